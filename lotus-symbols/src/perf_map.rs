//! Naming JIT-compiled code from a perf map file, `/tmp/perf-<pid>.map`:
//! what CPython 3.12+ writes once its perf trampolines are on
//! (`sys.activate_stack_trampoline("perf")`), and other JITs too.
//!
//! Each line is `<hex start> <hex size> <name>` (CPython's:
//! `7fb6c06b6000 b py::spin:<string>`), appended while the process runs, as
//! code gets compiled. Samples taken in that code land in anonymous
//! executable memory, which no ELF file names: [`PerfMap::lookup`] does.
//!
//! The file is the job's, in a folder every user can write (`/tmp`), and
//! lotus often runs as root, so [`PerfMap::open`] trusts it only when it is
//! a regular file (never a link, never a FIFO, which could block a read
//! forever), owned by the user the job ran as, writable by no one else, and
//! with no second name (a hard link another user made to a file of the
//! job's user). Reading is bounded: a line longer than
//! [`PerfMap::MAX_LINE`] is skipped as bad, at most [`PerfMap::MAX_BYTES`]
//! are read from one file in all (past that [`PerfMap::note`] says so), and
//! names are made printable ([`lotus_sys::text::one_line`]).
//!
//! The parser is hand-written: the format is three fields on a line, and
//! the rules around it (what to trust, what to bound) are lotus's own.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use lotus_sys::text::one_line;

/// How much one `read` asks for.
const CHUNK: usize = 64 << 10;

/// The path CPython (and other JITs) write for `pid`: `/tmp/perf-<pid>.map`.
pub fn perf_map_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// A CPython perf map name, `py::<qualname>:<file>`, split into its
/// qualified name and file; `None` for any other name (another JIT's).
///
/// ```
/// use lotus_symbols::python_frame;
/// assert_eq!(python_frame("py::Net.forward:/app/model.py"), Some(("Net.forward", "/app/model.py")));
/// assert_eq!(python_frame("py::spin:<string>"), Some(("spin", "<string>")));
/// assert_eq!(python_frame("LazyCompile:*foo"), None);
/// ```
pub fn python_frame(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("py::")?;
    // A qualified name has no `:` (dots and `<locals>` only); a file may.
    rest.split_once(':')
}

/// One named range, `[start, end)`, as the painted index keeps it.
#[derive(Debug, Clone, Copy)]
struct Range {
    end: u64,
    /// Index into [`PerfMap::names`].
    name: u32,
}

/// The entries of one perf map file, read as the file grows.
///
/// Entries are kept as disjoint ranges in an ordered map (a B-tree, so a
/// lookup is a logarithmic search and an appended entry is inserted where
/// it belongs without re-sorting the rest). An entry overlapping earlier
/// ones is painted over them: the later entry wins where they overlap
/// (a JIT can reuse memory), the earlier ones keep the rest of their range.
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    file: File,
    /// Start address → the range starting there.
    ranges: BTreeMap<u64, Range>,
    names: Vec<Box<str>>,
    /// Bytes read so far.
    consumed: u64,
    /// The most bytes read in all ([`PerfMap::MAX_BYTES`]; smaller in tests).
    max_bytes: u64,
    /// The last line read so far, not yet ended by a newline.
    partial: Vec<u8>,
    /// Inside a line longer than [`PerfMap::MAX_LINE`]: its bytes are dropped up to
    /// its newline.
    skipping: bool,
    bad: u64,
    /// The file had more than `max_bytes`.
    capped: bool,
    /// A read failed: nothing more is read.
    failed: Option<String>,
    /// The user the file must stay owned by.
    owner: u32,
    /// Why the file is no longer trusted (it changed owner, mode or links
    /// while it was read): nothing of it is named any more.
    revoked: Option<String>,
}

/// `path` for a message: on one line, control characters escaped.
fn shown(path: &Path) -> String {
    one_line(&path.display().to_string()).into_owned()
}

impl PerfMap {
    /// The longest line read (bytes, newline excluded); longer lines are
    /// skipped and counted in [`PerfMap::bad_lines`].
    pub const MAX_LINE: usize = 4096;

    /// The most bytes read from one perf map file in all; the entries past
    /// it stay unnamed and [`PerfMap::note`] says so.
    pub const MAX_BYTES: u64 = 64 << 20;

