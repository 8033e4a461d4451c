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
//! are read from one file in all, the entries of all the maps of a job
//! hold no more memory than their [`PerfMapBudget`] together (16 bytes a
//! range, names in one arena, cut at 1 KiB), past any of which
//! [`PerfMap::note`] says so; names are made printable
//! ([`lotus_sys::text::one_line`]). No descriptor is held between reads:
//! each read opens the file, checks it again and closes it.
//!
//! The parser is hand-written: the format is three fields on a line, and
//! the rules around it (what to trust, what to bound) are lotus's own.

use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// One named range as the painted index keeps it, under its start: 16
/// bytes a range with its key.
#[derive(Debug, Clone, Copy)]
struct Range {
    /// Its length (an entry of 4 GiB or more is no code: a bad line).
    len: u32,
    /// Where its name is in [`PerfMap::names`].
    name: u32,
}

/// What one range costs in the tree, counted against the budget: its 16
/// bytes and twice as much again for the tree's nodes and slack (a node
/// filled in descending order is about half full).
const RANGE_COST: u64 = 3 * std::mem::size_of::<(u64, Range)>() as u64;

/// The longest name kept (bytes); a longer one is cut, and
/// [`PerfMap::note`] counts it.
const MAX_NAME: usize = 1024;

/// The memory the perf maps of one job may hold together, shared by the
/// maps opened with it ([`PerfMap::open_within`]): the ranges and names
/// read. A map that would pass it reads no further, and its
/// [`PerfMap::note`] says so.
#[derive(Debug, Clone)]
pub struct PerfMapBudget {
    left: Arc<AtomicU64>,
    total: u64,
}

impl PerfMapBudget {
    /// The budget of the maps of one job: 128 MiB, about 2 million
    /// entries of CPython's (a real job's processes name tens of
    /// thousands of functions each).
    pub const DEFAULT: u64 = 128 << 20;

    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> PerfMapBudget {
        PerfMapBudget {
            left: Arc::new(AtomicU64::new(bytes)),
            total: bytes,
        }
    }

    /// The bytes it allows in all.
    pub fn bytes(&self) -> u64 {
        self.total
    }

    /// Takes `n` bytes, if they are left.
    fn take(&self, n: u64) -> bool {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            })
            .is_ok()
    }

    /// Gives `n` bytes back.
    fn give(&self, n: u64) {
        self.left.fetch_add(n, Ordering::AcqRel);
    }
}

impl Default for PerfMapBudget {
    fn default() -> PerfMapBudget {
        PerfMapBudget::new(PerfMapBudget::DEFAULT)
    }
}

/// The entries of one perf map file, read as the file grows.
///
/// Entries are kept as disjoint ranges in an ordered map (a B-tree, so a
/// lookup is a logarithmic search and an appended entry is inserted where
/// it belongs without re-sorting the rest), 16 bytes a range, their names
/// in one arena (a name shared with the entry before it is stored once).
/// An entry overlapping earlier ones is painted over them: the later entry
/// wins where they overlap (a JIT can reuse memory), the earlier ones keep
/// the rest of their range.
///
/// No descriptor is held between reads: each read opens the file, checks
/// it again, reads what was appended and closes it (a job of hundreds of
/// processes would otherwise make lotus hold hundreds of descriptors, and
/// run out of them).
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    /// (device, inode) of the file when it was opened: where the path
    /// names another file later, that file is not read.
    identity: (u64, u64),
    /// Start address → the range starting there.
    ranges: BTreeMap<u64, Range>,
    /// The names: each a 2-byte little-endian length, then its bytes
    /// (UTF-8).
    names: Vec<u8>,
    /// Where the last name stored is.
    last_name: Option<u32>,
    /// Entries read so far.
    entries: usize,
    /// Shared with the other maps of the job.
    budget: PerfMapBudget,
    /// What this map holds of the budget.
    held: u64,
    /// The budget was spent: nothing more is read.
    over_budget: bool,
    /// Names longer than [`MAX_NAME`], cut.
    cut: u64,
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
    /// The path names another file now: nothing more is read.
    replaced: bool,
    /// Why the last read could not open the file, where it was for want
    /// of descriptors (the next read tries again).
    short_of_descriptors: Option<String>,
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

