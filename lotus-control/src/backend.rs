//! Which backend a control call goes to, decided once per process from the
//! environment the lotus process set.
//!
//! - [`Backend::Inactive`]: not under lotus; every call succeeds and does
//!   nothing, so op scripts run standalone.
//! - [`Backend::Channel`]: the lotus process switches the window (perf
//!   marks the window's time range and reads its counters); the call asks
//!   it over the pipes in `LOTUS_CONTROL_FDS` and waits for the answer.
//!   With `LOTUS_WINDOW_STAMPS=1`, resume and pause instead stamp their
//!   edge on CLOCK_MONOTONIC (the perf samples' clock) with this process's
//!   own counters, send it, and return without waiting.
//! - [`Backend::InProcess`]: the window is switched by a vendor API called
//!   in this process (VTune's `__itt_resume`, uProf's `amdProfileResume`):
//!   see [`crate::profiler_api`].
//! - [`Backend::Misconfigured`]: the environment is set but unusable; every
//!   call fails with the reason.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use lotus_protocol::{
    Edge, OwnCounters, Reply, Request, ENV_BACKEND, ENV_CONTROL_FDS, ENV_WINDOW_STAMPS,
};
use lotus_sys::clock_ns;

use crate::channel::Channel;
use crate::error::ControlError;

/// The control call being made, for dispatch and for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call<'a> {
    Resume(&'a str),
    Pause,
    Detach,
    /// Stop (`false`) or restart (`true`) sampling outside windows.
    Sampling(bool),
}

impl Call<'_> {
    fn c_name(self) -> &'static str {
        match self {
            Call::Resume(_) => "lotus_resume",
            Call::Pause => "lotus_pause",
            Call::Detach => "lotus_detach",
            Call::Sampling(_) => "lotus_sampling",
        }
    }

    fn request(self) -> Request {
        match self {
            Call::Resume(op) => Request::Resume { op: op.to_string() },
            Call::Pause => Request::Pause,
            Call::Detach => Request::Detach,
            Call::Sampling(on) => Request::Sampling { on },
        }
    }
}

/// A vendor whose control API runs in the profiled process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vendor {
    /// Intel VTune (ITT: `__itt_resume` / `__itt_pause`).
    Vtune,
    /// AMD uProf (`amdProfileResumeImpl` / `amdProfileResume(1)`).
    Uprof,
}

/// Where control calls go.
#[derive(Debug)]
pub(crate) enum Backend {
    Inactive,
    Channel(Mutex<ChannelState>),
    InProcess(Vendor),
    Misconfigured(String),
}

/// The channel and what has happened to it.
#[derive(Debug)]
pub(crate) struct ChannelState {
    /// `None` once detached.
    channel: Option<Channel>,
    /// Set when a read or write failed: the channel's position in the
    /// conversation is unknown, so no later call may use it.
    broken: Option<String>,
    /// Resume and pause stamp their edge here and send it without waiting
    /// (`LOTUS_WINDOW_STAMPS=1`); otherwise each waits for lotus's reply.
    stamped: bool,
}

/// The process's control state.
#[derive(Debug)]
pub(crate) struct Control {
    pub(crate) backend: Backend,
    /// `LOTUS_BACKEND`, for `lotus_backend()`.
    pub(crate) backend_name: Option<CString>,
    /// The process the environment was read in: the channel's owner
    /// (until a forked child adopts it, see [`Control::adopt`]).
    owner_pid: AtomicU32,
}

static CONTROL: OnceLock<Control> = OnceLock::new();

