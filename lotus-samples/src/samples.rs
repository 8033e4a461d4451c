use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use lotus_sys::input::{escaped, for_each_line, Dir, SharedFolder, SizedFile};

/// The first 8 bytes of a samples file.
pub const SAMPLES_MAGIC: &[u8; 8] = b"LOTUSSMP";
/// The samples file's format version without counters.
pub const SAMPLES_VERSION: u32 = 1;
/// The samples file's format version whose records carry counter deltas.
pub const SAMPLES_VERSION_COUNTERS: u32 = 2;
/// The samples file's format version whose records carry a stack id (and
/// counter deltas, where there are counters).
pub const SAMPLES_VERSION_STACKS: u32 = 3;
/// The first line of a stacks file.
pub const STACKS_TAG: &str = "#lotus-stacks v1";
/// The most frames a stored stack holds: deeper chains keep their
/// innermost frames. A sampler takes at most [`MAX_NATIVE_DEPTH`] native
/// frames; the Python frames spliced between them (read from the
/// interpreter, on Pythons without perf trampolines) make the rest.
pub const MAX_STACK_DEPTH: usize = 512;
/// The most native frames a sampler takes of a stack (the kernel's own
/// cap, `perf_event_max_stack`, is 127 by default).
pub const MAX_NATIVE_DEPTH: usize = 256;
/// Bytes per sample record without counters (a version 1 record, and the
/// start of every version 2 record).
pub const RECORD_BYTES: usize = 24;
/// Most counters a record carries.
pub const MAX_COUNTERS: usize = 8;
/// Bytes of the samples file's header.
pub const HEADER_BYTES: usize = 16;
/// The first line of a symbols file.
pub const SYMBOLS_TAG: &str = "#lotus-symbols v1";
/// The first line of a sampling description.
pub const SAMPLING_TAG: &str = "#lotus-sampling v1";
/// The function name of a symbol id with no line in the symbols file.
pub const UNKNOWN_SYMBOL: &str = "[unknown]";

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When, ns on `CLOCK_MONOTONIC`.
    pub time_ns: u64,
    /// The process.
    pub pid: u32,
    /// The thread (the native thread id; the pid for the main thread).
    pub tid: u32,
    /// The symbol id (in the symbols file).
    pub symbol: u32,
    /// The CPU was in kernel mode.
    pub kernel: bool,
    /// The counters read with the sample: each one's delta since the
    /// thread's previous sample (empty in a file without counters).
    pub counters: CounterValues,
}

/// Counter values carried by one sample, at most [`MAX_COUNTERS`]; fixed
/// size so that a [`Sample`] stays `Copy` and allocation-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CounterValues {
    len: u8,
    values: [u64; MAX_COUNTERS],
}

impl CounterValues {
    /// The values; `None` when there are more than [`MAX_COUNTERS`].
    pub fn new(values: &[u64]) -> Option<CounterValues> {
        if values.len() > MAX_COUNTERS {
            return None;
        }
        let mut v = CounterValues {
            len: values.len() as u8,
            values: [0; MAX_COUNTERS],
        };
        v.values[..values.len()].copy_from_slice(values);
        Some(v)
    }

    /// The values, in counter order.
    pub fn as_slice(&self) -> &[u64] {
        &self.values[..usize::from(self.len)]
    }

    /// How many values.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Sample {
    fn to_bytes(self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&self.time_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.tid.to_le_bytes());
        b[16..20].copy_from_slice(&self.symbol.to_le_bytes());
        b[20..24].copy_from_slice(&u32::from(self.kernel).to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8; RECORD_BYTES]) -> Sample {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[0..8]);
        Sample {
            time_ns: u64::from_le_bytes(t),
            pid: u32_at(8),
            tid: u32_at(12),
            symbol: u32_at(16),
            kernel: u32_at(20) & 1 == 1,
            counters: CounterValues::default(),
        }
    }
}

/// A function and the module it is in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct Symbol {
    /// The function (demangled), `func@0x...` or `[unknown]`.
    pub function: String,
    /// The module: a path, or `[kernel]`, `[vdso]`, `[unknown]`...
    pub module: String,
}

/// The most bytes of a function's name a folded frame keeps
/// ([`Symbol::folded_frame`]).
pub const MAX_FOLDED_FRAME: usize = 1024;
/// What ends a folded frame whose name was cut.
pub const FRAME_CUT: &str = "...[cut]";

impl Symbol {
    /// A Python frame's file and the line its function begins on, where
    /// its module says it (`path/train.py:42`, as lotus names the frames it
    /// reads from the interpreter); the module whole and `None` otherwise
    /// (a native function, a frame from CPython's perf map, which names no
    /// line).
    pub fn py_file_line(&self) -> (&str, Option<u32>) {
        if !self.function.starts_with("py::") {
            return (&self.module, None);
        }
        match self.module.rsplit_once(':') {
            Some((file, line))
                if !file.is_empty()
                    && !line.is_empty()
                    && line.bytes().all(|b| b.is_ascii_digit()) =>
            {
                (file, line.parse().ok())
            }
            _ => (&self.module, None),
        }
    }

    /// A symbol; tabs and line breaks (which the file cannot hold) become
    /// spaces.
    pub fn new(function: &str, module: &str) -> Symbol {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        Symbol {
            function: clean(function),
            module: clean(module),
        }
    }

    /// The frame this symbol is in collapsed stacks (`--format folded`,
    /// as inferno, flamegraph.pl and speedscope read them): its function,
    /// `;` made `:` and line breaks spaces, `[unknown]` where empty, a
    /// kernel function (module `[kernel]`) marked `_[k]` as
    /// `stackcollapse-perf.pl --kernel` marks them.
    ///
    /// A name longer than [`MAX_FOLDED_FRAME`] bytes is cut there and
    /// ends in [`FRAME_CUT`]: a stack is one line, and a received folder of
    /// 255 frames of 60 KB names each made every line 15 MB (2.6 GB for
    /// 150 stacks); real C++ names stay whole.
    pub fn folded_frame(&self) -> String {
        let name = if self.function.is_empty() {
            UNKNOWN_SYMBOL
        } else {
            &self.function
        };
        let name = if name.len() > MAX_FOLDED_FRAME {
            let mut end = MAX_FOLDED_FRAME;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            &name[..end]
        } else {
            name
        };
        let mut f = name.replace(';', ":").replace(['\n', '\r'], " ");
        if name.len() < self.function.len() {
            f.push_str(FRAME_CUT);
        }
        if self.module == "[kernel]" {
            f.push_str("_[k]");
        }
        f
    }
}