    /// Opens `path` only if it is a regular file, not a symbolic link, owned
    /// by `owner` (the uid of the process that wrote it), writable by no
    /// other user, and with no other name (one hard link). The open never follows a link in the last component
    /// (`O_PATH | O_NOFOLLOW`, then a check of what the descriptor is) and
    /// never blocks (the file is reopened through `/proc/self/fd` with
    /// `O_NONBLOCK`, and only once it is known to be a regular file).
    ///
    /// Nothing is read until the first [`PerfMap::lookup`].
    ///
    /// The error is one line naming the file and why (not found, a link,
    /// not a regular file, owned by another user), usable as is in a note
    /// to the user.
    pub fn open(path: &Path, owner: u32) -> Result<PerfMap, String> {
        let shown = shown(path);
        let handle = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => format!("{shown}: not found"),
                _ => format!("{shown}: {e}"),
            })?;
        let meta = handle.metadata().map_err(|e| format!("{shown}: {e}"))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Err(format!(
                "{shown} is a symbolic link, so not trusted (links are never followed)"
            ));
        }
        if let Some(what) = lotus_sys::input::not_regular(kind) {
            return Err(format!("{shown} is {what}, not a regular file"));
        }
        if meta.uid() != owner {
            return Err(format!(
                "{shown} is owned by uid {}, not the job's user {owner}, so not trusted",
                meta.uid()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(format!(
                "{shown} can be written by other users (mode {:o}), so not trusted",
                meta.mode() & 0o7777
            ));
        }
        // A second name: another user may have linked a file of the job's
        // user (one it must not read) at this predictable path, for the
        // job to append to and lotus to read.
        if meta.nlink() != 1 {
            return Err(format!(
                "{shown} has {} hard links (another name of another file), so not trusted",
                meta.nlink()
            ));
        }
        let file = reopen(&handle, path).map_err(|e| format!("{shown}: {e}"))?;
        let opened = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
            return Err(format!("{shown} was replaced while it was being opened"));
        }
        Ok(PerfMap {
            path: path.to_path_buf(),
            file,
            ranges: BTreeMap::new(),
            names: Vec::new(),
            consumed: 0,
            max_bytes: PerfMap::MAX_BYTES,
            partial: Vec::new(),
            skipping: false,
            bad: 0,
            capped: false,
            failed: None,
            owner,
            revoked: None,
        })
    }

    /// The file this map reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name of the entry holding `address`, as the file wrote it
    /// (CPython's: `py::spin:<string>`; [`python_frame`] splits it), made
    /// printable. On a miss the lines appended since the last read are
    /// read first (the file grows while the job runs).
    ///
    /// A hit does not read on: where memory may have been reused since the
    /// last read (samples taken later than it), call [`PerfMap::refresh`]
    /// first, so that the newer entry wins.
    pub fn lookup(&mut self, address: u64) -> Option<&str> {
        if self.find(address).is_none() {
            self.refresh();
        }
        if self.revoked.is_some() {
            return None;
        }
        let name = self.find(address)?;
        Some(&self.names[name as usize])
    }

    /// Reads the lines appended since the last read (up to [`PerfMap::MAX_BYTES`]
    /// in all). Whether any entry was added.
    ///
    /// Each read checks the file again, on the descriptor held: one that
    /// was given to another user, made writable by others or linked
    /// elsewhere since it was opened is no longer trusted, and nothing of
    /// it is named from then on ([`PerfMap::note`] says why).
    pub fn refresh(&mut self) -> bool {
        if self.revoked.is_some() {
            return false;
        }
        let shown = shown(&self.path);
        let why = match self.file.metadata() {
            Ok(m) if m.uid() != self.owner => Some(format!(
                "{shown} is owned by uid {} now, not the job's user {}, so no longer trusted",
                m.uid(),
                self.owner
            )),
            Ok(m) if m.mode() & 0o022 != 0 => Some(format!(
                "{shown} can be written by other users now (mode {:o}), so no longer trusted",
                m.mode() & 0o7777
            )),
            Ok(m) if m.nlink() != 1 => Some(format!(
                "{shown} has {} hard links now, so no longer trusted",
                m.nlink()
            )),
            Ok(_) => None,
            Err(e) => Some(format!("{shown}: {e}")),
        };
        if let Some(why) = why {
            self.revoked = Some(why);
            self.ranges.clear();
            return false;
        }
        let before = self.names.len();
        if let Err(e) = self.read_appended() {
            self.failed = Some(e.to_string());
        }
        self.names.len() != before
    }

    /// Lines that could not be parsed so far (skipped, the rest kept): not
    /// `<hex start> <hex size> <name>`, an end past 2^64, or longer than
    /// [`PerfMap::MAX_LINE`].
    pub fn bad_lines(&self) -> u64 {
        self.bad
    }

    /// How many entries were read so far (entries of size 0 are not
    /// counted: they name nothing).
    pub fn entries(&self) -> usize {
        self.names.len()
    }

    /// What the user should know about this file, on one line: lines
    /// skipped, the read stopped at [`PerfMap::MAX_BYTES`], a read that failed.
    /// `None` when all went well.
    pub fn note(&self) -> Option<String> {
        if let Some(why) = &self.revoked {
            return Some(why.clone());
        }
        let path = shown(&self.path);
        let mut parts = Vec::new();
        if self.bad > 0 {
            parts.push(format!(
                "{} line(s) that are not `<hex start> <hex size> <name>` skipped",
                self.bad
            ));
        }
        if self.capped {
            parts.push(format!(
                "only its first {} MiB read: code compiled after that is unnamed",
                self.max_bytes >> 20
            ));
        }
        if let Some(e) = &self.failed {
            parts.push(format!(
                "reading it failed ({e}): code compiled after that is unnamed"
            ));
        }
        (!parts.is_empty()).then(|| format!("{path}: {}", parts.join("; ")))
    }

    /// The name index of the range holding `address`.
    fn find(&self, address: u64) -> Option<u32> {
        let (_, r) = self.ranges.range(..=address).next_back()?;
        (address < r.end).then_some(r.name)
    }

    /// Reads to the end of the file (or the byte limit), parsing whole
    /// lines and keeping a partial last one for later.
    fn read_appended(&mut self) -> io::Result<()> {
        if self.failed.is_some() || self.capped {
            return Ok(());
        }
        let mut buf = vec![0u8; CHUNK];
        loop {
            let left = self.max_bytes - self.consumed;
            if left == 0 {
                // More there than the limit allows?
                let mut probe = [0u8; 1];
                self.capped = read_retrying(&mut self.file, &mut probe)? > 0;
                return Ok(());
            }
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = read_retrying(&mut self.file, &mut buf[..want])?;
            if n == 0 {
                return Ok(());
            }
            self.consumed += n as u64;
            self.take(&buf[..n]);
        }
    }

    /// Splits `data` into lines, parsing each whole one.
    fn take(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let newline = data.iter().position(|&b| b == b'\n');
            let (piece, rest) = match newline {
                Some(i) => (&data[..i], &data[i + 1..]),
                None => (data, &data[data.len()..]),
            };
            data = rest;
            if !self.skipping {
                if self.partial.len() + piece.len() > PerfMap::MAX_LINE {
                    self.partial.clear();
                    self.skipping = true;
                } else {
                    self.partial.extend_from_slice(piece);
                }
            }
            if newline.is_none() {
                return;
            }
            if self.skipping {
                self.skipping = false;
                self.bad += 1;
            } else {
                let line = std::mem::take(&mut self.partial);
                self.add_line(&line);
                self.partial = line;
                self.partial.clear();
            }
        }
    }

    /// Parses one line (no newline) and paints its entry in.
    fn add_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match parse_line(line) {
            Some((_, 0, _)) => {}
            Some((start, size, name)) => match start.checked_add(size) {
                Some(end) => self.paint(start, end, name),
                None => self.bad += 1,
            },
            None => self.bad += 1,
        }
    }

    /// Adds `[start, end)` named `name` over whatever earlier ranges it
    /// overlaps: they keep only what lies outside it.
    fn paint(&mut self, start: u64, end: u64, name: &[u8]) {
        let Ok(index) = u32::try_from(self.names.len()) else {
            self.bad += 1;
            return;
        };
        let text = String::from_utf8_lossy(name);
        self.names.push(one_line(&text).into());
        // A range starting below `start` that reaches into it: cut at
        // `start`, its part past `end` (if any) kept after the new one.
        if let Some((_, r)) = self.ranges.range_mut(..start).next_back() {
            if r.end > start {
                let old = *r;
                r.end = start;
                if old.end > end {
                    self.ranges.insert(end, old);
                }
            }
        }
        // Ranges starting inside the new one: gone, but for their part
        // past `end`.
        let inside: Vec<u64> = self.ranges.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(old) = self.ranges.remove(&s) {
                if old.end > end {
                    self.ranges.insert(end, old);
                }
            }
        }
        self.ranges.insert(start, Range { end, name: index });
    }
}

