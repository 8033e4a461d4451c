//! Finding a trace's files: every log under a folder, recursively (the
//! logs of several processes, ranks or machines merge into one timeline),
//! and any PyTorch profiler trace beside them.
//!
//! A log is a file named `<prefix>_main_pid_<pid>` or
//! `<prefix>_worker_pid_<pid>` ([`parse_file_name`]). A PyTorch profiler
//! trace is a `*.json` file named `*.pt.trace.json` or with `trace` in its
//! name whose first 64 KiB hold `"traceEvents"`, unless it is a view
//! already made of a trace ([`is_view`]: `lotus trace view`'s own output,
//! or the original study's `*_coarse.json` / `*_fine.json`), which would
//! put everything in the view twice. Names starting with `.`
//! are skipped, and so are links to folders. Files are listed in path
//! order, so results do not depend on the file system's order.
//!
//! Every file of the folder is opened through [`lotus_sys::input::Folder`]:
//! relative to the folder, never through a link that leads out of it,
//! regular files only, read no further than their size when opened. A
//! folder received from another machine is read as it is, and nothing
//! outside it is read or quoted: a log (or profiler trace) that is a link
//! out of the folder is refused by name, saying to copy the real file in.

use std::fs;
use std::io::{BufReader, Read};

use lotus_sys::input::{escaped, Dir, Folder, SharedFolder, SizedFile};
use std::path::{Path, PathBuf};

use super::event::Process;
use super::parse::{
    clean_text, parse_file_name, Entry, EntrySink, FileName, LineParser, Names, TraceReader,
};
use super::TraceError;

/// The bytes of lines in one block [`TraceFolder::read_all`] parses.
/// Measured on 10 million events (`bench/scale_trace.py`, 2 CPUs): 2 MiB
/// took 0.92 CPU-s against 1.05 at 512 KiB and 1.10 at 256 KiB (a block
/// costs a turn, a hand-over and a sink of its own), and 4 MiB no less.
const BLOCK_BYTES: usize = 2048 * 1024;
/// Parsed blocks waiting for the caller, per parsing thread, at most.
const BLOCKS_AHEAD: usize = 2;
/// Parsing threads at most.
const MAX_PARSERS: usize = 8;

/// Whole lines of one log, for a parsing thread.
struct Block {
    /// The log (index into [`TraceFolder::logs`]).
    file: usize,
    /// The first block of its log (which is announced before it).
    starts_file: bool,
    /// The log's parser, at the line before the block's first.
    parser: LineParser,
    /// The lines, each followed by `\n`.
    text: Vec<u8>,
    /// Where each line ends in `text` (before its `\n`), and whether it
    /// was cut for length.
    ends: Vec<(usize, bool)>,
    /// Entries already parsed: the header line's.
    parsed: Vec<Entry>,
    /// Entries after the block's lines: a log cut short says so.
    after: Vec<Entry>,
    /// Reading the log failed after these lines.
    failed: Option<TraceError>,
}

/// A block's entries, in the caller's sink, filled on the parsing
/// thread.
struct Parsed<T> {
    file: usize,
    starts_file: bool,
    value: T,
    failed: Option<TraceError>,
}

impl Block {
    fn new(file: usize, starts_file: bool, parser: LineParser) -> Block {
        Block {
            file,
            starts_file,
            parser,
            text: Vec::with_capacity(BLOCK_BYTES + 1024),
            // Room for lines of 48 bytes or more (a trace's are longer): a
            // list grown by doubling was copied about twice over per block.
            ends: Vec::with_capacity(BLOCK_BYTES / 48),
            parsed: Vec::new(),
            after: Vec::new(),
            failed: None,
        }
    }

