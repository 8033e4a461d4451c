use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A record of a fixed size on disk.
pub trait Record: Sized {
    /// Its size in bytes, encoded.
    const SIZE: usize;
    /// Writes it into `out` (exactly [`Record::SIZE`] bytes).
    fn encode(&self, out: &mut [u8]);
    /// Reads it back from `bytes` (exactly [`Record::SIZE`] bytes).
    fn decode(bytes: &[u8]) -> Self;
}

/// How much memory one sorter or spool may hold before it writes to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Budget {
    /// Bytes of records kept in memory.
    pub bytes: usize,
}

impl Budget {
    /// The default: 16 MiB per sorter or spool (a few of them are alive
    /// at once). Enough for the duration counts of a trace of tens of
    /// millions of short ops to stay in memory (`trace stats` at 10
    /// million events: CPU time 1.6 s instead of 2.3 s with 1 MiB, which
    /// spilled every duration; peak memory about 45 MiB instead of 19).
    pub const DEFAULT_BYTES: usize = 16 << 20;

    /// The variable that sets the budget, in bytes.
    pub const ENV: &'static str = "LOTUS_SORT_BUFFER";

    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Budget {
        Budget { bytes }
    }

    /// The budget `LOTUS_SORT_BUFFER` sets (bytes; an optional `k`, `m`
    /// or `g` suffix), else the default. An unreadable value is an error
    /// naming the variable.
    pub fn from_env() -> Result<Budget, SpillError> {
        match std::env::var(Self::ENV) {
            Ok(v) => match Self::parse_checked(&v) {
                Ok(n) => Ok(Budget::new(n)),
                Err(BadBudget::TooLarge) => Err(SpillError::TooLarge { value: v }),
                Err(BadBudget::NotANumber) => Err(SpillError::Setting { value: v }),
            },
            Err(_) => Ok(Budget::new(Self::DEFAULT_BYTES)),
        }
    }

    /// The largest budget accepted: past it, one sort's memory would be
    /// larger than most machines have (and sorted runs go to disk anyway).
    pub const MAX_BYTES: usize = 64 << 30;

    #[cfg(test)]
    fn parse(v: &str) -> Option<usize> {
        Self::parse_checked(v).ok()
    }

    fn parse_checked(v: &str) -> Result<usize, BadBudget> {
        let v = v.trim().to_ascii_lowercase();
        let (digits, mult) = match v.chars().last() {
            Some('k') => (&v[..v.len() - 1], 1usize << 10),
            Some('m') => (&v[..v.len() - 1], 1 << 20),
            Some('g') => (&v[..v.len() - 1], 1 << 30),
            _ => (v.as_str(), 1),
        };
        let digits = digits.trim();
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(BadBudget::NotANumber);
        }
        // All digits: a number that does not parse is one too large.
        let n = digits
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or(BadBudget::TooLarge)?;
        match n {
            0 => Err(BadBudget::NotANumber),
            n if n > Self::MAX_BYTES => Err(BadBudget::TooLarge),
            n => Ok(n),
        }
    }

    /// How many records of type `R` fit (at least 16).
    pub fn records<R>(self) -> usize {
        (self.bytes / std::mem::size_of::<R>().max(1)).max(16)
    }
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(Self::DEFAULT_BYTES)
    }
}

/// Why a budget value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BadBudget {
    NotANumber,
    TooLarge,
}

/// A temporary file could not be written or read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillError {
    /// Writing or reading the temporary file failed.
    #[error("cannot keep sorted data in a temporary file in {dir}: {source} (lotus writes there when a trace outgrows {bytes} bytes of memory per sort; set TMPDIR to a folder with free space, or {env} to a larger number of bytes)", env = Budget::ENV)]
    Io {
        /// The temporary folder.
        dir: String,
        /// The budget that was outgrown.
        bytes: usize,
        /// What failed.
        source: io::Error,
    },
    /// The budget variable is not a number of bytes.
    #[error("{env}={value:?} is not a number of bytes (such as 4194304, 4096k or 64m)", env = Budget::ENV)]
    Setting {
        /// The value given.
        value: String,
    },
    /// The budget variable is a number past [`Budget::MAX_BYTES`].
    #[error("{env}={value:?} is too large: at most 64g ({max} bytes) per sort; the default is 16m, and a few tens of megabytes are plenty (sorted data past the budget goes to temporary files)", env = Budget::ENV, max = Budget::MAX_BYTES)]
    TooLarge {
        /// The value given.
        value: String,
    },
}

