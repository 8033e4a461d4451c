//! Ending what a job leaves behind.
//!
//! A job's workers outlive its main process when it dies (`kill -9` of a
//! training script leaves its DataLoader or multiprocessing workers
//! running), and a daemon it starts with `setsid` leaves its process group.
//! This process becomes a child subreaper ([`become_subreaper`]), so every
//! such orphan is reparented to it rather than to init; once the main
//! process has ended, [`end_children`] stops and reaps whatever is left
//! under it, down to grandchildren (each becomes our child in turn when its
//! parent is ended).

use std::io;
use std::time::{Duration, Instant};

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): its
/// descendants whose parent exits are reparented to it.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The ids of this process's living (not yet reaped) children, from
/// `/proc/<pid>/stat`.
pub fn children() -> Vec<u32> {
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces and ')'.
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) && state != Some("Z") {
            found.push(pid);
        }
    }
    found
}

/// Reaps every child of this process that has exited.
fn reap_exited() {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer; WNOHANG never blocks.
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            return;
        }
    }
}

fn signal_all(pids: &[u32], signal: libc::c_int) {
    for &pid in pids {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill(2) on a child of ours: it cannot be another
            // process, since its id stays reserved until we reap it.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

/// Ends every process left under this one (see the module doc): SIGTERM,
/// up to `grace` for them to exit, then SIGKILL; each is reaped. Call it
/// after the main child is reaped, in a process that became a subreaper
/// before starting it. Returns how many processes were ended; gives up
/// (returning what it ended) after `grace` plus 5 seconds, since a process
/// stuck in the kernel (uninterruptible sleep) cannot be waited for.
pub fn end_children(grace: Duration) -> usize {
    let start = Instant::now();
    let give_up = grace + Duration::from_secs(5);
    let mut ended = std::collections::HashSet::new();
    loop {
        reap_exited();
        let left = children();
        if left.is_empty() || start.elapsed() > give_up {
            return ended.len();
        }
        let signal = if start.elapsed() < grace {
            libc::SIGTERM
        } else {
            libc::SIGKILL
        };
        // A process is sent SIGTERM once; SIGKILL every round after grace.
        let fresh: Vec<u32> = left
            .iter()
            .copied()
            .filter(|pid| signal == libc::SIGKILL || !ended.contains(pid))
            .collect();
        signal_all(&fresh, signal);
        ended.extend(left);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A subreaper ends every child it has: in this test binary's own
    /// process it would end the other tests' children too.
    #[test]
    fn orphans_and_their_children_are_ended_and_reaped() {
        let exe = std::env::current_exe().expect("test binary");
        let out = Command::new(exe)
            .args([
                "--ignored",
                "--exact",
                "orphans::tests::in_a_process_of_its_own",
                "--nocapture",
            ])
            .output()
            .expect("run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    #[ignore = "run by orphans_and_their_children_are_ended_and_reaped, alone in its process"]
    fn in_a_process_of_its_own() {
        become_subreaper().expect("subreaper");
        // A shell that leaves a sleeper, which itself has a sleeper, then
        // exits: the first comes to us, the second when the first ends.
        let dir = tempfile::tempdir().expect("tmp");
        let started = dir.path().join("started");
        let status = Command::new("sh")
            .args([
                "-c",
                "sh -c 'sleep 300 & touch \"$1\"; exec sleep 300' sh \"$1\" & exit 0",
                "sh",
            ])
            .arg(&started)
            .status()
            .expect("sh");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while (children().is_empty() || !started.exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!children().is_empty(), "the orphan came to us");
        let ended = end_children(Duration::from_secs(2));
        assert!(ended >= 2, "ended {ended}");
        assert!(children().is_empty());
    }
}
