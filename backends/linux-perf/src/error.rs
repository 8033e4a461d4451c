//! Turning what the kernel says into [`CoreError`]s that say what to do.

use std::io;

use lotus_core::Error as CoreError;

use crate::{BACKEND, MLOCK_PATH, PARANOID_PATH};

/// The current `perf_event_paranoid` level, as text (`"2"`), or why it could
/// not be read.
pub(crate) fn paranoid_level() -> String {
    match std::fs::read_to_string(PARANOID_PATH) {
        Ok(s) => s.trim().to_string(),
        Err(e) => format!("unreadable ({e})"),
    }
}

/// What the report and the probe say when the kernel refuses kernel-mode
/// sampling.
pub(crate) fn kernel_refused_note() -> String {
    format!(
        "kernel samples: not collected (perf_event_paranoid = {}; run as root or set \
         kernel.perf_event_paranoid=1 to include kernel time)",
        paranoid_level()
    )
}

/// True for the errors `perf_event_open` returns when the kernel refuses on
/// permission grounds.
pub(crate) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// True for the errors that mean "this event does not exist here" (no PMU,
/// a virtual machine without counters, an unsupported attribute).
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) | Some(libc::EINVAL)
    ) || e.kind() == io::ErrorKind::Unsupported
}

/// The error for a failed `perf_event_open` of `what` (e.g. "cpu-clock
/// sampling on CPU 3").
pub(crate) fn open_error(what: &str, e: io::Error) -> CoreError {
    if is_permission(&e) {
        return CoreError::Permission {
            backend: BACKEND.into(),
            message: format!(
                "perf_event_open refused {what} ({e}); {PARANOID_PATH} is {}",
                paranoid_level()
            ),
            fix: "run `sudo sysctl kernel.perf_event_paranoid=1` (or lower), or give the \
                  lotus binary CAP_PERFMON (`sudo setcap cap_perfmon+ep $(command -v lotus)`)"
                .into(),
        };
    }
    match e.raw_os_error() {
        Some(libc::ENOSYS) => CoreError::Unavailable {
            backend: BACKEND.into(),
            reason: format!(
                "perf_event_open is not implemented by this kernel ({e}); \
                 it needs CONFIG_PERF_EVENTS, or a container that allows the syscall"
            ),
        },
        Some(libc::EMFILE) | Some(libc::ENFILE) => CoreError::Io {
            context: format!(
                "opening {what}: out of file descriptors (perf needs about four per CPU, \
                 {} CPUs here, plus its own files; the open-file limit is {}): raise it, \
                 e.g. `ulimit -n 4096` before running lotus",
                crate::events::online_cpus().len(),
                open_file_limit()
            ),
            source: e,
        },
        Some(libc::ESRCH) => CoreError::Other {
            backend: BACKEND.into(),
            message: format!("opening {what}: the target exited before it could be profiled"),
        },
        _ if is_unsupported(&e) => CoreError::Unavailable {
            backend: BACKEND.into(),
            reason: format!("the kernel cannot do {what} here ({e})"),
        },
        _ => CoreError::Io {
            context: format!("perf_event_open of {what}"),
            source: e,
        },
    }
}

/// The soft open-file limit (`ulimit -n`), as text.
fn open_file_limit() -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return "unknown".into();
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        lim.rlim_cur.to_string()
    }
}

/// The error for a failed mapping of a ring buffer.
pub(crate) fn mmap_error(what: &str, e: io::Error) -> CoreError {
    if is_permission(&e) {
        let limit = std::fs::read_to_string(MLOCK_PATH)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        return CoreError::Permission {
            backend: BACKEND.into(),
            message: format!(
                "mapping the ring buffer of {what} exceeded the locked-memory allowance \
                 ({e}); {MLOCK_PATH} is {limit} KiB"
            ),
            fix: "raise it (`sudo sysctl kernel.perf_event_mlock_kb=2048`), raise \
                  `ulimit -l`, or lower the sampling frequency"
                .into(),
        };
    }
    CoreError::Io {
        context: format!("mapping the ring buffer of {what}"),
        source: e,
    }
}

/// A failed ioctl or read on an open event.
pub(crate) fn event_io(context: &str, e: io::Error) -> CoreError {
    CoreError::Io {
        context: context.to_string(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_errors_name_the_setting_and_the_fix() {
        for errno in [libc::EACCES, libc::EPERM] {
            let err = open_error("cpu-clock sampling", io::Error::from_raw_os_error(errno));
            let CoreError::Permission { message, fix, .. } = &err else {
                panic!("expected a permission error, got {err:?}");
            };
            assert!(message.contains(PARANOID_PATH), "{message}");
            assert!(message.contains(&paranoid_level()), "{message}");
            assert!(fix.contains("perf_event_paranoid=1"), "{fix}");
            assert!(fix.contains("CAP_PERFMON"), "{fix}");
            assert!(err.to_string().contains("to fix"), "{err}");
        }
    }

    #[test]
    fn missing_events_are_unavailable_not_io() {
        for errno in [libc::ENOENT, libc::EOPNOTSUPP, libc::ENOSYS] {
            let err = open_error("cycles", io::Error::from_raw_os_error(errno));
            assert!(
                matches!(err, CoreError::Unavailable { .. }),
                "{errno}: {err:?}"
            );
        }
        let err = open_error("cycles", io::Error::from_raw_os_error(libc::EBADF));
        assert!(matches!(err, CoreError::Io { .. }), "{err:?}");
    }

    #[test]
    fn mmap_permission_names_the_mlock_limit() {
        let err = mmap_error("CPU 0", io::Error::from_raw_os_error(libc::EPERM));
        assert!(err.to_string().contains(MLOCK_PATH), "{err}");
    }
}