/// Why a perf map with metadata `meta` (never followed: a link's own) is
/// not trusted for `owner`, where it is not: a link, not a regular file,
/// another user's, writable by others, or with a second name (another
/// user may have linked a file of the job's user, one it must not read,
/// at this predictable path, for the job to append to and lotus to read).
fn distrust(shown: &str, meta: &Metadata, owner: u32) -> Option<String> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        return Some(format!(
            "{shown} is a symbolic link, so not trusted (links are never followed)"
        ));
    }
    if let Some(what) = lotus_sys::input::not_regular(kind) {
        return Some(format!("{shown} is {what}, not a regular file"));
    }
    if meta.uid() != owner {
        return Some(format!(
            "{shown} is owned by uid {}, not the job's user {owner}, so not trusted",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "{shown} can be written by other users (mode {:o}), so not trusted",
            meta.mode() & 0o7777
        ));
    }
    if meta.nlink() != 1 {
        return Some(format!(
            "{shown} has {} hard links (another name of another file), so not trusted",
            meta.nlink()
        ));
    }
    None
}

/// Why a perf map is trusted no longer, where it is not: [`distrust`]'s
/// words for a file that was trusted when it was opened.
fn distrust_now(shown: &str, meta: &Metadata, owner: u32) -> Option<String> {
    distrust(shown, meta, owner).map(|why| {
        if meta.uid() != owner {
            format!(
                "{shown} is owned by uid {} now, not the job's user {owner}, so no longer trusted",
                meta.uid()
            )
        } else if meta.mode() & 0o022 != 0 {
            format!(
                "{shown} can be written by other users now (mode {:o}), so no longer trusted",
                meta.mode() & 0o7777
            )
        } else if meta.nlink() != 1 && meta.file_type().is_file() {
            format!(
                "{shown} has {} hard links now, so no longer trusted",
                meta.nlink()
            )
        } else {
            format!("{why}, so no longer trusted")
        }
    })
}

/// Whether `e` says this process is out of descriptors.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

impl PerfMap {
    /// The longest line read (bytes, newline excluded); longer lines are
    /// skipped and counted in [`PerfMap::bad_lines`].
    pub const MAX_LINE: usize = 4096;

    /// The most bytes read from one perf map file in all; the entries past
    /// it stay unnamed and [`PerfMap::note`] says so.
    pub const MAX_BYTES: u64 = 64 << 20;

    /// [`PerfMap::open_within`] a budget of its own
    /// ([`PerfMapBudget::DEFAULT`]).
    pub fn open(path: &Path, owner: u32) -> Result<PerfMap, String> {
        PerfMap::open_within(path, owner, &PerfMapBudget::default())
    }