impl Control {
    /// The process's control state, read from the environment on first use.
    pub(crate) fn get() -> &'static Control {
        CONTROL.get_or_init(Control::from_env)
    }

    fn from_env() -> Control {
        let name = std::env::var_os(ENV_BACKEND).map(|v| v.to_string_lossy().into_owned());
        let fds = std::env::var_os(ENV_CONTROL_FDS).map(|v| v.to_string_lossy().into_owned());
        Control {
            backend: choose(name.as_deref(), fds.as_deref()),
            backend_name: name.and_then(|n| CString::new(n).ok()),
            owner_pid: AtomicU32::new(std::process::id()),
        }
    }

    /// Whether this process runs under lotus (its variables are set).
    pub(crate) fn active(&self) -> bool {
        !matches!(self.backend, Backend::Inactive)
    }

    /// Makes this process the channel's owner: for a child forked on
    /// purpose (lotus's fork server forks one per run, after the op's
    /// imports), whose parent leaves the channel alone until the child is
    /// done. The lock is taken anew: the parent held it in no other thread
    /// at the fork, or this child's calls would wait forever (the harness
    /// forks from its only thread that calls lotus).
    pub(crate) fn adopt(&self) {
        self.owner_pid.store(std::process::id(), Ordering::SeqCst);
    }

    /// Performs `call` on the active backend.
    pub(crate) fn call(&self, call: Call<'_>) -> Result<(), ControlError> {
        match &self.backend {
            Backend::Inactive => Ok(()),
            Backend::Misconfigured(why) => Err(ControlError::Misconfigured(why.clone())),
            // The vendor's collection is paused outside windows already:
            // nothing to stop or restart.
            Backend::InProcess(_) if matches!(call, Call::Sampling(_)) => Ok(()),
            Backend::InProcess(vendor) => crate::profiler_api::call(*vendor, call),
            Backend::Channel(state) => {
                // Before taking the lock: a child forked while another
                // thread held it would wait forever.
                let pid = std::process::id();
                let owner = self.owner_pid.load(Ordering::SeqCst);
                if pid != owner {
                    return Err(ControlError::Forked {
                        call: call.c_name(),
                        pid,
                        owner,
                    });
                }
                lock(state).call(call)
            }
        }
    }
}

fn lock(state: &Mutex<ChannelState>) -> MutexGuard<'_, ChannelState> {
    // A panic inside a call (caught at the C boundary) poisons the lock;
    // the state itself stays consistent because `broken` is set before
    // anything that could fail.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ChannelState {
    fn call(&mut self, call: Call<'_>) -> Result<(), ControlError> {
        if let Some(why) = &self.broken {
            return Err(ControlError::Misconfigured(format!(
                "the control channel is unusable after an earlier error: {why}"
            )));
        }
        let Some(channel) = self.channel.as_mut() else {
            return match call {
                Call::Resume(_) | Call::Sampling(_) => Err(ControlError::Detached {
                    call: call.c_name(),
                }),
                // Nothing is open after a detach: closing again is a no-op.
                Call::Pause | Call::Detach => Ok(()),
            };
        };
        if self.stamped {
            let request = match call {
                Call::Resume(op) => {
                    // The counters first: the window starts after them.
                    let own = own_counters();
                    Some(Request::OpenedAt {
                        op: op.to_string(),
                        edge: Edge {
                            at_ns: clock_ns(libc::CLOCK_MONOTONIC),
                            own,
                        },
                    })
                }
                Call::Pause => {
                    let at_ns = clock_ns(libc::CLOCK_MONOTONIC);
                    Some(Request::ClosedAt {
                        edge: Edge {
                            at_ns,
                            own: own_counters(),
                        },
                    })
                }
                // Round trips: lotus stops or restarts sampling, then
                // replies.
                Call::Detach | Call::Sampling(_) => None,
            };
            if let Some(request) = request {
                return channel.send_only(&request).inspect_err(|err| {
                    if !matches!(err, ControlError::Refused { .. }) {
                        self.broken = Some(err.to_string());
                    }
                });
            }
        }
        match channel.call(&call.request()) {
            Ok(Reply::Ok) => {
                if call == Call::Detach {
                    if let Some(channel) = self.channel.take() {
                        channel.close();
                    }
                }
                Ok(())
            }
            Ok(Reply::Error(reason)) => Err(ControlError::Refused {
                call: call.c_name(),
                reason,
            }),
            Ok(other) => {
                let err = ControlError::BadReply(format!("{other:?}"));
                self.broken = Some(err.to_string());
                Err(err)
            }
            Err(err) => {
                self.broken = Some(err.to_string());
                Err(err)
            }
        }
    }
}

