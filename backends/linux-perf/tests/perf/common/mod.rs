//! Helpers for the integration tests: building the C targets and talking to
//! them over pipes.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lotus_backend_perf::{LinuxPerf, PerfCollection, PerfOptions, WindowSwitch};
use lotus_core::{CollectOptions, Collection, Target};

/// Tests that burn CPU take turns: the CI machine has two cores, and
/// sample counts of one test should not depend on another's load.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run build tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds `burn` (see tests/data/burn.c) in `dir`.
pub fn build_burn(dir: &Path) -> PathBuf {
    let exe = dir.join("burn");
    run(Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(Path::new(DATA).join("burn.c")));
    exe
}

/// Builds `libhot.so` (stripped) with an unstripped copy
/// `libhot.unstripped.so`, and `burn` linked against it.
pub fn build_burn_with_lib(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let lib = dir.join("libhot.so");
    let unstripped = dir.join("libhot.unstripped.so");
    run(Command::new("gcc")
        .args(["-O1", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(Path::new(DATA).join("libhot.c")));
    std::fs::copy(&lib, &unstripped).expect("copy lib");
    run(Command::new("strip").arg("--strip-all").arg(&lib));
    let exe = dir.join("burn");
    run(Command::new("gcc")
        .args(["-O1", "-pthread", "-DWITH_LIB", "-o"])
        .arg(&exe)
        .arg(Path::new(DATA).join("burn.c"))
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lhot"));
    (exe, lib, unstripped)
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: valid array of two ints.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Two pipes to a target: it writes phase letters, and waits for go bytes.
pub struct Channel {
    from_child: File,
    to_child: File,
    child_ends: Option<(OwnedFd, OwnedFd)>,
}

impl Channel {
    pub fn new() -> Channel {
        let (from_child, child_out) = pipe();
        let (child_in, to_child) = pipe();
        Channel {
            from_child: File::from(from_child),
            to_child: File::from(to_child),
            child_ends: Some((child_out, child_in)),
        }
    }

    /// The target: `program OUT IN MODE SECS`, with the child's pipe ends
    /// inherited.
    pub fn target(&self, program: &Path, mode: &str, secs: f64) -> Target {
        let (out, inp) = self.child_ends.as_ref().expect("child ends");
        {
            let mut target = Target::new(program);
            target.args = vec![
                out.as_raw_fd().to_string().into(),
                inp.as_raw_fd().to_string().into(),
                mode.into(),
                secs.to_string().into(),
            ];
            target.keep_fds = vec![out.as_raw_fd(), inp.as_raw_fd()];
            target
        }
    }

    /// Closes our copies of the child's ends (after the spawn), so a dead
    /// child reads as EOF.
    pub fn spawned(&mut self) {
        self.child_ends = None;
    }

    /// Waits (up to 120 s: a bound for a hang; a torch target importing on a
    /// busy machine is slow to get there) for the letter `c`.
    pub fn expect(&mut self, c: u8) {
        let mut pfd = libc::pollfd {
            fd: self.from_child.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 120_000) };
        assert_eq!(n, 1, "target did not say {:?} within 120 s", c as char);
        let mut b = [0u8];
        self.from_child
            .read_exact(&mut b)
            .expect("target closed its pipe");
        assert_eq!(
            b[0], c,
            "target said {:?}, expected {:?}",
            b[0] as char, c as char
        );
    }

    pub fn go(&mut self) {
        self.to_child.write_all(b"g").expect("write go");
    }
}

/// Starts `target` under perf, no window open.
pub fn start(channel: &mut Channel, target: &Target) -> PerfCollection {
    start_with(channel, target, WindowSwitch::default())
}

/// Starts `target` under perf with windows switched as `switch` says.
pub fn start_with(channel: &mut Channel, target: &Target, switch: WindowSwitch) -> PerfCollection {
    start_options(
        channel,
        target,
        &PerfOptions::default().with_window_switch(switch),
    )
}

/// Starts `target` under perf with `options`.
pub fn start_options(
    channel: &mut Channel,
    target: &Target,
    options: &PerfOptions,
) -> PerfCollection {
    let c = LinuxPerf::default()
        .start_with(target, &CollectOptions::default(), options)
        .expect("start collection");
    assert_eq!(c.window_switch(), options.window_switch);
    channel.spawned();
    c
}

/// Waits (up to 120 s: a bound for a hang, not a timing; a torch target on
/// a busy machine takes a while) for the target to exit; asserts it
/// succeeded.
pub fn wait_exit(c: &mut PerfCollection) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = c.try_wait().expect("try_wait") {
            assert!(status.success(), "target failed: {status}");
            return;
        }
        assert!(Instant::now() < deadline, "target did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `mode` with the window open from 'r' to 'd' (modes both, fork,
/// lib), and returns the finished report.
pub fn profile_window(program: &Path, mode: &str, secs: f64) -> lotus_backend_perf::PerfReport {
    profile_window_with(program, mode, secs, WindowSwitch::default())
}

/// [`profile_window`] with windows switched as `switch` says.
pub fn profile_window_with(
    program: &Path,
    mode: &str,
    secs: f64,
    switch: WindowSwitch,
) -> lotus_backend_perf::PerfReport {
    profile_window_options(
        program,
        mode,
        secs,
        &PerfOptions::default().with_window_switch(switch),
    )
}

/// [`profile_window`] with `options`.
pub fn profile_window_options(
    program: &Path,
    mode: &str,
    secs: f64,
    options: &PerfOptions,
) -> lotus_backend_perf::PerfReport {
    let mut ch = Channel::new();
    let target = ch.target(program, mode, secs);
    let mut c = start_options(&mut ch, &target, options);
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);
    c.finish().expect("finish")
}

/// Samples of `function` in module `module`, 0 when absent.
pub fn samples_of(report: &lotus_backend_perf::PerfReport, function: &str, module: &str) -> f64 {
    report
        .report
        .rows
        .iter()
        .filter(|r| r.function == function && r.module == module)
        .map(|r| r.value)
        .sum()
}

/// The top rows, for assertion messages.
pub fn top(report: &lotus_backend_perf::PerfReport, n: usize) -> String {
    report
        .report
        .rows
        .iter()
        .take(n)
        .map(|r| format!("{:>7} {} | {}\n", r.value, r.function, r.module))
        .collect()
}
