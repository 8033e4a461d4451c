//! The control library (`liblotus_control.so`, crate `lotus-control`)
//! that lotus loads into the processes it profiles, carried inside the
//! `lotus` binary: `build.rs` builds it and this module embeds it, so a
//! copied or `cargo install`ed `lotus` needs nothing beside it.
//!
//! Which library a run loads, in this order:
//!
//! 1. `$LOTUS_CONTROL_LIB`, when it names a file: the user's explicit
//!    choice (a library under development), used as given like PATH;
//! 2. the embedded copy, written for each run into the run's private
//!    folder (the harness's or the tracer's, made by `mkdtemp`, mode
//!    0700), created with `O_CREAT|O_EXCL|O_NOFOLLOW` so nothing already
//!    there (a file, a link) is written through, and checked like any
//!    library lotus loads: trusted, or not loaded.
//!
//! No file beside the binary or in a build tree is looked for any more:
//! the embedded copy is always there and always the one built with this
//! binary, and every other place was one more a planted file could hide in.

use std::path::{Path, PathBuf};

/// The library built by `build.rs` from `lotus-control`.
const EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/liblotus_control.so"));

/// Why the control library cannot be had.
pub use lotus_map::MapError as ControlLibError;

/// The copy of the control library this binary carries.
pub fn embedded() -> &'static [u8] {
    EMBEDDED
}

/// The control library for a run whose private folder is `private_dir`
/// (see the module's documentation for the order).
pub fn path_for_run(private_dir: &Path) -> Result<PathBuf, ControlLibError> {
    lotus_map::harness::control_library_for_run(private_dir, EMBEDDED)
}

/// `program`, found by searching, with a warning where another user
/// could change it ([`lotus_sys::trust::interpreter_warning`]).
pub fn warn_if_others_can_change(program: PathBuf) -> PathBuf {
    if let Some(w) = lotus_sys::trust::interpreter_warning(&program) {
        crate::usage::say!("lotus: warning: {w}");
    }
    program
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the embedded library into `dir` as `liblotus_control.so` and checks
    /// the result can be trusted.
    fn write_embedded(dir: &Path) -> Result<PathBuf, ControlLibError> {
        lotus_map::harness::write_control_library(dir, EMBEDDED)
    }

    #[test]
    fn the_embedded_copy_is_the_library_and_never_written_through_what_is_there() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write_embedded(dir.path()).expect("written");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert_eq!(bytes.len(), EMBEDDED.len());
        // A second copy into the same folder does not replace the first.
        assert!(matches!(
            write_embedded(dir.path()),
            Err(ControlLibError::ControlLibraryWrite { .. })
        ));
        // Nor is a link at its name followed.
        let other = tempfile::tempdir().expect("temp dir");
        let target = other.path().join("elsewhere");
        std::os::unix::fs::symlink(
            &target,
            other.path().join(lotus_map::harness::CONTROL_LIBRARY),
        )
        .expect("symlink");
        assert!(write_embedded(other.path()).is_err());
        assert!(!target.exists());
    }

    #[test]
    fn a_copy_in_a_folder_others_can_write_is_not_loaded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        let e = write_embedded(dir.path()).expect_err("a world-writable folder");
        assert!(
            matches!(&e, ControlLibError::ControlLibraryUntrusted(u) if u.path == dir.path()),
            "{e}"
        );
    }
}
