//! The file descriptors a traced run needs: refused below a floor before
//! anything is created, and named when a run runs out of them.

use crate::error::{Result, RunnerError};

/// The current soft limit on file descriptors (`ulimit -n`), where known.
fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a live rlimit.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    known.then_some(limit.rlim_cur)
}

/// What to say above an error that comes from running out of descriptors:
/// the limit and its fix.
pub(crate) fn out_of_descriptors_hint() -> String {
    let limit = match descriptor_limit() {
        Some(l) => format!("{l}"),
        None => "unknown".into(),
    };
    format!(
        "lotus ran out of file descriptors (the limit, `ulimit -n`, is {limit}): nothing was left behind; raise the limit, e.g. `ulimit -n 4096`, and run again"
    )
}

/// The fewest file descriptors a traced run asks for before it creates
/// anything: the three standard ones and lotus's own (the report pipe, the
/// spawn's pipe, the tracer's files, and removing its temp folder, a
/// descriptor per level, and the one output writer's walk to
/// `lotus.sampling`, a descriptor per folder it holds); measured: 10 run a
/// sampled trace without perf (9 failed writing `lotus.sampling`; perf
/// itself needs more, and says so). Below it, a run would fail half-way
/// and leave a half-removed tracer folder or an empty samples file.
pub const MIN_DESCRIPTORS: u64 = 10;

/// Fails when the descriptor limit is below [`MIN_DESCRIPTORS`] (nothing
/// is run or written then).
pub fn check_descriptor_limit() -> Result<()> {
    let Some(current) = descriptor_limit() else {
        return Ok(());
    };
    if current < MIN_DESCRIPTORS {
        return Err(RunnerError::Refused(format!(
            "lotus trace run needs at least {MIN_DESCRIPTORS} file descriptors and the limit (`ulimit -n`) is {current}: raise it, e.g. `ulimit -n 4096`, and run again (nothing was run or written)"
        )));
    }
    Ok(())
}