/// `read`, again where a signal interrupted it.
fn read_retrying(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// `handle` (an `O_PATH` descriptor of a regular file) opened for reading,
/// without blocking and without looking the path up again.
fn reopen(handle: &File, path: &Path) -> io::Result<File> {
    let flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let via_proc = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(handle));
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(via_proc)
    {
        Ok(f) => Ok(f),
        // No /proc (a chroot): the path, never following a link; the
        // caller checks that it is the same file.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags | libc::O_NOFOLLOW)
            .open(path),
        Err(e) => Err(e),
    }
}

/// A hexadecimal number, with or without `0x`, of at most 16 digits.
fn hex(field: &[u8]) -> Option<u64> {
    let digits = field
        .strip_prefix(b"0x")
        .or_else(|| field.strip_prefix(b"0X"))
        .unwrap_or(field);
    if digits.is_empty() || digits.len() > 16 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // All ASCII hex digits: valid UTF-8, and no sign for from_str_radix.
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// `<hex start> <hex size> <name>`: the name is the rest of the line
/// (spaces included), as perf reads it.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &[u8])> {
    let line = line.trim_ascii_start();
    let cut = line.iter().position(u8::is_ascii_whitespace)?;
    let start = hex(&line[..cut])?;
    let line = line[cut..].trim_ascii_start();
    let cut = line.iter().position(u8::is_ascii_whitespace)?;
    let size = hex(&line[..cut])?;
    let name = line[cut..].trim_ascii();
    (!name.is_empty()).then_some((start, size, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    fn me() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    /// A private temp folder holding `name` with `text`.
    fn map_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (dir, path)
    }

    fn append(path: &Path, text: &[u8]) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(text).unwrap();
    }

    #[test]
    fn perf_map_path_is_cpythons() {
        assert_eq!(perf_map_path(4242), Path::new("/tmp/perf-4242.map"));
    }

    #[test]
    fn perf_map_parses_cpythons_lines() {
        let (_dir, path) = map_file(
            "7fb6c06b6000 b py::spin:<string>\n\
             7fb6c06b600b b py::Net.forward:/app/model.py\n\
             0x1000 0x20 LazyCompile:*foo with spaces.js:1\n",
        );
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(map.lookup(0x7fb6c06b6000), Some("py::spin:<string>"));
        assert_eq!(map.lookup(0x7fb6c06b600a), Some("py::spin:<string>"));
        assert_eq!(
            map.lookup(0x7fb6c06b600b),
            Some("py::Net.forward:/app/model.py")
        );
        assert_eq!(map.lookup(0x7fb6c06b6016), None);
        assert_eq!(map.lookup(0x7fb6c06b5fff), None);
        assert_eq!(
            map.lookup(0x1010),
            Some("LazyCompile:*foo with spaces.js:1")
        );
        assert_eq!(map.lookup(0), None);
        assert_eq!(map.lookup(u64::MAX), None);
        assert_eq!(map.entries(), 3);
        assert_eq!(map.bad_lines(), 0);
        assert_eq!(map.note(), None);
        assert_eq!(
            python_frame(map.lookup(0x7fb6c06b6001).unwrap()),
            Some(("spin", "<string>"))
        );
    }

    #[test]
    fn perf_map_reads_lines_appended_after_a_miss() {
        let (_dir, path) = map_file("1000 10 py::first:a.py\n");
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(map.lookup(0x1000), Some("py::first:a.py"));
        assert_eq!(map.lookup(0x2000), None);
        append(&path, b"2000 10 py::second:a.py\n");
        assert_eq!(map.lookup(0x2008), Some("py::second:a.py"));
        assert_eq!(map.lookup(0x1008), Some("py::first:a.py"));
        assert!(!map.refresh(), "nothing new");
        append(&path, b"3000 10 py::third:a.py\n");
        assert!(map.refresh());
        assert_eq!(map.entries(), 3);
    }

    #[test]
    fn perf_map_keeps_a_partial_last_line_for_the_next_read() {
        let (_dir, path) = map_file("1000 10 py::whole:a.py\n2000 10 py::hal");
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(map.lookup(0x1000), Some("py::whole:a.py"));
        // Not parsed as `py::hal` while its line is unfinished.
        assert_eq!(map.lookup(0x2000), None);
        assert_eq!(map.bad_lines(), 0);
        append(&path, b"f:a.py\n");
        assert_eq!(map.lookup(0x2000), Some("py::half:a.py"));
        assert_eq!(map.bad_lines(), 0);
    }

    #[test]
    fn perf_map_counts_and_skips_garbage_lines() {
        let long = format!("5000 10 py::{}:a.py\n", "x".repeat(PerfMap::MAX_LINE));
        let text = format!(
            "zz 10 py::bad_start:a.py\n\
             1000\n\
             1000 10\n\
             1000 zz py::bad_size:a.py\n\
             -1000 10 py::signed:a.py\n\
             +1000 10 py::signed:a.py\n\
             11112222333344445 10 py::too_many_digits:a.py\n\
             ffffffffffffffff 10 py::past_the_end:a.py\n\
             \n\
             {long}\
             \u{1}\u{2}\u{3}\n\
             3000 0 py::empty:a.py\n\
             1000 10 py::good:a.py\n"
        );
        let (_dir, path) = map_file(&text);
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(map.lookup(0x1000), Some("py::good:a.py"));
        // A size 0 entry names nothing and is no error.
        assert_eq!(map.lookup(0x3000), None);
        assert_eq!(map.lookup(0x5000), None);
        assert_eq!(map.entries(), 1);
        assert_eq!(map.bad_lines(), 10);
        let note = map.note().unwrap();
        assert!(
            note.starts_with(&format!("{}: 10 line(s)", path.display())),
            "{note}"
        );
    }

    #[test]
    fn perf_map_skips_a_long_line_split_across_reads() {
        let (_dir, path) = map_file("1000 10 py::a:a.py\n4000 10 py::");
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(map.lookup(0x1000), Some("py::a:a.py"));
        assert_eq!(map.lookup(0x4000), None);
        append(&path, "y".repeat(PerfMap::MAX_LINE).as_bytes());
        assert_eq!(map.lookup(0x4000), None);
        append(&path, b"yyy:a.py\n2000 10 py::b:a.py\n");
        assert_eq!(map.lookup(0x2000), Some("py::b:a.py"));
        assert_eq!(map.lookup(0x4000), None);
        assert_eq!(map.bad_lines(), 1);
        // A line of exactly PerfMap::MAX_LINE bytes is read.
        let name = format!("py::{}:a.py", "z".repeat(PerfMap::MAX_LINE - 8 - 9));
        let line = format!("6000 10 {name}");
        assert_eq!(line.len(), PerfMap::MAX_LINE);
        append(&path, format!("{line}\n").as_bytes());
        assert_eq!(map.lookup(0x6000), Some(name.as_str()));
    }

    #[test]
    fn perf_map_later_entries_win_where_they_overlap() {
        let (_dir, path) = map_file(
            "1000 100 py::a:a.py\n\
             1080 10 py::b:a.py\n",
        );
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(map.lookup(0x1010), Some("py::a:a.py"));
        assert_eq!(map.lookup(0x1085), Some("py::b:a.py"));
        // The earlier entry keeps its range on both sides of the later one.
        assert_eq!(map.lookup(0x1090), Some("py::a:a.py"));
        assert_eq!(map.lookup(0x10ff), Some("py::a:a.py"));
        assert_eq!(map.lookup(0x1100), None);
        // Memory reused: one entry over all of them, and over the start
        // of another.
        append(
            &path,
            b"3000 100 py::c:a.py\n0f00 1100 py::d:a.py\n2000 1080 py::e:a.py\n",
        );
        assert!(map.refresh());
        for a in [0xf00, 0x1010, 0x1085, 0x1090, 0x1fff] {
            assert_eq!(map.lookup(a), Some("py::d:a.py"), "{a:#x}");
        }
        assert_eq!(map.lookup(0x2000), Some("py::e:a.py"));
        assert_eq!(map.lookup(0x307f), Some("py::e:a.py"));
        assert_eq!(map.lookup(0x3080), Some("py::c:a.py"));
        assert_eq!(map.lookup(0x30ff), Some("py::c:a.py"));
        assert_eq!(map.lookup(0x3100), None);
        // The same range again: the last one names it.
        append(&path, b"3000 100 py::f:a.py\n");
        assert!(map.refresh());
        for a in [0x3000, 0x307f, 0x3080, 0x30ff] {
            assert_eq!(map.lookup(a), Some("py::f:a.py"), "{a:#x}");
        }
        assert_eq!(map.lookup(0x2fff), Some("py::e:a.py"));
        assert_eq!(map.lookup(0x3100), None);
    }

    #[test]
    fn perf_map_names_are_made_printable() {
        let (_dir, path) = map_file("1000 10 py::\x1b]0;pwned\x07:a\u{202e}.py\n");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"2000 10 py::\xff\xfe:b.py\n");
        std::fs::write(&path, bytes).unwrap();
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert_eq!(
            map.lookup(0x1000),
            Some("py::\\x1b]0;pwned\\x07:a\\u{202e}.py")
        );
        assert_eq!(map.lookup(0x2000), Some("py::\u{fffd}\u{fffd}:b.py"));
    }

    #[test]
    fn perf_map_reads_no_more_than_its_limit() {
        let (_dir, path) = map_file("1000 10 py::a:a.py\n2000 10 py::b:a.py\n");
        let mut map = PerfMap::open(&path, me()).unwrap();
        map.max_bytes = 19; // the first line
        assert_eq!(map.lookup(0x1000), Some("py::a:a.py"));
        assert_eq!(map.lookup(0x2000), None);
        let note = map.note().unwrap();
        assert!(note.contains("only its first 0 MiB read"), "{note}");
        // Nothing more is read once capped.
        append(&path, b"3000 10 py::c:a.py\n");
        assert_eq!(map.lookup(0x3000), None);
        // A file of exactly the limit is read whole and says nothing.
        let (_dir2, path2) = map_file("1000 10 py::a:a.py\n");
        let mut whole = PerfMap::open(&path2, me()).unwrap();
        whole.max_bytes = 19;
        assert_eq!(whole.lookup(0x1000), Some("py::a:a.py"));
        assert_eq!(whole.lookup(0x2000), None);
        assert_eq!(whole.note(), None);
    }

    #[test]
    fn perf_map_refuses_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-9.map");
        let e = PerfMap::open(&path, me()).unwrap_err();
        assert_eq!(e, format!("{}: not found", path.display()));
    }

    #[test]
    fn perf_map_refuses_a_symbolic_link() {
        let (dir, target) = map_file("1000 10 py::a:a.py\n");
        let link = dir.path().join("perf-2.map");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = PerfMap::open(&link, me()).unwrap_err();
        assert!(
            e.starts_with(&format!("{} is a symbolic link", link.display())),
            "{e}"
        );
        // A dangling link too.
        let dangling = dir.path().join("perf-3.map");
        std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
        let e = PerfMap::open(&dangling, me()).unwrap_err();
        assert!(e.contains("is a symbolic link"), "{e}");
    }

    #[test]
    fn perf_map_refuses_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("perf-4.map");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let f = fifo.clone();
        // In a thread: were the open to block (no writer ever comes), the
        // test fails after the timeout instead of hanging.
        std::thread::spawn(move || {
            let _ = tx.send(PerfMap::open(&f, me()).map(|_| ()));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("PerfMap::open blocked on a FIFO");
        let e = got.unwrap_err();
        assert!(
            e.contains("is a fifo (named pipe), not a regular file"),
            "{e}"
        );
        // A folder neither.
        let e = PerfMap::open(dir.path(), me()).unwrap_err();
        assert!(e.contains("is a folder, not a regular file"), "{e}");
    }

    #[test]
    fn perf_map_refuses_a_file_another_user_owns_or_can_write() {
        let (_dir, path) = map_file("1000 10 py::a:a.py\n");
        // Not the owner we expect: refused whoever we are.
        let e = PerfMap::open(&path, me().wrapping_add(1)).unwrap_err();
        assert!(
            e.contains(&format!(
                "is owned by uid {}, not the job's user {}, so not trusted",
                me(),
                me().wrapping_add(1)
            )),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = PerfMap::open(&path, me()).unwrap_err();
        assert!(
            e.contains("can be written by other users (mode 666)"),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620)).unwrap();
        assert!(PerfMap::open(&path, me()).is_err());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(PerfMap::open(&path, me()).is_ok());
        // A second name for it.
        let other = path.with_file_name("perf-5.map");
        std::fs::hard_link(&path, &other).unwrap();
        let e = PerfMap::open(&other, me()).unwrap_err();
        assert!(
            e.ends_with("has 2 hard links (another name of another file), so not trusted"),
            "{e}"
        );
        std::fs::remove_file(&other).unwrap();
        assert!(PerfMap::open(&path, me()).is_ok());
        if me() != 0 {
            println!("skipped: perf_map_refuses_a_file_another_user_owns_or_can_write (chown to nobody): not root");
            return;
        }
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let e = PerfMap::open(&path, 0).unwrap_err();
        assert_eq!(
            e,
            format!(
                "{} is owned by uid 65534, not the job's user 0, so not trusted",
                path.display()
            )
        );
        assert!(PerfMap::open(&path, 65534).is_ok());

        // A map trusted when opened and given away while it is read: what
        // was read stays, nothing more is named, and the note says why.
        std::os::unix::fs::chown(&path, Some(0), Some(0)).unwrap();
        std::fs::write(&path, "1000 10 py::early:/a.py\n").unwrap();
        let mut map = PerfMap::open(&path, 0).expect("trusted");
        assert_eq!(map.lookup(0x1004), Some("py::early:/a.py"));
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"2000 10 py::late:/a.py\n").unwrap();
        assert_eq!(map.lookup(0x2004), None);
        assert_eq!(map.lookup(0x1004), None);
        let note = map.note().expect("note");
        assert!(
            note.ends_with("is owned by uid 65534 now, not the job's user 0, so no longer trusted"),
            "{note}"
        );
    }

    /// A Python 3.12 or later: `$LOTUS_PYTHON312`, else pyenv's.
    fn python312() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("LOTUS_PYTHON312") {
            return Some(PathBuf::from(p));
        }
        let versions = PathBuf::from(std::env::var_os("HOME")?).join(".pyenv/versions");
        let mut found: Vec<PathBuf> = std::fs::read_dir(versions)
            .ok()?
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.starts_with("3.12") || name.starts_with("3.13")
            })
            .map(|e| e.path().join("bin/python3"))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        found.into_iter().next()
    }

    /// Removes the file at its path when dropped.
    struct Removed(PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn perf_map_names_cpythons_trampolines() {
        let Some(python) = python312() else {
            println!("skipped: perf_map_names_cpythons_trampolines: no Python 3.12+ (set LOTUS_PYTHON312)");
            return;
        };
        const SCRIPT: &str = r#"
import os, sys
sys.activate_stack_trampoline("perf")
def spin():
    s = 0
    for i in range(1000):
        s += i
    return s
spin()
with open(f"/tmp/perf-{os.getpid()}.map") as f:
    line = next(l for l in f if " py::spin:" in l)
print(os.getpid(), line.split()[0])
"#;
        let out = std::process::Command::new(&python)
            .args(["-c", SCRIPT])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut fields = stdout.split_whitespace();
        let pid: Option<u32> = fields.next().and_then(|p| p.parse().ok());
        let _removed = pid.map(|p| Removed(perf_map_path(p)));
        assert!(
            out.status.success(),
            "{}: {}\n{stdout}",
            python.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = pid.unwrap();
        let address = u64::from_str_radix(fields.next().unwrap(), 16).unwrap();
        let mut map = PerfMap::open(&perf_map_path(pid), me()).unwrap();
        let name = map.lookup(address + 1).unwrap();
        assert_eq!(python_frame(name), Some(("spin", "<string>")), "{name}");
        assert_eq!(map.bad_lines(), 0);
        assert_eq!(map.note(), None);
        // Owned by the user the job ran as: another uid is refused.
        assert!(PerfMap::open(&perf_map_path(pid), me().wrapping_add(1)).is_err());
    }
}
