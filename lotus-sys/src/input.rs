//! Opening the files users name (mappings, profiles, reports, op times,
//! trace logs) for reading.
//!
//! A path that is not a regular file must be refused before reading it:
//! `/dev/zero` never ends, a fifo blocks the open until some writer comes
//! (forever, if none does), and a folder fails later with a vaguer error.
//! [`open_regular`] opens without blocking (`O_NONBLOCK`, which regular
//! files ignore), then checks what the descriptor is, so a path swapped
//! between a check and the open cannot slip through.
//!
//! The files of a trace folder, which users often receive from another
//! machine, are opened through [`Folder`] instead: relative to the
//! folder's descriptor, never through a link that leads out of it, regular
//! files only, and read no further than the size they had when opened
//! ([`SizedFile`]), so that neither a link to `/dev/zero` or to a file of
//! another user, nor a fifo, nor a file growing under lotus can make a
//! reader block, run out of memory or quote what is not the folder's.

use std::collections::HashMap;
use std::fs::{File, FileType, OpenOptions};
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// What a file that is not a regular file is, in words ("a fifo (named
/// pipe)"); `None` for a regular file.
pub fn not_regular(file_type: FileType) -> Option<&'static str> {
    if file_type.is_file() {
        None
    } else if file_type.is_dir() {
        Some("a folder")
    } else if file_type.is_fifo() {
        Some("a fifo (named pipe)")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Opens `path` for reading if it is a regular file (symbolic links are
/// followed). Anything else is an error of kind `InvalidInput` whose text
/// says what it is: "is a fifo (named pipe), not a regular file".
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_regular_with_metadata(path).map(|(file, _)| file)
}

/// The one checked open of a file lotus reads by path (what users name,
/// the libraries a profiled process mapped, the kernel's tables): the
/// file and its metadata, if it is a regular file.
///
/// The path is opened `O_PATH` first, which opens nothing (no driver's
/// `open`, no FIFO wait), checked with `fstat`, and only then reopened
/// for reading through `/proc/self/fd` (the same inode, whatever the path
/// names by then) with `O_NONBLOCK|O_NOCTTY`; the inode is checked again.
/// (Opening the path for reading straight away, as this did before
/// 2026-11-28, already refused a FIFO without waiting, but ran a device's
/// `open`.)
pub fn open_regular_with_metadata(path: &Path) -> io::Result<(File, std::fs::Metadata)> {
    let not_regular_error = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {what}, not a regular file"),
        )
    };
    // Only the constants come from libc: no foreign call is made here.
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)?;
    let meta = handle.metadata()?;
    if let Some(what) = not_regular(meta.file_type()) {
        return Err(not_regular_error(what));
    }
    let read = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(p)
    };
    let file = match read(&Path::new("/proc/self/fd").join(handle.as_raw_fd().to_string())) {
        Ok(f) => f,
        // No /proc (a chroot): the path itself; the checks below hold.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => read(path)?,
        Err(e) => return Err(e),
    };
    let opened = file.metadata()?;
    if let Some(what) = not_regular(opened.file_type()) {
        return Err(not_regular_error(what));
    }
    if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(io::Error::other("replaced while it was being opened"));
    }
    Ok((file, opened))
}

/// A folder whose files are opened relative to it (a trace folder): see
/// [`Folder::open_file`].
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
    path: PathBuf,
    /// Where it reads each file once ([`Folder::open_reading_once`]).
    once: Option<ReadOnce>,
}

/// A regular file opened for reading, read no further than its size when
/// it was opened: a file that grows while it is read (a trace still being
/// written) ends where it ended then. Its bytes come from the file, or
/// from a [`Folder::open_reading_once`] copy of them.
#[derive(Debug)]
pub struct SizedFile {
    file: Source,
    size: u64,
    pos: u64,
}

/// Where a [`SizedFile`]'s bytes come from.
#[derive(Debug)]
enum Source {
    File(File),
    Held(Arc<Vec<u8>>),
}

