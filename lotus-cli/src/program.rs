//! Finding the program lotus is asked to run (`--python`, `LOTUS_PYTHON`,
//! the program after `lotus profile --`), with the reason when it cannot
//! be run.

use std::path::{Path, PathBuf};

/// `program` (a path, or a name on PATH) as it will be run; the error
/// says why it cannot be: no such file, a folder, or one this user may not
/// execute (which `which` reports only as "cannot find binary path").
pub(crate) fn find_program(program: &Path) -> Result<PathBuf, ProgramError> {
    if let Ok(found) = which::which(program) {
        return Ok(found);
    }
    let candidates: Vec<PathBuf> = if program.components().count() > 1 {
        vec![program.to_path_buf()]
    } else {
        std::env::var_os("PATH")
            .map(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(program))
                    .collect()
            })
            .unwrap_or_default()
    };
    for candidate in &candidates {
        match std::fs::metadata(candidate) {
            Ok(meta) if meta.is_dir() => {
                return Err(ProgramError::Unusable(format!(
                    "{} is a folder, not a program",
                    candidate.display()
                )))
            }
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                return Err(ProgramError::Unusable(format!(
                    "permission denied: {} exists but you may not execute it (mode {:o}, owner \
                     uid {}); make it executable (chmod +x) or give another",
                    candidate.display(),
                    meta.mode() & 0o7777,
                    meta.uid()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(ProgramError::Unusable(format!(
                    "permission denied: {} cannot be reached ({e}): a folder on its path is \
                     not open to you",
                    candidate.display()
                )))
            }
            Err(_) => {}
        }
    }
    Err(ProgramError::Missing(if program.components().count() > 1 {
        "no such file".into()
    } else {
        "not found on PATH".into()
    }))
}

/// Why [`find_program`] cannot run a program.
#[derive(Debug)]
pub(crate) enum ProgramError {
    /// There is no such file (on PATH): the words say which.
    Missing(String),
    /// There is, but it cannot be run: the words say why and what to do.
    Unusable(String),
}

impl std::fmt::Display for ProgramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramError::Missing(why) | ProgramError::Unusable(why) => f.write_str(why),
        }
    }
}

/// The Python interpreter: `--python`, else `$LOTUS_PYTHON`, else the
/// active virtual environment's, else `python3` on PATH.
pub(crate) fn find_python(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return find_program(p).map_err(|e| match e {
            ProgramError::Missing(_) => anyhow::anyhow!(
                "--python {}: no such interpreter (give the path of a python executable)",
                p.display()
            ),
            ProgramError::Unusable(why) => anyhow::anyhow!("--python {}: {why}", p.display()),
        });
    }
    if let Some(p) = std::env::var_os("LOTUS_PYTHON") {
        return find_program(Path::new(&p)).map_err(|e| match e {
            ProgramError::Missing(_) => {
                anyhow::anyhow!("LOTUS_PYTHON={}: no such interpreter", p.to_string_lossy())
            }
            ProgramError::Unusable(why) => {
                anyhow::anyhow!("LOTUS_PYTHON={}: {why}", p.to_string_lossy())
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn says_why_a_program_cannot_be_run() {
        let dir = tempfile::tempdir().expect("tmp");
        let script = dir.path().join("tool");
        std::fs::write(&script, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = find_program(&script).expect_err("not executable");
        assert!(matches!(e, ProgramError::Unusable(_)), "{e}");
        assert!(e.to_string().starts_with("permission denied"), "{e}");
        assert!(e.to_string().contains("mode 644"), "{e}");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(find_program(&script).expect("executable"), script);
        let e = find_program(dir.path()).expect_err("a folder");
        assert!(e.to_string().contains("is a folder"), "{e}");
        let e = find_program(&dir.path().join("none")).expect_err("missing");
        assert!(matches!(e, ProgramError::Missing(_)), "{e}");
        let e = find_program(Path::new("lotus-no-such-program-on-path")).expect_err("missing");
        assert_eq!(e.to_string(), "not found on PATH");
    }
}
