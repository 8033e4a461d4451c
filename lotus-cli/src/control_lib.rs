//! Where the control library the profiled processes load is found, and
//! the warnings for what lotus runs that another user could change. The
//! engine (`lotus_map`) is given the library's path
//! (`LiveOptions::new`); finding it is the binary's business.

use std::path::{Path, PathBuf};

use lotus_map::harness::{CONTROL_LIBRARY, ENV_CONTROL_LIB};
/// Finds the control library: `LOTUS_CONTROL_LIB` when it names a file,
/// else `liblotus_control.so` beside the running executable. A cargo build
/// tree is the one place with a second choice, and it stays inside that
/// tree: the `lotus` binary in `target/<profile>/` may find it in `deps/`
/// below, and a test binary in `target/<profile>/deps/` one folder up
/// (only where that folder is a cargo profile folder, with `deps/` and
/// `.fingerprint/`). The first that exists is taken, never the newest: a
/// modification time is whatever the file's owner says it is. The library
/// found, and every folder above it, must be owned by this user or root
/// and writable by no one else (see [`lotus_backend_common::trust`]);
/// otherwise it is not loaded and a warning says why.
pub fn control_library_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(ENV_CONTROL_LIB).map(PathBuf::from) {
        if path.is_file() {
            return Some(path);
        }
    }
    let exe = std::env::current_exe().ok()?;
    match control_library_near(&exe)? {
        Ok(path) => Some(path),
        Err(untrusted) => {
            eprintln!("lotus: warning: the control library is not loaded: {untrusted}");
            None
        }
    }
}

/// The control library for the executable `exe` (see
/// [`control_library_path`]): `None` when there is none, an error when the
/// one found is not trusted.
fn control_library_near(
    exe: &Path,
) -> Option<Result<PathBuf, lotus_backend_common::trust::Untrusted>> {
    let dir = exe.parent()?;
    let is_profile_dir = |d: &Path| d.join("deps").is_dir() && d.join(".fingerprint").is_dir();
    let beside = Some(dir.to_path_buf());
    let below = is_profile_dir(dir).then(|| dir.join("deps"));
    let above = dir
        .parent()
        .filter(|up| dir.file_name() == Some(std::ffi::OsStr::new("deps")) && is_profile_dir(up))
        .map(Path::to_path_buf);
    let found = [beside, below, above]
        .into_iter()
        .flatten()
        .map(|d| d.join(CONTROL_LIBRARY))
        .find(|p| p.is_file())?;
    Some(lotus_backend_common::trust::check_file(&found).map(|()| found))
}

/// `program`, found by searching (the active virtual environment, PATH)
/// rather than named by the user, with a warning on stderr when another
/// user could change it or a folder above it: run by root, it would run
/// their code as root. Not refused: a user's own interpreter run by that
/// user is the common case, and `--python` names one explicitly.
pub fn warn_if_others_can_change(program: PathBuf) -> PathBuf {
    if let Err(untrusted) = lotus_backend_common::trust::check_file(&program) {
        eprintln!(
            "lotus: warning: the Python interpreter {} can be changed by another user ({untrusted}); pass --python to choose one only you and root can write",
            program.display()
        );
    }
    program
}

/// Warns on stderr when another user can write the op file `op` or its
/// folder (sticky or not): the harness puts that folder first on
/// `sys.path`, as Python does for a script, so a module dropped there by
/// another user (`numpy.py`) would be imported in place of the real one,
/// as root when lotus runs as root. Not refused: ops in a shared project
/// folder are common, and the warning says what to do.
pub fn warn_if_op_folder_shared(op: &Path) {
    use lotus_backend_common::trust;
    let folder = match op.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let checked = trust::check_path(folder, true).and_then(|()| trust::check_entry(op, false));
    if let Err(untrusted) = checked {
        eprintln!(
            "lotus: warning: op file {}: {untrusted}: another user could put a module there that the op imports in place of the real one (its folder comes first on sys.path); move the op to a folder only you can write",
            op.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn touch(path: &Path, age: Duration) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let file = std::fs::File::create(path).expect("create");
        file.set_modified(SystemTime::now() - age)
            .expect("set mtime");
    }

    fn near(exe: &Path) -> Option<PathBuf> {
        control_library_near(exe).map(|r| r.expect("trusted"))
    }

    #[test]
    fn the_control_library_beside_the_executable_wins_whatever_its_age() {
        let dir = tempfile::tempdir().expect("temp dir");
        let exe = dir.path().join("release/lotus");
        assert_eq!(near(&exe), None);
        touch(
            &dir.path().join("release").join(CONTROL_LIBRARY),
            Duration::from_secs(3600),
        );
        // One folder up, newer: never looked at (it is outside the install).
        touch(&dir.path().join(CONTROL_LIBRARY), Duration::ZERO);
        touch(
            &dir.path().join("release/deps").join(CONTROL_LIBRARY),
            Duration::ZERO,
        );
        assert_eq!(
            near(&exe),
            Some(dir.path().join("release").join(CONTROL_LIBRARY))
        );
        // An install beside which there is none does not look elsewhere
        // (release/ is no cargo profile folder: no .fingerprint/).
        std::fs::remove_file(dir.path().join("release").join(CONTROL_LIBRARY)).expect("rm");
        assert_eq!(near(&exe), None);
        let test_exe = dir.path().join("release/deps/harness-0123");
        assert_eq!(
            near(&test_exe),
            Some(dir.path().join("release/deps").join(CONTROL_LIBRARY))
        );
    }

    #[test]
    fn a_cargo_build_tree_falls_back_inside_itself() {
        let dir = tempfile::tempdir().expect("temp dir");
        let profile = dir.path().join("target/debug");
        std::fs::create_dir_all(profile.join(".fingerprint")).expect("mkdir");
        touch(&profile.join("deps").join(CONTROL_LIBRARY), Duration::ZERO);
        touch(
            &dir.path().join("target").join(CONTROL_LIBRARY),
            Duration::ZERO,
        );
        // `lotus` in target/debug finds deps/'s.
        assert_eq!(
            near(&profile.join("lotus")),
            Some(profile.join("deps").join(CONTROL_LIBRARY))
        );
        // A test binary in deps/ finds it beside itself; with only the
        // uplifted copy, one folder up, never two.
        std::fs::remove_file(profile.join("deps").join(CONTROL_LIBRARY)).expect("rm");
        assert_eq!(near(&profile.join("deps/harness-0123")), None);
        touch(&profile.join(CONTROL_LIBRARY), Duration::from_secs(3600));
        assert_eq!(
            near(&profile.join("deps/harness-0123")),
            Some(profile.join(CONTROL_LIBRARY))
        );
    }

    #[test]
    fn a_control_library_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let lib = dir.path().join("bin").join(CONTROL_LIBRARY);
        touch(&lib, Duration::ZERO);
        std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        let e = control_library_near(&dir.path().join("bin/lotus"))
            .expect("found")
            .expect_err("world-writable");
        assert_eq!(e.path, lib);
    }
}