    /// Parses the block's lines into `sink` (made for it, with room for
    /// `lines` entries).
    fn parse<S: EntrySink>(mut self, names: &mut Names, sink: impl Fn(usize) -> S) -> Parsed<S> {
        let mut out = sink(self.ends.len() + self.parsed.len());
        for entry in std::mem::take(&mut self.parsed) {
            out.push(entry);
        }
        // Checked once for the whole block (most are clean): its lines
        // then need no check of their own.
        let clean = clean_text(&self.text)
            .then(|| std::str::from_utf8(&self.text).ok())
            .flatten();
        let mut start = 0;
        for &(end, too_long) in &self.ends {
            match clean {
                Some(text) if !too_long => {
                    self.parser.clean_line(&text[start..end], names, &mut out)
                }
                _ => self
                    .parser
                    .line(&self.text[start..end], too_long, names, &mut out),
            }
            start = end + 1;
        }
        for entry in self.after {
            out.push(entry);
        }
        Parsed {
            file: self.file,
            starts_file: self.starts_file,
            value: out,
            failed: self.failed,
        }
    }
}

/// The log being cut into blocks.
struct OpenLog {
    /// Its index in [`TraceFolder::logs`].
    i: usize,
    reader: TraceReader<BufReader<SizedFile>>,
    /// The next block is its first.
    first: bool,
}

/// Cuts the logs into blocks, one at a time, for whichever parsing thread
/// has its turn (see [`TraceFolder::read_blocks`]). The first line of a
/// log is parsed here, so the header's host and rank reach every block's
/// parser.
struct Blocks<'a> {
    logs: &'a [LogFile],
    next_log: usize,
    open: Option<OpenLog>,
    names: Names,
}

impl Blocks<'_> {
    /// The next block, or `None` when every log is read. A log's last
    /// block goes even when empty (an empty log is still announced); a
    /// block that failed ends its log.
    fn next_block(&mut self) -> Option<Block> {
        let open = match &mut self.open {
            Some(open) => open,
            None => {
                let i = self.next_log;
                let log = self.logs.get(i)?;
                self.next_log += 1;
                match log.open() {
                    Ok(reader) => self.open.insert(OpenLog {
                        i,
                        reader,
                        first: true,
                    }),
                    Err(e) => {
                        let process = Process::new(log.name.role, log.name.pid);
                        let mut block =
                            Block::new(i, true, LineParser::new(log.display.clone(), process));
                        block.failed = Some(e);
                        return Some(block);
                    }
                }
            }
        };
        let reader = &mut open.reader;
        let mut block = Block::new(open.i, open.first, reader.parser().clone());
        open.first = false;
        loop {
            let too_long = match reader.read_line() {
                Ok(Some(t)) => t,
                Ok(None) => {
                    block.after.extend(reader.take_cut());
                    break;
                }
                Err(e) => {
                    block.failed = Some(e);
                    break;
                }
            };
            if reader.parser().line_no == 0 {
                // Line 1, maybe a header: parsed here, so every later
                // block's parser has its host and rank.
                reader.parse_line(too_long, &mut self.names, &mut block.parsed);
                block.parser = reader.parser().clone();
                continue;
            }
            block.text.extend_from_slice(reader.raw());
            block.ends.push((block.text.len(), too_long));
            block.text.push(b'\n');
            reader.skip_line();
            // The whole lines after it, a buffer at a time.
            loop {
                let room = BLOCK_BYTES.saturating_sub(block.text.len());
                match reader.take_lines(room, &mut block.text, &mut block.ends) {
                    Ok(0) => break,
                    Ok(n) => reader.skip_lines(n),
                    Err(e) => {
                        block.failed = Some(e);
                        self.open = None;
                        return Some(block);
                    }
                }
                if room == 0 || block.text.len() >= BLOCK_BYTES {
                    break;
                }
            }
            if block.text.len() >= BLOCK_BYTES {
                return Some(block);
            }
        }
        self.open = None;
        Some(block)
    }
}

/// Whose turn it is to cut the next block, shared by the parsing threads.
struct Turns<'a> {
    /// The number of the next block.
    next: usize,
    /// Every thread stops: no more blocks, or the caller stopped, or a
    /// thread failed.
    stop: bool,
    blocks: Blocks<'a>,
}