    /// Trusts `path` only if it is a regular file, not a symbolic link,
    /// owned by `owner` (the uid of the process that wrote it), writable by
    /// no other user, and with no other name (one hard link); what it
    /// reads counts against `budget`, shared with the other maps of the
    /// job. The path is looked at without following a link in its last
    /// component, and without opening it: each read opens it (never
    /// following a link, never blocking: `O_PATH | O_NOFOLLOW`, a check
    /// of what the descriptor is, then a reopen through `/proc/self/fd`
    /// with `O_NONBLOCK`), checks it again and closes it.
    ///
    /// Nothing is read until the first [`PerfMap::lookup`].
    ///
    /// The error is one line naming the file and why (not found, a link,
    /// not a regular file, owned by another user), usable as is in a note
    /// to the user.
    pub fn open_within(path: &Path, owner: u32, budget: &PerfMapBudget) -> Result<PerfMap, String> {
        let shown = shown(path);
        let meta = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => format!("{shown}: not found"),
            _ => format!("{shown}: {e}"),
        })?;
        if let Some(why) = distrust(&shown, &meta, owner) {
            return Err(why);
        }
        Ok(PerfMap {
            path: path.to_path_buf(),
            identity: (meta.dev(), meta.ino()),
            ranges: BTreeMap::new(),
            names: Vec::new(),
            last_name: None,
            entries: 0,
            budget: budget.clone(),
            held: 0,
            over_budget: false,
            cut: 0,
            consumed: 0,
            max_bytes: PerfMap::MAX_BYTES,
            partial: Vec::new(),
            skipping: false,
            bad: 0,
            capped: false,
            failed: None,
            replaced: false,
            short_of_descriptors: None,
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
        Some(self.name_at(name))
    }

    /// Reads the lines appended since the last read (up to
    /// [`PerfMap::MAX_BYTES`] in all, and within the budget). Whether any
    /// entry was added.
    ///
    /// Each read checks the file again, by its path and then on the
    /// descriptor it opens: one that was given to another user, made
    /// writable by others or linked elsewhere since it was opened is no
    /// longer trusted, and nothing of it is named from then on
    /// ([`PerfMap::note`] says why); where the path names another file
    /// now, nothing more is read. Where the file has not grown, it is not
    /// opened.
    pub fn refresh(&mut self) -> bool {
        if self.revoked.is_some() || self.replaced {
            return false;
        }
        let shown = shown(&self.path);
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => meta,
            // Removed: what was read stays.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return false,
            Err(e) => {
                self.failed.get_or_insert_with(|| e.to_string());
                return false;
            }
        };
        if (meta.dev(), meta.ino()) != self.identity {
            self.replaced = true;
            return false;
        }
        if let Some(why) = distrust_now(&shown, &meta, self.owner) {
            self.revoke(why);
            return false;
        }
        if self.failed.is_some() || self.capped || self.over_budget || meta.len() <= self.consumed {
            return false;
        }
        let file = match self.open_checked(&shown) {
            Ok(file) => file,
            Err(Refused::Distrusted(why)) => {
                self.revoke(why);
                return false;
            }
            Err(Refused::Io(e)) if out_of_descriptors(&e) => {
                self.short_of_descriptors = Some(e.to_string());
                return false;
            }
            Err(Refused::Io(e)) => {
                self.failed = Some(e.to_string());
                return false;
            }
        };
        self.short_of_descriptors = None;
        let before = self.entries;
        if let Err(e) = self.read_appended(&file) {
            self.failed = Some(e.to_string());
        }
        self.entries != before
    }

    /// Stops trusting the file, for `why`: nothing of it is named any more.
    fn revoke(&mut self, why: String) {
        self.revoked = Some(why);
        self.ranges = BTreeMap::new();
        self.names = Vec::new();
        self.budget.give(std::mem::take(&mut self.held));
    }

    /// The file opened for reading, checked on its descriptor: still the
    /// file first opened, and trusted.
    fn open_checked(&self, shown: &str) -> Result<File, Refused> {
        let handle = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)
            .map_err(Refused::Io)?;
        let meta = handle.metadata().map_err(Refused::Io)?;
        if let Some(why) = distrust_now(shown, &meta, self.owner) {
            return Err(Refused::Distrusted(why));
        }
        let file = reopen(&handle, &self.path).map_err(Refused::Io)?;
        let opened = file.metadata().map_err(Refused::Io)?;
        if (opened.dev(), opened.ino()) != self.identity
            || (meta.dev(), meta.ino()) != self.identity
        {
            return Err(Refused::Distrusted(format!(
                "{shown} was replaced while it was being opened, so no longer trusted"
            )));
        }
        Ok(file)
    }

    /// Lines that could not be parsed so far (skipped, the rest kept): not
    /// `<hex start> <hex size> <name>`, an end past 2^64, a size of 4 GiB
    /// or more, or longer than [`PerfMap::MAX_LINE`].
    pub fn bad_lines(&self) -> u64 {
        self.bad
    }

    /// How many entries were read so far (entries of size 0 are not
    /// counted: they name nothing).
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// What the user should know about this file, on one line: lines
    /// skipped, the read stopped at [`PerfMap::MAX_BYTES`] or at the
    /// budget, names cut, a read that failed. `None` when all went well.
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
        if self.over_budget {
            parts.push(format!(
                "only its first {} entries kept: the job's perf maps hold the most lotus keeps \
                 of them ({} MiB in all), code compiled after that is unnamed",
                self.entries,
                self.budget.bytes() >> 20
            ));
        }
        if self.cut > 0 {
            parts.push(format!(
                "{} name(s) longer than {MAX_NAME} bytes cut",
                self.cut
            ));
        }
        if self.replaced {
            parts.push(
                "the path names another file since it was first read: code compiled after \
                 that is unnamed"
                    .to_string(),
            );
        }
        if let Some(e) = &self.short_of_descriptors {
            parts.push(format!(
                "it could not be opened again ({e}): raise `ulimit -n`; code compiled after \
                 that is unnamed"
            ));
        }
        if let Some(e) = &self.failed {
            parts.push(format!(
                "reading it failed ({e}): code compiled after that is unnamed"
            ));
        }
        (!parts.is_empty()).then(|| format!("{path}: {}", parts.join("; ")))
    }

    /// Where the name of the range holding `address` is.
    fn find(&self, address: u64) -> Option<u32> {
        let (&start, r) = self.ranges.range(..=address).next_back()?;
        (address - start < u64::from(r.len)).then_some(r.name)
    }

    /// The name stored at `at` in [`PerfMap::names`].
    fn name_at(&self, at: u32) -> &str {
        let at = at as usize;
        let len = match self.names.get(at..at + 2) {
            Some(&[a, b]) => usize::from(u16::from_le_bytes([a, b])),
            _ => return "",
        };
        self.names
            .get(at + 2..at + 2 + len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    /// Reads `file` from where the last read ended to its end (or the byte
    /// limit, or the budget), parsing whole lines and keeping a partial
    /// last one for later.
    fn read_appended(&mut self, file: &File) -> io::Result<()> {
        let mut buf = vec![0u8; CHUNK];
        loop {
            if self.over_budget {
                return Ok(());
            }
            let left = self.max_bytes - self.consumed;
            if left == 0 {
                // More there than the limit allows?
                let mut probe = [0u8; 1];
                self.capped = read_at_retrying(file, &mut probe, self.consumed)? > 0;
                return Ok(());
            }
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = read_at_retrying(file, &mut buf[..want], self.consumed)?;
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
            Some((start, size, name)) => match (start.checked_add(size), u32::try_from(size)) {
                (Some(_), Ok(len)) => self.paint(start, len, name),
                _ => self.bad += 1,
            },
            None => self.bad += 1,
        }
    }

    /// Stores `name` (printable) in the arena, or finds it there as the
    /// last name stored; where it is, and the bytes the arena grew by.
    fn store_name(&mut self, name: &str) -> Option<(u32, u64)> {
        if let Some(at) = self.last_name {
            if self.name_at(at) == name {
                return Some((at, 0));
            }
        }
        let at = u32::try_from(self.names.len()).ok()?;
        let len = u16::try_from(name.len()).ok()?;
        let grow = name.len() + 2;
        if self.names.capacity() - self.names.len() < grow {
            // An eighth more at a time: the arena's slack stays small.
            self.names
                .reserve_exact(grow.max(self.names.len() / 8).max(4096));
        }
        self.names.extend_from_slice(&len.to_le_bytes());
        self.names.extend_from_slice(name.as_bytes());
        self.last_name = Some(at);
        Some((at, grow as u64))
    }

    /// Adds `[start, start + len)` named `name` over whatever earlier
    /// ranges it overlaps: they keep only what lies outside it. Within the
    /// budget: past it, nothing more is added or read.
    fn paint(&mut self, start: u64, len: u32, name: &[u8]) {
        let end = start + u64::from(len);
        let text = String::from_utf8_lossy(name);
        let mut text = one_line(&text).into_owned();
        if text.len() > MAX_NAME {
            let mut cut = MAX_NAME;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            self.cut += 1;
        }
        // The most this entry may cost: two ranges (it, and the part of
        // one it splits) and its name.
        let most = 2 * RANGE_COST + text.len() as u64 + 2;
        if !self.budget.take(most) {
            self.over_budget = true;
            return;
        }
        let ranges_before = self.ranges.len();
        let Some((name, grew)) = self.store_name(&text) else {
            self.budget.give(most);
            self.bad += 1;
            return;
        };
        // A range starting below `start` that reaches into it: cut at
        // `start`, its part past `end` (if any) kept after the new one.
        if let Some((&s, r)) = self.ranges.range_mut(..start).next_back() {
            let old_end = s + u64::from(r.len);
            if old_end > start {
                let old = *r;
                r.len = (start - s) as u32;
                if old_end > end {
                    let tail = Range {
                        len: (old_end - end) as u32,
                        ..old
                    };
                    self.ranges.insert(end, tail);
                }
            }
        }
        // Ranges starting inside the new one: gone, but for their part
        // past `end`.
        let inside: Vec<u64> = self.ranges.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(old) = self.ranges.remove(&s) {
                let old_end = s + u64::from(old.len);
                if old_end > end {
                    let tail = Range {
                        len: (old_end - end) as u32,
                        ..old
                    };
                    self.ranges.insert(end, tail);
                }
            }
        }
        self.ranges.insert(start, Range { len, name });
        self.entries += 1;
        // What it cost: the ranges it added (none where it replaced as
        // many as it made) and its name; the rest goes back.
        let added = self.ranges.len().saturating_sub(ranges_before) as u64;
        let cost = added * RANGE_COST + grew;
        self.held += cost;
        self.budget.give(most - cost.min(most));
    }
}

