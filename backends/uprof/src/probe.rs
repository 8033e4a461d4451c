//! Finding AMD uProf on this machine.

use std::path::{Path, PathBuf};

use lotus_core::Probe;

use crate::control_lib;

/// The environment variable naming uProf's install folder.
pub const ENV_UPROF_HOME: &str = "AMDUPROF_HOME";

/// Folders uProf installs into by default, as said in messages.
const DEFAULT_HOMES: &str = "/opt/AMDuProf* or /opt/amd/uprof";

/// The `AMDuProfCLI` command: on PATH, else under `$AMDUPROF_HOME/bin` or
/// the default install folders (`/opt/AMDuProf*`, newest version first,
/// and `/opt/amd/uprof`).
pub fn find_cli() -> Option<PathBuf> {
    if let Ok(p) = which::which("AMDuProfCLI") {
        return Some(p);
    }
    let home = std::env::var_os(ENV_UPROF_HOME).map(PathBuf::from);
    control_lib::install_homes(home.as_deref(), Path::new("/opt"))
        .into_iter()
        .map(|h| h.join("bin").join("AMDuProfCLI"))
        .find(|p| p.is_file())
}

/// Where the profiled process will find the profile-control library, in
/// words, for the probe's notes.
fn control_library_note() -> String {
    match control_lib::find_file() {
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
    let Some(cli) = find_cli() else {
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