/// Sets [`Turns::stop`] when a parsing thread ends, however it ends (a
/// panic included), so that no other thread waits for its turn for ever.
struct StopOnExit<'a, 'b> {
    turns: &'a std::sync::Mutex<Turns<'b>>,
    changed: &'a std::sync::Condvar,
}

impl Drop for StopOnExit<'_, '_> {
    fn drop(&mut self) {
        let mut t = self
            .turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        t.stop = true;
        self.changed.notify_all();
    }
}

/// What [`TraceFolder::read_blocks`] hands over.
pub(crate) enum Handed<'a, T> {
    /// The blocks that follow come from this log.
    File(&'a LogFile),
    /// One block's entries, in the sink made for it.
    Block(T),
}

/// What [`TraceFolder::read_all`] hands over.
#[derive(Debug)]
pub enum Item<'a> {
    /// The entries that follow come from this log.
    File(&'a LogFile),
    /// An event, or a bad line.
    Entry(Entry),
}

/// The mark `lotus trace view` puts at the start of its output, so that
/// a view written into the trace folder is not read back as a PyTorch
/// profiler trace.
pub const VIEW_MARK: &str = "\"lotusTrace\"";

/// How much of a JSON file is read to tell whether it is a profiler trace.
const SNIFF_BYTES: u64 = 64 * 1024;

/// One log file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogFile {
    /// Its path.
    pub path: PathBuf,
    /// Its path as shown in messages.
    pub display: String,
    /// The folder it is in, relative to the trace folder (`""` at the top):
    /// logs of one run share it, so batches are matched within it.
    pub folder: String,
    /// What its name says.
    pub name: FileName,
    /// The trace folder it was found in (its own path when the log was
    /// named alone).
    root: PathBuf,
    /// That folder opened once, where its reader shares one.
    shared: Option<SharedFolder>,
}

impl LogFile {
    /// Opens it for reading, as [`LogFile::open_file`] does.
    pub fn open(&self) -> Result<TraceReader<BufReader<SizedFile>>, TraceError> {
        let f = self
            .open_file()
            .map_err(|e| TraceError::io(&self.display, &e))?;
        Ok(TraceReader::new(
            BufReader::with_capacity(256 * 1024, f),
            self.display.clone(),
            Process::new(self.name.role, self.name.pid),
        ))
    }

    /// Opens its bytes for reading: inside its trace folder through
    /// [`Folder::open_file`] (no link out of the folder, regular files
    /// only, no further than its size now); a log named alone on the
    /// command line is the user's choice, opened as named.
    pub fn open_file(&self) -> std::io::Result<SizedFile> {
        if self.path == self.root {
            return SizedFile::open_named(&self.path);
        }
        let rel = self.path.strip_prefix(&self.root).unwrap_or(&self.path);
        Dir::of(&self.root, self.shared.as_ref()).open_file(rel)
    }
}

/// The files of one trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceFolder {
    /// The folder (or the one log file) given.
    pub root: PathBuf,
    /// The logs, in path order.
    pub logs: Vec<LogFile>,
    /// PyTorch profiler traces, in path order.
    pub torch: Vec<PathBuf>,
    /// Views of a trace found beside it (lotus's or the study's), left
    /// out of [`TraceFolder::torch`], in path order.
    pub views: Vec<PathBuf>,
    /// The folder opened once, where it was scanned through one
    /// ([`Dir::Shared`]): its files are read through it.
    pub(crate) shared: Option<SharedFolder>,
}

