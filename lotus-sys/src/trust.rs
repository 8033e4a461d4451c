//! Whether a path is under the control of this user alone.
//!
//! lotus often runs as root. Whatever it loads into a process (the control
//! library, uProf's profile-control library) or writes into (trace logs,
//! output files) must not be a file, folder or symbolic link that another
//! user can place or change. A path is *trusted* when every file, folder and
//! link on it is owned by this user or root, and nothing on it can be
//! written by others, except that a sticky folder (`/tmp`) may be on the way
//! to it: there others cannot rename or remove what they do not own.
//!
//! The checks are written here (a few `lstat` calls) rather than taken
//! from a crate: the one rule lotus needs, "owned by us or root, not
//! writable by others", is smaller than any crate's configuration of it.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Group or others may write.
const SHARED_WRITE: u32 = 0o022;
/// The sticky bit: only a file's owner may rename or remove it.
const STICKY: u32 = 0o1000;

/// Why a path is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Untrusted {
    /// The file, folder or link that fails the check.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.why)
    }
}

impl std::error::Error for Untrusted {}

use crate::sys::euid;

/// Whether `uid` is this user or root.
pub(crate) fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == euid()
}

/// The rule of [`check_entry`] on an entry's owner and mode (`S_IF*` type
/// bits included): `Err` says what is wrong.
pub(crate) fn verdict(uid: u32, mode: u32, sticky_ok: bool) -> Result<(), String> {
    if !trusted_owner(uid) {
        return Err(format!(
            "is owned by user {uid}, not by this user ({}) or root",
            euid()
        ));
    }
    let kind = mode & libc::S_IFMT;
    // A link's own permission bits mean nothing.
    if kind == libc::S_IFLNK || mode & SHARED_WRITE == 0 {
        return Ok(());
    }
    if kind == libc::S_IFDIR && sticky_ok && mode & STICKY != 0 {
        return Ok(());
    }
    Err(format!(
        "can be written by {} (mode {:o})",
        if mode & 0o002 != 0 {
            "every user"
        } else {
            "its group"
        },
        mode & 0o7777
    ))
}

/// Opens the regular file `path` (through the one checked open,
/// [`crate::input::open_regular_with_metadata`]) only if the file opened
/// is this user's or root's and writable by no one else: a file found by
/// its path alone (a separate debug file), so that another user cannot
/// choose what it says. The folders on the way are not checked: a file
/// put in their place by another user is that user's, and refused.
pub fn open_trusted(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), Untrusted> {
    let (file, meta) = crate::input::open_regular_with_metadata(path)
        .map_err(|e| untrusted(path, format!("cannot be opened ({e})")))?;
    verdict(meta.uid(), meta.mode(), false).map_err(|why| untrusted(path, why))?;
    Ok((file, meta))
}

fn untrusted(path: &Path, why: String) -> Untrusted {
    Untrusted {
        path: path.to_path_buf(),
        why,
    }
}

/// Checks one file, folder or link (not what a link points to): owned by
/// this user or root, and not writable by group or others (a folder may be
/// when it is sticky and `sticky_ok`).
pub fn check_entry(path: &Path, sticky_ok: bool) -> Result<(), Untrusted> {
    let meta = std::fs::symlink_metadata(path)
        .map_err(|e| untrusted(path, format!("cannot be examined ({e})")))?;
    verdict(meta.uid(), meta.mode(), sticky_ok).map_err(|why| untrusted(path, why))
}

/// Checks `path` and every folder above it, following symbolic links the
/// way the kernel would (each link on the way is checked too). The last
/// component must not be writable by others even when sticky when
/// `private_last` (a folder lotus creates files in by name).
pub fn check_path(path: &Path, private_last: bool) -> Result<(), Untrusted> {
    let absolute = std::path::absolute(path)
        .map_err(|e| untrusted(path, format!("cannot be resolved ({e})")))?;
    let mut seen = 0;
    walk(&absolute, private_last, &mut seen)
}