/// Where samples go as they come: the profiler backend calls it from its
/// writer thread, symbols always before the samples that use them.
pub trait SampleSink: Send {
    /// How many counter values every sample will carry: called once,
    /// before any sample.
    fn counters(&mut self, count: usize) -> io::Result<()>;
    /// New symbols, by id.
    fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()>;
    /// A block of samples, in time order within the block.
    fn samples(&mut self, block: &[Sample]) -> io::Result<()>;
    /// The end: writes what is buffered.
    fn finish(&mut self) -> io::Result<()>;
    /// Every sample will carry a stack id: called once, before any
    /// sample. A sink that cannot store stacks refuses (the default).
    fn with_stacks(&mut self) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this sample sink does not store call stacks",
        ))
    }
    /// New stacks, each after its parent (and after the symbols it uses).
    fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
        let _ = new;
        Ok(())
    }
    /// A block of samples with the stack id of each (`stacks[i]` is
    /// `block[i]`'s; 0: none); without [`SampleSink::with_stacks`], the
    /// stacks are dropped.
    fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
        let _ = stacks;
        self.samples(block)
    }
}

/// One stack of the stack table: its innermost frame under its callers'
/// stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StackNode {
    /// The stack's id (from 1).
    pub id: u32,
    /// The callers' stack; 0 when `symbol` is the outermost frame.
    pub parent: u32,
    /// The innermost frame's symbol id.
    pub symbol: u32,
}

impl StackNode {
    /// Stack `id`: `symbol` called from stack `parent` (0: the outermost).
    pub fn new(id: u32, parent: u32, symbol: u32) -> StackNode {
        StackNode { id, parent, symbol }
    }
}

/// The paths of a folder's sample files.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampleFiles {
    /// `<prefix>.samples`.
    pub samples: PathBuf,
    /// `<prefix>.symbols`.
    pub symbols: PathBuf,
    /// `<prefix>.sampling`.
    pub sampling: PathBuf,
    /// `<prefix>.stacks`.
    pub stacks: PathBuf,
    /// The folder they are in.
    dir: PathBuf,
    /// The folder opened once, where the caller shares one
    /// ([`Dir::Shared`]): the files are read through it.
    shared: Option<SharedFolder>,
}

impl SampleFiles {
    /// The files of `prefix` in `dir` (whether or not they exist), read
    /// through `dir`'s shared folder where it is one.
    pub fn of<'a>(dir: impl Into<Dir<'a>>, prefix: &str) -> SampleFiles {
        let dir = dir.into();
        let path = dir.path();
        SampleFiles {
            samples: path.join(format!("{prefix}.samples")),
            symbols: path.join(format!("{prefix}.symbols")),
            sampling: path.join(format!("{prefix}.sampling")),
            stacks: path.join(format!("{prefix}.stacks")),
            dir: path.to_path_buf(),
            shared: dir.shared().cloned(),
        }
    }

    /// The files of `prefix` in `dir`; an error naming the folder when it
    /// holds no samples file (of kind `NotFound`), or naming the samples
    /// file when it is not one lotus reads (a fifo, a device, a link out
    /// of the folder: see [`Folder::open_file`](lotus_sys::input::Folder::open_file)).
    pub fn open<'a>(dir: impl Into<Dir<'a>>, prefix: &str) -> io::Result<SampleFiles> {
        let dir = dir.into();
        let f = SampleFiles::of(dir, prefix);
        match f.open_in_folder(&f.samples) {
            Ok(_) => Ok(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{}: no samples ({} is missing): trace with `lotus trace run --sample`",
                    dir.path().display(),
                    f.samples.display()
                ),
            )),
            Err(e) => Err(e),
        }
    }

    /// Opens one of the three files inside the folder (see
    /// [`Folder::open_file`](lotus_sys::input::Folder::open_file)); errors name the file.
    fn open_in_folder(&self, path: &Path) -> io::Result<SizedFile> {
        let name = path.file_name().map_or(path, Path::new);
        let dir = Dir::of(&self.dir, self.shared.as_ref());
        dir.open_file(name).map_err(|e| with_path(path, e))
    }

    /// Any of the files that exists.
    pub fn existing(&self) -> Vec<&Path> {
        [&self.samples, &self.symbols, &self.sampling, &self.stacks]
            .into_iter()
            .filter(|p| p.symlink_metadata().is_ok())
            .map(PathBuf::as_path)
            .collect()
    }

    /// The symbol table (ids with no line read as `[unknown]`); an empty
    /// one when the file is missing.
    pub fn read_symbols(&self) -> io::Result<SymbolTable> {
        match self.open_in_folder(&self.symbols) {
            Ok(file) => SymbolTable::read_from(file, &self.symbols),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(SymbolTable::empty()),
            Err(e) => Err(e),
        }
    }

    /// The stack table; an empty one when the file is missing (a run
    /// without stacks).
    pub fn read_stacks(&self) -> io::Result<StackTable> {
        match self.open_in_folder(&self.stacks) {
            Ok(file) => StackTable::read_from(file, &self.stacks),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(StackTable::default()),
            Err(e) => Err(e),
        }
    }

    /// The sampling description's `key=value` pairs, in file order
    /// (`note` may repeat); empty when the file is missing. Text that is
    /// not UTF-8 is read with U+FFFD in its place; a line is at most
    /// [`MAX_SAMPLING_LINE`] bytes (the rest is dropped).
    pub fn read_sampling(&self) -> io::Result<Vec<(String, String)>> {
        let file = match self.open_in_folder(&self.sampling) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut pairs = Vec::new();
        for_each_line(
            BufReader::new(file),
            MAX_SAMPLING_LINE,
            |line| -> io::Result<()> {
                let text = String::from_utf8_lossy(line.bytes);
                if !text.starts_with('#') {
                    if let Some((k, v)) = text.split_once('=') {
                        pairs.push((k.to_string(), v.to_string()));
                    }
                }
                Ok(())
            },
        )
        .map_err(|e| with_path(&self.sampling, e))?;
        Ok(pairs)
    }

    /// What the sampling description says of missing samples
    /// ([`SamplingCoverage`]); empty when the file is missing.
    pub fn read_coverage(&self) -> io::Result<SamplingCoverage> {
        Ok(SamplingCoverage::from_pairs(&self.read_sampling()?))
    }

    /// A streaming reader of the samples, which stops at the size the
    /// file had when opened.
    pub fn samples(&self) -> io::Result<SampleReader<BufReader<SizedFile>>> {
        let file = self.open_in_folder(&self.samples)?;
        let size = file.size();
        let mut reader = SampleReader::new(BufReader::with_capacity(1 << 16, file), &self.samples)?;
        reader.most = size.saturating_sub(HEADER_BYTES as u64) / reader.record.len() as u64;
        Ok(reader)
    }
}

/// What a sampling description says of the samples known to be missing:
/// its `note=` lines, and the figures to set the samples against the CPU
/// time the job ran ([`SamplingCoverage::shortfall_note`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SamplingCoverage {
    /// The `note=` lines, in file order (each a known loss with its
    /// figure, as the collection said it).
    pub notes: Vec<String>,
    /// `cpu_ns=`: the CPU time the job's processes ran, where the sampler
    /// could count it.
    pub cpu_ns: Option<u64>,
    /// `samples=`: the samples written.
    pub samples: Option<u64>,
    /// `interval_ns=` (or one period of `frequency_hz=`): the CPU time a
    /// sample stands for.
    pub interval_ns: Option<u64>,
}

