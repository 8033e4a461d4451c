//! The walk: a path opened from `/` one component at a time, each checked
//! on the descriptor held (never looked up by name a second time), links
//! resolved here rather than by the kernel.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::sys;
use crate::trust;

/// The most links one walk follows (the kernel's own limit).
const MAX_LINKS: u32 = 40;

/// A folder reached by the walk: its descriptor (`O_PATH`) and the path it
/// was reached by, links resolved (for messages).
pub(crate) struct Folder {
    pub(crate) fd: OwnedFd,
    pub(crate) path: PathBuf,
}

/// A walk in progress: the folders from `/` to where it stands.
pub(crate) struct Walk<'a> {
    /// The path the caller gave, for messages.
    shown: &'a Path,
    /// What is being done, for messages ("write").
    action: &'static str,
    stack: Vec<Folder>,
    links: u32,
    /// The components still to walk.
    queue: VecDeque<OsString>,
}

/// The noun for an entry's kind, for messages.
fn noun(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "the folder",
        libc::S_IFLNK => "the symbolic link",
        libc::S_IFIFO => "the FIFO",
        libc::S_IFCHR => "the character device",
        libc::S_IFBLK => "the block device",
        libc::S_IFSOCK => "the socket",
        _ => "the file",
    }
}

fn push_components(queue: &mut VecDeque<OsString>, path: &Path) {
    // In reverse, to the front: the link's text comes before what was
    // left of the path.
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    for p in parts.into_iter().rev() {
        queue.push_front(p);
    }
}

impl<'a> Walk<'a> {
    /// Starts at `/` (checked) with the components of `shown` made
    /// absolute (joined to the working folder).
    pub(crate) fn start(shown: &'a Path, action: &'static str) -> Result<Walk<'a>> {
        let io_err = |source| Error::Io {
            action,
            path: shown.to_path_buf(),
            reason: source,
        };
        let absolute = std::path::absolute(shown).map_err(io_err)?;
        let root = sys::openat(
            None,
            c"/",
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(io_err)?;
        let mut walk = Walk {
            shown,
            action,
            stack: Vec::new(),
            links: 0,
            queue: VecDeque::new(),
        };
        let st = sys::fstat(root.as_fd()).map_err(io_err)?;
        walk.judge(Path::new("/"), &st, true)?;
        walk.stack.push(Folder {
            fd: root,
            path: PathBuf::from("/"),
        });
        push_components(&mut walk.queue, &absolute);
        Ok(walk)
    }

    fn io(&self, source: io::Error) -> Error {
        Error::Io {
            action: self.action,
            path: self.shown.to_path_buf(),
            reason: source,
        }
    }

    fn untrusted(&self, mode: libc::mode_t, at: &Path, why: String) -> Error {
        Error::Untrusted {
            action: self.action,
            path: self.shown.to_path_buf(),
            component: format!("{} {}", noun(mode), at.display()),
            why,
        }
    }

    /// Checks an entry by its `fstat`: owned by this user or root, not
    /// writable by others (a sticky folder may be, when `sticky_ok`).
    fn judge(&self, at: &Path, st: &libc::stat, sticky_ok: bool) -> Result<()> {
        trust::verdict(st.st_uid, st.st_mode, sticky_ok)
            .map_err(|why| self.untrusted(st.st_mode, at, why))
    }

    /// The folder the walk stands in.
    pub(crate) fn here(&self) -> &Folder {
        // The stack always holds `/`.
        &self.stack[self.stack.len() - 1]
    }

