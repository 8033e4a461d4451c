//! The streaming reader of one trace log: `BufRead` in, events out, one
//! line at a time. A line that cannot be read (truncated, garbled, not
//! UTF-8, numbers that are negative or overflow) is an [`Entry::Bad`] with
//! its file and line; the lines after it are still read.
//!
//! A NUL tail ends the log: the tracer copies its lines into a mapping of
//! a file grown ahead of them, and a process killed before it closed its
//! log (SIGKILL, the OOM killer) leaves NUL bytes after its last line, to
//! the end of the file. A line with a NUL byte that reaches the end of
//! the file, or runs past [`MAX_LINE_BYTES`] with no line break, is such
//! a tail: the reader stops there (reading no further), the lines before
//! it are read, the line it cuts (a partial line) is not, and one
//! [`Entry::Bad`] says the log was cut short there ([`CUT_SHORT`]). A
//! line with NUL bytes that ends in a line break is a bad line like any.
//!
//! ```
//! use lotus_trace::{Entry, TraceReader};
//! use lotus_trace::{Kind, Process, Role};
//!
//! let log = "SLoader,1000,50\nSBatchPreprocessed_3,900,400\nSToTen";
//! let mut reader = TraceReader::new(log.as_bytes(), "x_worker_pid_7", Process::new(Role::Worker, 7));
//! let entries: Vec<Entry> = reader.by_ref().map(Result::unwrap).collect();
//! let Entry::Event(e) = &entries[1] else { panic!() };
//! assert_eq!((&*e.name, e.kind, e.batch), ("BatchPreprocessed", Kind::Batch, Some(3)));
//! let Entry::Bad(bad) = &entries[2] else { panic!() };
//! assert_eq!(bad.to_string(), "x_worker_pid_7:3: truncated line: expected S<Name>,<start_ns>,<duration_ns>, found 'SToTen'");
//! ```

use std::collections::HashSet;
use std::fmt;
use std::io::{BufRead, ErrorKind};
use std::num::IntErrorKind;
use std::sync::Arc;

use super::event::{Event, HandedBy, Kind, LoaderConfig, OpSpan, Process, Role, Usage};
use super::header::LogHeader;
use super::TraceError;

/// The longest line read; longer ones (a file with no line breaks) are
/// bad lines, and memory stays bounded.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The duration the original fork writes for a batch that arrived out of
/// order and was already there when the main process asked for it (and
/// as a placeholder on `SBatchConsumed_<id>` / `SBatchQueued_<id>`).
pub const ORIGINAL_PLACEHOLDER_NS: u64 = 1000;

pub use lotus_protocol::HEADER_TAG;

mod fast;
use fast::*;
pub(crate) use fast::{clean_text, fast_fields};

/// What a log file's name says: `<prefix>_<role>_pid_<pid>`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileName {
    /// What comes before `_main_pid_` / `_worker_pid_` (may be empty).
    pub prefix: String,
    /// `main` or `worker`.
    pub role: Role,
    /// The process id.
    pub pid: u32,
}

/// Reads a log file's name: `<prefix>_main_pid_<pid>` or
/// `<prefix>_worker_pid_<pid>`, optionally with a `.log`, `.txt` or `.csv`
/// extension. `None` for any other name.
pub fn parse_file_name(name: &str) -> Option<FileName> {
    let stem = [".log", ".txt", ".csv"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .unwrap_or(name);
    let (at, role, tag) = [("_main_pid_", Role::Main), ("_worker_pid_", Role::Worker)]
        .iter()
        .filter_map(|(tag, role)| stem.rfind(tag).map(|at| (at, *role, *tag)))
        .max_by_key(|(at, _, _)| *at)?;
    let digits = &stem[at + tag.len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(FileName {
        prefix: stem[..at].to_string(),
        role,
        pid: digits.parse().ok()?,
    })
}

/// What the [`Entry::Bad`] of a log cut short by NUL bytes says.
pub const CUT_SHORT: &str = "the log was cut short here: NUL bytes from this line on (its process was killed before it closed its log); the lines before are read, the rest is not";

/// A line that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BadLine {
    /// The file (as given to the reader).
    pub file: String,
    /// The 1-based line.
    pub line: u64,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// What the reader yields for each line that is not blank or a comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// An event.
    Event(Event),
    /// A line that was skipped (or a header field that was ignored).
    Bad(BadLine),
}

/// Distinct names a reader shares at most; more are allocated per event.
const MAX_SHARED_NAMES: usize = 4096;

/// Event names met so far, shared by their events (a log repeats a few
/// names millions of times).
#[derive(Debug, Default)]
pub(crate) struct Names {
    set: HashSet<Arc<str>>,
    /// The last names given, most recent last: a log's lines cycle through
    /// a few names, found here by a few byte compares instead of hashing
    /// each line's name (a tenth of the parsing threads' time when
    /// profiled).
    recent: Vec<Arc<str>>,
}

/// Names [`Names`] keeps at hand.
const RECENT_NAMES: usize = 16;

impl Names {
    /// No names yet.
    pub(crate) fn new() -> Names {
        Names::default()
    }
}

/// `name`, shared with earlier events of that name.
fn intern(names: &mut Names, name: &str) -> Arc<str> {
    if let Some(n) = names.recent.iter().rev().find(|n| ***n == *name) {
        return Arc::clone(n);
    }
    let n = match names.set.get(name) {
        Some(n) => Arc::clone(n),
        None => {
            let n: Arc<str> = Arc::from(name);
            if names.set.len() < MAX_SHARED_NAMES {
                names.set.insert(Arc::clone(&n));
            }
            n
        }
    };
    if names.recent.len() == RECENT_NAMES {
        names.recent.remove(0);
    }
    names.recent.push(Arc::clone(&n));
    n
}

/// Where [`LineParser::line`] puts what a line holds: a list, or a
/// consumer that sums events up as they come (see
/// `crate::index`), so that no list of every event is built.
pub(crate) trait EntrySink {
    /// Takes one entry.
    fn push(&mut self, entry: Entry);

    /// Takes one event line of `parser`'s process: by default as the
    /// [`Event`] it makes; a sink that only sums events up can take the
    /// line's fields without one being built.
    fn line_event(&mut self, parser: &LineParser, names: &mut Names, p: LineEvent<'_>) {
        self.push(parser.event(names, p));
    }
}

impl EntrySink for Vec<Entry> {
    fn push(&mut self, entry: Entry) {
        Vec::push(self, entry);
    }
}

/// Turns the lines of one log into entries, one line at a time: knows the
/// file, the process (the header's host and rank, once line 1 is read) and
/// the line number.
#[derive(Debug, Clone)]
pub(crate) struct LineParser {
    /// The file, as named in bad lines.
    pub(crate) file: String,
    /// The process the events belong to.
    pub(crate) process: Process,
    /// The number of the last line parsed (0 before the first).
    pub(crate) line_no: u64,
}

impl LineParser {
    pub(crate) fn new(file: String, process: Process) -> Self {
        LineParser {
            file,
            process,
            line_no: 0,
        }
    }

    fn bad(&self, message: String) -> Entry {
        Entry::Bad(BadLine {
            file: self.file.clone(),
            line: self.line_no,
            message,
        })
    }

    /// Parses the next line, `raw` without its line break (`too_long`: it
    /// was longer than [`MAX_LINE_BYTES`] and cut), pushing what it holds
    /// to `out`: nothing (blank, a comment), an event, a bad line, or a
    /// header's bad fields.
    pub(crate) fn line(
        &mut self,
        raw: &[u8],
        too_long: bool,
        names: &mut Names,
        out: &mut impl EntrySink,
    ) {
        self.line_no += 1;
        if !too_long {
            if let Some(p) = fast_event_line(raw) {
                out.line_event(self, names, p);
                return;
            }
        }
        if too_long {
            out.push(self.bad(format!(
                "line longer than {MAX_LINE_BYTES} bytes (no line break: not a trace log?)"
            )));
            return;
        }
        let Ok(text) = std::str::from_utf8(raw) else {
            out.push(self.bad("not UTF-8 text (garbled line)".into()));
            return;
        };
        let line = text.trim_start_matches('\u{feff}').trim();
        if line.is_empty() {
            return;
        }
        if line.starts_with('#') {
            let is_header = line.split_whitespace().next() == Some(HEADER_TAG);
            if is_header && self.line_no == 1 {
                for m in self.apply_header(line) {
                    out.push(self.bad(m));
                }
            }
            return;
        }
        match parse_event_line(line) {
            Ok(p) => out.line_event(self, names, p),
            Err(message) => out.push(self.bad(message)),
        }
    }

    /// [`LineParser::line`] of a line of a block that [`clean_text`]
    /// passed (so not cut for length either): the common line is read with
    /// no check of its bytes.
    #[inline(always)]
    pub(crate) fn clean_line(&mut self, line: &str, names: &mut Names, out: &mut impl EntrySink) {
        match fast_fields(line) {
            Some(p) => {
                self.line_no += 1;
                out.line_event(self, names, p);
            }
            None => self.line(line.as_bytes(), false, names, out),
        }
    }

    /// The event of a parsed line, in this parser's process.
    pub(crate) fn event(&self, names: &mut Names, p: LineEvent<'_>) -> Entry {
        Entry::Event(Event {
            name: intern(names, p.name),
            kind: p.kind,
            pid: self.process.pid,
            role: self.process.role,
            start_ns: p.start_ns,
            dur_ns: p.dur_ns,
            batch: p.batch,
            sample: p.sample,
            ready: p.ready,
            host: self.process.host.clone(),
            rank: self.process.rank,
            tid: p.tid,
            cpu_ns: p.cpu_ns,
            hook_ns: p.hook_ns,
            hook_in_ns: p.hook_in_ns,
            usage: p.usage,
            config: p.config,
            gc: p.gc,
            task: p.task,
        })
    }

    /// An op line's span in brief ([`OpSpan`]): what [`LineParser::event`]
    /// would make of it, without the fields a model does not read.
    pub(crate) fn op_span<'a>(&self, p: &LineEvent<'a>) -> OpSpan<'a> {
        OpSpan {
            name: p.name,
            pid: self.process.pid,
            role: self.process.role,
            start_ns: p.start_ns,
            dur_ns: p.dur_ns,
            batch: p.batch,
            tid: p.tid,
            cpu_ns: p.cpu_ns,
            gc: p.gc,
        }
    }

    /// Takes host and rank from the header line ([`LogHeader::parse`]);
    /// its role and pid may be stale, the file name's are kept.
    fn apply_header(&mut self, header: &str) -> Vec<String> {
        let (h, mut problems) = LogHeader::parse(header);
        for p in &mut problems {
            if p.starts_with("header: role") {
                *p += &format!(" (the file name's, {}, is used)", self.process.role);
            } else if p.starts_with("header: pid") {
                *p += &format!(" (the file name's, {}, is used)", self.process.pid);
            }
        }
        if h.host.is_some() {
            self.process.host = h.host;
        }
        if h.rank.is_some() {
            self.process.rank = h.rank;
        }
        problems
    }
}

