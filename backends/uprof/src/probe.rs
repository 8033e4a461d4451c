//! Finding AMD uProf on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use lotus_core::Probe;

/// The environment variable naming uProf's install folder.
pub const ENV_UPROF_HOME: &str = "AMDUPROF_HOME";

/// Folders uProf installs into by default.
const DEFAULT_HOMES: &[&str] = &["/opt/AMDuProf", "/opt/amd/uprof"];

/// The `AMDuProfCLI` command: on PATH, else under `$AMDUPROF_HOME/bin` or
/// the default install folders.
pub fn find_cli() -> Option<PathBuf> {
    if let Ok(p) = which::which("AMDuProfCLI") {
        return Some(p);
    }
    let homes = std::env::var_os(ENV_UPROF_HOME)
        .map(PathBuf::from)
        .into_iter()
        .chain(DEFAULT_HOMES.iter().map(PathBuf::from));
    homes
        .map(|h| Path::new(&h).join("bin").join("AMDuProfCLI"))
        .find(|p| p.is_file())
}

/// Whether uProf can be driven here, and its version.
pub fn probe() -> Probe {
    let Some(cli) = find_cli() else {
        return Probe::unavailable(
            "uprof",
            format!(
                "`AMDuProfCLI` is not on PATH, nor under ${ENV_UPROF_HOME}/bin or {}; install AMD uProf and add its bin folder to PATH, or set {ENV_UPROF_HOME}",
                DEFAULT_HOMES.join(" or ")
            ),
        );
    };
    match Command::new(&cli).arg("--version").output() {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let version = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_string());
            Probe::available("uprof", version)
        }
        Ok(out) => Probe::unavailable(
            "uprof",
            format!("{} --version failed ({})", cli.display(), out.status),
        ),
        Err(e) => Probe::unavailable("uprof", format!("cannot run {}: {e}", cli.display())),
    }
}