impl SpillError {
    fn io(budget: Budget, source: io::Error) -> SpillError {
        SpillError::Io {
            dir: std::env::temp_dir().display().to_string(),
            bytes: budget.bytes,
            source,
        }
    }
}

/// Runs merged at once; more are merged in rounds.
const FAN_IN: usize = 256;
/// The read buffer of one run while merging (at most 2 MiB for a whole
/// merge).
const READ_BUF: usize = 8 << 10;
/// The write buffer of a run or spool file.
const WRITE_BUF: usize = 64 << 10;

/// A sorted run: where it starts in its sorter's file, in bytes, and how
/// many records it holds. A sorter's runs share one file (one open file
/// however many runs).
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    len: u64,
}

impl Run {
    fn end<R: Record>(&self) -> u64 {
        self.start + self.len * R::SIZE as u64
    }
}

/// Writes `records` into `file` from byte `start` on, as one run.
fn write_run<R: Record>(
    budget: Budget,
    file: &File,
    start: u64,
    records: impl Iterator<Item = Result<R, SpillError>>,
) -> Result<Run, SpillError> {
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BUF + R::SIZE);
    let mut at = start;
    let mut len = 0u64;
    for r in records {
        let n = buf.len();
        buf.resize(n + R::SIZE, 0);
        r?.encode(&mut buf[n..]);
        len += 1;
        if buf.len() >= WRITE_BUF {
            file.write_all_at(&buf, at)
                .map_err(|e| SpillError::io(budget, e))?;
            at += buf.len() as u64;
            buf.clear();
        }
    }
    file.write_all_at(&buf, at)
        .map_err(|e| SpillError::io(budget, e))?;
    Ok(Run { start, len })
}

/// A run being sorted and written on a thread of its own.
type Writing = std::thread::JoinHandle<Result<Run, SpillError>>;

/// Records pushed in any order, given back ascending. A full buffer is
/// sorted and written on a thread of its own while the next one fills, so
/// a sorter holds at most two budgets' worth of records.
#[derive(Debug)]
pub struct Sorter<R: Record + Ord + Send + 'static> {
    budget: Budget,
    cap: usize,
    buf: Vec<R>,
    /// The runs' file, once one is written.
    file: Option<Arc<File>>,
    runs: Vec<Run>,
    writing: Option<Writing>,
    len: u64,
}