/// Reads one log file, a line at a time. The process's role and pid are
/// the file name's; a `#lotus-trace` first line adds host and rank (its
/// own role and pid may be stale: the tracer renames a log whose process
/// turns out to be a worker, and keeps its first header).
pub struct TraceReader<R> {
    input: R,
    parser: LineParser,
    buf: Vec<u8>,
    done: bool,
    /// What the last line gave, not handed out yet (in order).
    pending: std::collections::VecDeque<Entry>,
    out: Vec<Entry>,
    names: Names,
    /// The line where a NUL tail begins: the log ends there.
    cut: Option<u64>,
    /// Its [`Entry::Bad`] was handed out.
    cut_said: bool,
}

impl<R: BufRead> TraceReader<R> {
    /// A reader of `input`, named `file` in bad lines, whose events belong
    /// to `process` (role and pid from the file name; host and rank are
    /// taken from the header where it has them).
    pub fn new(input: R, file: impl Into<String>, process: Process) -> Self {
        TraceReader {
            input,
            parser: LineParser::new(file.into(), process),
            buf: Vec::new(),
            done: false,
            pending: std::collections::VecDeque::new(),
            out: Vec::new(),
            names: Names::new(),
            cut: None,
            cut_said: false,
        }
    }

    /// The line being read begins a NUL tail: the log ends (`None`).
    fn cut_here(&mut self) -> Option<bool> {
        self.buf.clear();
        self.cut = Some(self.parser.line_no + 1);
        None
    }

    /// Once the reader met the NUL bytes of a log cut short: the
    /// [`Entry::Bad`] that says so, the first time it is asked.
    pub(crate) fn take_cut(&mut self) -> Option<Entry> {
        let line = self.cut.filter(|_| !self.cut_said)?;
        self.cut_said = true;
        Some(Entry::Bad(BadLine {
            file: self.parser.file.clone(),
            line,
            message: CUT_SHORT.to_string(),
        }))
    }

    /// The process the events belong to (after the header, once read).
    pub fn process(&self) -> &Process {
        &self.parser.process
    }

    /// The line [`TraceReader::read_line`] read (cut when too long).
    pub(crate) fn raw(&self) -> &[u8] {
        &self.buf
    }

    /// The line parser, at the last line parsed or skipped.
    pub(crate) fn parser(&self) -> &LineParser {
        &self.parser
    }

    /// Parses the line just read, its entries pushed to `out`.
    pub(crate) fn parse_line(&mut self, too_long: bool, names: &mut Names, out: &mut Vec<Entry>) {
        self.parser.line(&self.buf, too_long, names, out);
    }

    /// Counts the line just read without parsing it (another thread will,
    /// from a copy of the parser taken before it).
    pub(crate) fn skip_line(&mut self) {
        self.parser.line_no += 1;
    }

    /// Counts `n` lines taken by [`TraceReader::take_lines`] without
    /// parsing them.
    pub(crate) fn skip_lines(&mut self, n: u64) {
        self.parser.line_no += n;
    }