impl Folder {
    /// Opens the folder `path` (a link given by the user is the user's
    /// choice and is followed; links inside it are what
    /// [`Folder::open_file`] guards against).
    pub fn open(path: &Path) -> io::Result<Folder> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY
                | OFlags::DIRECTORY
                | OFlags::NONBLOCK
                | OFlags::NOCTTY
                | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Folder {
            fd,
            path: path.to_path_buf(),
            once: None,
        })
    }

    /// Opens the folder `path` as [`Folder::open`] does, to be read by
    /// several readers in turn (a report's rows, views and figures): each
    /// file is opened and read once, its bytes held and handed to every
    /// later [`Folder::open_file`] of it, while the files held stay within
    /// `budget` bytes together. A file past the budget is opened again by
    /// each reader, as [`Folder::open`]'s are. Every reader sees the same
    /// bytes, where a folder still being written would have shown each
    /// reader more.
    pub fn open_reading_once(path: &Path, budget: u64) -> io::Result<Folder> {
        let mut folder = Folder::open(path)?;
        folder.once = Some(ReadOnce {
            budget,
            held: Mutex::new(Held::default()),
        });
        Ok(folder)
    }

    /// The folder's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` (a path inside the folder) for reading. The rule:
    ///
    /// - symbolic links are followed only while they stay inside the
    ///   folder (`openat2` with `RESOLVE_BENEATH`): a link that leads out
    ///   of it (an absolute target, or `..` past the folder) is refused,
    ///   saying to copy the real file in, and so are `/proc` "magic"
    ///   links. On a kernel without `openat2` (before Linux 5.6, or one
    ///   that forbids it) no link is followed at all;
    /// - only a regular file is opened for reading: a fifo, device,
    ///   socket or folder is refused, saying what it is, without blocking
    ///   and without opening it for reading (it is looked at through an
    ///   `O_PATH` descriptor first, and the file opened is checked again);
    /// - the file is read no further than its size when opened.
    ///
    /// Errors are of kind `InvalidInput` for what the rule refuses, with
    /// a text to follow the file's name ("is a fifo (named pipe), not a
    /// regular file").
    pub fn open_file(&self, rel: &Path) -> io::Result<SizedFile> {
        let Some(once) = &self.once else {
            return self.open_checked(rel);
        };
        // One reader at a time opens and reads a file; the others wait for
        // its bytes rather than open it too.
        let mut held = once.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = held.files.get(rel) {
            let size = bytes.len() as u64;
            return Ok(SizedFile {
                file: Source::Held(Arc::clone(bytes)),
                size,
                pos: 0,
            });
        }
        let (file, size) = self.open_regular(rel)?;
        if held.bytes.saturating_add(size) > once.budget {
            return Ok(SizedFile {
                file: Source::File(file),
                size,
                pos: 0,
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // Through `File`'s own reading (no zeroing of the buffer first,
        // which `SizedFile`'s `read` would need), no further than its size
        // when opened; kept as read (an `Arc<[u8]>` was a second copy).
        (&file).take(size).read_to_end(&mut bytes)?;
        let bytes = Arc::new(bytes);
        held.bytes += bytes.len() as u64;
        held.files.insert(rel.to_path_buf(), Arc::clone(&bytes));
        Ok(SizedFile {
            size: bytes.len() as u64,
            file: Source::Held(bytes),
            pos: 0,
        })
    }

    /// [`Folder::open_file`]'s rule, always from the file.
    fn open_checked(&self, rel: &Path) -> io::Result<SizedFile> {
        let (file, size) = self.open_regular(rel)?;
        Ok(SizedFile {
            file: Source::File(file),
            size,
            pos: 0,
        })
    }

    /// The regular file `rel` opened by [`Folder::open_file`]'s rule, and
    /// its size when opened.
    fn open_regular(&self, rel: &Path) -> io::Result<(File, u64)> {
        let read = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        // What is there, without opening it for reading: opening a device
        // or a fifo for reading can block or act on the device.
        let peek = self
            .openat_beneath(rel, OFlags::PATH | OFlags::CLOEXEC)
            .ok();
        let fd = match peek {
            Some(peek) => {
                refuse_unless_regular(&File::from(peek?))?;
                match self.openat_beneath(rel, read) {
                    Ok(fd) => fd?,
                    Err(Fallback) => self.open_following_no_link(rel, read)?,
                }
            }
            None => self.open_following_no_link(rel, read)?,
        };
        let file = File::from(fd);
        let size = refuse_unless_regular(&file)?;
        Ok((file, size))
    }

    /// `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`; `Err(Fallback)`
    /// when the kernel has no `openat2` (or forbids it, as some container
    /// runtimes' filters do).
    fn openat_beneath(&self, rel: &Path, flags: OFlags) -> Result<io::Result<OwnedFd>, Fallback> {
        match rustix::fs::openat2(
            &self.fd,
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => Ok(Ok(fd)),
            Err(Errno::NOSYS | Errno::PERM) => Err(Fallback),
            Err(Errno::XDEV) => Ok(Err(refused(format!(
                "is a symbolic link that leads out of the folder {}: lotus reads only files inside a trace folder (copy the real file in instead of linking to it)",
                escaped(&self.path.display().to_string())
            )))),
            Err(Errno::LOOP) => Ok(Err(refused(
                "is a symbolic link lotus does not follow (a loop of links, or a /proc link): copy the real file in".to_string(),
            ))),
            Err(e) => Ok(Err(e.into())),
        }
    }

    /// Opens `rel` one component at a time with `O_NOFOLLOW`: no link is
    /// followed, inside the folder or out (the rule where `openat2` is
    /// missing).
    pub(crate) fn open_following_no_link(&self, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let names: Vec<&std::ffi::OsStr> = rel
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
            .map(|c| match c {
                Component::Normal(name) => Ok(name),
                _ => Err(refused(format!(
                    "is not a path inside the folder {}",
                    escaped(&self.path.display().to_string())
                ))),
            })
            .collect::<io::Result<_>>()?;
        let Some((last, dirs)) = names.split_last() else {
            return Err(refused("is the folder itself, not a file in it".into()));
        };
        let link = || {
            refused(
                "is a symbolic link (or lies under one): lotus follows no link in a trace folder on this kernel (no openat2): copy the real file in".into(),
            )
        };
        let mut at: Option<OwnedFd> = None;
        for name in dirs {
            let next = rustix::fs::openat(
                at.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd),
                *name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            at = Some(match next {
                Ok(fd) => fd,
                Err(Errno::LOOP | Errno::NOTDIR) => return Err(link()),
                Err(e) => return Err(e.into()),
            });
        }
        let opened = rustix::fs::openat(
            at.as_ref().map_or(self.fd.as_fd(), AsFd::as_fd),
            *last,
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        );
        match opened {
            Ok(fd) => Ok(fd),
            Err(Errno::LOOP) => Err(link()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A folder opened once ([`Folder::open_reading_once`]) and shared by
/// the readers of one report, which then read each of its files once: a
/// handle to it, equal to another where it is the same opening.
#[derive(Debug, Clone)]
pub struct SharedFolder(Arc<Folder>);

impl SharedFolder {
    /// [`Folder::open_reading_once`], to be shared.
    pub fn open_reading_once(path: &Path, budget: u64) -> io::Result<SharedFolder> {
        Folder::open_reading_once(path, budget).map(|f| SharedFolder(Arc::new(f)))
    }
}

impl From<Folder> for SharedFolder {
    /// A folder shared as it was opened (reading once or not).
    fn from(f: Folder) -> SharedFolder {
        SharedFolder(Arc::new(f))
    }
}

impl std::ops::Deref for SharedFolder {
    type Target = Folder;
    fn deref(&self) -> &Folder {
        &self.0
    }
}

impl PartialEq for SharedFolder {
    fn eq(&self, other: &SharedFolder) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedFolder {}

/// A trace folder as its readers take it: by its path (each reader opens
/// it and its files anew), or a [`SharedFolder`] whose files are read
/// once for all of them.
#[derive(Debug, Clone, Copy)]
pub enum Dir<'a> {
    /// The folder at this path.
    Path(&'a Path),
    /// The folder opened once.
    Shared(&'a SharedFolder),
}

impl<'a> Dir<'a> {
    /// The folder at `path`, through `shared` where its reader holds it
    /// opened once: the one place a reader's optional shared folder
    /// becomes what it reads through.
    pub fn of(path: &'a Path, shared: Option<&'a SharedFolder>) -> Dir<'a> {
        match shared {
            Some(f) => Dir::Shared(f),
            None => Dir::Path(path),
        }
    }

    /// The folder's path.
    pub fn path(&self) -> &'a Path {
        match self {
            Dir::Path(p) => p,
            Dir::Shared(f) => f.0.path.as_path(),
        }
    }

    /// The shared folder, where it is one.
    pub fn shared(&self) -> Option<&'a SharedFolder> {
        match self {
            Dir::Path(_) => None,
            Dir::Shared(f) => Some(f),
        }
    }

    /// Opens `rel` inside the folder ([`Folder::open_file`]): through the
    /// shared folder, or the folder opened for this file alone.
    pub fn open_file(&self, rel: &Path) -> io::Result<SizedFile> {
        match self {
            Dir::Path(p) => Folder::open(p)?.open_file(rel),
            Dir::Shared(f) => f.open_file(rel),
        }
    }
}

impl<'a> From<&'a Path> for Dir<'a> {
    fn from(p: &'a Path) -> Dir<'a> {
        Dir::Path(p)
    }
}

impl<'a> From<&'a PathBuf> for Dir<'a> {
    fn from(p: &'a PathBuf) -> Dir<'a> {
        Dir::Path(p)
    }
}

impl<'a> From<&'a SharedFolder> for Dir<'a> {
    fn from(f: &'a SharedFolder) -> Dir<'a> {
        Dir::Shared(f)
    }
}

/// The files a [`Folder::open_reading_once`] holds, and its budget.
#[derive(Debug)]
struct ReadOnce {
    budget: u64,
    held: Mutex<Held>,
}

/// The files held, by their path inside the folder, and their bytes
/// together.
#[derive(Debug, Default)]
struct Held {
    files: HashMap<PathBuf, Arc<Vec<u8>>>,
    bytes: u64,
}

/// The kernel cannot resolve beneath a folder (no `openat2`).
struct Fallback;

fn refused(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// The size of `file` if it is a regular file; else the error saying
/// what it is.
fn refuse_unless_regular(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    match not_regular(meta.file_type()) {
        None => {
            refuse_hollow(meta.len(), meta.blocks())?;
            Ok(meta.len())
        }
        Some(what) => Err(refused(format!("is {what}, not a regular file"))),
    }
}

/// Below this size a file is read whatever its holes.
pub const HOLLOW_MIN_SIZE: u64 = 64 << 20;
/// A larger file must hold at least 1/HOLLOW_RATIO of its size in data.
pub const HOLLOW_RATIO: u64 = 64;

/// Refuses a file of `size` bytes whose `blocks` (512-byte units the file
/// system holds for it) are a sliver of it: a sparse file (`truncate -s
/// 1T`) is mostly holes, which read as zeros for as long as its size says,
/// and a received file's size is no proof of its content. lotus writes
/// its trace files in order, with no holes; a file of at least
/// [`HOLLOW_MIN_SIZE`] with less than 1/[`HOLLOW_RATIO`] of its size in data
/// is refused at once, saying so.
pub fn refuse_hollow(size: u64, blocks: u64) -> io::Result<()> {
    let held = blocks.saturating_mul(512);
    if size >= HOLLOW_MIN_SIZE && held.saturating_mul(HOLLOW_RATIO) < size {
        return Err(refused(format!(
            "is a sparse file of {} bytes that holds only {} bytes of data: a received file's size is no proof of its content, and lotus writes no holes (copy the real file in)",
            size, held
        )));
    }
    Ok(())
}

impl SizedFile {
    /// Opens `path`, a file the user named, as [`open_regular`] does
    /// (links followed: the user's choice), to be read no further than its
    /// size now.
    pub fn open_named(path: &Path) -> io::Result<SizedFile> {
        let file = open_regular(path)?;
        let meta = file.metadata()?;
        refuse_hollow(meta.len(), meta.blocks())?;
        Ok(SizedFile {
            file: Source::File(file),
            size: meta.len(),
            pos: 0,
        })
    }

    /// Its size when it was opened: no more is ever read.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Read for SizedFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.size.saturating_sub(self.pos);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if n == 0 {
            return Ok(0);
        }
        let k = match &mut self.file {
            Source::File(f) => f.read(&mut buf[..n])?,
            Source::Held(bytes) => {
                // `pos` is within `size`, the bytes' length.
                let at = usize::try_from(self.pos).unwrap_or(usize::MAX);
                let from = bytes.get(at..at.saturating_add(n)).unwrap_or_default();
                buf[..from.len()].copy_from_slice(from);
                from.len()
            }
        };
        self.pos += k as u64;
        Ok(k)
    }
}

impl Seek for SizedFile {
    /// Seeks within the size seen at open (a place past it is its end).
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let at = match to {
            SeekFrom::Start(n) => i128::from(n),
            SeekFrom::End(d) => i128::from(self.size) + i128::from(d),
            SeekFrom::Current(d) => i128::from(self.pos) + i128::from(d),
        };
        if at < 0 {
            return Err(refused("seek before the start of the file".into()));
        }
        let at = u64::try_from(at).unwrap_or(u64::MAX).min(self.size);
        self.pos = match &mut self.file {
            Source::File(f) => f.seek(SeekFrom::Start(at))?,
            Source::Held(_) => at,
        };
        Ok(self.pos)
    }
}

/// `text` with control characters escaped (`\n`, `\x1b`): for
/// messages that quote what a file holds, so that a received file cannot
/// put raw terminal escapes on the user's terminal. The one rule of
/// [`crate::text::one_line`], which every view uses.
pub fn escaped(text: &str) -> String {
    crate::text::one_line(text).into_owned()
}

/// One line of a file read by [`for_each_line`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Line<'a> {
    /// Its number, from 1.
    pub no: u64,
    /// Its bytes, without the line break; at most the length limit.
    pub bytes: &'a [u8],
    /// It was longer than the limit: `bytes` is its start.
    pub too_long: bool,
    /// It ends with a line break (false only for a last line cut short).
    pub ended: bool,
}

/// Hands each line of `input` to `f`, holding at most `max` bytes of a
/// line (a longer one comes cut, [`Line::too_long`]): memory stays bounded
/// whatever the file holds, a 10 GB line without a break included.
pub fn for_each_line<R: BufRead, E: From<io::Error>>(
    mut input: R,
    max: usize,
    mut f: impl FnMut(Line<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let mut line: Vec<u8> = Vec::new();
    let mut too_long = false;
    let mut no = 0u64;
    loop {
        let available = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if available.is_empty() {
            if !line.is_empty() || too_long {
                no += 1;
                f(Line {
                    no,
                    bytes: &line,
                    too_long,
                    ended: false,
                })?;
            }
            return Ok(());
        }
        let (take, used, ends) = match memchr::memchr(b'\n', available) {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        let room = max.saturating_sub(line.len());
        if take.len() > room {
            too_long = true;
        }
        line.extend_from_slice(&take[..take.len().min(room)]);
        input.consume(used);
        if ends {
            no += 1;
            f(Line {
                no,
                bytes: &line,
                too_long,
                ended: true,
            })?;
            line.clear();
            too_long = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_folders_are_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let e = open_regular(&fifo).expect_err("fifo");
        assert_eq!(e.to_string(), "is a fifo (named pipe), not a regular file");
        let e = open_regular(Path::new("/dev/zero")).expect_err("device");
        assert!(e.to_string().contains("character device"), "{e}");
        let e = open_regular(dir.path()).expect_err("folder");
        assert!(e.to_string().contains("a folder"), "{e}");
        let file = dir.path().join("f");
        std::fs::write(&file, "x").expect("write");
        let mut text = String::new();
        io::Read::read_to_string(&mut open_regular(&file).expect("file"), &mut text).expect("read");
        assert_eq!(text, "x");
    }

    #[test]
    fn folder_files_open_inside_the_folder_only() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("trace");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("sub/log"), "inside").expect("write");
        std::fs::write(dir.path().join("secret"), "outside").expect("write");
        symlink("sub/log", root.join("in")).expect("link");
        symlink("../secret", root.join("up")).expect("link");
        symlink(dir.path().join("secret"), root.join("abs")).expect("link");
        symlink("/dev/zero", root.join("zero")).expect("link");
        symlink("/proc/self/fd/0", root.join("magic")).expect("link");
        let made = std::process::Command::new("mkfifo")
            .arg(root.join("fifo"))
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let folder = Folder::open(&root).expect("folder");
        let read = |rel: &str| -> io::Result<String> {
            let mut text = String::new();
            folder
                .open_file(Path::new(rel))?
                .read_to_string(&mut text)?;
            Ok(text)
        };
        assert_eq!(read("sub/log").expect("file"), "inside");
        // A link that stays inside is followed.
        assert_eq!(read("in").expect("link inside"), "inside");
        for out in ["up", "abs", "zero"] {
            let e = read(out).expect_err(out);
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{out}: {e}");
            assert!(
                e.to_string().contains("leads out of the folder")
                    && e.to_string().contains("copy the real file in"),
                "{out}: {e}"
            );
        }
        // An absolute link to /proc is out of the folder before it is magic.
        let e = read("magic").expect_err("magic link");
        assert!(e.to_string().contains("leads out of the folder"), "{e}");
        // Refused at once, never opened for reading (it would block).
        let e = read("fifo").expect_err("fifo");
        assert_eq!(e.to_string(), "is a fifo (named pipe), not a regular file");
        let e = read("sub").expect_err("folder");
        assert!(e.to_string().contains("a folder"), "{e}");
        assert_eq!(
            read("none").expect_err("missing").kind(),
            io::ErrorKind::NotFound
        );

        // Without openat2, no link is followed at all, not even inside.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let e = folder
            .open_following_no_link(Path::new("in"), flags)
            .expect_err("link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::create_dir(dir.path().join("elsewhere")).expect("mkdir");
        std::fs::write(dir.path().join("elsewhere/log"), "x").expect("write");
        symlink(dir.path().join("elsewhere"), root.join("linked_dir")).expect("link");
        assert!(folder
            .open_following_no_link(Path::new("linked_dir/log"), flags)
            .is_err());
        assert!(folder
            .open_following_no_link(Path::new("sub/log"), flags)
            .is_ok());
        assert!(folder
            .open_following_no_link(Path::new("../secret"), flags)
            .is_err());
    }

    #[test]
    fn a_file_is_read_no_further_than_its_size_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        std::fs::write(&path, "0123456789").expect("write");
        let folder = Folder::open(dir.path()).expect("folder");
        let mut f = folder.open_file(Path::new("log")).expect("open");
        assert_eq!(f.size(), 10);
        // It grows while read: the reader stops where it ended at open.
        std::fs::write(&path, "0123456789abcdefghij").expect("grow");
        let mut text = String::new();
        f.read_to_string(&mut text).expect("read");
        assert_eq!(text, "0123456789");
        assert_eq!(f.seek(SeekFrom::End(-3)).expect("seek"), 7);
        let mut tail = String::new();
        f.read_to_string(&mut tail).expect("read");
        assert_eq!(tail, "789");
        assert_eq!(f.seek(SeekFrom::Start(1000)).expect("seek"), 10);
    }

    #[test]
    fn lines_are_bounded_and_a_cut_last_line_is_flagged() {
        let text = b"short\nxxxxxxxxxxxxxxxxxxxx\n\ncut";
        let mut lines = Vec::new();
        for_each_line(&text[..], 8, |l| -> io::Result<()> {
            lines.push((l.no, l.bytes.to_vec(), l.too_long, l.ended));
            Ok(())
        })
        .expect("lines");
        assert_eq!(
            lines,
            vec![
                (1, b"short".to_vec(), false, true),
                (2, b"xxxxxxxx".to_vec(), true, true),
                (3, Vec::new(), false, true),
                (4, b"cut".to_vec(), false, false),
            ]
        );
        assert_eq!(escaped("a\u{1b}[31m\tb"), "a\\x1b[31m\\tb");
    }

    #[test]
    fn a_folder_read_once_hands_every_reader_the_bytes_of_the_first_open() {
        let dir = tempfile::tempdir().expect("tmp");
        let log = dir.path().join("log");
        std::fs::write(&log, b"first").expect("write");
        std::fs::write(dir.path().join("big"), vec![b'x'; 100]).expect("write");
        let folder = SharedFolder::open_reading_once(dir.path(), 64).expect("open");
        let read = |name: &str| {
            let mut f = Dir::Shared(&folder)
                .open_file(Path::new(name))
                .expect("open");
            let mut out = Vec::new();
            f.read_to_end(&mut out).expect("read");
            (f.size(), out)
        };
        assert_eq!(read("log"), (5, b"first".to_vec()));
        // Replaced (a new inode) and grown after the first open: every
        // later reader still gets what the first one read.
        std::fs::remove_file(&log).expect("rm");
        std::fs::write(&log, b"second, longer").expect("write");
        assert_eq!(read("log"), (5, b"first".to_vec()));
        // Past the budget, each reader opens the file itself.
        assert_eq!(read("big").1.len(), 100);
        std::fs::write(dir.path().join("big"), b"y").expect("write");
        assert_eq!(read("big"), (1, b"y".to_vec()));
        // The rule holds as for any open: not a link out, not a fifo.
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("out")).expect("link");
        assert!(folder.open_file(Path::new("out")).is_err());
        // Held bytes seek and read in parts as a file does.
        let mut f = folder.open_file(Path::new("log")).expect("open");
        assert_eq!(f.seek(SeekFrom::End(-2)).expect("seek"), 3);
        let mut two = [0u8; 4];
        assert_eq!(f.read(&mut two).expect("read"), 2);
        assert_eq!(&two[..2], b"st");
        assert_eq!(f.read(&mut two).expect("read"), 0);
        assert_eq!(f.seek(SeekFrom::Start(99)).expect("seek"), 5);
        // A path's Dir opens the folder for each file: the new bytes.
        let mut f = Dir::Path(dir.path())
            .open_file(Path::new("log"))
            .expect("open");
        let mut out = String::new();
        f.read_to_string(&mut out).expect("read");
        assert_eq!(out, "second, longer");
    }
}
