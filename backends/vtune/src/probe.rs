//! Finding VTune on this machine.

use std::path::{Path, PathBuf};

use lotus_core::Probe;

/// The environment variable VTune's `vars.sh` sets to its install folder.
pub const ENV_VTUNE_DIR: &str = "VTUNE_PROFILER_DIR";

/// The `vtune` command: on PATH, else under `$VTUNE_PROFILER_DIR/bin64`.
pub fn find_vtune() -> Option<PathBuf> {
    if let Ok(p) = which::which("vtune") {
        return Some(p);
    }
    let dir = std::env::var_os(ENV_VTUNE_DIR)?;
    let candidate = Path::new(&dir).join("bin64").join("vtune");
    candidate.is_file().then_some(candidate)
}

/// Whether VTune can be driven here, and its version.
pub fn probe() -> Probe {
    let Some(vtune) = find_vtune() else {
        return Probe::unavailable(
            "vtune",
            format!(
                "`vtune` is not on PATH and {ENV_VTUNE_DIR} is not set; install Intel VTune Profiler and run `source <oneapi>/vtune/latest/env/vars.sh`, or set {ENV_VTUNE_DIR} to its folder"
            ),
        );
    };
    Probe::from_version_command("vtune", &vtune)
}
