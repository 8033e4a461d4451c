//! The samples of a sampled trace (`lotus trace run --sample`): every
//! sample the profiler took of every process and thread of the job, written
//! beside the logs as they come, with the symbol table they need, so the
//! folder alone is enough to analyse later, on another machine.
//!
//! Three files (four with call stacks), `<prefix>` being the logs' prefix:
//!
//! - `<prefix>.samples`: a 16-byte header (`LOTUSSMP`, format version and
//!   the record size, both `u32` little-endian), then one record per
//!   sample, little-endian: time (`u64`, ns on `CLOCK_MONOTONIC`), pid
//!   and tid (`u32`), symbol id (`u32`), flags (`u32`; bit 0: the CPU was
//!   in kernel mode): 24 bytes, which is all of a version 1 record. A
//!   version 2 record follows them with one `u64` per counter read with
//!   each sample (`counters=` in `<prefix>.sampling` names them, in
//!   order; the record size says how many): the counter's **delta**, how
//!   much it counted on the sample's thread since that thread's previous
//!   sample on the same sampler (CPU), or since the thread started for
//!   its first. The interval a delta covers is closed by its sample, so it
//!   is credited to whatever that sample is credited to (`lotus attribute
//!   DIR`: the same row). A sample the kernel lost leaves its interval to
//!   the next one: the deltas of a thread add up to its whole count
//!   whatever was lost. A run without counters writes version 1. Written in
//!   blocks; a job or lotus killed mid-run leaves at most a cut last
//!   record, which the reader drops and reports. A version 3 record
//!   (a run with call stacks, `--stacks fp`) puts a `u32` stack id (in
//!   `<prefix>.stacks`; 0: no stack) between the 24 bytes and the
//!   counters: 28 bytes, and 8 more per counter. The reader reads the
//!   three versions.
//! - `<prefix>.symbols`: `#lotus-symbols v1`, then `id<TAB>function<TAB>module`
//!   per line, appended before the first sample that uses the id (so a cut
//!   tail never leaves a sample without its name; an id with no line is
//!   read as `[unknown]`).
//! - `<prefix>.stacks` (version 3 only): `#lotus-stacks v1`, then
//!   `id<TAB>parent<TAB>symbol` per line: the call stacks as a prefix
//!   tree, deduplicated. A stack is its innermost frame (`symbol`, an id
//!   of `<prefix>.symbols`) under its callers' stack `parent` (0: the
//!   frame is the outermost one); ids count from 1, and a line is written
//!   after its parent's and before the first sample that uses it, so the
//!   file grows with distinct stacks, not with samples.
//! - `<prefix>.sampling`: `key=value` lines about the collection (backend,
//!   `frequency_hz`, `interval_ns`, `clock=monotonic`, `status=running`
//!   while it runs (with `lotus_pid=` and `lotus_start=`, lotus's pid and
//!   start time, so that a reader can tell a lotus killed outright from one
//!   still running) and `complete` at the end, or `failed` with `reason=`
//!   (`disk full: ...`, `out of memory: ...`, a trace that could not be
//!   written), sample and lost counts,
//!   `note=` lines, `counters=` the counters the records carry, or
//!   `counters_unsupported=`, `counters_kind=` (`hardware` or `software`)
//!   and `counters_reason=` the counters asked for and the kernel's
//!   refusal), `sampling_cost_us=` and `sampling_slowdown_pct=` (what a
//!   sample costs the job's threads here, and the slowdown at this
//!   frequency), rewritten whole at the start and the end.
//!
//! Memory stays flat however long the job: samples go to the file in
//! blocks; only the symbol table (distinct functions) and the stack table
//! (distinct stacks) are kept.
//!
//! Reading: the three files are opened inside their folder through
//! [`lotus_sys::input::Folder`] (no link out of the folder, regular files only,
//! read no further than their size when opened), since a folder is often
//! received from another machine. A symbols line that is not UTF-8 text,
//! or not `id<TAB>function<TAB>module`, or whose id is past what the file's
//! size can hold (ids are numbered from 0, one line each), is skipped and
//! counted ([`SymbolTable::skipped`]); a cut last line is dropped without a
//! word; the table holds only the ids that have a line. A stacks line is
//! read the same way ([`StackTable`]), and also skipped when its parent is
//! not a stack of an earlier line (which a cut or edited file, or a
//! cycle, would make), so every stack read ends at an outermost frame; a
//! sample whose stack id has no line is read with its own function alone
//! ([`StackTable::frames`] says so, and the folded output counts them).
//!
//! ```
//! use lotus_samples::{Sample, SampleFiles, SampleSink, SamplesWriter, Symbol};
//!
//! let dir = tempfile::tempdir()?;
//! let mut w = SamplesWriter::create(dir.path(), "lotus")?;
//! w.symbols(&[(0, Symbol::new("blur", "/lib/libk.so"))])?;
//! w.samples(&[Sample { time_ns: 5, pid: 7, tid: 8, symbol: 0, kernel: false, counters: Default::default() }])?;
//! w.finish()?;
//! let files = SampleFiles::open(dir.path(), "lotus")?;
//! let symbols = files.read_symbols()?;
//! let mut reader = files.samples()?;
//! let s = reader.next().expect("one")?;
//! assert_eq!((s.tid, symbols.get(s.symbol).function.as_str()), (8, "blur"));
//! assert!(reader.next().is_none());
//! assert_eq!(reader.cut_bytes(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod folds;
mod samples;

pub use folds::{FoldKey, FoldSink, NoSink, SharedFolds, StackFolds, WindowOf};
pub use samples::{
    unsupported_note, write_sampling, CounterValues, Sample, SampleFiles, SampleReader, SampleSink,
    SamplesWriter, SamplingCoverage, StackNode, StackTable, Symbol, SymbolTable,
    COVERAGE_WARN_BELOW, FRAME_CUT, MAX_COUNTERS, MAX_FOLDED_FRAME, MAX_NATIVE_DEPTH,
    MAX_SAMPLING_LINE, MAX_STACK_DEPTH, SAMPLING_TAG, UNKNOWN_SYMBOL,
};

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
