//! Stand-ins for AMD uProf, shared by the uProf tests
//! (`backends/uprof/tests/` and the end-to-end `uprof_control` tests); the
//! sources they build stay in `backends/uprof/tests/standin/`:
//!
//! - [`build_library`]: a profile-control library
//!   (`profile_controller.c`) built with gcc, exporting the 5.x or 4.x API
//!   or neither, recording each call to `$UPROF_STANDIN_LOG`;
//! - [`install_cli`]: an `AMDuProfCLI` (`AMDuProfCLI.py`) that accepts
//!   exactly the flags lotus uses, runs the target with a stand-in library
//!   and writes reports from `fixtures/reports/uprof`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root (the folder holding `fixtures/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|d| d.join("fixtures/reports/uprof").is_dir())
        .expect("the repository root holds fixtures/reports/uprof")
        .to_path_buf()
}

/// The folder of stand-in sources.
pub fn sources() -> PathBuf {
    root().join("backends/uprof/tests/standin")
}

/// The real uProf reports the stand-in `AMDuProfCLI report` hands out.
pub fn fixtures() -> PathBuf {
    root().join("fixtures/reports/uprof")
}

/// The Python the tests run: `$LOTUS_PYTHON`, else the repository's
/// `.venv`, else `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("LOTUS_PYTHON") {
        return p.into();
    }
    let venv = root().join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    "python3".into()
}

/// Which profile-control API a stand-in library exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// uProf 5.x: `amdProfileResumeImpl()` / `amdProfilePauseImpl()`.
    V5,
    /// uProf 4.x: `amdProfileResume(unsigned)` / `amdProfilePause(unsigned)`.
    V4,
    /// Neither.
    Neither,
}

/// How a stand-in library behaves.
#[derive(Debug, Clone, Copy)]
pub struct Flavor {
    /// The API it exports.
    pub api: Api,
    /// Exports `amdGetLastProfileError()` returning this.
    pub last_error: Option<i32>,
    /// Resume returns false.
    pub fail_resume: bool,
    /// Pause returns false.
    pub fail_pause: bool,
}

impl Flavor {
    /// A library of `api` whose calls succeed.
    pub fn good(api: Api) -> Self {
        Flavor {
            api,
            last_error: None,
            fail_resume: false,
            fail_pause: false,
        }
    }
}

/// Builds a stand-in profile-control library at `out` (its folders are
/// created).
pub fn build_library(out: &Path, flavor: Flavor) -> PathBuf {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).expect("library folder");
    }
    let mut cmd = Command::new("gcc");
    cmd.args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(sources().join("profile_controller.c"));
    match flavor.api {
        Api::V5 => {
            cmd.arg("-DAPI5");
        }
        Api::V4 => {
            cmd.arg("-DAPI4");
        }
        Api::Neither => {}
    }
    if let Some(code) = flavor.last_error {
        cmd.arg(format!("-DLAST_ERROR=({code})"));
    }
    if flavor.fail_resume {
        cmd.arg("-DFAIL_RESUME");
    }
    if flavor.fail_pause {
        cmd.arg("-DFAIL_PAUSE");
    }
    let out_put = cmd.output().expect("run gcc");
    assert!(
        out_put.status.success(),
        "gcc failed: {}",
        String::from_utf8_lossy(&out_put.stderr)
    );
    out.to_path_buf()
}

/// Writes the stand-in `AMDuProfCLI` into `bin` (created); returns its path.
pub fn install_cli(bin: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(bin).expect("bin folder");
    let body =
        std::fs::read_to_string(sources().join("AMDuProfCLI.py")).expect("AMDuProfCLI.py source");
    let path = bin.join("AMDuProfCLI");
    let py = python();
    let shebang = if py.is_absolute() {
        py.display().to_string()
    } else {
        format!("/usr/bin/env {}", py.display())
    };
    std::fs::write(&path, format!("#!{shebang}\n{body}")).expect("write AMDuProfCLI");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// The lines of a stand-in library's call log (empty when there is none).
pub fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
