//! The private-folder maker: every temporary folder lotus makes (the
//! harness's, the tracer's, a vendor tool's, `--keep-raw`'s) and every
//! temporary file (spill files) goes through [`PrivateDir`] or
//! [`temp_file`].

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::sys;
use crate::walk::{open_folder, Folder};

/// The file in a folder made by [`PrivateDir::new`] that names the lotus
/// process that made it: its pid and start time (`/proc/<pid>/stat`), so
/// that a later lotus can tell the folder of a killed lotus from a running
/// one's.
pub const OWNER_FILE: &str = "lotus.owner";

/// How deep [`PrivateDir`]'s removal goes (a job may make folders in it).
const MAX_DEPTH: u32 = 256;

/// The temporary folder (`TMPDIR`, else `/tmp`), walked and checked: it and
/// every folder above it are owned by this user or root and not writable
/// by others, except sticky ones (`/tmp`).
fn temp_root() -> Result<Folder> {
    let tmp = std::env::temp_dir();
    open_folder(&tmp, "use the temporary folder", None).map_err(|e| match e {
        Error::Untrusted { component, why, .. } => Error::UnsafeTmpDir {
            tmpdir: tmp.clone(),
            component,
            why,
        },
        other => other,
    })
}

/// The temporary folder (`TMPDIR`, else `/tmp`) once it passes the check
/// [`PrivateDir::new`] makes, links resolved; an [`Error::UnsafeTmpDir`]
/// naming the folder at fault otherwise.
pub fn temp_dir() -> Result<PathBuf> {
    temp_root().map(|f| f.path)
}

/// `"<pid> <start time>"` of a running process, or `None` when it is gone.
pub fn owner_stamp(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name (in parentheses, which may hold anything):
    // state is field 3, the start time field 22.
    let rest = &stat[stat.rfind(')')? + 1..];
    let start = rest.split_whitespace().nth(19)?;
    Some(format!("{pid} {start}"))
}

/// Removes the entry `name` of `parent`, a folder with all it holds,
/// through descriptors: a link in it is removed, never followed.
fn remove_tree(parent: BorrowedFd<'_>, name: &CStr, depth: u32) -> io::Result<()> {
    match sys::unlinkat(parent, name, 0) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::EPERM)) => {}
        Err(e) => return Err(e),
    }
    if depth > MAX_DEPTH {
        return Err(io::Error::other("folders nested too deep to remove"));
    }
    let dir = sys::openat(
        Some(parent),
        name,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )?;
    let mut first = None;
    for entry in sys::list(dir.as_fd())? {
        if let Err(e) = remove_tree(dir.as_fd(), &entry, depth + 1) {
            first.get_or_insert(e);
        }
    }
    if let Some(e) = first {
        return Err(e);
    }
    sys::unlinkat(parent, name, libc::AT_REMOVEDIR)
}

/// Removes the folders in `root` named `prefix*` that a killed lotus left:
/// a real folder (not a link), owned by this user, whose owner file names
/// a process that is gone (its pid is free, or taken by a process started
/// at another time). Folders without an owner file, or of another user,
/// are left alone.
fn remove_stale_in(root: BorrowedFd<'_>, prefix: &str) {
    let Ok(names) = sys::list(root) else {
        return;
    };
    for name in names {
        if !name.to_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        let Ok(dir) = sys::openat(
            Some(root),
            &name,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        ) else {
            continue;
        };
        match sys::fstat(dir.as_fd()) {
            Ok(st) if st.st_uid == sys::euid() => {}
            _ => continue,
        }
        let Ok(owner) = sys::openat(
            Some(dir.as_fd()),
            c"lotus.owner",
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) else {
            continue;
        };
        let mut stamp = String::new();
        if File::from(owner)
            .take(128)
            .read_to_string(&mut stamp)
            .is_err()
        {
            continue;
        }
        let Some(pid) = stamp.split_whitespace().next().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if owner_stamp(pid).as_deref() != Some(stamp.trim()) {
            // Best effort: what cannot be removed now may be next time.
            let _ = remove_tree(root, &name, 0);
        }
    }
}

/// Removes the folders named `prefix*` in `dir` that a killed lotus left
/// (see [`PrivateDir::new`]); others' folders, folders without an owner
/// file and those of a running lotus stay. [`PrivateDir::new`] does this
/// in the temporary folder by itself.
pub fn remove_stale_folders(dir: &Path, prefix: &str) {
    if let Ok(root) = open_folder(dir, "clean", None) {
        remove_stale_in(root.fd.as_fd(), prefix);
    }
}