    fn dir(&self) -> BorrowedFd<'_> {
        self.here().fd.as_fd()
    }

    /// Takes the next component, `None` when the path is walked.
    pub(crate) fn pop_front(&mut self) -> Option<OsString> {
        self.queue.pop_front()
    }

    /// Takes the last component off the path (the name of a file to
    /// write), `None` when nothing is left.
    pub(crate) fn pop_back(&mut self) -> Option<OsString> {
        self.queue.pop_back()
    }

    /// Walks every component left as a folder, making missing ones with
    /// `mode` when `create` is given.
    pub(crate) fn descend(&mut self, create: Option<libc::mode_t>) -> Result<()> {
        while let Some(part) = self.pop_front() {
            self.step(&part, create)?;
        }
        Ok(())
    }

    /// Goes into the folder `part` of the current one (or follows the link
    /// `part`).
    fn step(&mut self, part: &OsStr, create: Option<libc::mode_t>) -> Result<()> {
        if part == "." {
            return Ok(());
        }
        if part == ".." {
            if self.stack.len() > 1 {
                self.stack.pop();
            }
            return Ok(());
        }
        let at = self.here().path.join(part);
        let name = sys::cstr(part).map_err(|e| self.io(e))?;
        let open =
            |walk: &Self| sys::openat(Some(walk.dir()), &name, libc::O_PATH | libc::O_NOFOLLOW, 0);
        let fd = match open(self) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create.is_some() => {
                let mode = create.unwrap_or(0o755);
                match sys::mkdirat(self.dir(), &name, mode) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => {
                        return Err(Error::Io {
                            action: "create the folder",
                            path: at,
                            reason: e,
                        })
                    }
                }
                open(self).map_err(|e| self.io(e))?
            }
            Err(e) => {
                return Err(Error::Io {
                    action: self.action,
                    path: self.shown.to_path_buf(),
                    reason: io::Error::new(e.kind(), format!("{}: {e}", at.display())),
                })
            }
        };
        let st = sys::fstat(fd.as_fd()).map_err(|e| self.io(e))?;
        match sys::kind(&st) {
            libc::S_IFDIR => {
                self.judge(&at, &st, true)?;
                self.stack.push(Folder { fd, path: at });
                Ok(())
            }
            libc::S_IFLNK => self.follow(fd.as_fd(), &at, &st),
            // A file where a folder should be: no trust question, the
            // kernel's answer.
            _ => Err(Error::Io {
                action: self.action,
                path: self.shown.to_path_buf(),
                reason: io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!(
                        "{} {}: Not a directory (os error {})",
                        noun(st.st_mode),
                        at.display(),
                        libc::ENOTDIR
                    ),
                ),
            }),
        }
    }

    /// Follows the link `fd` (at `at`, in the current folder, which passed
    /// the check): only a link of this user or root; its text is put before
    /// the rest of the path.
    pub(crate) fn follow(&mut self, fd: BorrowedFd<'_>, at: &Path, st: &libc::stat) -> Result<()> {
        self.judge(at, st, true)?;
        self.links += 1;
        if self.links > MAX_LINKS {
            return Err(self.untrusted(
                st.st_mode,
                at,
                format!("leads through more than {MAX_LINKS} links"),
            ));
        }
        let text = sys::readlink_fd(fd).map_err(|e| self.io(e))?;
        let text = Path::new(&text);
        if text.as_os_str().as_bytes().first() == Some(&b'/') {
            self.stack.truncate(1);
        }
        push_components(&mut self.queue, text);
        Ok(())
    }

    /// Ends the walk: the folder it stands in.
    pub(crate) fn into_folder(mut self) -> Result<Folder> {
        match self.stack.pop() {
            Some(folder) => Ok(folder),
            // The walk never pops `/` (`..` at the root stays there).
            None => Err(self.io(io::Error::other("the walk lost its folder"))),
        }
    }

    /// An untrusted-entry error at `at` (for the final name's checks).
    pub(crate) fn refuse(&self, mode: libc::mode_t, at: &Path, why: String) -> Error {
        self.untrusted(mode, at, why)
    }

    /// An error of a system call on the caller's path.
    pub(crate) fn fail(&self, source: io::Error) -> Error {
        self.io(source)
    }

    /// Checks an entry by its `fstat` (see `judge`).
    pub(crate) fn check(&self, at: &Path, st: &libc::stat, sticky_ok: bool) -> Result<()> {
        self.judge(at, st, sticky_ok)
    }
}

/// Walks `path` as a folder, making missing folders with `mode` (less the
/// umask) when `create` is given; every folder on the way is checked.
pub(crate) fn open_folder(
    path: &Path,
    action: &'static str,
    create: Option<libc::mode_t>,
) -> Result<Folder> {
    let mut walk = Walk::start(path, action)?;
    walk.descend(create)?;
    walk.into_folder()
}