impl TraceFolder {
    /// Opens `path`, one of the folder's files (a profiler trace found by
    /// [`TraceFolder::scan`]), inside the folder as
    /// [`Folder::open_file`] does: no link out of it, regular files only,
    /// read no further than its size now.
    pub fn open_file(&self, path: &Path) -> std::io::Result<SizedFile> {
        match path.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => self.source().open_file(rel),
            _ => SizedFile::open_named(path),
        }
    }

    /// The folder as its readers take it: the shared folder it was
    /// scanned through ([`Dir::Shared`]), else its path.
    pub fn source(&self) -> Dir<'_> {
        Dir::of(&self.root, self.shared.as_ref())
    }

    /// Every log's entries, in order (logs in path order, lines in file
    /// order), each log announced before its entries. A few threads (one
    /// per CPU, at most 8) take turns to cut the logs into blocks of lines,
    /// each parsing the blocks it cut; `f` gets them in order. Each
    /// thread stays at most a few blocks ahead, so memory is bounded
    /// whatever the trace's size. Stops at the first error, `f`'s or the
    /// logs'.
    pub fn read_all<E: From<TraceError>>(
        &self,
        mut f: impl FnMut(Item<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.read_blocks(Vec::with_capacity, |handed| match handed {
            Handed::File(log) => f(Item::File(log)),
            Handed::Block(entries) => {
                for entry in entries {
                    f(Item::Entry(entry))?;
                }
                Ok(())
            }
        })
    }

    /// [`TraceFolder::read_all`], with each block's entries put into a
    /// sink that `sink` makes for it (given the block's lines) on its
    /// parsing thread, so that work per event can be done there, in
    /// parallel; the caller gets one sink per block of lines, in order.
    pub(crate) fn read_blocks<T: EntrySink + Send, E: From<TraceError>>(
        &self,
        sink: impl Fn(usize) -> T + Sync,
        mut f: impl FnMut(Handed<'_, T>) -> Result<(), E>,
    ) -> Result<(), E> {
        use std::sync::mpsc::{sync_channel, Receiver};
        use std::sync::{Condvar, Mutex, PoisonError};
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_PARSERS);
        let mut from_workers: Vec<Receiver<Parsed<T>>> = Vec::new();
        let mut worker_ends = Vec::new();
        for _ in 0..workers {
            let (ptx, prx) = sync_channel::<Parsed<T>>(BLOCKS_AHEAD);
            from_workers.push(prx);
            worker_ends.push(ptx);
        }
        let sink = &sink;
        let turns = Mutex::new(Turns {
            next: 0,
            stop: false,
            blocks: Blocks {
                logs: &self.logs,
                next_log: 0,
                open: None,
                names: Names::new(),
            },
        });
        let changed = Condvar::new();
        let (turns, changed) = (&turns, &changed);
        std::thread::scope(|scope| {
            // The parsing threads: thread w cuts block k (k % workers == w)
            // when its turn comes, right after block k - 1 is cut, then
            // parses it while the next thread cuts the next block. Each
            // cuts and parses its own blocks: the log's bytes are read into
            // the cache of the thread that parses them (a reading thread
            // of its own handed every byte over to another).
            for (w, ptx) in worker_ends.into_iter().enumerate() {
                scope.spawn(move || {
                    let _stop = StopOnExit { turns, changed };
                    let mut names = Names::new();
                    let mut k = w;
                    loop {
                        let block = {
                            let mut t = turns.lock().unwrap_or_else(PoisonError::into_inner);
                            while t.next != k && !t.stop {
                                t = changed.wait(t).unwrap_or_else(PoisonError::into_inner);
                            }
                            if t.stop {
                                return;
                            }
                            let block = t.blocks.next_block();
                            t.next += 1;
                            t.stop = block.is_none();
                            changed.notify_all();
                            block
                        };
                        let Some(block) = block else {
                            return;
                        };
                        if ptx.send(block.parse(&mut names, sink)).is_err() {
                            return;
                        }
                        k += workers;
                    }
                });
            }
            // The caller, taking parser k % workers's next result for block
            // k. The receivers are dropped when this returns, early or not,
            // so no thread waits on a full channel for ever.
            let mut consume = move |outs: Vec<Receiver<Parsed<T>>>| -> Result<(), E> {
                for k in 0.. {
                    let Ok(parsed) = outs[k % workers].recv() else {
                        return Ok(());
                    };
                    if parsed.starts_file {
                        f(Handed::File(&self.logs[parsed.file]))?;
                    }
                    f(Handed::Block(parsed.value))?;
                    if let Some(e) = parsed.failed {
                        return Err(e.into());
                    }
                }
                Ok(())
            };
            consume(from_workers)
        })
    }

    /// Notes for the logs that are empty (a disk-full trace, a process
    /// killed before it wrote): they have no events, and are said by name.
    pub fn empty_logs(&self) -> Vec<String> {
        self.logs
            .iter()
            .filter(|log| log.open_file().is_ok_and(|f| f.size() == 0))
            .map(|log| format!("note: {}: empty: the process wrote nothing (disk full, or killed before it wrote?); skipped", log.display))
            .collect()
    }

    /// Finds the logs and profiler traces under `root`, or takes `root`
    /// itself when it is one log file. An error when there are no logs.
    /// Through a shared folder ([`Dir::Shared`]), its files are read
    /// through it: once, for every reader of this scan.
    pub fn scan<'a>(root: impl Into<Dir<'a>>) -> Result<TraceFolder, TraceError> {
        let dir = root.into();
        let root = dir.path();
        let shared = dir.shared().cloned();
        let shown = root.display().to_string();
        let meta = fs::metadata(root).map_err(|e| TraceError::io(&shown, &e))?;
        let mut folder = TraceFolder {
            root: root.to_path_buf(),
            shared: shared.clone(),
            ..TraceFolder::default()
        };
        if !meta.is_dir() {
            if let Some(what) = lotus_sys::input::not_regular(meta.file_type()) {
                return Err(not_a_log_file(&shown, what));
            }
        }
        if meta.is_file() {
            let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("");
            match parse_file_name(name) {
                Some(name) => folder.logs.push(LogFile {
                    path: root.to_path_buf(),
                    display: shown,
                    folder: String::new(),
                    name,
                    root: root.to_path_buf(),
                    shared: None,
                }),
                None => return Err(TraceError::NoLogs { path: shown }),
            }
            return Ok(folder);
        }
        let opened = match &shared {
            Some(f) => f.clone(),
            None => SharedFolder::from(Folder::open(root).map_err(|e| TraceError::io(&shown, &e))?),
        };
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let entries = fs::read_dir(&dir).map_err(|e| TraceError::io(dir.display(), &e))?;
            let mut paths = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| TraceError::io(dir.display(), &e))?;
                paths.push(entry.path());
            }
            paths.sort();
            let mut subdirs = Vec::new();
            for path in paths {
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let Ok(link_meta) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if link_meta.is_dir() {
                    subdirs.push(path);
                    continue;
                }
                let rel_file = path.strip_prefix(root).unwrap_or(&path);
                if let Some(parsed) = parse_file_name(name) {
                    // Named like a log, it must be one: a fifo would block
                    // the reading, a link out of the folder would read
                    // (and quote) another file, and skipping either would
                    // lose that process's events in silence.
                    if let Err(e) = opened.open_file(rel_file) {
                        return Err(TraceError::Io {
                            path: escaped(&path.display().to_string()),
                            message: format!("{e}: a trace log must be a file in the folder"),
                        });
                    }
                    let rel = dir.strip_prefix(root).unwrap_or(&dir);
                    folder.logs.push(LogFile {
                        // A received folder's names may hold anything:
                        // shown with control characters escaped.
                        display: escaped(&path.display().to_string()),
                        folder: rel.display().to_string(),
                        path,
                        name: parsed,
                        root: root.to_path_buf(),
                        shared: shared.clone(),
                    });
                } else if looks_like_torch_trace(name) {
                    let mut file = match opened.open_file(rel_file) {
                        Ok(f) => f,
                        // A link out of the folder is refused by name: a
                        // profiler trace of someone else's would be merged.
                        Err(e)
                            if link_meta.file_type().is_symlink()
                                && e.kind() == std::io::ErrorKind::InvalidInput =>
                        {
                            return Err(TraceError::Io {
                                path: escaped(&path.display().to_string()),
                                message: e.to_string(),
                            });
                        }
                        // Not a file (a fifo, a device): not a profiler trace.
                        Err(_) => continue,
                    };
                    if sniff_torch_trace(&mut file) {
                        if is_view(name, &mut file) {
                            folder.views.push(path);
                        } else {
                            folder.torch.push(path);
                        }
                    }
                }
            }
            // Depth first, in name order.
            subdirs.reverse();
            stack.extend(subdirs);
        }
        folder.logs.sort_by(|a, b| a.path.cmp(&b.path));
        folder.torch.sort();
        folder.views.sort();
        if folder.logs.is_empty() {
            return Err(TraceError::NoLogs { path: shown });
        }
        Ok(folder)
    }
}