    /// Moves the whole lines in the input's buffer (at most about
    /// `max_bytes` of them) to `text`, each followed by `\n`, with where
    /// each ends (without its line break; never cut) in `ends`, and
    /// returns how many. 0 when the buffer starts with a line that is not
    /// whole in it, or too long, or at the end: [`TraceReader::read_line`]
    /// then reads the next line. Lines are found with `memchr`, a buffer
    /// at a time, rather than copied one by one.
    pub(crate) fn take_lines(
        &mut self,
        max_bytes: usize,
        text: &mut Vec<u8>,
        ends: &mut Vec<(usize, bool)>,
    ) -> Result<u64, TraceError> {
        if self.cut.is_some() {
            return Ok(0);
        }
        let chunk = loop {
            match self.input.fill_buf() {
                Ok(c) => break c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(TraceError::io(&self.parser.file, &e)),
            }
        };
        // Whole lines before a NUL byte only (read_line tells a NUL tail,
        // which ends the log, from a bad line).
        let chunk = match memchr::memchr(0, chunk) {
            Some(nul) => &chunk[..nul],
            None => chunk,
        };
        let base = text.len();
        let mut start = 0;
        let mut lines = 0;
        for end in memchr::memchr_iter(b'\n', chunk) {
            if end - start > MAX_LINE_BYTES {
                break;
            }
            ends.push((base + end, false));
            lines += 1;
            start = end + 1;
            if start >= max_bytes {
                break;
            }
        }
        text.extend_from_slice(&chunk[..start]);
        self.input.consume(start);
        Ok(lines)
    }

    /// Reads the next line into `buf`, at most [`MAX_LINE_BYTES`] of it.
    /// `None` at the end, or at a NUL tail, which ends the log (the line
    /// it cuts is dropped: [`TraceReader::take_cut`]); `Some(true)` when
    /// the line was longer.
    pub(crate) fn read_line(&mut self) -> Result<Option<bool>, TraceError> {
        self.buf.clear();
        if self.cut.is_some() {
            return Ok(None);
        }
        let mut any = false;
        let mut too_long = false;
        let mut nul = false;
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(TraceError::io(&self.parser.file, &e)),
            };
            if chunk.is_empty() {
                if nul {
                    return Ok(self.cut_here());
                }
                return Ok(any.then_some(too_long));
            }
            any = true;
            let (piece, used, end) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (&chunk[..i], i + 1, true),
                None => (chunk, chunk.len(), false),
            };
            nul = nul || memchr::memchr(0, piece).is_some();
            let room = MAX_LINE_BYTES.saturating_sub(self.buf.len());
            if piece.len() > room {
                too_long = true;
                if nul && !end {
                    // NUL bytes past the longest line: a tail, not read on.
                    return Ok(self.cut_here());
                }
            }
            self.buf.extend_from_slice(&piece[..piece.len().min(room)]);
            self.input.consume(used);
            if end {
                return Ok(Some(too_long));
            }
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Entry, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.pending.pop_front() {
            return Some(Ok(e));
        }
        while !self.done {
            let too_long = match self.read_line() {
                Ok(Some(t)) => t,
                Ok(None) => {
                    self.done = true;
                    return self.take_cut().map(Ok);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            self.parser
                .line(&self.buf, too_long, &mut self.names, &mut self.out);
            self.pending.extend(self.out.drain(..));
            if let Some(e) = self.pending.pop_front() {
                return Some(Ok(e));
            }
        }
        None
    }
}

/// One event line's own content (the process is the file's).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LineEvent<'a> {
    /// The name without the leading `S` (a part of the line).
    pub name: &'a str,
    /// What it measures.
    pub kind: Kind,
    /// Start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// Batch id.
    pub batch: Option<u64>,
    /// Sample index.
    pub sample: Option<u64>,
    /// Wait for a batch that was already there.
    pub ready: Option<bool>,
    /// The native id of the thread that ran it, where it is not the
    /// process's main thread (`tid=`; `None` means the main thread).
    pub tid: Option<u32>,
    /// The CPU time the span's own thread ran during it, ns (`cpu=`; at
    /// most the duration plus [`CPU_SLACK_NS`]; `None` in older logs).
    pub cpu_ns: Option<u64>,
    /// What lotus's wrapper cost the thread outside the span, ns (`hook=`;
    /// `None` in older logs and spans no wrapper of lotus wrote).
    pub hook_ns: Option<u64>,
    /// What lotus's wrapper cost the thread inside the span, ns
    /// (`hook_in=`, in this span's `cpu=`; `None` where not said).
    pub hook_in_ns: Option<u64>,
    /// What the span's process and thread used (`pcpu=`, `delay=`,
    /// `pcpu_at=`, `delay_at=`); `None` where the line says none.
    pub usage: Option<Box<Usage>>,
    /// The DataLoader's settings (a `kind=config` line).
    pub config: Option<Box<LoaderConfig>>,
    /// The generation a `gc` span collected (`gen=`, 0 to 2).
    pub gc: Option<u8>,
    /// Who handed a task's work over, and when (`by=`, `at=`).
    pub task: Option<HandedBy>,
}

/// How far a span's `cpu=` may pass its duration: the thread's CPU clock
/// and the wall clock are read at slightly different instants, so a span
/// that ran all the time may read a little more CPU than wall time; past
/// this the field is wrong and the line is bad.
pub const CPU_SLACK_NS: u64 = 1_000_000;

/// Checks a span's `cpu=` against its duration ([`CPU_SLACK_NS`]).
fn cpu_within(cpu_ns: u64, dur_ns: u64) -> Result<u64, String> {
    if cpu_ns > dur_ns.saturating_add(CPU_SLACK_NS) {
        return Err(format!(
            "cpu time {cpu_ns} ns is more than the span's duration {dur_ns} ns: a thread cannot run longer than the span lasted (a garbled line?)"
        ));
    }
    Ok(cpu_ns)
}

/// How much of a bad line is quoted in its message.
const QUOTE_CHARS: usize = 80;

/// At most [`QUOTE_CHARS`] of `line`, control characters escaped.
fn quote(line: &str) -> String {
    let head: String = line.chars().take(QUOTE_CHARS).collect();
    let mut s = lotus_sys::text::one_line(&head).into_owned();
    if line.chars().count() > QUOTE_CHARS {
        s.push('…');
    }
    s
}

/// A whole number of ns (or an id): not negative, not over `u64::MAX`.
fn whole_number(text: &str, what: &str) -> Result<u64, String> {
    // The common case, plain digits (19 of them always fit a u64): one
    // pass, no trimming.
    let digits = text.as_bytes();
    if (1..=19).contains(&digits.len()) {
        let mut v = 0u64;
        let mut plain = true;
        for &d in digits {
            let d = d.wrapping_sub(b'0');
            if d > 9 {
                plain = false;
                break;
            }
            v = v * 10 + u64::from(d);
        }
        if plain {
            return Ok(v);
        }
    }
    let t = text.trim();
    if t.is_empty() {
        return Err(format!("{what} is empty"));
    }
    t.parse::<u64>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow => {
            format!("{what} '{t}' overflows (the largest is {})", u64::MAX)
        }
        _ if t.starts_with('-') && t[1..].bytes().all(|b| b.is_ascii_digit()) && t.len() > 1 => {
            format!("{what} '{t}' is negative")
        }
        _ => format!("{what} '{t}' is not a whole number"),
    })
}