impl<R: Record + Ord + Send + 'static> Sorter<R> {
    /// An empty sorter holding at most `budget` in memory (two while a run
    /// is written).
    pub fn new(budget: Budget) -> Self {
        Sorter {
            budget,
            cap: budget.records::<R>(),
            buf: Vec::new(),
            file: None,
            runs: Vec::new(),
            writing: None,
            len: 0,
        }
    }

    /// Adds a record.
    pub fn push(&mut self, r: R) -> Result<(), SpillError> {
        if self.buf.len() == self.buf.capacity() {
            // Grown by doubling, but never past the budget: plain doubling
            // overshot it by up to half again (a 25 MiB buffer for a
            // 16 MiB budget, measured at 20 million samples).
            let grown = (self.buf.capacity() * 2).max(64).min(self.cap.max(1));
            self.buf
                .reserve_exact(grown.saturating_sub(self.buf.len()).max(1));
        }
        self.buf.push(r);
        self.len += 1;
        if self.buf.len() >= self.cap {
            self.wait_for_run()?;
            let file = self.file()?;
            let start = self.end();
            let mut full = std::mem::replace(&mut self.buf, Vec::with_capacity(self.cap));
            let budget = self.budget;
            self.writing = Some(std::thread::spawn(move || {
                full.sort_unstable();
                write_run(budget, &file, start, full.into_iter().map(Ok))
            }));
        }
        Ok(())
    }

    /// The runs' file, created the first time.
    fn file(&mut self) -> Result<Arc<File>, SpillError> {
        if let Some(f) = &self.file {
            return Ok(Arc::clone(f));
        }
        let f =
            Arc::new(lotus_sys::temp_file().map_err(|e| SpillError::io(self.budget, e.into()))?);
        self.file = Some(Arc::clone(&f));
        Ok(f)
    }

    /// Where the next run starts (with no run being written).
    fn end(&self) -> u64 {
        self.runs.iter().map(Run::end::<R>).max().unwrap_or(0)
    }

    /// Waits for the run being written, if any.
    fn wait_for_run(&mut self) -> Result<(), SpillError> {
        if let Some(h) = self.writing.take() {
            let run = h.join().map_err(|_| {
                SpillError::io(self.budget, io::Error::other("the sorting thread failed"))
            })??;
            self.runs.push(run);
        }
        Ok(())
    }

    /// How many records were pushed.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether some records went to disk.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    /// Every record, ascending.
    pub fn finish(mut self) -> Result<Sorted<R>, SpillError> {
        self.wait_for_run()?;
        self.buf.sort_unstable();
        let Some(file) = self.file.clone() else {
            return Ok(Sorted {
                inner: SortedInner::Memory(std::mem::take(&mut self.buf).into_iter()),
                len: self.len,
            });
        };
        // Merge in rounds (appended to the same file) until the runs and
        // the memory tail fit one merge.
        while self.runs.len() + 1 > FAN_IN {
            let take: Vec<Run> = self.runs.drain(..FAN_IN).collect();
            let start = self
                .runs
                .iter()
                .chain(&take)
                .map(Run::end::<R>)
                .max()
                .unwrap_or(0);
            let merged: Merge<R> = Merge::new(self.budget, &file, take, Vec::new());
            let run = write_run(self.budget, &file, start, merged)?;
            self.runs.push(run);
        }
        let buf = std::mem::take(&mut self.buf);
        let mut runs = std::mem::take(&mut self.runs);
        let inner = if runs.len() >= SPLIT_RUNS {
            // Two halves merged on threads of their own; this thread only
            // merges their two streams.
            let second = runs.split_off(runs.len() / 2);
            SortedInner::Halves(Box::new(TwoWay {
                a: Feed::spawn(self.budget, &file, runs, Vec::new()),
                b: Feed::spawn(self.budget, &file, second, buf),
                heads: None,
            }))
        } else {
            SortedInner::Merge(Merge::new(self.budget, &file, runs, buf))
        };
        Ok(Sorted {
            inner,
            len: self.len,
        })
    }
}

/// Runs from which the final merge is split over two threads.
const SPLIT_RUNS: usize = 8;
/// Records a merging thread hands over at once.
const FEED_BLOCK: usize = 1024;

/// The records of some runs, merged on a thread of their own and handed
/// over in blocks (at most two waiting).
#[derive(Debug)]
struct Feed<R> {
    rx: std::sync::mpsc::Receiver<Result<Vec<R>, SpillError>>,
    block: std::vec::IntoIter<R>,
}

impl<R: Record + Ord + Send + 'static> Feed<R> {
    fn spawn(budget: Budget, file: &Arc<File>, runs: Vec<Run>, tail: Vec<R>) -> Feed<R> {
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let file = Arc::clone(file);
        // Not joined: when the reader is dropped, the next send fails and
        // the thread ends.
        std::thread::spawn(move || {
            let merge = Merge::new(budget, &file, runs, tail);
            let mut block = Vec::with_capacity(FEED_BLOCK);
            for r in merge {
                match r {
                    Ok(r) => block.push(r),
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
                if block.len() == FEED_BLOCK {
                    let full = std::mem::replace(&mut block, Vec::with_capacity(FEED_BLOCK));
                    if tx.send(Ok(full)).is_err() {
                        return;
                    }
                }
            }
            if !block.is_empty() {
                let _ = tx.send(Ok(block));
            }
        });
        Feed {
            rx,
            block: Vec::new().into_iter(),
        }
    }

    fn next(&mut self) -> Result<Option<R>, SpillError> {
        loop {
            if let Some(r) = self.block.next() {
                return Ok(Some(r));
            }
            match self.rx.recv() {
                Ok(block) => self.block = block?.into_iter(),
                Err(_) => return Ok(None),
            }
        }
    }
}

