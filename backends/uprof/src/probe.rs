//! Finding AMD uProf on this machine.

use std::path::{Path, PathBuf};

use lotus_core::Probe;
use lotus_sys::trust::{self, Untrusted};

// Where the profiled process loads uProf's profile-control library from
// is the control library's to say (it does the loading); the probe reports
// the same search, and finds AMDuProfCLI in the same install folders.
use lotus_control::uprof_library::{self as control_lib, ENV_UPROF_HOME};

/// Folders uProf installs into by default, as said in messages.
const DEFAULT_HOMES: &str = "/opt/AMDuProf* or /opt/amd/uprof";

/// The `AMDuProfCLI` command: on PATH, else under `$AMDUPROF_HOME/bin` or
/// the default install folders (`/opt/AMDuProf*`, newest version first,
/// and `/opt/amd/uprof`). One found in those folders is used only when no
/// other user can have put it there ([`lotus_sys::trust`]).
pub fn find_cli() -> Option<PathBuf> {
    search_cli().and_then(Result::ok)
}

/// [`find_cli`]'s search: the first `AMDuProfCLI` found, and whether it
/// may be run.
fn search_cli() -> Option<Result<PathBuf, Untrusted>> {
    if let Ok(p) = which::which("AMDuProfCLI") {
        return Some(Ok(p));
    }
    let home = std::env::var_os(ENV_UPROF_HOME).map(PathBuf::from);
    let found = control_lib::install_homes(home.as_deref(), Path::new("/opt"))
        .into_iter()
        .map(|h| h.join("bin").join("AMDuProfCLI"))
        .find(|p| p.is_file())?;
    Some(trust::check_file(&found).map(|()| found))
}

/// Where the profiled process will find the profile-control library, in
/// words, for the probe's notes.
fn control_library_note() -> String {
    match control_lib::find_file() {
        Some(path) if std::env::var_os(control_lib::ENV_LIBRARY).is_none() => {
            match trust::check_file(&path) {
                Ok(()) => format!("profile-control library: {}", path.display()),
                Err(untrusted) => format!(
                    "profile-control library: not loaded: {untrusted} (set {} to its full path to load it anyway)",
                    control_lib::ENV_LIBRARY
                ),
            }
        }
        Some(path) => format!("profile-control library: {}", path.display()),
        None => format!(
            "profile-control library: {} is not under ${ENV_UPROF_HOME}/lib/x64/shared or {DEFAULT_HOMES}; the profiled process will look for it on the dynamic library path (set {} to its full path if it lies elsewhere)",
            control_lib::LIBRARY,
            control_lib::ENV_LIBRARY
        ),
    }
}

/// Whether uProf can be driven here, and its version.
pub fn probe() -> Probe {
    let cli = match search_cli() {
        Some(Err(untrusted)) => {
            return Probe::unavailable(
                "uprof",
                format!(
                    "`AMDuProfCLI` is not run: {untrusted}; another user could have put it there. Add a trusted install's bin folder to PATH"
                ),
            )
        }
        found => found.and_then(Result::ok),
    };
    let Some(cli) = cli else {
        return Probe::unavailable(
            "uprof",
            format!(
                "`AMDuProfCLI` is not on PATH, nor in the bin folder of ${ENV_UPROF_HOME}, {DEFAULT_HOMES}; install AMD uProf and add its bin folder to PATH, or set {ENV_UPROF_HOME} to its install folder"
            ),
        );
    };
    let mut probe = Probe::from_version_command("uprof", &cli);
    if probe.available {
        probe.notes.push(format!("AMDuProfCLI: {}", cli.display()));
        probe.notes.push(control_library_note());
    }
    probe
}
