//! AMD uProf's profile-control library, called in the profiled process.
//!
//! Under `AMDuProfCLI collect --start-paused`, the process being profiled
//! resumes and pauses the collection itself by calling
//! `libAMDProfileController.so`. The library is opened with `libloading`
//! on the first call, once per process, from the places
//! [`crate::uprof_library`] lists (`LOTUS_UPROF_CONTROL_LIB`,
//! `$AMDUPROF_HOME/lib/x64/shared`, `/opt/AMDuProf*/lib/x64/shared`, the
//! dynamic library path), and stays loaded.
//!
//! Two API generations exist; whichever the library exports is used:
//!
//! - uProf 5.x: `bool amdProfileResumeImpl(void)`,
//!   `bool amdProfilePauseImpl(void)`;
//! - uProf 4.x: `bool amdProfileResume(unsigned int)`,
//!   `bool amdProfilePause(unsigned int)`, called with 1
//!   (`AMD_PROFILE_CPU`).
//!
//! Both return true on success. On failure, `int amdGetLastProfileError()`
//! (where exported) gives the code, reported with its meaning. "Already
//! resumed" on a resume and "already paused" on a pause are not failures:
//! the window is in the state asked for.
//!
//! uProf has no detach: `lotus_detach` pauses if a window is open, and
//! every call after it does nothing.

use std::ffi::{c_int, c_uint};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::uprof_library::{self as control_lib, Search};
use libloading::Library;

use crate::backend::Call;
use crate::error::ControlError;

/// `AMD_PROFILE_CPU`: the 4.x mode argument that names CPU profiling.
const AMD_PROFILE_CPU: c_uint = 1;

/// 5.x names.
const RESUME_5: &str = "amdProfileResumeImpl";
const PAUSE_5: &str = "amdProfilePauseImpl";
/// 4.x names.
const RESUME_4: &str = "amdProfileResume";
const PAUSE_4: &str = "amdProfilePause";
/// Both generations.
const LAST_ERROR: &str = "amdGetLastProfileError";

/// `AMD_PROFILE_WARN_PROFILE_ALREADY_RESUMED`, the same in both
/// generations.
const ALREADY_RESUMED: c_int = -2;
/// `AMD_PROFILE_WARN_PROFILE_ALREADY_PAUSED`, the same in both generations.
const ALREADY_PAUSED: c_int = -3;

/// `bool` is returned in the low byte: read it as a byte, so a library
/// that leaves other bits set cannot make an invalid Rust `bool`.
type Switch5 = unsafe extern "C" fn() -> u8;
type Switch4 = unsafe extern "C" fn(c_uint) -> u8;
type LastError = unsafe extern "C" fn() -> c_int;

/// The API generation a library exports.
#[derive(Clone, Copy)]
enum Api {
    V5 { resume: Switch5, pause: Switch5 },
    V4 { resume: Switch4, pause: Switch4 },
}

/// The opened library and its functions.
struct Controller {
    /// Keeps the functions below valid; never unloaded.
    _library: Library,
    /// Where it was opened from, for messages.
    path: String,
    api: Api,
    last_error: Option<LastError>,
}

impl Controller {
    fn generation(&self) -> Generation {
        match self.api {
            Api::V5 { .. } => Generation::V5,
            Api::V4 { .. } => Generation::V4,
        }
    }

    /// Calls resume (`open`) or pause; `Err` holds the message.
    fn switch(&self, open: bool) -> Result<(), String> {
        // SAFETY: the pointers come from the library `_library` keeps
        // loaded, looked up under the names whose C signatures the types
        // above match (uProf's AMDProfileController.h).
        let ok = unsafe {
            match (self.api, open) {
                (Api::V5 { resume, .. }, true) => resume(),
                (Api::V5 { pause, .. }, false) => pause(),
                (Api::V4 { resume, .. }, true) => resume(AMD_PROFILE_CPU),
                (Api::V4 { pause, .. }, false) => pause(AMD_PROFILE_CPU),
            }
        };
        if ok != 0 {
            return Ok(());
        }
        let call = match (self.api, open) {
            (Api::V5 { .. }, true) => format!("{RESUME_5}()"),
            (Api::V5 { .. }, false) => format!("{PAUSE_5}()"),
            (Api::V4 { .. }, true) => format!("{RESUME_4}({AMD_PROFILE_CPU})"),
            (Api::V4 { .. }, false) => format!("{PAUSE_4}({AMD_PROFILE_CPU})"),
        };
        let Some(last_error) = self.last_error else {
            return Err(format!(
                "{call} in {} returned false (the library has no {LAST_ERROR} to say why)",
                self.path
            ));
        };
        // SAFETY: as above; `int amdGetLastProfileError(void)`.
        let code = unsafe { last_error() };
        let harmless = if open {
            ALREADY_RESUMED
        } else {
            ALREADY_PAUSED
        };
        if code == harmless {
            return Ok(());
        }
        Err(format!(
            "{call} in {} failed: {LAST_ERROR}() = {code} ({}){}",
            self.path,
            meaning(self.generation(), code),
            hint(self.generation(), code)
        ))
    }
}

