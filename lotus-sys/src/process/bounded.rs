//! Asking a program something with a bound on the wait (`output_within`).
//!
//! `Command::output` waits for the program and for every process holding
//! its output pipes: a vendor tool that hangs on `--version` (a license
//! server that does not answer), or an interpreter wrapper that stays,
//! would hang lotus. [`output_within`] gives up after a limit.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `cmd` in a process group of its own with stdin closed and its
/// output captured, for at most `limit`: past it the program is killed
/// and `Ok(None)` returned. Processes it leaves holding its output pipes
/// are not waited for. For short questions (`tool --version`).
pub fn output_within(cmd: &mut Command, limit: Duration) -> io::Result<Option<Output>> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    // Each pipe is read on a thread of its own, so a chatty program cannot
    // block on a full pipe; a thread ends when its pipe closes.
    fn read(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
        let (tx, rx) = mpsc::channel();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                let _ = tx.send(bytes);
            });
        }
        rx
    }
    let stdout = read(child.stdout.take());
    let stderr = read(child.stderr.take());
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let left = || deadline.saturating_duration_since(Instant::now());
    let stdout = stdout.recv_timeout(left()).unwrap_or_default();
    let stderr = stderr.recv_timeout(left()).unwrap_or_default();
    Ok(Some(Output {
        status,
        stdout,
        stderr,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn returns_the_output_or_gives_up_in_time() {
        let out = output_within(
            &mut sh("echo out; echo err >&2; exit 3"),
            Duration::from_secs(10),
        )
        .expect("runs")
        .expect("in time");
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(
            (&out.stdout[..], &out.stderr[..]),
            (&b"out\n"[..], &b"err\n"[..])
        );
        let start = Instant::now();
        let hung =
            output_within(&mut sh("exec sleep 30"), Duration::from_millis(300)).expect("runs");
        assert!(hung.is_none());
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_leftover_process_holding_the_pipes_is_not_waited_for() {
        let start = Instant::now();
        let out = output_within(&mut sh("sleep 3 & echo done"), Duration::from_secs(1))
            .expect("runs")
            .expect("in time");
        assert!(out.status.success());
        assert!(start.elapsed() < Duration::from_secs(3));
    }
}