/// The oldest generation Python's collector has (`gen=` is 0 to this).
const MAX_GC_GENERATION: u8 = 2;

/// The field of `usage` that log key `key` sets (`None`: not a usage
/// key).
fn usage_field<'u>(usage: &'u mut Usage, key: &[u8]) -> Option<&'u mut Option<u64>> {
    Some(match key {
        b"pcpu" => &mut usage.pcpu_ns,
        b"delay" => &mut usage.delay_ns,
        b"pcpu_at" => &mut usage.pcpu_at_ns,
        b"delay_at" => &mut usage.delay_at_ns,
        b"psys" => &mut usage.psys_ns,
        _ => return None,
    })
}

/// `usage`, boxed, where a field is given.
fn boxed_usage(usage: Usage) -> Option<Box<Usage>> {
    (!usage.is_empty()).then(|| Box::new(usage))
}

/// A `kind=config` line's settings, as written (checked by
/// [`RawConfig::read`]).
#[derive(Default)]
struct RawConfig<'a> {
    workers: Option<&'a str>,
    prefetch: Option<&'a str>,
    persistent: Option<&'a str>,
    pin: Option<&'a str>,
    batch_size: Option<&'a str>,
    method: Option<&'a str>,
    len: Option<&'a str>,
    overridden: Option<&'a str>,
}

impl<'a> RawConfig<'a> {
    /// Takes `key=value` where it is a setting; `false` otherwise.
    fn take(&mut self, key: &str, value: &'a str) -> bool {
        let slot = match key {
            "workers" => &mut self.workers,
            "prefetch" => &mut self.prefetch,
            "persistent" => &mut self.persistent,
            "pin" => &mut self.pin,
            "batch_size" => &mut self.batch_size,
            "method" => &mut self.method,
            "len" => &mut self.len,
            "overridden" => &mut self.overridden,
            _ => return false,
        };
        *slot = Some(value.trim());
        true
    }

    /// The settings, checked: `workers=` is required; `-` (or no field)
    /// is "not said" for the optional numbers and the method; the flags
    /// are 0 or 1 (absent: 0).
    fn read(&self) -> Result<LoaderConfig, String> {
        let number = |v: Option<&str>, what: &str| -> Result<Option<u64>, String> {
            match v {
                None | Some("-") => Ok(None),
                Some(v) => whole_number(v, what).map(Some),
            }
        };
        let small = |v: Option<u64>, what: &str| -> Result<Option<u32>, String> {
            v.map(|n| u32::try_from(n).map_err(|_| format!("config: {what} {n} is too large")))
                .transpose()
        };
        let flag = |v: Option<&str>, what: &str| -> Result<bool, String> {
            match v {
                None | Some("0") => Ok(false),
                Some("1") => Ok(true),
                Some(v) => Err(format!("config: {what} '{}' is not 0 or 1", quote(v))),
            }
        };
        let Some(workers) = self.workers else {
            return Err("config: no workers= field (the DataLoader's num_workers)".into());
        };
        let workers =
            small(Some(whole_number(workers, "config: workers")?), "workers")?.unwrap_or(0);
        let method = match self.method {
            None | Some("-") => None,
            Some(m)
                if !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                Some(m.to_string())
            }
            Some(m) => {
                return Err(format!(
                    "config: method '{}' is not a start method name",
                    quote(m)
                ))
            }
        };
        Ok(LoaderConfig {
            workers,
            prefetch: small(number(self.prefetch, "config: prefetch")?, "prefetch")?,
            persistent: flag(self.persistent, "persistent")?,
            pin: flag(self.pin, "pin")?,
            batch_size: number(self.batch_size, "config: batch_size")?,
            method,
            len: number(self.len, "config: len")?,
            overridden: flag(self.overridden, "overridden")?,
        })
    }
}

/// Parses one event line (trimmed, not blank, not a comment).
pub fn parse_event_line(line: &str) -> Result<LineEvent<'_>, String> {
    if line.contains('\0') {
        return Err(format!(
            "NUL bytes (a block cut short by a crash?): '{}'",
            quote(line)
        ));
    }
    let mut fields = line.split(',');
    let name_field = fields.next().unwrap_or("").trim();
    let (Some(start), Some(dur)) = (fields.next(), fields.next()) else {
        return Err(format!(
            "truncated line: expected S<Name>,<start_ns>,<duration_ns>, found '{}'",
            quote(line)
        ));
    };
    let Some(name) = name_field.strip_prefix('S').filter(|n| !n.is_empty()) else {
        return Err(format!(
            "expected S<Name> as the first field, found '{}'",
            quote(name_field)
        ));
    };
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "name '{}' has spaces or control characters (garbled line)",
            quote(name)
        ));
    }
    let start_ns = whole_number(start, "start time")?;
    let dur_ns = whole_number(dur, "duration")?;
    if start_ns.checked_add(dur_ns).is_none() {
        return Err(format!(
            "start {start_ns} + duration {dur_ns} overflows (the largest time is {})",
            u64::MAX
        ));
    }
    let (mut kind, mut batch, mut sample, mut ready, mut tid) = (None, None, None, None, None);
    let (mut cpu, mut hook, mut hook_in) = (None, None, None);
    let (mut usage, mut gc, mut raw_config) = (Usage::default(), None, RawConfig::default());
    let (mut by, mut at) = (None, None);
    for field in fields {
        let field = field.trim();
        if field.is_empty() {
            continue;
        }
        let Some((key, value)) = field.split_once('=') else {
            return Err(format!("field '{}' is not key=value", quote(field)));
        };
        match key.trim() {
            "kind" => {
                kind = Some(Kind::parse(value.trim()).ok_or_else(|| {
                    format!(
                    "unknown kind '{}' (expected op, sample, fetch, batch, wait, consume, queue, thread, start, stop, config or task)",
                    quote(value)
                )
                })?)
            }
            "batch" => batch = Some(whole_number(value, "batch id")?),
            "sample" => sample = Some(whole_number(value, "sample index")?),
            "tid" => {
                let id = whole_number(value, "thread id")?;
                tid = Some(
                    u32::try_from(id).map_err(|_| format!("thread id {id} is not a thread id"))?,
                )
            }
            "by" => {
                let id = whole_number(value, "thread id")?;
                by = Some(
                    u32::try_from(id).map_err(|_| format!("thread id {id} is not a thread id"))?,
                )
            }
            "at" => {
                let t = whole_number(value, "hand-over time")?;
                if t > start_ns {
                    return Err(format!(
                        "a task handed over at {t}, after it started at {start_ns}"
                    ));
                }
                at = Some(t)
            }
            "cpu" => cpu = Some(cpu_within(whole_number(value, "cpu time")?, dur_ns)?),
            "hook" => hook = Some(whole_number(value, "hook time")?),
            "hook_in" => hook_in = Some(whole_number(value, "hook time")?),
            k @ ("pcpu" | "delay" | "pcpu_at" | "delay_at" | "psys") => {
                let n = whole_number(value, k)?;
                if let Some(slot) = usage_field(&mut usage, k.as_bytes()) {
                    *slot = Some(n);
                }
            }
            "gen" => {
                let g = whole_number(value, "gc generation")?;
                gc = Some(
                    u8::try_from(g)
                        .ok()
                        .filter(|g| *g <= MAX_GC_GENERATION)
                        .ok_or_else(|| {
                            format!("gc generation {g} is not 0, 1 or 2 (gen= of a gc span)")
                        })?,
                );
            }
            "ready" => {
                ready = Some(match value.trim() {
                    "1" | "true" => true,
                    "0" | "false" => false,
                    v => return Err(format!("ready '{}' is not 0 or 1", quote(v))),
                })
            }
            // A config event's settings (read once its kind is known);
            // other fields added later are ignored.
            k => {
                raw_config.take(k, value);
            }
        }
    }
    let config = match kind {
        Some(Kind::Config) => Some(Box::new(raw_config.read()?)),
        _ => None,
    };
    let task = match (kind, by, at) {
        (Some(Kind::Task), Some(by), Some(at_ns)) => Some(HandedBy { by, at_ns }),
        (Some(Kind::Task), ..) => {
            return Err("a task without by= and at= (who handed it over, when)".into())
        }
        _ => None,
    };
    let fields = Fields {
        batch,
        sample,
        ready,
        tid,
        cpu,
        hook,
        hook_in,
        usage: boxed_usage(usage),
        config,
        gc,
        task,
    };
    Ok(event(name, kind, start_ns, dur_ns, fields))
}

