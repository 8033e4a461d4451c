//! The file descriptors `lotus trace run` needs: refused below a floor
//! before anything is created, and named when a run runs out of them.

use std::io;

use anyhow::{anyhow, Result};

/// Whether `error` comes from running out of file descriptors (EMFILE,
/// ENFILE).
pub(super) fn out_of_descriptors(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
            .is_some_and(|c| c == libc::EMFILE || c == libc::ENFILE)
    })
}

/// `error`, with the descriptor limit and its fix named when it comes from
/// running out of descriptors.
pub(super) fn with_descriptor_hint(error: anyhow::Error) -> anyhow::Error {
    if !out_of_descriptors(&error) {
        return error;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a live rlimit.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let limit = if known {
        format!("{}", limit.rlim_cur)
    } else {
        "unknown".into()
    };
    error.context(format!(
        "lotus ran out of file descriptors (the limit, `ulimit -n`, is {limit}): nothing was left behind; raise the limit, e.g. `ulimit -n 4096`, and run again"
    ))
}

/// The fewest file descriptors `trace run` asks for before it creates
/// anything: the three standard ones and lotus's own (the report pipe, the
/// spawn's pipe, the tracer's files, and removing its temp folder, a
/// descriptor per level, and the one output writer's walk to
/// `lotus.sampling`, a descriptor per folder it holds); measured: 10 run a
/// sampled trace without perf (9 failed writing `lotus.sampling`; perf
/// itself needs more, and says so). Below it, a run would fail half-way
/// and leave a half-removed tracer folder or an empty samples file.
pub(super) const MIN_DESCRIPTORS: u64 = 10;

/// Fails when the descriptor limit is below [`MIN_DESCRIPTORS`].
pub(super) fn check_descriptor_limit() -> Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a live rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Ok(());
    }
    let current = limit.rlim_cur;
    if current < MIN_DESCRIPTORS {
        return Err(anyhow!(
            "lotus trace run needs at least {MIN_DESCRIPTORS} file descriptors and the limit (`ulimit -n`) is {current}: raise it, e.g. `ulimit -n 4096`, and run again (nothing was run or written)"
        ));
    }
    Ok(())
}