/// A path named like a trace log that is `what` ("a fifo (named pipe)").
fn not_a_log_file(path: impl std::fmt::Display, what: &str) -> TraceError {
    TraceError::Io {
        path: path.to_string(),
        message: format!("is {what}, not a regular file: a trace log must be a file"),
    }
}

/// Whether a file name may be a PyTorch profiler trace.
pub fn looks_like_torch_trace(name: &str) -> bool {
    name.ends_with(".pt.trace.json") || (name.ends_with(".json") && name.contains("trace"))
}

/// Whether the start of `file` holds `"traceEvents"`.
fn sniff_torch_trace(file: &mut SizedFile) -> bool {
    use std::io::{Seek, SeekFrom};
    let mut head = Vec::new();
    if file.seek(SeekFrom::Start(0)).is_err()
        || file.take(SNIFF_BYTES).read_to_end(&mut head).is_err()
    {
        return false;
    }
    String::from_utf8_lossy(&head).contains("\"traceEvents\"")
}

/// Whether a trace-event JSON file (`name`, opened as `f`) is a view made of a
/// trace rather than a profiler's own trace: `lotus trace view`'s output
/// ([`VIEW_MARK`] at its start), or the original study's
/// (`visualization_augmenter.py` in rajveerb/lotus writes the profiler
/// trace `X.json` with its own batch events appended as `X_coarse.json` or
/// `X_fine.json`, or with no profiler trace a file of those events alone:
/// its `SBatchPreprocessed_<id>` / `SBatchConsumed_<id>` spans, at the
/// end).
pub fn is_view(name: &str, f: &mut SizedFile) -> bool {
    use std::io::{Seek, SeekFrom};
    if name.ends_with("_coarse.json") || name.ends_with("_fine.json") {
        return true;
    }
    let mut head = Vec::new();
    if f.seek(SeekFrom::Start(0)).is_err() || f.take(SNIFF_BYTES).read_to_end(&mut head).is_err() {
        return false;
    }
    if String::from_utf8_lossy(&head).contains(VIEW_MARK) {
        return true;
    }
    let len = f.size();
    let mut tail = Vec::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(SNIFF_BYTES)))
        .is_err()
        || f.take(SNIFF_BYTES).read_to_end(&mut tail).is_err()
    {
        return false;
    }
    let tail = String::from_utf8_lossy(&tail);
    tail.contains("\"SBatchPreprocessed_") || tail.contains("\"SBatchConsumed_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Role;

    #[test]
    fn scans_recursively_in_order() {
        let tmp = tempdir();
        let root = tmp.as_path();
        fs::create_dir_all(root.join("rank1/deep")).expect("mkdir");
        fs::write(root.join("lotus_worker_pid_20"), "SA,1,2\n").expect("w");
        fs::write(root.join("lotus_main_pid_10"), "SA,1,2\n").expect("w");
        fs::write(root.join("rank1/deep/x_worker_pid_30.log"), "SA,1,2\n").expect("w");
        fs::write(root.join("rank1/notes.txt"), "hi").expect("w");
        fs::write(root.join(".lotus-123.tmp"), "").expect("w");
        fs::write(root.join("run.pt.trace.json"), r#"{"traceEvents": []}"#).expect("w");
        fs::write(
            root.join("trace.json"),
            r#"{"lotusTrace": "x", "traceEvents": []}"#,
        )
        .expect("w");
        fs::write(root.join("other_trace.json"), r#"{"a": 1}"#).expect("w");
        let f = TraceFolder::scan(root).expect("scan");
        let names: Vec<(&str, Role, u32)> = f
            .logs
            .iter()
            .map(|l| (l.folder.as_str(), l.name.role, l.name.pid))
            .collect();
        assert_eq!(
            names,
            vec![
                ("", Role::Main, 10),
                ("", Role::Worker, 20),
                ("rank1/deep", Role::Worker, 30)
            ]
        );
        assert_eq!(f.torch, vec![root.join("run.pt.trace.json")]);
        assert_eq!(f.views, vec![root.join("trace.json")]);
        // One log file on its own.
        let one = TraceFolder::scan(&root.join("lotus_main_pid_10")).expect("file");
        assert_eq!(one.logs.len(), 1);
        // No logs.
        let empty = root.join("rank1");
        fs::remove_dir_all(root.join("rank1/deep")).expect("rm");
        let e = TraceFolder::scan(&empty).expect_err("no logs");
        assert!(e.to_string().contains("no trace logs"), "{e}");
    }

    /// Every entry of `f`, read one log at a time by [`TraceReader`] and
    /// by [`TraceFolder::read_all`]'s threads, as text.
    fn both_ways(f: &TraceFolder) -> (Vec<String>, Vec<String>) {
        let mut one = Vec::new();
        for log in &f.logs {
            one.push(format!("file {}", log.display));
            for e in log.open().expect("open") {
                one.push(format!("{:?}", e.expect("entry")));
            }
        }
        let mut all = Vec::new();
        f.read_all(|item| -> Result<(), TraceError> {
            all.push(match item {
                Item::File(log) => format!("file {}", log.display),
                Item::Entry(e) => format!("{e:?}"),
            });
            Ok(())
        })
        .expect("read_all");
        (one, all)
    }

    #[test]
    fn a_log_cut_short_by_nul_bytes_is_read_to_them_both_ways() {
        let tmp = tempdir();
        let root = tmp.as_path();
        // Several blocks of lines, a line cut by the kill, then the NUL
        // bytes of the file the tracer had grown ahead of its lines.
        let mut text = b"#lotus-trace v1 role=worker pid=7\n".to_vec();
        for i in 0..60_000u64 {
            text.extend_from_slice(format!("SOp,{},5,kind=op\n", 1000 + i).as_bytes());
        }
        text.extend_from_slice(b"SOp,12");
        text.extend(std::iter::repeat_n(0u8, 1 << 20));
        fs::write(root.join("lotus_worker_pid_7"), &text).expect("w");
        fs::write(root.join("lotus_worker_pid_8"), "SA,1,2\n").expect("w");
        let f = TraceFolder::scan(root).expect("scan");
        let (one, all) = both_ways(&f);
        assert_eq!(one, all);
        let ops = all.iter().filter(|e| e.contains("name: \"Op\"")).count();
        assert_eq!(ops, 60_000);
        let cut: Vec<&String> = all
            .iter()
            .filter(|e| e.contains(crate::CUT_SHORT))
            .collect();
        assert_eq!(cut.len(), 1, "{cut:?}");
        assert!(cut[0].contains("line: 60002"), "{}", cut[0]);
        // The next log is read whole.
        assert!(all.iter().any(|e| e.contains("name: \"A\"")));
    }

    #[test]
    fn parsing_in_blocks_on_threads_gives_what_one_reader_gives() {
        let tmp = tempdir();
        let root = tmp.as_path();
        // A long log: a header with a bad field, many blocks' worth of
        // lines, bad and blank lines, a line too long in the middle, a
        // BOM, no line break at the end.
        let mut text = String::from("#lotus-trace v1 role=worker pid=7 host=h9 rank=x\n");
        // About ten blocks.
        for i in 0..150_000u64 {
            text += &format!(
                "SOp{},{},{},kind=op,batch={}\n",
                i % 7,
                1000 + i,
                i % 13,
                i / 64
            );
            if i % 997 == 0 {
                text += "garbled line\n\n";
            }
            if i == 20_000 {
                text += &"x".repeat(crate::parse::MAX_LINE_BYTES + 10);
                text += "\n\u{feff}SBatch,5,6,kind=batch\n";
            }
            if i == 100_000 {
                // Longer than a block.
                text += &"y".repeat(BLOCK_BYTES + 1000);
                text += "\n";
            }
        }
        text += "SLast,1,2";
        fs::write(root.join("lotus_worker_pid_7"), &text).expect("w");
        // An empty log, a log of one line, a header-only log.
        fs::write(root.join("lotus_worker_pid_8"), "").expect("w");
        fs::write(root.join("lotus_worker_pid_9"), "SA,1,2").expect("w");
        fs::write(
            root.join("lotus_main_pid_1"),
            "#lotus-trace v1 role=main pid=1\n",
        )
        .expect("w");
        let f = TraceFolder::scan(root).expect("scan");
        let (one, all) = both_ways(&f);
        assert!(one.len() > 150_000, "{}", one.len());
        assert_eq!(one.len(), all.len());
        for (a, b) in one.iter().zip(&all) {
            assert_eq!(a, b);
        }
        assert_eq!(
            all.iter()
                .filter(|e| e.contains("line longer than"))
                .count(),
            2
        );
        assert!(all.iter().any(|e| e.contains("rank 'x'")));
        assert!(all.iter().any(|e| e.contains("host: Some(\"h9\")")));

        // The caller's error stops everything and comes back.
        let mut seen = 0;
        let r = f.read_all(|_| -> Result<(), TraceError> {
            seen += 1;
            if seen == 5000 {
                return Err(TraceError::NoLogs {
                    path: "stop".into(),
                });
            }
            Ok(())
        });
        assert!(matches!(r, Err(TraceError::NoLogs { .. })));
        assert_eq!(seen, 5000);
    }

    /// A parsing thread that panics stops the others (which take turns
    /// to cut blocks): the panic comes back to the caller instead of the
    /// other threads waiting for the dead one's turn for ever.
    #[test]
    fn a_parsing_thread_that_panics_stops_them_all() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let tmp = tempdir();
        let root = tmp.as_path();
        let mut text = String::new();
        // Enough lines for several blocks, whatever their size.
        let mut i = 0u64;
        while text.len() < 4 * BLOCK_BYTES {
            text += &format!("SOp,{i},{},kind=op\n", i % 17);
            i += 1;
        }
        fs::write(root.join("lotus_worker_pid_7"), &text).expect("w");
        let f = TraceFolder::scan(root).expect("scan");
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let made = AtomicUsize::new(0);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                f.read_blocks(
                    |lines| {
                        assert!(made.fetch_add(1, Ordering::SeqCst) != 2, "third block");
                        Vec::with_capacity(lines)
                    },
                    |_| -> Result<(), TraceError> { Ok(()) },
                )
            }));
            let _ = done.send(r.is_err());
        });
        let panicked = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("read_blocks came back");
        assert!(panicked, "the panic reached the caller");
    }

    /// A fresh folder with a name no one can guess (not a predictable
    /// `/tmp` path: the tests may run as root).
    fn tempdir() -> TempDir {
        TempDir(tempfile::tempdir().expect("tmp"))
    }

    struct TempDir(tempfile::TempDir);
    impl TempDir {
        fn as_path(&self) -> &Path {
            self.0.path()
        }
    }
}
