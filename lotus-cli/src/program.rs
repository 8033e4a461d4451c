//! Finding the program lotus is asked to run (`--python`, `LOTUS_PYTHON`,
//! the program after `lotus profile --`), with the reason when it cannot
//! be run.

use std::path::{Path, PathBuf};

pub(crate) use lotus_runner::find_program;

/// The Python interpreter: `--python`, else `$LOTUS_PYTHON`, else the
/// active virtual environment's, else `python3` on PATH.
pub(crate) fn find_python(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return find_program(p).map_err(|e| match e {
            lotus_runner::RunnerError::ProgramMissing(_) => anyhow::anyhow!(
                "--python {}: no such interpreter (give the path of a python executable)",
                p.display()
            ),
            why => anyhow::anyhow!("--python {}: {why}", p.display()),
        });
    }
    if let Some(p) = std::env::var_os("LOTUS_PYTHON") {
        return find_program(Path::new(&p)).map_err(|e| match e {
            lotus_runner::RunnerError::ProgramMissing(_) => {
                anyhow::anyhow!("LOTUS_PYTHON={}: no such interpreter", p.to_string_lossy())
            }
            why => anyhow::anyhow!("LOTUS_PYTHON={}: {why}", p.to_string_lossy()),
        });
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        let p = Path::new(&venv).join("bin").join("python");
        if p.is_file() {
            return Ok(crate::control_lib::warn_if_others_can_change(p));
        }
    }
    which::which("python3")
        .or_else(|_| which::which("python"))
        .map(crate::control_lib::warn_if_others_can_change)
        .map_err(|_| {
            anyhow::anyhow!(
                "no Python found: python3 is not on PATH; install Python 3 or pass --python PATH"
            )
        })
}