/// Which header's error codes apply.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Generation {
    V4,
    V5,
}

/// The name and meaning of an `amdGetLastProfileError` code (the
/// `AMD_PROFILE_*` constants of each generation's header).
fn meaning(generation: Generation, code: c_int) -> &'static str {
    match (generation, code) {
        (_, 0) => "AMD_PROFILE_SUCCESS: no error recorded",
        (_, -1) => "AMD_PROFILE_ERROR_INTERNAL: an internal error in uProf",
        (_, -2) => "AMD_PROFILE_WARN_PROFILE_ALREADY_RESUMED: the profile was already resumed",
        (_, -3) => "AMD_PROFILE_WARN_PROFILE_ALREADY_PAUSED: the profile was already paused",
        (Generation::V4, -4) => "AMD_PROFILE_ERROR_INVALID_ARG: invalid argument",
        (Generation::V5, -4) => {
            "AMD_PROFILE_WARN_PROFILE_ALREADY_PENDING: an earlier pause or resume has not taken effect yet"
        }
        (Generation::V5, -5) => "AMD_PROFILE_ERROR_INVALID_ARG: invalid argument",
        (Generation::V5, -6) => {
            "AMD_PROFILE_ERROR_VERSION_MISMATCH: the profile-control library and the running uProf are different versions"
        }
        (Generation::V5, -7) => {
            "AMD_PROFILE_ERROR_MIXED_FUNCTIONS_NOT_ALLOWED: pause/resume and strict pause/resume functions were mixed in one run"
        }
        _ => "an error code this version of lotus does not know",
    }
}

/// What to do about a code, where there is something to say.
fn hint(generation: Generation, code: c_int) -> &'static str {
    match (generation, code) {
        (Generation::V5, -6) => {
            "; point LOTUS_UPROF_CONTROL_LIB or AMDUPROF_HOME at the install whose AMDuProfCLI runs the collection"
        }
        (_, -1) => {
            "; is the process running under `AMDuProfCLI collect --start-paused`, with uProf's driver loaded?"
        }
        _ => "",
    }
}

/// Window state, and whether detach was called.
#[derive(Default)]
struct State {
    open: bool,
    detached: bool,
}

static CONTROLLER: OnceLock<Result<Controller, String>> = OnceLock::new();
static STATE: Mutex<State> = Mutex::new(State {
    open: false,
    detached: false,
});

fn vendor_error(message: String) -> ControlError {
    ControlError::Vendor {
        backend: "uprof",
        message,
    }
}

fn controller() -> Result<&'static Controller, ControlError> {
    CONTROLLER
        .get_or_init(load)
        .as_ref()
        .map_err(|why| vendor_error(why.clone()))
}

/// Performs `call` through uProf's profile-control library.
pub(crate) fn call(call: Call<'_>) -> Result<(), ControlError> {
    // A panic inside a call (caught at the C boundary) poisons the lock;
    // the state is updated only after a call succeeded, so it stays true.
    let mut state = STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if state.detached {
        return Ok(());
    }
    match call {
        Call::Resume(_) => {
            controller()?.switch(true).map_err(vendor_error)?;
            state.open = true;
        }
        Call::Pause => {
            controller()?.switch(false).map_err(vendor_error)?;
            state.open = false;
        }
        Call::Detach => {
            if state.open {
                controller()?.switch(false).map_err(vendor_error)?;
                state.open = false;
            }
            state.detached = true;
        }
        // Answered by `Control::call` before it gets here: outside windows
        // uProf's collection is paused already.
        Call::Sampling(_) => {}
    }
    Ok(())
}

