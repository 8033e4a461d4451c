//! AMD uProf's profile-control entry points, exported by the control
//! library so that native code written for uProf opens lotus's windows.
//!
//! A program built against `AMDProfileController.h` calls
//! `amdProfileResume(1)` / `amdProfilePause(1)` (uProf 4.x) or
//! `amdProfileResumeImpl()` / `amdProfilePauseImpl()` (5.x). Linked with
//! `-llotus_control` in place of `-lAMDProfileController` (or run with
//! `LD_PRELOAD` naming this library), its calls reach the control
//! library's normal dispatch: under `--backend perf` they become requests
//! over the control channel, as ITT calls do through the ITT collector
//! ([`crate::itt_collector`]); under uProf they go on to uProf's own
//! library. Unlike ITT, uProf has no collector-loading mechanism lotus
//! could point at itself, so the bridge needs this library in place of
//! AMD's at link or load time. Python scripts that `import
//! amdprofilecontrol` get the harness's stand-in module instead (see
//! `lotus-tracer/python/lotus_harness.py`).
//!
//! Each call returns true on success; on failure false, the reason goes
//! to stderr (these functions have no error string) and
//! `amdGetLastProfileError()` returns -1 (`AMD_PROFILE_ERROR_INTERNAL`),
//! 0 after a call that succeeded.

#![allow(non_snake_case)] // AMD's names.

use std::ffi::{c_int, c_uint};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::backend::{Call, Control};

/// `AMD_PROFILE_SUCCESS`.
const SUCCESS: c_int = 0;
/// `AMD_PROFILE_ERROR_INTERNAL`.
const ERROR_INTERNAL: c_int = -1;

/// The code `amdGetLastProfileError` returns.
static LAST_ERROR: AtomicI32 = AtomicI32::new(SUCCESS);

/// Performs `call`, recording its outcome for `amdGetLastProfileError`.
fn route(call: Call<'_>, name: &str) -> bool {
    let outcome = catch_unwind(AssertUnwindSafe(|| Control::get().call(call)));
    let why = match outcome {
        Ok(Ok(())) => {
            LAST_ERROR.store(SUCCESS, Ordering::SeqCst);
            return true;
        }
        Ok(Err(err)) => err.to_string(),
        Err(_) => "internal error (a panic was caught)".to_string(),
    };
    LAST_ERROR.store(ERROR_INTERNAL, Ordering::SeqCst);
    let _ = writeln!(std::io::stderr(), "lotus control: {name}: {why}");
    false
}

/// uProf 4.x: opens a window (`profile_type` is `AMD_PROFILE_CPU`, 1;
/// lotus measures the CPU whatever it is).
#[no_mangle]
pub extern "C" fn amdProfileResume(_profile_type: c_uint) -> bool {
    route(Call::Resume(""), "amdProfileResume")
}

/// uProf 4.x: closes the window.
#[no_mangle]
pub extern "C" fn amdProfilePause(_profile_type: c_uint) -> bool {
    route(Call::Pause, "amdProfilePause")
}

/// uProf 5.x: opens a window.
#[no_mangle]
pub extern "C" fn amdProfileResumeImpl() -> bool {
    route(Call::Resume(""), "amdProfileResumeImpl")
}

/// uProf 5.x: closes the window.
#[no_mangle]
pub extern "C" fn amdProfilePauseImpl() -> bool {
    route(Call::Pause, "amdProfilePauseImpl")
}

/// The outcome of this process's last call above: 0, or -1 after a
/// failure.
#[no_mangle]
pub extern "C" fn amdGetLastProfileError() -> c_int {
    LAST_ERROR.load(Ordering::SeqCst)
}