/// Under this share of the job's CPU time, samples that cover less are
/// said ([`SamplingCoverage::shortfall_note`]).
pub const COVERAGE_WARN_BELOW: f64 = 0.95;

impl SamplingCoverage {
    /// Reads the keys from a description's pairs
    /// ([`SampleFiles::read_sampling`]); a number that does not parse is
    /// taken as absent (the figure then goes unsaid, never wrong).
    pub fn from_pairs(pairs: &[(String, String)]) -> SamplingCoverage {
        let num = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        };
        let interval_ns = num("interval_ns").filter(|&n| n > 0).or_else(|| {
            num("frequency_hz")
                .filter(|&hz| hz > 0)
                .map(|hz| (1_000_000_000 / hz).max(1))
        });
        SamplingCoverage {
            notes: pairs
                .iter()
                .filter(|(k, _)| k == "note")
                .map(|(_, v)| v.clone())
                .collect(),
            cpu_ns: num("cpu_ns"),
            samples: num("samples"),
            interval_ns,
        }
    }

    /// The CPU time the samples stand for (samples × interval), where both
    /// are known.
    pub fn covered_ns(&self) -> Option<u64> {
        Some(self.samples?.saturating_mul(self.interval_ns?))
    }

    /// What the samples cover of `cpu_ns=` when it is under
    /// [`COVERAGE_WARN_BELOW`] (e.g. "the samples cover 0.720 s of the
    /// 0.970 s CPU the job ran (74%)..."); `None` when a figure is missing
    /// or the samples cover enough.
    pub fn shortfall_note(&self) -> Option<String> {
        let cpu = self.cpu_ns.filter(|&n| n > 0)?;
        let covered = self.covered_ns()?;
        let share = covered as f64 / cpu as f64;
        (share < COVERAGE_WARN_BELOW).then(|| {
            format!(
                "the samples cover {:.3} s of the {:.3} s CPU the job ran ({:.0}%: {} samples \
                 x {} us against cpu_ns={cpu}): the rest is missing from every row",
                covered as f64 / 1e9,
                cpu as f64 / 1e9,
                (share * 100.0).floor(),
                self.samples.unwrap_or(0),
                self.interval_ns.unwrap_or(0) as f64 / 1e3,
            )
        })
    }

    /// Every note to show: the `note=` lines, then the shortfall.
    pub fn all_notes(&self) -> Vec<String> {
        let mut notes = self.notes.clone();
        notes.extend(self.shortfall_note());
        notes
    }
}

/// The longest line of a sampling description that is read whole.
pub const MAX_SAMPLING_LINE: usize = 64 * 1024;
/// The longest line of a symbols file that is read whole (a longer one is
/// skipped and counted).
pub const MAX_SYMBOL_LINE: usize = 64 * 1024;
/// The fewest bytes a symbols line takes (`0<TAB><TAB>` and its line
/// break): a file of `n` bytes holds at most `n / 4` ids.
const MIN_SYMBOL_LINE: u64 = 4;

fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Creates `path` for writing: a new file (never through a link, never
/// over another file: the folder may be shared).
fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
        .map_err(|e| with_path(path, e))
}

/// Writes a folder's sample and symbol files as samples come.
#[derive(Debug)]
pub struct SamplesWriter {
    samples: BufWriter<File>,
    symbols: BufWriter<File>,
    /// `<prefix>.stacks`, once [`SampleSink::with_stacks`] made it.
    stacks: Option<BufWriter<File>>,
    files: SampleFiles,
    written: u64,
    counters: usize,
}

impl SamplesWriter {
    /// Creates `<prefix>.samples` (format version 1: no counters, until
    /// [`SampleSink::counters`] says otherwise) and `<prefix>.symbols` in
    /// `dir`; an error if either exists.
    pub fn create(dir: &Path, prefix: &str) -> io::Result<SamplesWriter> {
        let files = SampleFiles::of(dir, prefix);
        let samples = BufWriter::with_capacity(1 << 16, create_new(&files.samples)?);
        let mut symbols = BufWriter::new(create_new(&files.symbols)?);
        writeln!(symbols, "{SYMBOLS_TAG}")?;
        symbols.flush()?;
        let mut w = SamplesWriter {
            samples,
            symbols,
            stacks: None,
            files,
            written: 0,
            counters: 0,
        };
        w.header()?;
        Ok(w)
    }

    /// [`Self::create`] for records that carry `counters` counter deltas
    /// each (format version 2; version 1 when `counters` is 0).
    pub fn create_with_counters(
        dir: &Path,
        prefix: &str,
        counters: usize,
    ) -> io::Result<SamplesWriter> {
        let mut w = SamplesWriter::create(dir, prefix)?;
        w.counters(counters)?;
        Ok(w)
    }

    /// Writes the header at the start of the samples file: the same size
    /// whatever the version, so it is rewritten in place until the first
    /// sample.
    fn header(&mut self) -> io::Result<()> {
        let version = if self.stacks.is_some() {
            SAMPLES_VERSION_STACKS
        } else if self.counters == 0 {
            SAMPLES_VERSION
        } else {
            SAMPLES_VERSION_COUNTERS
        };
        self.samples.seek(SeekFrom::Start(0))?;
        self.samples.write_all(SAMPLES_MAGIC)?;
        self.samples.write_all(&version.to_le_bytes())?;
        self.samples
            .write_all(&(self.record_bytes() as u32).to_le_bytes())?;
        self.samples.flush()
    }

    /// Samples written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes of one record in this file.
    fn record_bytes(&self) -> usize {
        RECORD_BYTES + 4 * usize::from(self.stacks.is_some()) + 8 * self.counters
    }

    /// Writes `block` (with `stacks`, one each, in a version 3 file).
    fn write_block(&mut self, block: &[Sample], stacks: Option<&[u32]>) -> io::Result<()> {
        if let Some(s) = block.iter().find(|s| s.counters.len() != self.counters) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a sample with {} counter values in a samples file of {} counters",
                    s.counters.len(),
                    self.counters
                ),
            ));
        }
        let with_stacks = self.stacks.is_some();
        if stacks.is_some_and(|st| st.len() != block.len()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a block of samples with another number of stack ids",
            ));
        }
        for (i, s) in block.iter().enumerate() {
            self.samples.write_all(&s.to_bytes())?;
            if with_stacks {
                let stack = stacks.map_or(0, |st| st[i]);
                self.samples.write_all(&stack.to_le_bytes())?;
            }
            for v in s.counters.as_slice() {
                self.samples.write_all(&v.to_le_bytes())?;
            }
        }
        self.written += block.len() as u64;
        self.samples.flush()
    }
}