/// The merge of two [`Feed`]s.
#[derive(Debug)]
struct TwoWay<R> {
    a: Feed<R>,
    b: Feed<R>,
    /// Each feed's next record, once started.
    heads: Option<(Option<R>, Option<R>)>,
}

impl<R: Record + Ord + Send + 'static> TwoWay<R> {
    fn next(&mut self) -> Result<Option<R>, SpillError> {
        let (ha, hb) = match self.heads.take() {
            Some(h) => h,
            None => (self.a.next()?, self.b.next()?),
        };
        let (out, heads) = match (ha, hb) {
            (Some(x), Some(y)) if x <= y => (Some(x), (self.a.next()?, Some(y))),
            (Some(x), Some(y)) => (Some(y), (Some(x), self.b.next()?)),
            (Some(x), None) => (Some(x), (self.a.next()?, None)),
            (None, Some(y)) => (Some(y), (None, self.b.next()?)),
            (None, None) => (None, (None, None)),
        };
        self.heads = Some(heads);
        Ok(out)
    }
}

/// Reads one run's records in order.
#[derive(Debug)]
struct RunReader<R> {
    reader: BufReader<AtReader<Arc<File>>>,
    left: u64,
    bytes: Vec<u8>,
    _r: PhantomData<R>,
}

impl<R: Record> RunReader<R> {
    fn new(file: &Arc<File>, run: Run) -> Self {
        RunReader {
            reader: BufReader::with_capacity(
                READ_BUF,
                AtReader {
                    file: Arc::clone(file),
                    pos: run.start,
                },
            ),
            left: run.len,
            bytes: vec![0u8; R::SIZE],
            _r: PhantomData,
        }
    }

    fn next(&mut self) -> io::Result<Option<R>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.reader.read_exact(&mut self.bytes)?;
        self.left -= 1;
        Ok(Some(R::decode(&self.bytes)))
    }
}

/// A k-way merge of sorted runs and a sorted memory tail, through a tree
/// of losers: each record taken costs one compare per level of the tree
/// (a binary heap's sift costs two, and moves records), which profiling
/// `trace stats` at 10 million events showed to be a tenth of its time.
#[derive(Debug)]
struct Merge<R: Record + Ord> {
    budget: Budget,
    readers: Vec<RunReader<R>>,
    tail: std::vec::IntoIter<R>,
    /// The next record of each source: reader index, or `readers.len()`
    /// for the tail (`None`: the source is done).
    heads: Vec<Option<R>>,
    /// Node `n` (1..sources) holds the source that lost the match there;
    /// the leaves, `sources..2 * sources`, are the sources themselves.
    losers: Vec<usize>,
    /// The source whose head is the smallest.
    winner: usize,
    started: bool,
}

impl<R: Record + Ord> Merge<R> {
    /// The merge of `runs` of `file` and `tail`; the runs' first records
    /// are read on the first call to `next`.
    fn new(budget: Budget, file: &Arc<File>, runs: Vec<Run>, tail: Vec<R>) -> Self {
        let readers: Vec<RunReader<R>> =
            runs.into_iter().map(|r| RunReader::new(file, r)).collect();
        Merge {
            budget,
            heads: Vec::with_capacity(readers.len() + 1),
            losers: Vec::new(),
            winner: 0,
            readers,
            tail: tail.into_iter(),
            started: false,
        }
    }