/// What this process can read of itself without waiting: its threads' CPU
/// time, page faults and context switches.
fn own_counters() -> OwnCounters {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let n = |v: libc::c_long| u64::try_from(v).unwrap_or(0);
    OwnCounters {
        cpu_ns: clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID),
        page_faults: n(usage.ru_minflt).saturating_add(n(usage.ru_majflt)),
        context_switches: n(usage.ru_nvcsw).saturating_add(n(usage.ru_nivcsw)),
    }
}

/// Decides the backend from `LOTUS_BACKEND` and `LOTUS_CONTROL_FDS`.
fn choose(name: Option<&str>, fds: Option<&str>) -> Backend {
    match (name, fds) {
        (None, None) => Backend::Inactive,
        // Whatever the backend, a channel means the lotus process switches
        // the window.
        (_, Some(fds)) => match Channel::from_env_value(ENV_CONTROL_FDS, fds) {
            Ok(channel) => Backend::Channel(Mutex::new(ChannelState {
                channel: Some(channel),
                broken: None,
                stamped: std::env::var_os(ENV_WINDOW_STAMPS).is_some_and(|v| v == "1"),
            })),
            Err(why) => Backend::Misconfigured(why),
        },
        (Some("vtune"), None) => Backend::InProcess(Vendor::Vtune),
        (Some("uprof"), None) => Backend::InProcess(Vendor::Uprof),
        (Some("perf"), None) => Backend::Misconfigured(format!(
            "{ENV_BACKEND}=perf but {ENV_CONTROL_FDS} is not set: the perf backend switches \
             windows over the control channel the lotus process opens"
        )),
        (Some(other), None) => Backend::Misconfigured(format!(
            "{ENV_BACKEND}={other:?} is not a backend this control library knows \
             (perf, vtune, uprof)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_environment_means_inactive() {
        assert!(matches!(choose(None, None), Backend::Inactive));
    }

    #[test]
    fn vendor_backends_without_a_channel_are_in_process() {
        assert!(matches!(
            choose(Some("vtune"), None),
            Backend::InProcess(Vendor::Vtune)
        ));
        assert!(matches!(
            choose(Some("uprof"), None),
            Backend::InProcess(Vendor::Uprof)
        ));
    }

    #[test]
    fn bad_environments_say_what_is_wrong() {
        let why = |b: Backend| match b {
            Backend::Misconfigured(why) => why,
            other => panic!("expected misconfigured, got {other:?}"),
        };
        assert!(why(choose(Some("perf"), None)).contains("LOTUS_CONTROL_FDS is not set"));
        assert!(why(choose(Some("gprof"), None)).contains("\"gprof\""));
        assert!(why(choose(Some("perf"), Some("3"))).contains("<read_fd>,<write_fd>"));
        assert!(why(choose(Some("perf"), Some("x,4"))).contains("\"x\" is not a file descriptor"));
        assert!(why(choose(Some("perf"), Some("5,5"))).contains("the same"));
        // A descriptor number far above anything this test process opened.
        assert!(why(choose(Some("perf"), Some("100000,100001"))).contains("not open"));
    }

    #[test]
    fn a_descriptor_that_is_not_a_pipe_is_refused() {
        let (a, b) = (
            tempfile::tempfile().expect("temp file"),
            tempfile::tempfile().expect("temp file"),
        );
        let (a, b) = (
            std::os::fd::AsRawFd::as_raw_fd(&a),
            std::os::fd::AsRawFd::as_raw_fd(&b),
        );
        match choose(Some("perf"), Some(&format!("{a},{b}"))) {
            Backend::Misconfigured(why) => assert!(why.contains("not a pipe"), "{why}"),
            other => panic!("expected misconfigured, got {other:?}"),
        }
    }
}