impl SampleSink for SamplesWriter {
    /// An error after the first sample, or for more than [`MAX_COUNTERS`].
    fn counters(&mut self, count: usize) -> io::Result<()> {
        if count > MAX_COUNTERS || self.written > 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{count} counters per sample after {} samples: at most {MAX_COUNTERS}, before the first",
                    self.written
                ),
            ));
        }
        self.counters = count;
        self.header()
    }

    fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()> {
        for (id, s) in new {
            writeln!(self.symbols, "{id}\t{}\t{}", s.function, s.module)?;
        }
        // Before the samples that use them reach the disk.
        self.symbols.flush()
    }

    /// An error (nothing of the block written) when a sample carries
    /// another number of counters than the file's records hold. In a
    /// file with stacks, the samples carry none (stack id 0).
    fn samples(&mut self, block: &[Sample]) -> io::Result<()> {
        self.write_block(block, None)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.symbols.flush()?;
        if let Some(stacks) = self.stacks.as_mut() {
            stacks.flush()?;
        }
        self.samples.flush()
    }

    /// Creates `<prefix>.stacks` and makes the records version 3; an
    /// error after the first sample, or if the file exists.
    fn with_stacks(&mut self) -> io::Result<()> {
        if self.written > 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("stacks asked for after {} samples", self.written),
            ));
        }
        if self.stacks.is_none() {
            let mut stacks = BufWriter::new(create_new(&self.files.stacks)?);
            writeln!(stacks, "{STACKS_TAG}")?;
            stacks.flush()?;
            self.stacks = Some(stacks);
        }
        self.header()
    }

    fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
        let Some(stacks) = self.stacks.as_mut() else {
            return Ok(());
        };
        for n in new {
            writeln!(stacks, "{}\t{}\t{}", n.id, n.parent, n.symbol)?;
        }
        // Before the samples that use them reach the disk.
        stacks.flush()
    }

    fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
        self.write_block(block, Some(stacks))
    }
}

/// Writes the sampling description (`key=value` lines) to `path`: whole,
/// through lotus's one output writer (a temporary file in the folder,
/// renamed over it; mode 0666 less the umask).
pub fn write_sampling(path: &Path, pairs: &[(&str, String)]) -> io::Result<()> {
    let mut text = format!("{SAMPLING_TAG}\n");
    for (k, v) in pairs {
        text += &format!("{k}={}\n", v.replace(['\n', '\r'], " "));
    }
    lotus_sys::write_file(path, text.as_bytes()).map_err(io::Error::from)
}

/// The one line that says the counters asked for were refused, with the
/// kernel's reason: `hardware counters: not supported here (reason)`
/// (`counters: ...` when none of them is a hardware counter).
pub fn unsupported_note(hardware: bool, reason: &str) -> String {
    format!(
        "{}: not supported here ({reason})",
        if hardware {
            "hardware counters"
        } else {
            "counters"
        }
    )
}

/// The symbols of a sampled trace, by id.
#[derive(Debug, Clone)]
pub struct SymbolTable {
    /// Only the ids that have a line: an id is never a number of slots.
    by_id: HashMap<u32, Symbol>,
    unknown: Symbol,
    /// The lines skipped.
    skipped: Skipped,
}

/// A line of a symbols file that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SkippedLine {
    /// Its number, from 1.
    pub line: u64,
    /// Why ("not UTF-8 text").
    pub why: String,
}

/// How many skipped lines a [`SymbolTable`] remembers by number (the rest
/// are counted).
const SKIPPED_KEPT: usize = 5;

impl SymbolTable {
    fn empty() -> SymbolTable {
        SymbolTable {
            by_id: HashMap::new(),
            unknown: Symbol::new(UNKNOWN_SYMBOL, UNKNOWN_SYMBOL),
            skipped: Skipped::default(),
        }
    }

