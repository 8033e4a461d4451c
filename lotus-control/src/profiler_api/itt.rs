//! Intel ITT, for the VTune backend: `lotus_resume` / `lotus_pause` /
//! `lotus_detach` call `__itt_resume` / `__itt_pause` / `__itt_detach`
//! through the `ittapi` crate.
//!
//! The ITT static part (built into this library by `ittapi-sys`) loads its
//! collector on the first call, from the library `INTEL_LIBITTNOTIFY64`
//! names; `vtune` sets it for the process it profiles. Without it every ITT
//! call would silently do nothing and the map would come out empty, so a
//! call fails instead, saying so. Any library that exports `__itt_api_init`
//! can stand in for VTune's collector (the tests use one that logs calls).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::backend::Call;
use crate::error::ControlError;

/// The variable the ITT static part reads to find its collector.
pub(crate) const ENV_ITT_COLLECTOR: &str = "INTEL_LIBITTNOTIFY64";

/// Set by a detach: no window opens again in this process.
static DETACHED: AtomicBool = AtomicBool::new(false);

/// Whether a collector is named, read once.
fn collector_named() -> Result<(), ControlError> {
    static NAMED: OnceLock<Result<(), String>> = OnceLock::new();
    NAMED
        .get_or_init(|| {
            let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
            // INTEL_ITTNOTIFY_GROUPS alone makes the static part load the
            // default libittnotify.so from the library path.
            if set(ENV_ITT_COLLECTOR) || set("INTEL_ITTNOTIFY_GROUPS") {
                return Ok(());
            }
            Err(format!(
                "LOTUS_BACKEND=vtune but {ENV_ITT_COLLECTOR} is not set: this process does not \
                 run under VTune's collector (vtune sets it for the process it profiles), so ITT \
                 resume/pause would do nothing; run it with `vtune -collect hotspots \
                 -start-paused -- ...` (as `lotus map --backend vtune` does), or set \
                 {ENV_ITT_COLLECTOR} to an ITT collector library"
            ))
        })
        .clone()
        .map_err(ControlError::Misconfigured)
}

/// Performs `call` through ITT.
pub(crate) fn call(call: Call<'_>) -> Result<(), ControlError> {
    collector_named()?;
    match call {
        Call::Resume(_) => {
            if DETACHED.load(Ordering::SeqCst) {
                return Err(ControlError::Detached {
                    call: "lotus_resume",
                });
            }
            ittapi::resume();
        }
        // Nothing is open after a detach: closing again is a no-op.
        Call::Pause if DETACHED.load(Ordering::SeqCst) => return Ok(()),
        Call::Pause => ittapi::pause(),
        Call::Detach => {
            if !DETACHED.swap(true, Ordering::SeqCst) {
                ittapi::detach();
            }
        }
        // Answered by `Control::call` before it gets here: outside windows
        // VTune's collection is paused already.
        Call::Sampling(_) => {}
    }
    // The first call loaded the collector; when that was this very library
    // (INTEL_LIBITTNOTIFY64 names liblotus_control.so), it declined.
    if crate::itt_collector::declined_under_vtune() {
        return Err(ControlError::Misconfigured(format!(
            "LOTUS_BACKEND=vtune but {ENV_ITT_COLLECTOR} names the lotus control library, not \
             VTune's ITT collector: ITT calls would come back to lotus; unset it and run under \
             vtune"
        )));
    }
    Ok(())
}