/// The optional fields of an event line, as read (the byte and the
/// character paths read them alike).
struct Fields {
    batch: Option<u64>,
    sample: Option<u64>,
    ready: Option<bool>,
    tid: Option<u32>,
    cpu: Option<u64>,
    hook: Option<u64>,
    hook_in: Option<u64>,
    usage: Option<Box<Usage>>,
    config: Option<Box<LoaderConfig>>,
    gc: Option<u8>,
    task: Option<HandedBy>,
}

/// The event of a line whose fields are read: where it has no `kind=`,
/// the kind (and batch id and readiness, unless given) its name implies.
#[inline]
fn event(name: &str, kind: Option<Kind>, start_ns: u64, dur_ns: u64, f: Fields) -> LineEvent<'_> {
    match kind {
        Some(kind) => LineEvent {
            name,
            kind,
            start_ns,
            dur_ns,
            batch: f.batch,
            sample: f.sample,
            ready: f.ready,
            tid: f.tid,
            cpu_ns: f.cpu,
            hook_ns: f.hook,
            hook_in_ns: f.hook_in,
            usage: f.usage,
            config: f.config,
            gc: f.gc,
            task: f.task,
        },
        None => inferred_event(name, start_ns, dur_ns, f),
    }
}

/// [`event`] of a line with no `kind=`: out of line, so that the common
/// line's event is built in place (building it through one function for
/// both was 5% of the parsing threads' time).
#[inline(never)]
fn inferred_event(name: &str, start_ns: u64, dur_ns: u64, f: Fields) -> LineEvent<'_> {
    let inferred = infer_kind(name, dur_ns);
    LineEvent {
        name: inferred.name,
        kind: inferred.kind,
        start_ns,
        dur_ns,
        batch: f.batch.or(inferred.batch),
        sample: f.sample,
        ready: f.ready.or(inferred.ready),
        tid: f.tid,
        cpu_ns: f.cpu,
        hook_ns: f.hook,
        hook_in_ns: f.hook_in,
        usage: f.usage,
        config: f.config,
        gc: f.gc,
        task: f.task,
    }
}

/// What a name alone says about an event with no `kind=` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inferred<'a> {
    /// The name to show (the original fork's `_<id>` suffix taken off).
    pub name: &'a str,
    /// The kind.
    pub kind: Kind,
    /// The batch id the name carries.
    pub batch: Option<u64>,
    /// For an original `SBatchWait_<id>`: whether it is the out-of-order
    /// placeholder ([`ORIGINAL_PLACEHOLDER_NS`]).
    pub ready: Option<bool>,
}