    /// Reads the symbols file `path` (a file the user named, links
    /// followed: a trace folder's is read through
    /// [`SampleFiles::read_symbols`]); an empty table when it is missing.
    /// See [`SymbolTable::read_from`].
    pub fn read(path: &Path) -> io::Result<SymbolTable> {
        match SizedFile::open_named(path) {
            Ok(file) => SymbolTable::read_from(file, path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(SymbolTable::empty()),
            Err(e) => Err(with_path(path, e)),
        }
    }

    /// Reads a symbols file (named `path` in errors), no further than its
    /// size when opened. A cut last line (no line break) is dropped; a
    /// line that is not UTF-8 text, not `id<TAB>function<TAB>module`, or
    /// whose id is past what the file can hold is skipped and counted
    /// ([`SymbolTable::skipped`], [`SymbolTable::skipped_note`]).
    pub fn read_from(file: SizedFile, path: &Path) -> io::Result<SymbolTable> {
        let most_ids = file.size() / MIN_SYMBOL_LINE;
        let mut table = SymbolTable::empty();
        let mut by_id = HashMap::new();
        let skipped = read_entries(file, path, |no, body, skip| {
            let mut parts = body.splitn(3, '\t');
            let (Some(id), Some(function), Some(module)) =
                (parts.next(), parts.next(), parts.next())
            else {
                skip.add(no, "not id<TAB>function<TAB>module".into());
                return;
            };
            let Ok(id) = id.parse::<u32>() else {
                skip.add(no, format!("id '{}' is not a number", escaped(id)));
                return;
            };
            if u64::from(id) > most_ids {
                skip.add(
                    no,
                    format!("id {id} is past what a file of this size can hold (ids count its lines from 0)"),
                );
                return;
            }
            by_id.insert(id, Symbol::new(function, module));
        })?;
        table.by_id = by_id;
        table.skipped = skipped;
        Ok(table)
    }

    /// The lines skipped (the first few, by number; see
    /// [`SymbolTable::skipped_count`] for how many).
    pub fn skipped(&self) -> &[SkippedLine] {
        &self.skipped.lines
    }

    /// How many lines were skipped.
    pub fn skipped_count(&self) -> usize {
        self.skipped.count
    }

    /// One line for the user about the skipped lines of `path`, if any:
    /// `lotus.symbols: 2 line(s) skipped (line 3: not UTF-8 text; ...)`.
    pub fn skipped_note(&self, path: &Path) -> Option<String> {
        self.skipped
            .note(path, &format!("their samples read as {UNKNOWN_SYMBOL}"))
    }

    /// Whether the file has a line for `id`.
    pub fn has(&self, id: u32) -> bool {
        self.by_id.contains_key(&id)
    }

    /// The symbol of `id` (`[unknown]` for an id with no line:
    /// [`SymbolTable::has`] tells).
    pub fn get(&self, id: u32) -> &Symbol {
        self.by_id.get(&id).unwrap_or(&self.unknown)
    }

    /// How many ids have a line.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no id has a line.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The fewest bytes a stacks line takes (`1<TAB>0<TAB>0` and its line
/// break): a file of `n` bytes holds at most `n / 6` ids.
const MIN_STACK_LINE: u64 = 6;

/// The call stacks of a sampled trace, by id (`<prefix>.stacks`, see the
/// module docs): each read from its innermost frame out through its
/// parents, every one of which was on an earlier line.
#[derive(Debug, Clone, Default)]
pub struct StackTable {
    /// id -> (parent, symbol, depth in frames).
    by_id: HashMap<u32, (u32, u32, u16)>,
    skipped: Skipped,
}

/// The lines a table file (symbols, stacks) skipped: the first few, by
/// number, and how many.
#[derive(Debug, Clone, Default)]
struct Skipped {
    lines: Vec<SkippedLine>,
    count: usize,
}

impl Skipped {
    fn add(&mut self, line: u64, why: String) {
        self.count += 1;
        if self.lines.len() < SKIPPED_KEPT {
            self.lines.push(SkippedLine { line, why });
        }
    }

    /// One line for the user about the skipped lines of `path`, if any:
    /// `lotus.symbols: 2 line(s) skipped (line 3: not UTF-8 text; ...)`,
    /// then `; ` and what it means for the samples (`then`).
    fn note(&self, path: &Path, then: &str) -> Option<String> {
        if self.count == 0 {
            return None;
        }
        let shown: Vec<String> = self
            .lines
            .iter()
            .map(|s| format!("line {}: {}", s.line, s.why))
            .collect();
        let more = self.count - shown.len();
        Some(format!(
            "{}: {} line(s) skipped ({}{}); {then}",
            escaped(&path.display().to_string()),
            self.count,
            shown.join("; "),
            if more > 0 {
                format!("; {more} more")
            } else {
                String::new()
            }
        ))
    }
}

/// The entries of a table file (symbols, stacks) named `path` in errors:
/// each complete line that is UTF-8 text and not a `#` comment goes to `f`
/// with its number; a cut last line (the run stopped while writing it) is
/// dropped, and a line too long or not text is skipped with why. The rules
/// the two files share, read in one place.
fn read_entries(
    file: SizedFile,
    path: &Path,
    mut f: impl FnMut(u64, &str, &mut Skipped),
) -> io::Result<Skipped> {
    let mut skipped = Skipped::default();
    for_each_line(
        BufReader::new(file),
        MAX_SYMBOL_LINE,
        |line| -> io::Result<()> {
            if !line.ended {
                return Ok(());
            }
            if line.too_long {
                skipped.add(line.no, format!("longer than {MAX_SYMBOL_LINE} bytes"));
                return Ok(());
            }
            let Ok(body) = std::str::from_utf8(line.bytes) else {
                skipped.add(line.no, "not UTF-8 text".into());
                return Ok(());
            };
            if !body.starts_with('#') {
                f(line.no, body, &mut skipped);
            }
            Ok(())
        },
    )
    .map_err(|e| with_path(path, e))?;
    Ok(skipped)
}

impl StackTable {
    /// Reads a stacks file (named `path` in errors), no further than its
    /// size when opened. A cut last line (no line break) is dropped; a line
    /// that is not UTF-8 text, not `id<TAB>parent<TAB>symbol` numbers, whose
    /// id is 0, given twice or past what the file can hold, whose parent is
    /// not a stack of an earlier line (a cut or edited file, or a cycle) or
    /// which would make a stack deeper than [`MAX_STACK_DEPTH`] is skipped
    /// and counted ([`StackTable::skipped_note`]).
    pub fn read_from(file: SizedFile, path: &Path) -> io::Result<StackTable> {
        let most_ids = file.size() / MIN_STACK_LINE;
        let mut table = StackTable::default();
        let mut by_id: HashMap<u32, (u32, u32, u16)> = HashMap::new();
        let skipped = read_entries(file, path, |no, body, skip| {
            let fields: Vec<Option<u32>> = body.split('\t').map(|f| f.parse().ok()).collect();
            let [Some(id), Some(parent), Some(symbol)] = fields[..] else {
                skip.add(no, "not id<TAB>parent<TAB>symbol numbers".into());
                return;
            };
            if id == 0 || u64::from(id) > most_ids {
                skip.add(
                    no,
                    format!("id {id} is 0 or past what a file of this size can hold"),
                );
                return;
            }
            if by_id.contains_key(&id) {
                skip.add(no, format!("id {id} is given twice"));
                return;
            }
            let depth = if parent == 0 {
                1
            } else {
                match by_id.get(&parent) {
                    Some(&(_, _, d)) => d.saturating_add(1),
                    None => {
                        skip.add(
                            no,
                            format!("its parent {parent} is not a stack of an earlier line"),
                        );
                        return;
                    }
                }
            };
            if usize::from(depth) > MAX_STACK_DEPTH {
                skip.add(no, format!("deeper than {MAX_STACK_DEPTH} frames"));
                return;
            }
            by_id.insert(id, (parent, symbol, depth));
        })?;
        table.by_id = by_id;
        table.skipped = skipped;
        Ok(table)
    }

    /// The symbol ids of stack `id`, outermost first, into `out` (cleared
    /// first); `false`, `out` left empty, when `id` has no line.
    pub fn frames(&self, id: u32, out: &mut Vec<u32>) -> bool {
        out.clear();
        let mut at = id;
        // Each parent was read on an earlier line and depths are capped:
        // the walk ends within MAX_STACK_DEPTH steps.
        while let Some(&(parent, symbol, _)) = self.by_id.get(&at) {
            out.push(symbol);
            if parent == 0 || out.len() >= MAX_STACK_DEPTH {
                break;
            }
            at = parent;
        }
        out.reverse();
        !out.is_empty()
    }

    /// How many stacks have a line.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no stack has a line.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// How many lines were skipped.
    pub fn skipped_count(&self) -> usize {
        self.skipped.count
    }

    /// One line for the user about the skipped lines of `path`, if any:
    /// `lotus.stacks: 2 line(s) skipped (line 3: ...)`.
    pub fn skipped_note(&self, path: &Path) -> Option<String> {
        self.skipped.note(
            path,
            "samples of those stacks are shown with their own function alone",
        )
    }
}

/// Reads samples one record at a time (format version 1, or 2 with
/// counter deltas); a cut last record is dropped and counted
/// ([`SampleReader::cut_bytes`]).
#[derive(Debug)]
pub struct SampleReader<R> {
    input: R,
    cut: usize,
    done: bool,
    counters: usize,
    /// The records carry a stack id (version 3).
    stacks: bool,
    record: Vec<u8>,
    most: u64,
}

impl<R: Read> SampleReader<R> {
    /// Reads and checks the header of `input` (named `path` in errors).
    pub fn new(mut input: R, path: &Path) -> io::Result<SampleReader<R>> {
        let mut head = [0u8; HEADER_BYTES];
        let bad = |what: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a lotus samples file: {what}", path.display()),
            )
        };
        let n = read_full(&mut input, &mut head).map_err(|e| with_path(path, e))?;
        if n < HEADER_BYTES || &head[..8] != SAMPLES_MAGIC {
            return Err(bad(format!("it does not start with {:?}", "LOTUSSMP")));
        }
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        let size = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
        let stacks = version == SAMPLES_VERSION_STACKS;
        let base = RECORD_BYTES + if stacks { 4 } else { 0 };
        let counters = (size.saturating_sub(base)) / 8;
        let valid = match version {
            SAMPLES_VERSION => size == RECORD_BYTES,
            SAMPLES_VERSION_COUNTERS => {
                size > RECORD_BYTES
                    && (size - RECORD_BYTES).is_multiple_of(8)
                    && counters <= MAX_COUNTERS
            }
            SAMPLES_VERSION_STACKS => {
                size >= base && (size - base).is_multiple_of(8) && counters <= MAX_COUNTERS
            }
            _ => false,
        };
        if !valid {
            return Err(bad(format!(
                "format version {version} with {size}-byte records (this lotus reads version {SAMPLES_VERSION}, {RECORD_BYTES} bytes, version {SAMPLES_VERSION_COUNTERS}, {RECORD_BYTES} bytes and up to {MAX_COUNTERS} counters of 8, and version {SAMPLES_VERSION_STACKS}, {} bytes and the counters): a newer lotus wrote it, or it is damaged",
                RECORD_BYTES + 4
            )));
        }
        Ok(SampleReader {
            input,
            cut: 0,
            done: false,
            counters,
            stacks,
            record: vec![0; size],
            most: u64::MAX,
        })
    }