    /// Whether source `a`'s head comes before source `b`'s: records in
    /// order, then sources (as a heap of `(record, source)` would give
    /// them); a done source after every other.
    fn before(&self, a: usize, b: usize) -> bool {
        match (&self.heads[a], &self.heads[b]) {
            (Some(x), Some(y)) => (x, a) < (y, b),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// The winner of the subtree at `node`, its losers recorded.
    fn play(&mut self, node: usize) -> usize {
        let k = self.heads.len();
        if node >= k {
            return node - k;
        }
        let (l, r) = (self.play(2 * node), self.play(2 * node + 1));
        let (win, lose) = if self.before(l, r) { (l, r) } else { (r, l) };
        self.losers[node] = lose;
        win
    }

    /// Reads every source's first record and plays the tree.
    fn start(&mut self) -> Result<(), SpillError> {
        self.started = true;
        for reader in self.readers.iter_mut() {
            let first = reader.next().map_err(|e| SpillError::io(self.budget, e))?;
            self.heads.push(first);
        }
        self.heads.push(self.tail.next());
        self.losers = vec![0; self.heads.len()];
        self.winner = self.play(1);
        Ok(())
    }
}

impl<R: Record + Ord> Iterator for Merge<R> {
    type Item = Result<R, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            if let Err(e) = self.start() {
                return Some(Err(e));
            }
        }
        let w = self.winner;
        let refill = match self.readers.get_mut(w) {
            Some(reader) => match reader.next() {
                Ok(next) => next,
                Err(e) => return Some(Err(SpillError::io(self.budget, e))),
            },
            None => self.tail.next(),
        };
        let out = std::mem::replace(&mut self.heads[w], refill)?;
        // The source's next record replays the matches on its path.
        let k = self.heads.len();
        let mut node = (w + k) / 2;
        let mut cur = w;
        while node >= 1 {
            let other = self.losers[node];
            if self.before(other, cur) {
                self.losers[node] = cur;
                cur = other;
            }
            node /= 2;
        }
        self.winner = cur;
        Some(Ok(out))
    }
}

#[derive(Debug)]
enum SortedInner<R: Record + Ord> {
    Memory(std::vec::IntoIter<R>),
    Merge(Merge<R>),
    Halves(Box<TwoWay<R>>),
}

/// A [`Sorter`]'s records, ascending. An item is an error only when a
/// temporary file cannot be read back.
#[derive(Debug)]
pub struct Sorted<R: Record + Ord + Send + 'static> {
    inner: SortedInner<R>,
    len: u64,
}

impl<R: Record + Ord + Send + 'static> Sorted<R> {
    /// How many records there are in all.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<R: Record + Ord + Send + 'static> Iterator for Sorted<R> {
    type Item = Result<R, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            SortedInner::Memory(it) => it.next().map(Ok),
            SortedInner::Merge(m) => m.next(),
            SortedInner::Halves(h) => h.next().transpose(),
        }
    }
}

/// Records kept in the order they came, readable any number of times.
#[derive(Debug)]
pub struct Spool<R: Record> {
    budget: Budget,
    cap: usize,
    buf: Vec<R>,
    file: Option<BufWriter<File>>,
    len: u64,
    bytes: Vec<u8>,
}

impl<R: Record> Spool<R> {
    /// An empty spool holding at most `budget` in memory.
    pub fn new(budget: Budget) -> Self {
        Spool {
            budget,
            cap: budget.records::<R>(),
            buf: Vec::new(),
            file: None,
            len: 0,
            bytes: vec![0u8; R::SIZE],
        }
    }

    /// Adds a record at the end.
    pub fn push(&mut self, r: R) -> Result<(), SpillError> {
        self.len += 1;
        match &mut self.file {
            Some(w) => {
                r.encode(&mut self.bytes);
                w.write_all(&self.bytes)
                    .map_err(|e| SpillError::io(self.budget, e))
            }
            None => {
                self.buf.push(r);
                if self.buf.len() >= self.cap {
                    let file = lotus_sys::temp_file()
                        .map_err(|e| SpillError::io(self.budget, e.into()))?;
                    let mut w = BufWriter::with_capacity(WRITE_BUF, file);
                    for r in std::mem::take(&mut self.buf) {
                        r.encode(&mut self.bytes);
                        w.write_all(&self.bytes)
                            .map_err(|e| SpillError::io(self.budget, e))?;
                    }
                    self.file = Some(w);
                }
                Ok(())
            }
        }
    }

    /// How many records it holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether some records went to disk.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }

    /// Its records, in the order they came.
    pub fn iter(&mut self) -> Result<SpoolIter<'_, R>, SpillError> {
        let budget = self.budget;
        let inner = match &mut self.file {
            Some(w) => {
                w.flush().map_err(|e| SpillError::io(budget, e))?;
                SpoolInner::File {
                    reader: BufReader::with_capacity(
                        READ_BUF,
                        AtReader {
                            file: w.get_ref(),
                            pos: 0,
                        },
                    ),
                    left: self.len,
                    bytes: vec![0u8; R::SIZE],
                }
            }
            None => SpoolInner::Memory(self.buf.iter()),
        };
        Ok(SpoolIter { budget, inner })
    }
}