/// A folder of this user alone (mode 0700), with a name others cannot
/// guess, removed with all it holds on drop (through descriptors: a link
/// in it is removed, never followed) unless [`PrivateDir::keep`] is called.
///
/// It holds no descriptor between calls (a run near its descriptor limit
/// keeps them all): each call walks to the folder again, from `/`, with
/// the same checks.
pub struct PrivateDir {
    /// The folder it was made in (walked and checked), links resolved.
    parent: PathBuf,
    name: CString,
    path: PathBuf,
    keep: bool,
}

impl std::fmt::Debug for PrivateDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateDir")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl PrivateDir {
    /// A new folder `<prefix><random>` in the temporary folder (`TMPDIR`,
    /// else `/tmp`), which must pass the trust check: refused with
    /// [`Error::UnsafeTmpDir`] otherwise (no fallback: a warning would
    /// scroll away while the job runs code another user could replace).
    /// The folder holds an owner file ([`OWNER_FILE`]); folders of the same
    /// prefix that a killed lotus left are removed first.
    pub fn new(prefix: &str) -> Result<PrivateDir> {
        let root = temp_root()?;
        remove_stale_in(root.fd.as_fd(), prefix);
        let dir = Self::make(root, prefix)?;
        if let Some(stamp) = owner_stamp(std::process::id()) {
            dir.write(Path::new(OWNER_FILE), stamp.as_bytes())?;
        }
        Ok(dir)
    }

    /// A new folder `<prefix><random>` in `dir` (`--keep-raw DIR`), made
    /// first if missing; `dir` and the folders above it must pass the same
    /// check as an output's. No owner file: such folders are kept.
    pub fn new_in(dir: &Path, prefix: &str) -> Result<PrivateDir> {
        let root = open_folder(dir, "create a folder in", Some(0o755))?;
        Self::make(root, prefix)
    }

    fn make(root: Folder, prefix: &str) -> Result<PrivateDir> {
        let fail = |source: io::Error| Error::Io {
            action: "create a private folder in",
            path: root.path.clone(),
            reason: source,
        };
        let mut tries = 0;
        let name = loop {
            let name = sys::cstr(OsStr::new(&format!("{prefix}{}", sys::random_name(10))))
                .map_err(fail)?;
            match sys::mkdirat(root.fd.as_fd(), &name, 0o700) {
                Ok(()) => break name,
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && tries < 100 => tries += 1,
                Err(e) => return Err(fail(e)),
            }
        };
        let path = root.path.join(OsStr::from_bytes(name.to_bytes()));
        let fd = sys::openat(
            Some(root.fd.as_fd()),
            &name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(fail)?;
        let dir = PrivateDir {
            parent: root.path.clone(),
            name,
            path,
            keep: false,
        };
        // The umask may have taken bits away; nothing else may add any.
        sys::fchmod(fd.as_fd(), 0o700).map_err(fail)?;
        let st = sys::fstat(fd.as_fd()).map_err(fail)?;
        if st.st_uid != sys::euid() || st.st_mode & 0o7777 != 0o700 {
            return Err(fail(io::Error::other(format!(
                "the new folder is owned by user {} with mode {:o}, not this user's with 0700",
                st.st_uid,
                st.st_mode & 0o7777
            ))));
        }
        Ok(dir)
    }

    /// The folder's path (absolute, links resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the folder (it is not removed on drop) and gives its path.
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }

    fn fail(&self, rel: &Path, source: io::Error) -> Error {
        Error::Io {
            action: "create",
            path: self.path.join(rel),
            reason: source,
        }
    }

    /// The folder itself, walked from `/` (see the type's doc).
    fn open(&self) -> Result<OwnedFd> {
        open_folder(&self.path, "create", None).map(|f| f.fd)
    }

    /// The folder of `rel`'s parent inside this one, and `rel`'s last name;
    /// `rel` must be relative, of plain names.
    fn parent_of(&self, rel: &Path) -> Result<(OwnedFd, CString)> {
        let invalid = || {
            self.fail(
                rel,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "not a plain relative name inside the private folder",
                ),
            )
        };
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => parts.push(n),
                _ => return Err(invalid()),
            }
        }
        let Some(last) = parts.pop() else {
            return Err(invalid());
        };
        let mut here = self.open()?;
        for part in parts {
            let name = sys::cstr(part).map_err(|e| self.fail(rel, e))?;
            here = sys::openat(
                Some(here.as_fd()),
                &name,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(|e| self.fail(rel, e))?;
        }
        let last = sys::cstr(last).map_err(|e| self.fail(rel, e))?;
        Ok((here, last))
    }

    /// Creates the new file `rel` (its folders must exist: see
    /// [`PrivateDir::create_dir`]) with mode `mode` less the umask, never
    /// through a link or over a file already there.
    pub fn create_file(&self, rel: &Path, mode: u32) -> Result<File> {
        let (parent, name) = self.parent_of(rel)?;
        sys::openat(
            Some(parent.as_fd()),
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            mode,
        )
        .map(File::from)
        .map_err(|e| self.fail(rel, e))
    }

    /// Writes `bytes` to the new file `rel` (mode 0644 less the umask) and
    /// gives its path.
    pub fn write(&self, rel: &Path, bytes: &[u8]) -> Result<PathBuf> {
        let mut file = self.create_file(rel, 0o644)?;
        file.write_all(bytes).map_err(|e| self.fail(rel, e))?;
        Ok(self.path.join(rel))
    }

    /// Lets every user read (never write) the folder itself and the files
    /// and folders `rels` name in it: the folder and each named folder
    /// 0755, each named file 0644, whatever the umask; what is not named
    /// (a status folder, the owner file) keeps its mode.
    ///
    /// For the tracer's folder alone: processes of a traced job that run
    /// as another user (`setpriv`, `os.setuid`) must still import the
    /// tracer, to report through lotus's pipe that they cannot write their
    /// logs; with the folder at 0700 they would run untraced without a
    /// word. It holds lotus's own Python source and nothing another user
    /// could change or learn from.
    pub fn readable_by_all(&self, rels: &[&Path]) -> Result<()> {
        let root = self.open_readable()?;
        sys::fchmod(root.as_fd(), 0o755).map_err(|e| self.fail(Path::new(""), e))?;
        for rel in rels {
            let (parent, name) = self.parent_of(rel)?;
            let fd = sys::openat(
                Some(parent.as_fd()),
                &name,
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                0,
            )
            .map_err(|e| self.fail(rel, e))?;
            let st = sys::fstat(fd.as_fd()).map_err(|e| self.fail(rel, e))?;
            let mode = match sys::kind(&st) {
                libc::S_IFDIR => 0o755,
                libc::S_IFREG => 0o644,
                _ => {
                    return Err(self.fail(
                        rel,
                        io::Error::new(io::ErrorKind::InvalidInput, "not a file or folder"),
                    ))
                }
            };
            sys::fchmod(fd.as_fd(), mode).map_err(|e| self.fail(rel, e))?;
        }
        Ok(())
    }

    /// The folder itself, opened for reading (fchmod needs a real
    /// descriptor, not an `O_PATH` one).
    fn open_readable(&self) -> Result<OwnedFd> {
        let parent = open_folder(&self.parent, "create", None)?;
        sys::openat(
            Some(parent.fd.as_fd()),
            &self.name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| self.fail(Path::new(""), e))
    }

    /// Makes the folder `rel` (mode 0700; its parent must exist) and gives
    /// its path.
    pub fn create_dir(&self, rel: &Path) -> Result<PathBuf> {
        let (parent, name) = self.parent_of(rel)?;
        sys::mkdirat(parent.as_fd(), &name, 0o700).map_err(|e| self.fail(rel, e))?;
        Ok(self.path.join(rel))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: a folder left behind is removed by the next
            // lotus (its owner file names a process that is gone).
            if let Ok(parent) = open_folder(&self.parent, "clean", None) {
                let _ = remove_tree(parent.fd.as_fd(), &self.name, 0);
            }
        }
    }
}

/// A new temporary file with no name (`O_TMPFILE`; a named file removed at
/// once where the file system has none), read-write, mode 0600, in the
/// temporary folder, which must pass the check [`PrivateDir::new`] makes.
/// It vanishes when closed, however lotus dies.
pub fn temp_file() -> Result<File> {
    let root = temp_root()?;
    let fail = |source: io::Error| Error::Io {
        action: "create a temporary file in",
        path: root.path.clone(),
        reason: source,
    };
    match sys::openat(
        Some(root.fd.as_fd()),
        c".",
        libc::O_TMPFILE | libc::O_RDWR,
        0o600,
    ) {
        Ok(fd) => return Ok(File::from(fd)),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) => {}
        Err(e) => return Err(fail(e)),
    }
    loop {
        let name = sys::cstr(OsStr::new(&format!(
            ".lotus-spill-{}",
            sys::random_name(12)
        )))
        .map_err(fail)?;
        match sys::openat(
            Some(root.fd.as_fd()),
            &name,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        ) {
            Ok(fd) => {
                sys::unlinkat(root.fd.as_fd(), &name, 0).map_err(fail)?;
                return Ok(File::from(fd));
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(fail(e)),
        }
    }
}
