//! The job `lotus trace run` starts, shared by the plain run and the
//! sampled one ([`crate::sampled`]): the termination signals lotus
//! receives passed on to it, and a plain run to its end.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use crate::error::{Context, Result};
use crate::progress::{MessageKind, Progress};

/// How often lotus looks whether the job ended or a signal must be passed
/// on.
const POLL: Duration = Duration::from_millis(20);

/// The last SIGTERM, SIGHUP or SIGINT lotus received that is still to be
/// passed on to the job (0: none).
static FORWARD: AtomicI32 = AtomicI32::new(0);

/// How many termination signals lotus received (a terminal's Ctrl-C
/// included).
static RECEIVED: AtomicU32 = AtomicU32::new(0);

/// The termination signal after which a job that is still running is
/// killed ([`insisted`]).
pub(crate) const KILL_AFTER_SIGNALS: u32 = 3;

/// Whether the job was already killed for [`insisted`].
static KILLED: AtomicBool = AtomicBool::new(false);

/// `si_code` of a signal the kernel sent (a terminal's Ctrl-C), as opposed
/// to one a process sent with kill(2) (`SI_USER`, 0, and below).
const SI_KERNEL: libc::c_int = 0x80;

extern "C" fn remember_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    RECEIVED.fetch_add(1, Ordering::SeqCst);
    if signal == libc::SIGINT {
        crate::sampled::INTERRUPTED.store(true, Ordering::SeqCst);
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO
        // handler; only its si_code is read.
        let code = if info.is_null() {
            0
        } else {
            unsafe { (*info).si_code }
        };
        // A terminal's Ctrl-C went to the whole foreground process group,
        // the job included: passing it on would interrupt the job twice.
        if code == SI_KERNEL {
            return;
        }
    }
    FORWARD.store(signal, Ordering::SeqCst);
}

/// SIGTERM, SIGHUP and SIGINT sent to lotus alone (a batch system ending
/// the job, `kill PID`, `kill -INT PID`) are passed on to the job, which
/// would otherwise run on while lotus waits for it. SIGINT from a terminal
/// reaches a plain job directly (it is in lotus's process group) and is not
/// passed on again; a sampled job has a group of its own and gets every
/// SIGINT through [`crate::sampled::INTERRUPTED`]. Hand-written
/// rather than `ctrlc`'s: the handler needs `si_code` to tell a terminal's
/// Ctrl-C from a kill(2). The third such signal (Ctrl-C included) kills
/// a job that is still running ([`insisted`]).
pub(crate) fn forward_termination_signals() {
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: a zeroed sigaction with a handler that only reads its
        // siginfo and stores to atomics (async-signal-safe); the old action
        // is not needed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = remember_signal
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as usize;
            action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The signal to pass on to the job, once.
pub(crate) fn signal_to_forward() -> Option<libc::c_int> {
    match FORWARD.swap(0, Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Whether lotus has received [`KILL_AFTER_SIGNALS`] termination signals
/// and the job must now be killed (SIGKILL), once: a job that catches or
/// ignores SIGTERM and SIGINT, or is blocked where no signal reaches it,
/// would otherwise keep lotus waiting for ever. Says so on stderr.
pub(crate) fn insisted(progress: &mut dyn Progress) -> bool {
    if RECEIVED.load(Ordering::SeqCst) < KILL_AFTER_SIGNALS || KILLED.swap(true, Ordering::SeqCst) {
        return false;
    }
    progress.message(
        MessageKind::Warning,
        &format!("{KILL_AFTER_SIGNALS} termination signals received and the program still runs: killing it (SIGKILL); what its processes had not written of their trace is lost"),
    );
    true
}

/// Runs `cmd` (in lotus's process group) to its end, passing SIGTERM and
/// SIGHUP on to it; should lotus be killed outright, the job gets SIGTERM
/// (a parent-death signal) instead of running on unwatched.
pub(crate) fn run_plain(
    cmd: &mut Command,
    program: &Path,
    progress: &mut dyn Progress,
) -> Result<std::process::ExitStatus> {
    // SAFETY: getpid(2) cannot fail.
    let lotus_pid = unsafe { libc::getpid() };
    // SAFETY: prctl and getppid are async-signal-safe; prctl only asks the
    // kernel for a signal when lotus (this thread, which waits for the job
    // to its end) dies.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // lotus died between the fork and the prctl: no signal will
            // come, so do not run unwatched.
            if libc::getppid() != lotus_pid {
                return Err(io::Error::from_raw_os_error(libc::ECANCELED));
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .context_with(|| format!("cannot start {}", program.display()))?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if let Some(signal) = signal_to_forward() {
            // SAFETY: kill(2) of our own unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        }
        if insisted(progress) {
            // The rest of the job is ended as processes it left.
            let _ = child.kill();
        }
        std::thread::sleep(POLL);
    }
}