impl Drop for PerfMap {
    fn drop(&mut self) {
        self.budget.give(self.held);
    }
}

/// Why a perf map could not be opened for a read.
enum Refused {
    /// It is not to be trusted any more.
    Distrusted(String),
    /// The open failed.
    Io(io::Error),
}

/// `pread` at `at`, again where a signal interrupted it.
fn read_at_retrying(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    loop {
        match file.read_at(buf, at) {
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
        // A line of exactly PerfMap::MAX_LINE bytes is read, its name cut
        // to MAX_NAME bytes.
        let name = format!("py::{}:a.py", "z".repeat(PerfMap::MAX_LINE - 8 - 9));
        let line = format!("6000 10 {name}");
        assert_eq!(line.len(), PerfMap::MAX_LINE);
        append(&path, format!("{line}\n").as_bytes());
        assert_eq!(map.lookup(0x6000), Some(&name[..MAX_NAME]));
        let note = map.note().unwrap();
        assert!(
            note.contains("1 name(s) longer than 1024 bytes cut"),
            "{note}"
        );
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

    /// `n` lines of 9 bytes (`<5 hex digits> 1 <2 letters>`), each its own
    /// one-byte range, the addresses descending as CPython's trampoline
    /// chunks are mapped (top-down).
    fn tiny_lines(n: u64, salt: u64) -> String {
        let mut text = String::with_capacity(n as usize * 9);
        for i in 0..n {
            let name = [b'a' + ((i + salt) % 26) as u8, b'a' + ((i / 26) % 26) as u8];
            let name = std::str::from_utf8(&name).unwrap();
            text.push_str(&format!("{:05x} 1 {name}\n", 0xfffff - i));
        }
        text
    }

    /// The open descriptors of this process.
    fn open_descriptors() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    /// A map of 9-byte lines costs at most 40 bytes an entry, counted by
    /// the allocator on this thread (names in one arena, 16 bytes a
    /// range): before, a name was a boxed string of its own and a range
    /// 24 bytes in the tree, 71 bytes an entry asked of the allocator (and
    /// more with malloc's own: 590 MB for a 64 MiB map).
    #[test]
    fn perf_map_entries_are_stored_compactly() {
        let n = 100_000;
        let (_dir, path) = map_file(&tiny_lines(n, 0));
        let before = crate::test_alloc::held();
        let mut map = PerfMap::open(&path, me()).unwrap();
        assert!(map.lookup(0xfffff).is_some());
        assert_eq!(map.entries(), n as usize);
        let per_entry = (crate::test_alloc::held() - before) / n as i64;
        assert!(per_entry <= 40, "{per_entry} bytes an entry");
        assert_eq!(map.lookup(0xfffff - 27), Some("bb"));
        // Line 99,999: letters 99,999 % 26 and 99,999 / 26 % 26.
        assert_eq!(map.lookup(0xfffff - (n - 1)), Some("dy"));
        assert_eq!(map.lookup(0xfffff - n), None);
    }

    /// Four maps of 9-byte lines sharing one budget hold no more than it
    /// (counted by the allocator on this thread), and each map past it
    /// says so; the entries read before it still name their code. Before,
    /// four 64 MiB maps held 2.4 GB for the whole run.
    #[test]
    fn perf_maps_of_one_job_hold_no_more_than_their_budget() {
        let budget = PerfMapBudget::new(2 << 20);
        let dirs: Vec<_> = (0..4).map(|i| map_file(&tiny_lines(60_000, i))).collect();
        let before = crate::test_alloc::held();
        let mut maps: Vec<PerfMap> = dirs
            .iter()
            .map(|(_, path)| PerfMap::open_within(path, me(), &budget).unwrap())
            .collect();
        for map in &mut maps {
            assert!(map.lookup(0xfffff - 59_999).is_none() || map.entries() == 60_000);
        }
        let held = crate::test_alloc::held() - before;
        assert!(
            held <= 2 << 20,
            "{held} bytes held by four maps with a 2 MiB budget"
        );
        let notes: Vec<String> = maps.iter().filter_map(PerfMap::note).collect();
        assert!(!notes.is_empty());
        assert!(
            notes
                .iter()
                .all(|n| n.contains("the most lotus keeps of them (2 MiB in all)")),
            "{notes:?}"
        );
        // The first map's first entries still name their code.
        assert_eq!(maps[0].lookup(0xfffff), Some("aa"));
        // A map dropped gives its share back.
        let spent: usize = maps.iter().map(PerfMap::entries).sum();
        assert!(spent > 10_000 && spent < 240_000, "{spent} entries kept");
        drop(maps);
        let (_dir, path) = map_file(&tiny_lines(1_000, 0));
        let mut again = PerfMap::open_within(&path, me(), &budget).unwrap();
        assert!(again.lookup(0xfffff).is_some());
        assert_eq!(again.entries(), 1_000);
        assert_eq!(again.note(), None);
    }

    /// Maps are read with a descriptor opened for the read and closed
    /// after it: 300 processes' maps read and kept hold none (before, each
    /// held its file open for the whole run: at `ulimit -n 256`, 300
    /// forked workers left a quarter of the samples unnamed and 81 maps
    /// refused).
    #[test]
    fn perf_maps_hold_no_descriptor_between_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut maps = Vec::new();
        let before = open_descriptors();
        for i in 0..300u64 {
            let path = dir.path().join(format!("perf-{i}.map"));
            std::fs::write(&path, format!("{:x} 10 py::f{i}:a.py\n", 0x1000 + i * 0x10)).unwrap();
            let mut map = PerfMap::open(&path, me()).unwrap();
            let want = format!("py::f{i}:a.py");
            assert_eq!(map.lookup(0x1000 + i * 0x10), Some(want.as_str()));
            maps.push(map);
        }
        let held = open_descriptors().saturating_sub(before);
        // Other tests of this binary open files meanwhile: a margin.
        assert!(held < 100, "{held} descriptors held by 300 perf maps");
        // Lines appended later are still read, each map opened again.
        for (i, map) in maps.iter_mut().enumerate().step_by(50) {
            append(
                &dir.path().join(format!("perf-{i}.map")),
                b"9000 10 py::later:a.py\n",
            );
            assert_eq!(map.lookup(0x9004), Some("py::later:a.py"));
        }
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