    /// The most records it can read: what the file's size held when it
    /// was opened ([`SampleFiles::samples`]); `u64::MAX` when not known.
    pub fn most_records(&self) -> u64 {
        self.most
    }

    /// How many counter values each record carries (0 in version 1).
    pub fn counters(&self) -> usize {
        self.counters
    }

    /// Whether the records carry stack ids (version 3).
    pub fn has_stacks(&self) -> bool {
        self.stacks
    }

    /// Bytes of a cut last record that were dropped (a run killed while
    /// writing).
    pub fn cut_bytes(&self) -> usize {
        self.cut
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl<R: Read> Iterator for SampleReader<R> {
    type Item = io::Result<Sample>;

    fn next(&mut self) -> Option<io::Result<Sample>> {
        self.next_with_stack()
            .map(|r| r.map(|(sample, _stack)| sample))
    }
}

impl<R: Read> SampleReader<R> {
    /// The next sample with its stack id (0: none, and always 0 in a file
    /// of version 1 or 2).
    pub fn next_with_stack(&mut self) -> Option<io::Result<(Sample, u32)>> {
        if self.done {
            return None;
        }
        let size = self.record.len();
        match read_full(&mut self.input, &mut self.record) {
            Ok(n) if n == size => {
                let mut head = [0u8; RECORD_BYTES];
                head.copy_from_slice(&self.record[..RECORD_BYTES]);
                let mut sample = Sample::from_bytes(&head);
                let (stack, base) = if self.stacks {
                    let b = &self.record[RECORD_BYTES..RECORD_BYTES + 4];
                    (
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                        RECORD_BYTES + 4,
                    )
                } else {
                    (0, RECORD_BYTES)
                };
                let mut values = [0u64; MAX_COUNTERS];
                for (i, v) in values.iter_mut().take(self.counters).enumerate() {
                    let at = base + 8 * i;
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&self.record[at..at + 8]);
                    *v = u64::from_le_bytes(b);
                }
                sample.counters = CounterValues::new(&values[..self.counters]).unwrap_or_default();
                Some(Ok((sample, stack)))
            }
            Ok(n) => {
                self.done = true;
                self.cut = n;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Symbol;

    #[test]
    fn a_python_frame_read_from_the_interpreter_says_its_file_and_first_line() {
        let py = |m: &str| Symbol::new("py::f", m).py_file_line().1;
        assert_eq!(
            Symbol::new("py::f", "/a/b.py:42").py_file_line(),
            ("/a/b.py", Some(42))
        );
        // A perf map's frame names no line; a native one is left alone.
        assert_eq!(py("/a/b.py"), None);
        assert_eq!(
            Symbol::new("f", "/lib/x.so:3").py_file_line(),
            ("/lib/x.so:3", None)
        );
        for odd in [":42", "/a/b.py:", "/a/b.py:4x", "<frozen io>:"] {
            assert_eq!(
                Symbol::new("py::f", odd).py_file_line(),
                (odd, None),
                "{odd}"
            );
        }
    }

    use super::*;

    fn sample(time_ns: u64, symbol: u32) -> Sample {
        Sample {
            time_ns,
            pid: 10,
            tid: 11,
            symbol,
            kernel: symbol == 1,
            counters: CounterValues::default(),
        }
    }

    #[test]
    fn written_then_read_and_a_cut_tail_is_dropped() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut w = SamplesWriter::create(dir.path(), "run").expect("create");
        w.symbols(&[
            (0, Symbol::new("a\tb", "/m")),
            (1, Symbol::new("k", "[kernel]")),
        ])
        .expect("symbols");
        let all: Vec<Sample> = (0..1000).map(|i| sample(i, (i % 2) as u32)).collect();
        w.samples(&all[..500]).expect("block");
        w.samples(&all[500..]).expect("block");
        w.finish().expect("finish");
        assert_eq!(w.written(), 1000);
        // A second writer never writes over the first's files.
        assert!(SamplesWriter::create(dir.path(), "run").is_err());

        let files = SampleFiles::open(dir.path(), "run").expect("open");
        let symbols = files.read_symbols().expect("symbols");
        assert_eq!(symbols.get(0).function, "a b");
        assert_eq!(symbols.get(7).function, UNKNOWN_SYMBOL);
        let got: Vec<Sample> = files.samples().expect("r").map(Result::unwrap).collect();
        assert_eq!(got, all);

        // Cut in the middle of the last record, and of the symbols' last line.
        let len = std::fs::metadata(&files.samples).expect("m").len();
        let f = OpenOptions::new()
            .write(true)
            .open(&files.samples)
            .expect("o");
        f.set_len(len - 7).expect("cut");
        let mut r = files.samples().expect("r");
        assert_eq!(r.by_ref().count(), 999);
        assert_eq!(r.cut_bytes(), RECORD_BYTES - 7);
        let text = std::fs::read_to_string(&files.symbols).expect("s");
        std::fs::write(&files.symbols, &text[..text.len() - 3]).expect("cut symbols");
        let symbols = files.read_symbols().expect("symbols");
        assert_eq!(symbols.get(0).function, "a b");
        assert_eq!(symbols.get(1).function, UNKNOWN_SYMBOL);
    }

    #[test]
    fn counter_deltas_round_trip_in_version_2_and_version_1_still_reads() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "run", 2).expect("create");
        let all: Vec<Sample> = (0..100u64)
            .map(|i| Sample {
                counters: CounterValues::new(&[i * 1000, i % 3]).expect("2"),
                ..sample(i, 0)
            })
            .collect();
        w.samples(&all).expect("block");
        // A sample without the file's counters is refused, not half written.
        let err = w.samples(&[sample(100, 0)]).expect_err("no counters");
        assert!(err.to_string().contains("0 counter values"), "{err}");
        w.finish().expect("finish");
        let files = SampleFiles::open(dir.path(), "run").expect("open");
        let bytes = std::fs::read(&files.samples).expect("read");
        assert_eq!(&bytes[8..12], &SAMPLES_VERSION_COUNTERS.to_le_bytes());
        assert_eq!(bytes.len(), HEADER_BYTES + 100 * (RECORD_BYTES + 16));
        let mut r = files.samples().expect("r");
        assert_eq!(r.counters(), 2);
        let got: Vec<Sample> = r.by_ref().map(Result::unwrap).collect();
        assert_eq!(got, all);
        // Cut inside the last record's counters: dropped and counted.
        let f = OpenOptions::new()
            .write(true)
            .open(&files.samples)
            .expect("o");
        f.set_len(bytes.len() as u64 - 5).expect("cut");
        let mut r = files.samples().expect("r");
        assert_eq!(r.by_ref().count(), 99);
        assert_eq!(r.cut_bytes(), RECORD_BYTES + 16 - 5);

        // Version 1 (no counters): read with empty counters.
        let v1 = tempfile::tempdir().expect("tmp");
        let mut w = SamplesWriter::create(v1.path(), "run").expect("create");
        w.samples(&[sample(1, 0)]).expect("block");
        w.finish().expect("finish");
        let files = SampleFiles::open(v1.path(), "run").expect("open");
        let bytes = std::fs::read(&files.samples).expect("read");
        assert_eq!(&bytes[8..12], &SAMPLES_VERSION.to_le_bytes());
        let mut r = files.samples().expect("r");
        assert_eq!(r.counters(), 0);
        assert!(r.next().expect("one").expect("ok").counters.is_empty());

        // Sizes a version cannot have are refused, naming what is read.
        for (version, size) in [
            (1u32, 32u32),
            (2, 24),
            (2, 28),
            (2, 24 + 8 * 9),
            (3, 24),
            (3, 32),
            (4, 28),
        ] {
            let mut head = SAMPLES_MAGIC.to_vec();
            head.extend_from_slice(&version.to_le_bytes());
            head.extend_from_slice(&size.to_le_bytes());
            let err = SampleReader::new(&head[..], Path::new("x.samples")).expect_err("bad");
            assert!(err.to_string().contains("version 2"), "{err}");
        }
    }

    #[test]
    fn stacks_round_trip_in_version_3_with_and_without_counters() {
        for counters in [0usize, 2] {
            let dir = tempfile::tempdir().expect("tmp");
            let mut w =
                SamplesWriter::create_with_counters(dir.path(), "run", counters).expect("create");
            w.with_stacks().expect("stacks");
            w.symbols(&[(0, Symbol::new("main", "/a")), (1, Symbol::new("f", "/a"))])
                .expect("symbols");
            w.stacks(&[StackNode::new(1, 0, 0), StackNode::new(2, 1, 1)])
                .expect("stacks");
            let values: Vec<u64> = (0..counters as u64).map(|i| 7 + i).collect();
            let all: Vec<Sample> = (0..10u64)
                .map(|i| Sample {
                    counters: CounterValues::new(&values).expect("n"),
                    ..sample(i, (i % 2) as u32)
                })
                .collect();
            let ids: Vec<u32> = (0..10u32).map(|i| i % 3).collect();
            w.samples_with_stacks(&all, &ids).expect("block");
            w.finish().expect("finish");
            // A second call after samples is refused.
            assert!(w.with_stacks().is_err());
            let files = SampleFiles::open(dir.path(), "run").expect("open");
            let bytes = std::fs::read(&files.samples).expect("read");
            assert_eq!(&bytes[8..12], &SAMPLES_VERSION_STACKS.to_le_bytes());
            assert_eq!(
                bytes.len(),
                HEADER_BYTES + 10 * (RECORD_BYTES + 4 + 8 * counters)
            );
            let mut r = files.samples().expect("r");
            assert!(r.has_stacks());
            assert_eq!(r.counters(), counters);
            let mut got = Vec::new();
            while let Some(x) = r.next_with_stack() {
                got.push(x.expect("ok"));
            }
            assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), all);
            assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), ids);
            let table = files.read_stacks().expect("stacks");
            assert_eq!(table.len(), 2);
            let mut frames = Vec::new();
            assert!(table.frames(2, &mut frames));
            assert_eq!(frames, vec![0, 1]);
            assert!(!table.frames(0, &mut frames) && frames.is_empty());
        }
        // A version 2 file reads with stack 0 and an empty table.
        let dir = tempfile::tempdir().expect("tmp");
        let mut w = SamplesWriter::create(dir.path(), "run").expect("create");
        w.samples_with_stacks(&[sample(1, 0)], &[5])
            .expect("dropped");
        w.finish().expect("finish");
        let files = SampleFiles::open(dir.path(), "run").expect("open");
        let mut r = files.samples().expect("r");
        assert!(!r.has_stacks());
        assert_eq!(r.next_with_stack().expect("one").expect("ok").1, 0);
        assert!(files.read_stacks().expect("none").is_empty());
    }

    #[test]
    fn stack_lines_that_cannot_be_read_are_skipped_and_the_rest_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let files = SampleFiles::of(dir.path(), "lotus");
        // 1 and 2: fine; 3 names a parent never defined; 4 and 5 a cycle
        // (each names the other); 6 repeats 2; 7 is not numbers; the cut
        // last line is dropped without a word.
        let text = "#lotus-stacks v1\n1\t0\t10\n2\t1\t11\n3\t99\t12\n4\t5\t1\n5\t4\t1\n2\t0\t3\nx\t1\t2\n8\t2\t1";
        std::fs::write(&files.stacks, text).expect("w");
        let table = files.read_stacks().expect("read");
        assert_eq!(table.len(), 2);
        assert_eq!(table.skipped_count(), 5);
        let mut frames = Vec::new();
        assert!(table.frames(2, &mut frames));
        assert_eq!(frames, vec![10, 11]);
        for missing in [3, 4, 5, 8, 1000] {
            assert!(!table.frames(missing, &mut frames), "{missing}");
        }
        let note = table.skipped_note(&files.stacks).expect("note");
        assert!(note.contains("lotus.stacks: 5 line(s) skipped"), "{note}");
        assert!(
            note.contains("line 4: its parent 99 is not a stack of an earlier line"),
            "{note}"
        );
        assert!(note.contains("id 2 is given twice"), "{note}");
        // A chain deeper than the cap stops at the cap.
        let mut deep = String::from("#lotus-stacks v1\n1\t0\t0\n");
        for id in 2..=(MAX_STACK_DEPTH as u32 + 5) {
            deep += &format!("{id}\t{}\t0\n", id - 1);
        }
        std::fs::write(&files.stacks, deep).expect("w");
        let table = files.read_stacks().expect("read");
        assert_eq!(table.len(), MAX_STACK_DEPTH);
        assert_eq!(table.skipped_count(), 5);
        assert!(table.frames(MAX_STACK_DEPTH as u32, &mut frames));
        assert_eq!(frames.len(), MAX_STACK_DEPTH);
    }

    #[test]
    fn symbols_lines_that_cannot_be_read_are_skipped_and_counted() {
        let dir = tempfile::tempdir().expect("tmp");
        let files = SampleFiles::of(dir.path(), "lotus");
        // An id of 20 million in a 39-byte line: skipped, no slot made;
        // bad UTF-8 and a line that is not three fields: skipped; the cut
        // last line: dropped without a word.
        let mut text = b"#lotus-symbols v1\n0\tf\tm\n20000000\tbig_function_name\t/lib/xyz.so\n1\tg\xff\tm\n2 no tabs\n3\th\tm\n4\tcu".to_vec();
        std::fs::write(&files.symbols, &text).expect("w");
        let table = files.read_symbols().expect("read");
        assert_eq!(table.len(), 2);
        assert_eq!(table.get(0).function, "f");
        assert_eq!(table.get(3).function, "h");
        assert_eq!(table.get(20_000_000).function, UNKNOWN_SYMBOL);
        assert_eq!(table.get(4).function, UNKNOWN_SYMBOL);
        assert_eq!(table.skipped_count(), 3);
        let lines: Vec<u64> = table.skipped().iter().map(|s| s.line).collect();
        assert_eq!(lines, vec![3, 4, 5]);
        let note = table.skipped_note(&files.symbols).expect("note");
        assert!(note.contains("lotus.symbols: 3 line(s) skipped"), "{note}");
        assert!(note.contains("line 4: not UTF-8 text"), "{note}");
        assert!(note.contains("id 20000000 is past"), "{note}");
        // Many bad lines: the first few named, all counted.
        text.clear();
        for i in 0..1000 {
            text.extend_from_slice(format!("x{i}\tf\tm\n").as_bytes());
        }
        std::fs::write(&files.symbols, &text).expect("w");
        let table = files.read_symbols().expect("read");
        assert_eq!(table.skipped_count(), 1000);
        assert_eq!(table.skipped().len(), SKIPPED_KEPT);
        let note = table.skipped_note(&files.symbols).expect("note");
        assert!(note.contains("; 995 more"), "{note}");
    }

    #[test]
    fn sample_files_inside_the_folder_only_and_bounded() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut w = SamplesWriter::create(dir.path(), "run").expect("create");
        w.samples(&[sample(1, 0), sample(2, 0)]).expect("block");
        w.finish().expect("finish");
        let files = SampleFiles::open(dir.path(), "run").expect("open");
        assert_eq!(files.samples().expect("r").most_records(), 2);
        std::fs::remove_file(&files.symbols).expect("rm");
        std::os::unix::fs::symlink("/dev/zero", &files.symbols).expect("link");
        let e = files.read_symbols().expect_err("link out");
        assert!(
            e.to_string()
                .contains("run.symbols: is a symbolic link that leads out"),
            "{e}"
        );
        std::fs::write(
            &files.sampling,
            b"#lotus-sampling v1\nstatus=compl\xffte\nnote=a=b\n",
        )
        .expect("w");
        assert_eq!(
            files.read_sampling().expect("lossy"),
            vec![
                ("status".to_string(), "compl\u{fffd}te".to_string()),
                ("note".to_string(), "a=b".to_string())
            ]
        );
        std::fs::remove_file(&files.samples).expect("rm");
        std::os::unix::fs::symlink("/etc/passwd", &files.samples).expect("link");
        let e = SampleFiles::open(dir.path(), "run").expect_err("link out");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }

    #[test]
    fn not_a_samples_file_or_none() {
        let dir = tempfile::tempdir().expect("tmp");
        let err = SampleFiles::open(dir.path(), "lotus").expect_err("none");
        assert!(err.to_string().contains("--sample"), "{err}");
        std::fs::write(dir.path().join("lotus.samples"), b"SLoader,1,2\n").expect("w");
        let files = SampleFiles::open(dir.path(), "lotus").expect("open");
        let err = files.samples().expect_err("bad");
        assert!(
            err.to_string().contains("not a lotus samples file"),
            "{err}"
        );
    }

    #[test]
    fn coverage_reads_notes_and_says_a_shortfall_with_its_figures() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let c = SamplingCoverage::from_pairs(&pairs(&[
            ("frequency_hz", "1000"),
            ("interval_ns", "1000000"),
            ("samples", "720"),
            ("cpu_ns", "970000000"),
            ("note", "5 samples were lost"),
            ("note", "kernel mode was not sampled"),
        ]));
        assert_eq!(c.notes.len(), 2);
        assert_eq!(c.covered_ns(), Some(720_000_000));
        let short = c.shortfall_note().expect("74% is short");
        assert!(short.contains("0.720 s of the 0.970 s"), "{short}");
        assert!(short.contains("(74%"), "{short}");
        assert_eq!(c.all_notes().len(), 3);
        // 96%: enough; no cpu_ns: nothing to set against; garbage: absent.
        let enough = SamplingCoverage::from_pairs(&pairs(&[
            ("frequency_hz", "1000"),
            ("samples", "960"),
            ("cpu_ns", "1000000000"),
        ]));
        assert_eq!(enough.interval_ns, Some(1_000_000));
        assert_eq!(enough.shortfall_note(), None);
        let none = SamplingCoverage::from_pairs(&pairs(&[("samples", "1"), ("cpu_ns", "x")]));
        assert_eq!(none.shortfall_note(), None);
        let huge = SamplingCoverage::from_pairs(&pairs(&[
            ("interval_ns", "18446744073709551615"),
            ("samples", "18446744073709551615"),
            ("cpu_ns", "1"),
        ]));
        assert_eq!(huge.shortfall_note(), None, "saturates, no panic");
    }

    #[test]
    fn sampling_description_is_rewritten_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let files = SampleFiles::of(dir.path(), "lotus");
        write_sampling(&files.sampling, &[("status", "running".into())]).expect("w");
        write_sampling(
            &files.sampling,
            &[("status", "complete".into()), ("note", "a\nb".into())],
        )
        .expect("w");
        assert_eq!(
            files.read_sampling().expect("r"),
            vec![
                ("status".to_string(), "complete".to_string()),
                ("note".to_string(), "a b".to_string())
            ]
        );
    }
}