/// Reads a file from a position of its own (the file's cursor untouched),
/// so several readers share one file.
#[derive(Debug)]
struct AtReader<F> {
    file: F,
    pos: u64,
}

impl<F: std::borrow::Borrow<File>> Read for AtReader<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.borrow().read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[derive(Debug)]
enum SpoolInner<'a, R> {
    Memory(std::slice::Iter<'a, R>),
    File {
        reader: BufReader<AtReader<&'a File>>,
        left: u64,
        bytes: Vec<u8>,
    },
}

/// A [`Spool`]'s records, in order. An item is an error only when the
/// temporary file cannot be read back.
#[derive(Debug)]
pub struct SpoolIter<'a, R> {
    budget: Budget,
    inner: SpoolInner<'a, R>,
}

impl<R: Record + Clone> Iterator for SpoolIter<'_, R> {
    type Item = Result<R, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            SpoolInner::Memory(it) => it.next().cloned().map(Ok),
            SpoolInner::File {
                reader,
                left,
                bytes,
            } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                Some(match reader.read_exact(bytes) {
                    Ok(()) => Ok(R::decode(bytes)),
                    Err(e) => {
                        *left = 0;
                        Err(SpillError::io(self.budget, e))
                    }
                })
            }
        }
    }
}

/// Little-endian field writing and reading for [`Record`] impls.
pub(crate) mod bytes {
    /// Writes fields one after another.
    #[derive(Debug)]
    pub struct Put<'a> {
        out: &'a mut [u8],
        at: usize,
    }

    impl<'a> Put<'a> {
        /// A writer at the start of `out`.
        pub fn new(out: &'a mut [u8]) -> Self {
            Put { out, at: 0 }
        }

        /// Writes a `u64`.
        pub fn u64(&mut self, v: u64) -> &mut Self {
            self.out[self.at..self.at + 8].copy_from_slice(&v.to_le_bytes());
            self.at += 8;
            self
        }

        /// Writes an `i64`.
        pub fn i64(&mut self, v: i64) -> &mut Self {
            self.u64(v as u64)
        }

        /// Writes a `u32`.
        pub fn u32(&mut self, v: u32) -> &mut Self {
            self.out[self.at..self.at + 4].copy_from_slice(&v.to_le_bytes());
            self.at += 4;
            self
        }

        /// Writes a byte.
        pub fn u8(&mut self, v: u8) -> &mut Self {
            self.out[self.at] = v;
            self.at += 1;
            self
        }

        /// Writes an optional `u64` (a flag byte, then the value or 0).
        pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
            self.u8(u8::from(v.is_some())).u64(v.unwrap_or(0))
        }

        /// Writes an optional `bool` (0 none, 1 false, 2 true).
        pub fn opt_bool(&mut self, v: Option<bool>) -> &mut Self {
            self.u8(match v {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            })
        }
    }

    /// Reads fields one after another.
    #[derive(Debug)]
    pub struct Get<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl<'a> Get<'a> {
        /// A reader at the start of `bytes`.
        pub fn new(bytes: &'a [u8]) -> Self {
            Get { bytes, at: 0 }
        }

        /// Reads a `u64`.
        pub fn u64(&mut self) -> u64 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.bytes[self.at..self.at + 8]);
            self.at += 8;
            u64::from_le_bytes(b)
        }

        /// Reads an `i64`.
        pub fn i64(&mut self) -> i64 {
            self.u64() as i64
        }

        /// Reads a `u32`.
        pub fn u32(&mut self) -> u32 {
            let mut b = [0u8; 4];
            b.copy_from_slice(&self.bytes[self.at..self.at + 4]);
            self.at += 4;
            u32::from_le_bytes(b)
        }

        /// Reads a byte.
        pub fn u8(&mut self) -> u8 {
            self.at += 1;
            self.bytes[self.at - 1]
        }

        /// Reads an optional `u64`.
        pub fn opt_u64(&mut self) -> Option<u64> {
            let some = self.u8() != 0;
            let v = self.u64();
            some.then_some(v)
        }

        /// Reads an optional `bool`.
        pub fn opt_bool(&mut self) -> Option<bool> {
            match self.u8() {
                0 => None,
                1 => Some(false),
                _ => Some(true),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::bytes::{Get, Put};
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    struct Pair(u32, i64);

    impl Record for Pair {
        const SIZE: usize = 12;
        fn encode(&self, out: &mut [u8]) {
            Put::new(out).u32(self.0).i64(self.1);
        }
        fn decode(b: &[u8]) -> Self {
            let mut g = Get::new(b);
            Pair(g.u32(), g.i64())
        }
    }

    /// A deterministic shuffle of `n` pairs with repeats and negatives.
    fn data(n: u64) -> Vec<Pair> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Pair((x % 5) as u32, (x >> 20) as i64 % 1000 - 500)
            })
            .collect()
    }

    fn sorted_by(budget: usize, input: &[Pair]) -> (Vec<Pair>, bool) {
        let mut s = Sorter::new(Budget::new(budget));
        for p in input {
            s.push(*p).expect("push");
        }
        let spilled = s.spilled();
        let out = s.finish().expect("finish");
        assert_eq!(out.len(), input.len() as u64);
        (out.collect::<Result<Vec<_>, _>>().expect("read"), spilled)
    }

    #[test]
    fn sorts_in_memory_and_spilled_alike() {
        let input = data(20_000);
        let mut want = input.clone();
        want.sort();
        let (mem, spilled) = sorted_by(1 << 30, &input);
        assert!(!spilled);
        assert_eq!(mem, want);
        // 16 records per run: 1250 runs in one file, merged in rounds of
        // 256.
        let (disk, spilled) = sorted_by(1, &input);
        assert!(spilled);
        assert_eq!(disk, want);
        // A budget that leaves a memory tail beside a few runs.
        let (some, _) = sorted_by(16 * 1000, &input);
        assert_eq!(some, want);
        let (none, _) = sorted_by(1, &[]);
        assert!(none.is_empty());
    }

    #[test]
    fn spool_keeps_order_and_reads_twice() {
        let input = data(5_000);
        for budget in [1usize, 1 << 30] {
            let mut s = Spool::new(Budget::new(budget));
            for p in &input {
                s.push(*p).expect("push");
            }
            assert_eq!(s.spilled(), budget == 1);
            for _ in 0..2 {
                let got: Vec<Pair> = s
                    .iter()
                    .expect("iter")
                    .collect::<Result<_, _>>()
                    .expect("read");
                assert_eq!(got, input);
            }
            // Pushing after reading goes on at the end.
            s.push(Pair(9, 9)).expect("push");
            let last = s.iter().expect("iter").last().expect("one").expect("read");
            assert_eq!(last, Pair(9, 9));
        }
    }

    #[test]
    fn budget_parses_suffixes_and_rejects_junk() {
        assert_eq!(Budget::parse("4096"), Some(4096));
        assert_eq!(Budget::parse("64k"), Some(64 << 10));
        assert_eq!(Budget::parse(" 2M "), Some(2 << 20));
        assert_eq!(Budget::parse("1g"), Some(1 << 30));
        assert_eq!(Budget::parse("0"), None);
        assert_eq!(Budget::parse("lots"), None);
        assert_eq!(Budget::parse(""), None);
        assert_eq!(Budget::parse("99999999999999999999g"), None);
        assert_eq!(
            Budget::parse_checked("99999999999999999999"),
            Err(BadBudget::TooLarge)
        );
        assert_eq!(Budget::parse_checked("65g"), Err(BadBudget::TooLarge));
        assert_eq!(Budget::parse_checked("64g"), Ok(64 << 30));
        assert_eq!(Budget::parse_checked("-5"), Err(BadBudget::NotANumber));
        let e = SpillError::TooLarge {
            value: "99999999999999999999".into(),
        };
        assert!(e.to_string().contains("too large: at most 64g"), "{e}");
        assert_eq!(Budget::new(1).records::<Pair>(), 16);
        let e = SpillError::Setting { value: "x".into() };
        assert!(e.to_string().contains(Budget::ENV), "{e}");
    }
}