/// Opens the library from the first place that has it.
fn load() -> Result<Controller, String> {
    match control_lib::search() {
        Search::Override(path) => {
            open_file(&path).map_err(|why| format!("{why} (named by {})", control_lib::ENV_LIBRARY))
        }
        Search::Candidates(files) => {
            if let Some(path) = files.iter().find(|p| p.is_file()) {
                // Found by searching (not named by the user): loaded only
                // when no other user can have put it there.
                lotus_sys::trust::check_file(path).map_err(|untrusted| {
                    format!(
                        "uProf's profile-control library is not loaded: {untrusted}; set {} to its full path to load it anyway",
                        control_lib::ENV_LIBRARY
                    )
                })?;
                return open_file(path);
            }
            // SAFETY: opening the library runs its initialisers; it is
            // uProf's profile-control library, meant to be loaded into the
            // profiled process.
            match unsafe { Library::new(control_lib::LIBRARY) } {
                Ok(library) => bind(library, control_lib::LIBRARY.to_string()),
                Err(e) => Err(format!(
                    "cannot find uProf's profile-control library {}: it is not in {}, nor on the dynamic library path ({}); set {} to its full path, or {} to uProf's install folder",
                    control_lib::LIBRARY,
                    folders(&files),
                    describe(&e),
                    control_lib::ENV_LIBRARY,
                    control_lib::ENV_UPROF_HOME,
                )),
            }
        }
    }
}

/// A loader error with the system's reason (libloading keeps `dlerror`'s
/// text as the source).
fn describe(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => format!("{e}: {source}"),
        None => e.to_string(),
    }
}

fn folders(files: &[PathBuf]) -> String {
    let dirs: Vec<String> = files
        .iter()
        .filter_map(|f| f.parent())
        .map(|d| d.display().to_string())
        .collect();
    if dirs.is_empty() {
        "any install folder".to_string()
    } else {
        dirs.join(", ")
    }
}

fn open_file(path: &Path) -> Result<Controller, String> {
    // SAFETY: as in `load`: the library named as uProf's profile-control
    // library is loaded, running its initialisers.
    let library = unsafe { Library::new(path) }.map_err(|e| {
        format!(
            "cannot open uProf's profile-control library {}: {}",
            path.display(),
            describe(&e)
        )
    })?;
    bind(library, path.display().to_string())
}

/// Looks up the functions of whichever generation `library` exports.
fn bind(library: Library, path: String) -> Result<Controller, String> {
    // SAFETY (all lookups): the types are the C signatures of these names
    // in uProf's AMDProfileController.h; the copied pointers stay valid
    // while `library` is loaded, which `Controller` ensures by owning it.
    let get5 = |name: &str| unsafe { library.get::<Switch5>(name.as_bytes()).ok().map(|s| *s) };
    let get4 = |name: &str| unsafe { library.get::<Switch4>(name.as_bytes()).ok().map(|s| *s) };
    let last_error = unsafe {
        library
            .get::<LastError>(LAST_ERROR.as_bytes())
            .ok()
            .map(|s| *s)
    };
    // This library exports AMD's names too (to bridge native code written
    // for uProf): taking it for uProf's would call itself forever.
    // SAFETY: only whether the symbol exists is asked.
    if unsafe { library.get::<unsafe extern "C" fn()>(b"lotus_resume") }.is_ok() {
        return Err(format!(
            "{path} is the lotus control library, not uProf's profile-control library: point {} at uProf's libAMDProfileController.so",
            control_lib::ENV_LIBRARY
        ));
    }
    let api = match (get5(RESUME_5), get5(PAUSE_5)) {
        (Some(resume), Some(pause)) => Api::V5 { resume, pause },
        _ => match (get4(RESUME_4), get4(PAUSE_4)) {
            (Some(resume), Some(pause)) => Api::V4 { resume, pause },
            _ => {
                return Err(format!(
                    "{path} is not a uProf profile-control library this version of lotus can use: it exports neither {RESUME_5}/{PAUSE_5} (uProf 5.x) nor {RESUME_4}/{PAUSE_4} (uProf 4.x)"
                ))
            }
        },
    };
    Ok(Controller {
        _library: library,
        path,
        api,
        last_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_mean_what_each_header_says() {
        assert!(meaning(Generation::V4, -4).contains("INVALID_ARG"));
        assert!(meaning(Generation::V5, -4).contains("ALREADY_PENDING"));
        assert!(meaning(Generation::V5, -6).contains("VERSION_MISMATCH"));
        assert!(meaning(Generation::V4, -6).contains("does not know"));
        assert!(meaning(Generation::V5, -1).contains("INTERNAL"));
    }
}