/// Checks every component of the absolute `path`, resolving links.
fn walk(path: &Path, private_last: bool, links: &mut u32) -> Result<(), Untrusted> {
    let mut here = PathBuf::from("/");
    check_entry(&here, true)?;
    let parts: Vec<_> = path.components().skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match part {
            std::path::Component::ParentDir => {
                here.pop();
                continue;
            }
            std::path::Component::CurDir => continue,
            _ => {}
        }
        let next = here.join(part);
        check_entry(&next, !(last && private_last))?;
        let meta = std::fs::symlink_metadata(&next)
            .map_err(|e| untrusted(&next, format!("cannot be examined ({e})")))?;
        if meta.file_type().is_symlink() {
            *links += 1;
            if *links > 40 {
                return Err(untrusted(&next, "has too many levels of links".into()));
            }
            let to = std::fs::read_link(&next)
                .map_err(|e| untrusted(&next, format!("cannot be read ({e})")))?;
            let target = here.join(to);
            walk(&target, last && private_last, links)?;
            here = std::fs::canonicalize(&target)
                .map_err(|e| untrusted(&target, format!("cannot be resolved ({e})")))?;
        } else {
            here = next;
        }
    }
    Ok(())
}

/// A file to load or execute: it and every folder above it are trusted
/// (see the module doc).
pub fn check_file(path: &Path) -> Result<(), Untrusted> {
    check_path(path, false)
}

/// What to say of `program`, an interpreter found by searching (the
/// active virtual environment, PATH) rather than named by the user,
/// where another user could change it or a folder above it: run by
/// root, it would run their code as root. A warning, not a refusal: a
/// user's own interpreter run by that user is the common case.
pub fn interpreter_warning(program: &Path) -> Option<String> {
    let untrusted = check_file(program).err()?;
    Some(format!(
        "the Python interpreter {} can be changed by another user ({untrusted}); pass --python to choose one only you and root can write",
        program.display()
    ))
}

/// What to say of the op file `op` where another user can write it or its
/// folder (sticky or not): the harness puts that folder first on
/// `sys.path`, as Python does for a script, so a module dropped there by
/// another user (`numpy.py`) would be imported in place of the real one,
/// as root when lotus runs as root. A warning, not a refusal: ops in a
/// shared project folder are common, and the warning says what to do.
pub fn op_folder_warning(op: &Path) -> Option<String> {
    let folder = match op.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let untrusted = check_path(folder, true)
        .and_then(|()| check_entry(op, false))
        .err()?;
    Some(format!(
        "op file {}: {untrusted}: another user could put a module there that the op imports in place of the real one (its folder comes first on sys.path); move the op to a folder only you can write",
        op.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn shared_folders_and_files_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("lib.so");
        std::fs::write(&file, b"x").expect("write");
        chmod(&file, 0o644);
        check_file(&file).expect("a private file in a private folder");
        chmod(&file, 0o666);
        let e = check_file(&file).expect_err("world-writable file");
        assert!(e.why.contains("every user"), "{e}");
        chmod(&file, 0o664);
        assert!(check_file(&file).expect_err("group").why.contains("group"));
        chmod(&file, 0o644);
        chmod(dir.path(), 0o777);
        let e = check_file(&file).expect_err("world-writable folder");
        assert_eq!(e.path, dir.path());
        chmod(dir.path(), 0o1777);
        check_file(&file).expect("a sticky folder on the way");
        let e = check_path(dir.path(), true).expect_err("sticky is not private");
        assert_eq!(e.path, dir.path());
        chmod(dir.path(), 0o700);
    }

    #[test]
    fn links_are_followed_and_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let real = dir.path().join("real");
        std::fs::create_dir(&real).expect("mkdir");
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        chmod(&shared, 0o777);
        std::os::unix::fs::symlink(&real, dir.path().join("to_real")).expect("link");
        std::os::unix::fs::symlink("shared", dir.path().join("to_shared")).expect("link");
        check_path(&dir.path().join("to_real"), true).expect("link to a private folder");
        let e = check_path(&dir.path().join("to_shared"), true).expect_err("link to shared");
        assert_eq!(e.path, shared);
    }
}