/// The kind of an event from its name (without the `S`), for lines with
/// no `kind=` field: the original fork's `BatchPreprocessed_<id>`,
/// `BatchWait_<id>`, `BatchConsumed_<id>`, `BatchQueued_<id>`; lotus's
/// `Batch`, `Wait`, `Consume`, `Fetch`, `Sample`; anything else is an op.
pub(crate) fn infer_kind(name: &str, dur_ns: u64) -> Inferred<'_> {
    let plain = |kind| Inferred {
        name,
        kind,
        batch: None,
        ready: None,
    };
    if let Some((base, id)) = name.rsplit_once('_') {
        if let Ok(id) = id.parse::<u64>() {
            let kind = match base {
                "BatchPreprocessed" => Some(Kind::Batch),
                "BatchWait" => Some(Kind::Wait),
                "BatchConsumed" => Some(Kind::Consume),
                "BatchQueued" => Some(Kind::Queue),
                _ => None,
            };
            if let Some(kind) = kind {
                return Inferred {
                    name: base,
                    kind,
                    batch: Some(id),
                    ready: (kind == Kind::Wait).then_some(dur_ns == ORIGINAL_PLACEHOLDER_NS),
                };
            }
        }
    }
    match name {
        "Batch" => plain(Kind::Batch),
        "Wait" => plain(Kind::Wait),
        "Consume" => plain(Kind::Consume),
        "Fetch" => plain(Kind::Fetch),
        "Sample" => plain(Kind::Sample),
        _ => plain(Kind::Op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &[u8]) -> Vec<Entry> {
        TraceReader::new(text, "f", Process::new(Role::Worker, 9))
            .map(|e| e.expect("no I/O error"))
            .collect()
    }

    fn bad_messages(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .filter_map(|e| match e {
                Entry::Bad(b) => Some(b.to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn file_names() {
        let f = parse_file_name("lotus_worker_pid_4242").expect("worker");
        assert_eq!(
            (f.prefix.as_str(), f.role, f.pid),
            ("lotus", Role::Worker, 4242)
        );
        let f = parse_file_name("custom_log_abc_main_pid_17.log").expect("main");
        assert_eq!(
            (f.prefix.as_str(), f.role, f.pid),
            ("custom_log_abc", Role::Main, 17)
        );
        assert_eq!(
            parse_file_name("_main_pid_1").expect("empty prefix").prefix,
            ""
        );
        for no in [
            "trace.json",
            "lotus_main_pid_",
            "lotus_main_pid_12x",
            "lotus_main_pid_12.json",
            "lotus_main_pid_99999999999",
        ] {
            assert_eq!(parse_file_name(no), None, "{no}");
        }
    }

    /// A task (work a pool thread ran for another thread) says who handed
    /// it over and when, on both paths of the parser; one that does not,
    /// or was handed over after it started, is a bad line that says why.
    #[test]
    fn task_lines_say_who_handed_the_work_over_and_when() {
        let line = "SBlurChunk,100,20,kind=task,tid=4243,by=4200,at=90";
        let e = parse_event_line(line).expect("a task");
        assert_eq!((e.kind, e.tid), (Kind::Task, Some(4243)));
        assert_eq!(
            e.task,
            Some(HandedBy {
                by: 4200,
                at_ns: 90
            })
        );
        assert!(fast_fields(line).is_none(), "the general path reads tasks");
        let read = read(format!("{line}\n").as_bytes());
        assert!(
            matches!(&read[..], [Entry::Event(e)] if e.task == Some(HandedBy { by: 4200, at_ns: 90 })),
            "{read:?}"
        );
        for (bad, why) in [
            (
                "SBlurChunk,100,20,kind=task,tid=4243,at=90",
                "without by= and at=",
            ),
            (
                "SBlurChunk,100,20,kind=task,tid=4243,by=4200",
                "without by= and at=",
            ),
            (
                "SBlurChunk,100,20,kind=task,tid=4243,by=4200,at=101",
                "after it started",
            ),
            (
                "SBlurChunk,100,20,kind=task,tid=1,by=99999999999,at=90",
                "not a thread id",
            ),
        ] {
            let err = parse_event_line(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
        // An op line's by= and at= (a later tracer's) say nothing of a task.
        let e = parse_event_line("SBlur,100,20,kind=op,by=4200,at=90").expect("op");
        assert_eq!(e.task, None);
    }

    #[test]
    fn lines_of_both_formats() {
        let e =
            parse_event_line("SRandomResizedCrop,100,20,kind=op,batch=3,sample=97").expect("ours");
        assert_eq!(
            e,
            LineEvent {
                name: "RandomResizedCrop",
                kind: Kind::Op,
                start_ns: 100,
                dur_ns: 20,
                batch: Some(3),
                sample: Some(97),
                ready: None,
                tid: None,
                cpu_ns: None,
                hook_ns: None,
                hook_in_ns: None,
                usage: None,
                config: None,
                gc: None,
                task: None
            }
        );
        let e = parse_event_line("SQueueFeederThread,100,0,kind=thread,tid=77").expect("thread");
        assert_eq!(
            (e.name, e.kind, e.tid, e.dur_ns),
            ("QueueFeederThread", Kind::Thread, Some(77), 0)
        );
        let e = parse_event_line("SBlur,100,20,kind=op,tid=4243").expect("with a thread");
        assert_eq!(e.tid, Some(4243));
        assert!(parse_event_line("SBlur,100,20,kind=op,tid=99999999999").is_err());
        let e = parse_event_line("SWait,5,0,kind=wait,batch=2,ready=1,future=x").expect("ours");
        assert_eq!(
            (e.kind, e.ready, e.batch),
            (Kind::Wait, Some(true), Some(2))
        );
        // The original fork's names, and the space its Compose log has.
        let e = parse_event_line("SToTensor, 1700000000000000000,3000").expect("orig");
        assert_eq!(
            (e.name, e.kind, e.start_ns),
            ("ToTensor", Kind::Op, 1_700_000_000_000_000_000)
        );
        let e = parse_event_line("SBatchWait_12,10,1000").expect("orig");
        assert_eq!(
            (e.name, e.kind, e.batch, e.ready),
            ("BatchWait", Kind::Wait, Some(12), Some(true))
        );
        let e = parse_event_line("SBatchWait_12,10,999").expect("orig");
        assert_eq!(e.ready, Some(false));
        let e = parse_event_line("SBatchConsumed_0,10,1000").expect("orig");
        assert_eq!((e.kind, e.batch), (Kind::Consume, Some(0)));
        let e = parse_event_line("SBatchQueued_4,10,1000").expect("orig");
        assert_eq!((e.kind, e.batch), (Kind::Queue, Some(4)));
        let e = parse_event_line("SBatchPreprocessed_7,10,5").expect("orig");
        assert_eq!(
            (e.name, e.kind, e.batch),
            ("BatchPreprocessed", Kind::Batch, Some(7))
        );
        let e = parse_event_line("SCollation,10,5").expect("orig");
        assert_eq!(e.kind, Kind::Op);
        for (name, kind) in [
            ("SBatch", Kind::Batch),
            ("SFetch", Kind::Fetch),
            ("SSample", Kind::Sample),
            ("SConsume", Kind::Consume),
            ("SBatchFoo_3", Kind::Op),
        ] {
            assert_eq!(
                parse_event_line(&format!("{name},1,2")).expect(name).kind,
                kind,
                "{name}"
            );
        }
    }

    /// The word-at-a-time helpers give what a loop over bytes gives.
    #[test]
    fn word_helpers_equal_byte_loops() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            // Half of them plain digits, some too many for a u64.
            let alphabet: &[u8] = if next() % 2 == 0 {
                b"0123456789"
            } else {
                b"0123456789,=/:S"
            };
            let len = (next() % 30) as usize;
            let b: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            for at in 0..=len {
                let want = b[at..]
                    .iter()
                    .position(|&c| c == b',')
                    .map_or(len, |p| at + p);
                assert_eq!(comma_from(&b, at), want, "{b:?} {at}");
                let digits = &b[at..want];
                let number = (digits.len() <= 19 && digits.iter().all(u8::is_ascii_digit))
                    .then(|| std::str::from_utf8(digits).ok()?.parse::<u64>().ok())
                    .flatten();
                assert_eq!(
                    number_field(&b, at),
                    number.map(|n| (n, want)),
                    "{:?} {at}",
                    String::from_utf8_lossy(&b)
                );
            }
        }
    }

    #[test]
    fn hook_time_is_read_by_both_parsers_and_optional() {
        let line = "SBlur,100,5000000,kind=op,tid=3,cpu=4000000,hook=1900,hook_in=800";
        let e = parse_event_line(line).expect("hook");
        assert_eq!(
            (e.cpu_ns, e.hook_ns, e.hook_in_ns),
            (Some(4_000_000), Some(1900), Some(800))
        );
        assert_eq!(fast_event_line(line.as_bytes()).expect("fast"), e);
        // Old logs, and spans no wrapper wrote: no hook=.
        let old = "SBlur,100,5000000,kind=op,tid=3,cpu=4000000";
        assert_eq!(parse_event_line(old).expect("old").hook_ns, None);
        assert_eq!(parse_event_line(old).expect("old").hook_in_ns, None);
        assert_eq!(fast_event_line(old.as_bytes()).expect("old").hook_ns, None);
        assert!(parse_event_line("SBlur,100,20,kind=op,hook=x")
            .expect_err("bad")
            .contains("hook time 'x'"));
    }

    #[test]
    fn usage_fields_are_read_by_both_parsers_and_optional() {
        let line =
            "SBatch,100,5000,kind=batch,batch=2,pcpu=9000,delay=300,pcpu_at=70000,psys=400,tid=5";
        let e = parse_event_line(line).expect("usage");
        let u = e.usage.as_deref().expect("usage given");
        assert_eq!(
            (
                u.pcpu_ns,
                u.delay_ns,
                u.pcpu_at_ns,
                u.delay_at_ns,
                u.psys_ns
            ),
            (Some(9000), Some(300), Some(70_000), None, Some(400))
        );
        assert_eq!(fast_event_line(line.as_bytes()).expect("fast"), e);
        let wait = "SWait,100,50,kind=wait,batch=2,pcpu_at=1,delay_at=2";
        let w = parse_event_line(wait).expect("wait");
        assert_eq!(
            w.usage.as_deref().map(|u| (u.pcpu_at_ns, u.delay_at_ns)),
            Some((Some(1), Some(2)))
        );
        assert_eq!(fast_event_line(wait.as_bytes()).expect("fast"), w);
        // Older logs: no usage.
        assert_eq!(
            parse_event_line("SBatch,1,2,kind=batch")
                .expect("old")
                .usage,
            None
        );
        for (bad, says) in [
            ("SBatch,1,2,kind=batch,pcpu=-4", "pcpu '-4' is negative"),
            (
                "SBatch,1,2,kind=batch,delay=x",
                "delay 'x' is not a whole number",
            ),
            ("SWait,1,2,kind=wait,delay_at=", "delay_at is empty"),
        ] {
            assert!(fast_event_line(bad.as_bytes()).is_none(), "{bad}");
            let m = parse_event_line(bad).expect_err(bad);
            assert!(m.contains(says), "{bad}: {m}");
        }
    }

    #[test]
    fn gc_spans_say_their_generation() {
        let line = "Sgc,100,5000,kind=op,gen=2,cpu=4000,batch=1";
        let e = parse_event_line(line).expect("gc");
        assert_eq!(
            (e.name, e.kind, e.gc, e.cpu_ns),
            ("gc", Kind::Op, Some(2), Some(4000))
        );
        assert_eq!(fast_event_line(line.as_bytes()).expect("fast"), e);
        assert_eq!(
            parse_event_line("SBlur,1,2,kind=op").expect("no gen").gc,
            None
        );
        for bad in [
            "Sgc,1,2,kind=op,gen=3",
            "Sgc,1,2,kind=op,gen=300",
            "Sgc,1,2,kind=op,gen=a",
        ] {
            assert!(fast_event_line(bad.as_bytes()).is_none(), "{bad}");
            let m = parse_event_line(bad).expect_err(bad);
            assert!(m.contains("gc generation"), "{bad}: {m}");
        }
    }

    #[test]
    fn config_events_say_the_loaders_settings() {
        let line = "SDataLoader,100,0,kind=config,workers=2,prefetch=4,persistent=1,pin=0,batch_size=32,method=fork,len=40,overridden=1,tid=7";
        let e = parse_event_line(line).expect("config");
        assert_eq!(
            (e.name, e.kind, e.tid),
            ("DataLoader", Kind::Config, Some(7))
        );
        assert_eq!(
            e.config.as_deref(),
            Some(&LoaderConfig {
                workers: 2,
                prefetch: Some(4),
                persistent: true,
                pin: false,
                batch_size: Some(32),
                method: Some("fork".into()),
                len: Some(40),
                overridden: true,
            })
        );
        // Read on the character path only, the same through the reader.
        assert!(fast_event_line(line.as_bytes()).is_none());
        let entries = read(line.as_bytes());
        let [Entry::Event(ev)] = &entries[..] else {
            panic!("{entries:?}")
        };
        assert_eq!(ev.config, e.config);
        let none = parse_event_line(
            "SDataLoader,1,0,kind=config,workers=0,prefetch=-,persistent=0,pin=0,batch_size=-,method=-,len=-,overridden=0",
        )
        .expect("no workers");
        assert_eq!(
            none.config.as_deref(),
            Some(&LoaderConfig::default()),
            "- is not said"
        );
        assert_eq!(
            parse_event_line("SBlur,1,2,kind=op,workers=3")
                .expect("op")
                .config,
            None
        );
        for (bad, says) in [
            (
                "SDataLoader,1,0,kind=config,prefetch=2",
                "no workers= field",
            ),
            ("SDataLoader,1,0,kind=config,workers=-1", "is negative"),
            (
                "SDataLoader,1,0,kind=config,workers=99999999999",
                "too large",
            ),
            (
                "SDataLoader,1,0,kind=config,workers=1,persistent=yes",
                "persistent 'yes' is not 0 or 1",
            ),
            (
                "SDataLoader,1,0,kind=config,workers=1,method=fo/rk",
                "not a start method",
            ),
            (
                "SDataLoader,1,0,kind=config,workers=1,len=x",
                "len 'x' is not a whole number",
            ),
        ] {
            let m = parse_event_line(bad).expect_err(bad);
            assert!(m.contains(says), "{bad}: {m}");
        }
    }

    #[test]
    fn cpu_time_is_read_checked_and_optional() {
        let e = parse_event_line("SBlur,100,5000000,kind=op,cpu=4000000,tid=3").expect("cpu");
        assert_eq!((e.cpu_ns, e.tid), (Some(4_000_000), Some(3)));
        let fast = fast_event_line(b"SBlur,100,5000000,kind=op,cpu=4000000,tid=3").expect("fast");
        assert_eq!(fast, e);
        // Old logs: no cpu=.
        assert_eq!(
            parse_event_line("SBlur,100,20,kind=op")
                .expect("old")
                .cpu_ns,
            None
        );
        // A little over the duration (the two clocks read apart) is kept.
        assert_eq!(
            parse_event_line("SBlur,100,20,kind=op,cpu=1000020")
                .expect("slack")
                .cpu_ns,
            Some(1_000_020)
        );
        for (bad, says) in [
            (
                "SBlur,100,20,kind=op,cpu=1000021",
                "more than the span's duration",
            ),
            ("SBlur,100,20,kind=op,cpu=x", "cpu time 'x'"),
            ("SBlur,100,20,kind=op,cpu=-3", "negative"),
            ("SBlur,100,20,kind=op,cpu=99999999999999999999", "overflows"),
        ] {
            let err = parse_event_line(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
            assert_eq!(fast_event_line(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn the_byte_path_reads_lines_as_the_char_path_does() {
        // Each piece, in every combination: the byte path takes a line
        // only where it reads it exactly as parse_event_line does, and
        // takes the common lines.
        let names = [
            "SA",
            "SBatchWait_12",
            "SBatch",
            "S",
            "A",
            "SA\u{e9}",
            "S\u{feff}A",
        ];
        let numbers = [
            "0",
            "1700000000000000000",
            "18446744073709551615",
            "-1",
            "",
            "01",
        ];
        let fields = [
            "",
            ",kind=op,batch=3,sample=97",
            ",kind=wait,ready=1,batch=0",
            ",ready=true",
            ",ready=2",
            ",kind=nope",
            ",kind=op=x",
            ",tid=4243",
            ",tid=99999999999",
            ",batch=x",
            ",future=x,,",
            ",kin",
            ",batch=99999999999999999999",
            ",=x",
            ",batch=",
            ",sample=1=2",
            ",tid=-1",
            ",kind=",
            ",ready=1,",
            ",x=1,kind=sample",
            ",kind=op,kind=batch",
            ",kind=op,cpu=0",
            ",kind=op,cpu=1000001",
            ",kind=op,tid=7,cpu=x",
            ",cpu=-1",
            ",cpu=18446744073709551615",
        ];
        let mut taken = 0;
        for name in names {
            for start in numbers {
                for dur in numbers {
                    for rest in fields {
                        let line = format!("{name},{start},{dur}{rest}");
                        if let Some(fast) = fast_event_line(line.as_bytes()) {
                            assert_eq!(Ok(fast), parse_event_line(&line), "{line}");
                            taken += 1;
                        }
                    }
                }
            }
        }
        assert!(taken > 100, "{taken}");
        for common in [
            "SRandomResizedCrop,1700000000000000000,20,kind=op,batch=3,sample=97",
            "SBatchPreprocessed_7,10,5",
            "SWait,5,0,kind=wait,batch=2,ready=1",
        ] {
            assert!(fast_event_line(common.as_bytes()).is_some(), "{common}");
        }
        assert!(fast_event_line(b"SA,1,2,kind=op,tid=7,cpu=2").is_some());
        for other in ["SA,1,2\r", " SA,1,2", "SA,1,2,kind=op ", "SA,1", "SA\0,1,2"] {
            assert_eq!(fast_event_line(other.as_bytes()), None, "{other:?}");
        }
    }

    #[test]
    fn bad_lines_say_why() {
        let cases = [
            ("SLoader,12", "truncated line"),
            ("SLoader", "truncated line"),
            ("Loader,1,2", "expected S<Name>"),
            ("S,1,2", "expected S<Name>"),
            ("SLoader,abc,2", "start time 'abc' is not a whole number"),
            ("SLoader,-5,2", "start time '-5' is negative"),
            ("SLoader,5,-2", "duration '-2' is negative"),
            ("SLoader,5,", "duration is empty"),
            ("SLoader,99999999999999999999,2", "overflows"),
            ("SLoader,18446744073709551615,2", "overflows"),
            ("SLoader,1.5,2", "not a whole number"),
            ("SLoader,1,2,kind=nope", "unknown kind 'nope'"),
            ("SLoader,1,2,kin", "field 'kin' is not key=value"),
            ("SLoader,1,2,batch=x", "batch id 'x'"),
            ("SWait,1,2,ready=2", "ready '2'"),
            ("SLo\u{1}ader,1,2", "name 'Lo\\x01ader'"),
            ("SLo ader,1,2", "spaces or control characters"),
            ("\0\0\0", "NUL bytes"),
        ];
        for (line, want) in cases {
            let e = parse_event_line(line).expect_err(line);
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn reader_skips_bad_lines_and_reads_on() {
        let text = b"#lotus-trace v1 role=main pid=77 host=n1 rank=3\n# comment\n\nSWait,1,2,kind=wait\nSWa\xff\xfeit,1,2\nSConsume,4,0\r\nSBroken,1";
        let entries = read(text);
        assert_eq!(
            bad_messages(&entries),
            vec![
                "f:5: not UTF-8 text (garbled line)".to_string(),
                "f:7: truncated line: expected S<Name>,<start_ns>,<duration_ns>, found 'SBroken,1'"
                    .to_string()
            ]
        );
        let events: Vec<&Event> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::Event(e) => Some(e),
                _ => None,
            })
            .collect();
        assert_eq!(events.len(), 2);
        // The file name's pid and role; the header's host and rank.
        assert_eq!(
            (events[0].pid, events[0].role, events[0].rank),
            (9, Role::Worker, Some(3))
        );
        assert_eq!(events[0].host.as_deref(), Some("n1"));
        assert_eq!((events[1].kind, events[1].start_ns), (Kind::Consume, 4));
    }

    #[test]
    fn header_problems_are_reported_not_fatal() {
        let entries = read(b"#lotus-trace v2 role=boss pid=x rank=-\nSA,1,2\n");
        let bad = bad_messages(&entries);
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(
            bad[0].starts_with("f:1: trace format version v2"),
            "{bad:?}"
        );
        let Entry::Event(e) = &entries[3] else {
            panic!("{entries:?}")
        };
        assert_eq!((e.pid, e.role, e.rank), (9, Role::Worker, None));
        // A header after the first line is a comment.
        let entries = read(b"SA,1,2\n#lotus-trace v1 pid=5\nSB,1,2\n");
        assert!(entries
            .iter()
            .all(|e| matches!(e, Entry::Event(e) if e.pid == 9)));
    }

    /// A log whose process was killed before it closed it: its lines, then
    /// a line cut by the kill, then the NUL bytes of the file grown ahead.
    fn cut_log(lines: usize) -> Vec<u8> {
        let mut text = b"#lotus-trace v1 role=worker pid=9\n".to_vec();
        for i in 0..lines {
            text.extend_from_slice(format!("SOp,{},5,kind=op\n", 1000 + i).as_bytes());
        }
        text.extend_from_slice(b"SOp,99");
        text.extend(std::iter::repeat_n(0u8, 3 * MAX_LINE_BYTES + 7));
        text
    }

    #[test]
    fn a_nul_tail_ends_the_log_as_cut_short() {
        let entries = read(&cut_log(3));
        let events = entries
            .iter()
            .filter(|e| matches!(e, Entry::Event(e) if &*e.name == "Op"))
            .count();
        assert_eq!(events, 3, "{entries:?}");
        // One bad entry, at the line the NUL bytes cut, saying why.
        assert_eq!(bad_messages(&entries), [format!("f:5: {CUT_SHORT}")]);
        // Read through a small buffer, a line at a time or in blocks of
        // lines, the same.
        let text = cut_log(200);
        let reader = std::io::BufReader::with_capacity(64, &text[..]);
        let entries: Vec<Entry> = TraceReader::new(reader, "f", Process::new(Role::Worker, 9))
            .map(|e| e.expect("read"))
            .collect();
        assert_eq!(entries.len(), 201);
        assert!(matches!(&entries[200], Entry::Bad(b) if b.line == 202));
        let mut reader = TraceReader::new(&text[..], "f", Process::new(Role::Worker, 9));
        let (mut block, mut ends) = (Vec::new(), Vec::new());
        assert_eq!(reader.read_line().expect("line 1"), Some(false));
        reader.skip_line();
        let n = reader
            .take_lines(1 << 20, &mut block, &mut ends)
            .expect("lines");
        assert_eq!(n, 200, "the lines before the NUL bytes, no further");
        assert!(!block.contains(&0));
        assert_eq!(reader.read_line().expect("end"), None);
        assert!(reader.take_cut().is_some());
        assert!(reader.take_cut().is_none(), "said once");
        // NUL bytes in a line that ends in a line break: a bad line, and the
        // log goes on.
        let entries = read(b"SA,1,2\n\0\0\0\nSB,3,4\n");
        assert_eq!(entries.len(), 3);
        assert!(
            bad_messages(&entries)[0].contains("f:2: NUL bytes"),
            "{entries:?}"
        );
        assert!(matches!(&entries[2], Entry::Event(e) if &*e.name == "B"));
    }

    #[test]
    fn long_lines_are_cut_and_skipped() {
        let mut text = vec![b'x'; MAX_LINE_BYTES * 3];
        text.extend_from_slice(b"\nSA,1,2\n");
        // A small buffer makes the reader see the line in many pieces.
        let reader = std::io::BufReader::with_capacity(1000, &text[..]);
        let entries: Vec<Entry> = TraceReader::new(reader, "f", Process::new(Role::Worker, 1))
            .map(|e| e.expect("read"))
            .collect();
        assert_eq!(entries.len(), 2);
        assert!(bad_messages(&entries)[0].contains("longer than"));
        assert!(matches!(&entries[1], Entry::Event(e) if &*e.name == "A"));
    }
}
