//! Finding the program a caller is asked to run (a Python interpreter, the
//! program to profile), with the reason when it cannot be run.

use std::path::{Path, PathBuf};

use crate::error::RunnerError;

/// `program` (a path, or a name on PATH) as it will be run; the error
/// says why it cannot be: no such file, a folder, or one this user may not
/// execute (which `which` reports only as "cannot find binary path").
pub fn find_program(program: &Path) -> Result<PathBuf, RunnerError> {
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
                return Err(RunnerError::ProgramUnusable(format!(
                    "{} is a folder, not a program",
                    candidate.display()
                )))
            }
            Ok(meta) => {
                use std::os::unix::fs::MetadataExt;
                return Err(RunnerError::ProgramUnusable(format!(
                    "permission denied: {} exists but you may not execute it (mode {:o}, owner \
                     uid {}); make it executable (chmod +x) or give another",
                    candidate.display(),
                    meta.mode() & 0o7777,
                    meta.uid()
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(RunnerError::ProgramUnusable(format!(
                    "permission denied: {} cannot be reached ({e}): a folder on its path is \
                     not open to you",
                    candidate.display()
                )))
            }
            Err(_) => {}
        }
    }
    Err(RunnerError::ProgramMissing(
        if program.components().count() > 1 {
            "no such file".into()
        } else {
            "not found on PATH".into()
        },
    ))
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
        assert!(matches!(e, RunnerError::ProgramUnusable(_)), "{e}");
        assert!(e.to_string().starts_with("permission denied"), "{e}");
        assert!(e.to_string().contains("mode 644"), "{e}");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(find_program(&script).expect("executable"), script);
        let e = find_program(dir.path()).expect_err("a folder");
        assert!(e.to_string().contains("is a folder"), "{e}");
        let e = find_program(&dir.path().join("none")).expect_err("missing");
        assert!(matches!(e, RunnerError::ProgramMissing(_)), "{e}");
        let e = find_program(Path::new("lotus-no-such-program-on-path")).expect_err("missing");
        assert_eq!(e.to_string(), "not found on PATH");
    }
}
