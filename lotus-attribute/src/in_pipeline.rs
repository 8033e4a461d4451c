//! In-pipeline attribution (`lotus attribute DIR`): the samples of a
//! sampled trace (`lotus trace run --sample`) credited to the op spans that
//! were open when they were taken, with no mapping and no splitting rule.
//!
//! The rule:
//!
//! 1. a sample is credited to the innermost op span open on its own thread
//!    at its time (spans carry their thread, `tid=`; times are put on the
//!    samples' clock with the clock pairs each log measured);
//! 2. a helper thread of a process (a thread with no op spans of its own)
//!    whose frames show a parallel runtime's pool (OpenMP, OpenBLAS,
//!    oneTBB, rayon, torch's pool: see the `cause` module) is credited by
//!    cause, sample by sample: a working sample to the innermost op open
//!    on its process's main thread then (the caller waits for its pool),
//!    a waiting one (spin, yield) to the op of the last work handed to it,
//!    inside that op's call or, once it returned, in the op's
//!    [`RowKind::PoolSpin`] row;
//! 3. any other helper thread is judged by timing: it is that process's
//!    intra-op pool when it runs with the ops: its
//!    sampling rate while the process's main thread is outside every op
//!    is under a fifth of its rate while it is inside one, or at least 90%
//!    of its samples fall inside the ops, 3 standard errors above the
//!    share of its window the ops cover (`is_pool`); both measured
//!    between the thread's own first and last sample (a thread started
//!    late is not judged by the process's start-up) and no later than
//!    the end of the main thread's last op (nor by its shutdown: a
//!    pool's threads torn down, the tail samples the sampler adds at a
//!    thread's exit, stamped there, more of them on a busy machine).
//!    Its samples
//!    taken while the main thread is inside an op are credited to the
//!    innermost op open there; the others go to "outside any op"
//!    ([`HelperRule::Timing`] judges every helper thread so);
//! 4. the others' cause is not known: their samples go to "other
//!    threads, cause unknown" (per process role), never to an op.
//!
//! Everything else is an explicit row: "other threads, cause unknown" per
//! role, "DataLoader threads" per role (the threads the tracer names as its
//! machinery), "untraced processes" (processes of the job that wrote no
//! log), a worker's samples outside every op by phase ("start-up and
//! imports (worker)", "outside any op (worker)": DataLoader machinery
//! between ops, "shutdown and exit (worker)"; see `phases`) and, last,
//! a main process's samples outside every op by phase:
//! "start-up and imports (main)" (before its first batch request),
//! "training loop, outside the DataLoader (main)" (to its last batch taken)
//! and "after the last batch (main)" ("outside any op (main)" where it
//! requested no batch). The rows add up to every sample read.
//!
//! **Wall time.** Each op row also has its spans' durations summed
//! (`wall_ns`, inclusive like `inclusive_cpu_ns`; `exclusive_wall_ns` less
//! its direct children's).
//!
//! **The op tree.** Spans nest: on one thread, a span that starts while
//! another is open is its child (the tracer's spans are calls, so they nest
//! in time). An op row is keyed by its path, the ops open around it then
//! its own name (`RandomApply/GaussianBlur`): a row's samples are its own
//! (exclusive: the rule credits the innermost span), its inclusive figures
//! add those of the rows under it, and the rows come as a tree (each
//! after its parent, siblings by inclusive CPU). Deeper than
//! [`MAX_DEPTH`] levels, spans are counted in their ancestor.
//!
//! **Exact CPU.** Where every span of a row and of its children says its
//! own thread's CPU time (`cpu=`, read from the thread's CPU clock at the
//! span's start and end), the row's CPU is exact on that thread: its spans'
//! `cpu=` less its children's; its pool threads' samples (times the
//! interval) are added. A row whose spans say `cpu=` but some child's do
//! not (an ITT task inside a Python op) takes that child's own-thread
//! samples off its clock instead ([`CpuSource::ClockLessSampled`]).
//! Elsewhere it is its samples times the interval.
//! A figure resting on `n` samples has a 95% interval of ±1.96·√n
//! intervals (a Poisson count; [`sampled_uncertainty_ns`]), given per row;
//! op rows uncertain past [`UNCERTAIN_PCT`] are named in a note. The rows'
//! exclusive CPU add up to [`InPipelineAttribution::total_cpu_ns`], the
//! shares are of it.
//!
//! **What was not seen.** Where more than [`UNSEEN_PCT`] of the workers'
//! samples (or of a main process's samples inside its own batches, when
//! it runs the DataLoader itself) are outside every op, a note says so
//! with the figure, the top functions there and what to do ([`Unseen`],
//! [`unseen_work`]).
//!
//! Counters read with each sample (samples file version 2; see
//! [`lotus_samples`]) follow their sample: each sample's deltas,
//! which cover its thread's interval since its previous sample, are added
//! to the row the sample is credited to. So the rows' counters add up to
//! the job's counts, and an op's `task-clock` is its CPU time measured
//! rather than estimated from sample counts. CPI (cycles per instruction)
//! is given per row where both `cycles` and `instructions` are read.
//! Counters the kernel refused are said once, in a note and in
//! [`InPipelineAttribution::counters_unsupported`], never as zeros.
//!
//! Memory: the samples are streamed (twice: once to tell pools from
//! other threads, once to credit); the op spans are sorted by start
//! through [`lotus_sort`] (in memory up to its budget, past that in a
//! temporary file) and swept alongside; only the spans open at a time and
//! per-thread, per-op and per-symbol counts are held.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufReader;
use std::path::Path;

use serde::Serialize;

pub(crate) use crate::Error;
use lotus_protocol::{clock_pair_of_line, ClockMap};
use lotus_samples::{Sample, SampleFiles, SymbolTable};
use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Budget, Record, Sorter, SpillError, Spool};
use lotus_trace::LogFile;
use lotus_trace::{Kind, Role};
pub(crate) use phases::{phase_order, phase_row_name, phased, MainPhase, Phases, WorkerPhase};

mod callers;
pub(crate) mod cause;
mod folded;
mod hooks;
mod phases;
mod timeline;
pub use callers::{callers_folder, CallerNode, Callers, FunctionCallers, CALLER_DEPTH, ROOT_FRAME};
pub use cause::HelperRule;
pub use folded::{folded_folder, folded_frame, FoldedStacks};
pub use timeline::{for_each_clocked_event, ClockedItem, ClockedSummary};

/// The slowdown by sampling (percent) above which `attribute DIR` says so.
const SLOWDOWN_NOTE_PCT: f64 = 5.0;

/// How many top functions each row lists by default.
pub const TOP_FUNCTIONS: usize = 5;
/// A helper thread is an intra-op pool when its sampling rate outside the
/// main thread's ops is under this fraction of its rate inside them.
pub const POOL_RATE_RATIO: f64 = 0.2;
/// Or when at least this share of its samples fall inside the ops...
pub const POOL_MIN_INSIDE: f64 = 0.9;
/// ...standing this many standard errors above the share of its window
/// the ops cover.
pub const POOL_MIN_Z: f64 = 3.0;

/// What a row stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RowKind {
    /// An op: its spans' samples (and its pools').
    Op,
    /// Traced threads outside every op span.
    Outside,
    /// Helper threads that run independently of the ops.
    Independent,
    /// Processes of the job that wrote no trace log.
    Untraced,
    /// A parallel runtime's pool threads spinning or waiting for more
    /// work after the op (the row's parent) that handed them their last
    /// work returned: that op's spin.
    PoolSpin,
    /// lotus's own cost per wrapped call (the spans' `hook=`, outside
    /// them, and `hook_in=`, inside), taken from the exact CPU of the ops
    /// that held it (`lotus hooks (<role>)`).
    Hooks,
}

/// The name of an op's [`RowKind::PoolSpin`] row (its path is the op's
/// path, `/`, this).
pub const SPIN_ROW: &str = "pool spin";

/// One function's samples in a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct TopFunction {
    /// The function.
    pub function: String,
    /// Its module.
    pub module: String,
    /// Samples.
    pub samples: u64,
    /// Share of the row's samples (0..1).
    pub share: f64,
    /// Its part of the row's CPU time, ns: the row's `cpu_ns` divided
    /// among its functions by their samples (for an exact row, the
    /// samples divide the thread clock's figure).
    pub cpu_ns: u64,
}

/// Where a row's CPU time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CpuSource {
    /// The spans' own-thread CPU clock (`cpu=`; exclusive: the spans' less
    /// their children's), plus the samples of the op's pool threads.
    Exact,
    /// Samples times the sampling interval.
    Sampled,
    /// The spans' own-thread CPU clock less what the ops inside it ran,
    /// some of which is known from samples only (an op inside it whose
    /// spans do not say `cpu=`: an ITT task, an older tracer's span); its
    /// `±` covers those samples.
    ClockLessSampled,
}

/// How many standard deviations a `±` spans: 1.96, a 95% interval.
pub const Z95: f64 = 1.96;

/// The 95% half-width of a CPU time resting on `n` samples taken every
/// `interval_ns`: a sample count is a Poisson count, of standard
/// deviation √n, so `±` is 1.96·√n·interval.
pub fn sampled_uncertainty_ns(n: u64, interval_ns: u64) -> u64 {
    (Z95 * (n as f64).sqrt() * interval_ns as f64).round() as u64
}

/// A row whose `±` passes this share of its CPU time (percent) is said
/// to be uncertain.
pub const UNCERTAIN_PCT: f64 = 5.0;

/// Above this share (percent) of a role's CPU outside every op,
/// `attribute` says what was not seen.
pub const UNSEEN_PCT: f64 = 5.0;

/// One row of the attribution.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AttributedRow {
    /// The op's name, or the row's (`outside any op (worker)`).
    pub name: String,
    /// The row's key: for an op its path, the op spans open around it on
    /// its thread then its own name, joined by `/`
    /// (`RandomApply/GaussianBlur`); for the other rows their name.
    pub path: String,
    /// For an op run inside another: the parent's path.
    pub parent: Option<String>,
    /// How many ops it runs inside (0: at the top).
    pub depth: u32,
    /// What it stands for.
    pub kind: RowKind,
    /// Samples credited to it, not to an op inside it (exclusive): the
    /// rows' samples add up to every sample read.
    pub samples: u64,
    /// Its samples and those of the ops inside it (inclusive).
    pub inclusive_samples: u64,
    /// Of `samples`, those of its pool threads.
    pub pool_samples: u64,
    /// Exclusive CPU time, ns (see `cpu_source`): the rows' add up to
    /// [`InPipelineAttribution::total_cpu_ns`].
    pub cpu_ns: u64,
    /// Inclusive CPU time: its own and that of the ops inside it, ns.
    pub inclusive_cpu_ns: u64,
    /// Where `cpu_ns` comes from.
    pub cpu_source: CpuSource,
    /// The 95% half-width of `cpu_ns`, ns: from the samples it rests on
    /// ([`sampled_uncertainty_ns`]; for an exact row, its pool samples).
    pub uncertainty_ns: u64,
    /// The 95% half-width of `inclusive_cpu_ns`, ns.
    pub inclusive_uncertainty_ns: u64,
    /// Share of the total CPU time (exclusive; 0..1).
    pub share: f64,
    /// Op spans of this path (ops only).
    pub calls: Option<u64>,
    /// Inclusive CPU time per call, ns (ops only).
    pub cpu_per_call_ns: Option<u64>,
    /// Wall time, ns (ops only): its spans' durations summed, inclusive
    /// like `inclusive_cpu_ns` (the ops inside it are in it). Beside the
    /// CPU time it says how long the op kept its thread waiting (I/O,
    /// locks, a busy machine) or ran threads in parallel.
    pub wall_ns: Option<u64>,
    /// Wall time less that of the ops inside it (its direct children's
    /// spans), ns (ops only).
    pub exclusive_wall_ns: Option<u64>,
    /// The functions with the most samples, most first.
    pub top_functions: Vec<TopFunction>,
    /// The counters read with each sample, summed over the row's samples
    /// (empty when the samples carry none).
    pub counters: BTreeMap<String, u64>,
    /// Cycles per instruction, where both are read and instructions are
    /// not 0.
    pub cpi: Option<f64>,
}

/// CPU of the processes of one role that ran outside every op span: work
/// lotus saw but cannot name.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Unseen {
    /// The processes' role.
    pub role: Role,
    /// Samples outside every op: for the workers, on their traced
    /// threads (and pool threads while no op ran); for a main process, on
    /// the thread running a batch (`num_workers=0`) while it did.
    pub samples: u64,
    /// Their CPU time, ns.
    pub cpu_ns: u64,
    /// Share of the workers' samples, or of the main process's samples in
    /// its batches (0..1).
    pub share: f64,
    /// The functions with the most of those samples.
    pub top_functions: Vec<TopFunction>,
}

impl Unseen {
    /// What to tell the user: the figure, the top functions, what to do.
    pub fn message(&self) -> String {
        let who = match self.role {
            Role::Worker => "the DataLoader workers' CPU",
            Role::Main => "the main process's CPU in its batches (the DataLoader at work there)",
        };
        let tops: Vec<String> = self
            .top_functions
            .iter()
            .take(3)
            .map(|f| format!("{} ({:.0}%)", f.function, f.share * 100.0))
            .collect();
        let within = match self.role {
            Role::Worker => " within their batches",
            Role::Main => "",
        };
        format!(
            "{:.0}% of {who} ({:.1} ms) ran{within} outside every op, so no op row shows it{}: name the functions that run it with `lotus trace run --op MODULE:QUALNAME`, or mark them in the code with `lotus_trace.wrap(fn)` or `with lotus_trace.span(\"name\"):`",
            self.share * 100.0,
            self.cpu_ns as f64 / 1e6,
            if tops.is_empty() {
                String::new()
            } else {
                format!(" (top functions there: {})", tops.join(", "))
            }
        )
    }
}

/// The work of a sampled trace folder's processes that ran outside every
/// op, where over [`UNSEEN_PCT`] of their role's CPU: what `attribute`
/// says at its end, for a caller (`lotus trace run --sample`) to say too.
pub fn unseen_work(dir: &Path, prefix: &str, budget: Budget) -> Result<Vec<Unseen>, Error> {
    Ok(attribute_folder(dir, prefix, budget, TOP_FUNCTIONS)?.unseen)
}

/// Counters that were asked for but could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CountersUnsupported {
    /// The counters asked for.
    pub counters: Vec<String>,
    /// The kernel's reason.
    pub reason: String,
}

/// The attribution of a sampled trace folder.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InPipelineAttribution {
    /// Sampling frequency, Hz.
    pub frequency_hz: u64,
    /// Sampling interval, ns.
    pub interval_ns: u64,
    /// Every sample read.
    pub total_samples: u64,
    /// Samples lost by the kernel (not in any row).
    pub lost_samples: u64,
    /// Whether the collection did not end normally (lotus stopped while the
    /// job ran, or a cut file): what was written is analysed.
    pub partial: bool,
    /// The rows' exclusive CPU times summed, ns.
    pub total_cpu_ns: u64,
    /// Ops first, as a tree (each op followed by the ops inside it; the
    /// most inclusive CPU first at each level), then the other rows.
    pub rows: Vec<AttributedRow>,
    /// Where more than [`UNSEEN_PCT`] of a role's CPU ran outside every op.
    pub unseen: Vec<Unseen>,
    /// The counters read with each sample, in the samples file's order.
    pub counters: Vec<String>,
    /// Each counter summed over every sample (the rows add up to it).
    pub counter_totals: BTreeMap<String, u64>,
    /// Counters asked for that the kernel refused, and why.
    pub counters_unsupported: Option<CountersUnsupported>,
    /// Helper threads found to be intra-op pools, as `pid/tid`.
    pub pool_threads: Vec<String>,
    /// Helper threads found independent of the ops, as `pid/tid`.
    pub independent_threads: Vec<String>,
    /// Things worth telling the user.
    pub notes: Vec<String>,
    /// Every function that spins or waits for work (the verdict's spin
    /// rule), over all rows, most samples first (not in the JSON: the
    /// verdict says them).
    #[serde(skip)]
    pub spinning: Vec<TopFunction>,
    /// The ops' samples and their pools' spin after them, by [on a pool
    /// thread][in a function that spins or waits for work] (not in the
    /// JSON; see [`InPipelineAttribution::pool_cpu_ns`]).
    #[serde(skip)]
    pub(crate) pool_figures: [[u64; 2]; 2],
}

impl InPipelineAttribution {
    /// The CPU of the ops' helper pools, ns: (their threads' work for the
    /// ops, their spinning or waiting for work during and after the ops,
    /// the ops' own threads' spinning while they wait for the pool), from
    /// the samples. What `lotus predict --threads 1` changes: the work
    /// moves onto the op's thread, the spinning stops.
    pub fn pool_cpu_ns(&self) -> (u64, u64, u64) {
        let ns = |n: u64| n.saturating_mul(self.interval_ns);
        let [[_, own_wait], [work, wait]] = self.pool_figures;
        (ns(work), ns(wait), ns(own_wait))
    }
}

/// A span's `cpu` when its log line has no `cpu=`.
const NO_CPU: u64 = u64::MAX;

/// How deep spans nest before deeper ones are folded into their ancestor
/// (a recursive function named with `--op` would otherwise make a row per
/// level).
pub const MAX_DEPTH: u32 = 32;

/// One op span on the samples' clock. `id` is the span's place in
/// reading order among every event of the folder (the count
/// [`lotus_trace::TraceFolder::read_all`] gives, the key `lotus trace
/// view` finds its events by). `cpu` is its own thread's CPU time during
/// it (`cpu=`), [`NO_CPU`] where the log does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SpanRec {
    start: u64,
    end: u64,
    pid: u32,
    tid: u32,
    op: u32,
    id: u64,
    cpu: u64,
    /// `hook=`, 0 where the log does not say.
    hook: u64,
    /// `hook_in=`, 0 where the log does not say.
    hook_in: u64,
}

impl SpanRec {
    /// The order of the sweep: by start; at one start the longer span
    /// first (a parent before the children that start with it); at one
    /// start and end the later written first (a span's line is written
    /// when it ends, so a parent's after its child's).
    fn key(&self) -> (u64, Reverse<u64>, Reverse<u64>, u32, u32) {
        (
            self.start,
            Reverse(self.end),
            Reverse(self.id),
            self.pid,
            self.tid,
        )
    }
}

impl Ord for SpanRec {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key()
            .cmp(&other.key())
            .then_with(|| self.op.cmp(&other.op))
            .then_with(|| self.cpu.cmp(&other.cpu))
    }
}

impl PartialOrd for SpanRec {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Record for SpanRec {
    const SIZE: usize = 60;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.start)
            .u64(self.end)
            .u32(self.pid)
            .u32(self.tid)
            .u32(self.op)
            .u64(self.id)
            .u64(self.cpu)
            .u64(self.hook)
            .u64(self.hook_in);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        SpanRec {
            start: g.u64(),
            end: g.u64(),
            pid: g.u32(),
            tid: g.u32(),
            op: g.u32(),
            id: g.u64(),
            cpu: g.u64(),
            hook: g.u64(),
            hook_in: g.u64(),
        }
    }
}

/// One place in the op tree: an op under a parent path (`None`: at the
/// top of its thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PathNode {
    parent: Option<u32>,
    op: u32,
    depth: u32,
}

/// What the spans of one path add up to.
#[derive(Debug, Clone, Copy, Default)]
struct PathStats {
    /// Spans of this path.
    calls: u64,
    /// Of them, those whose line says `cpu=`.
    with_cpu: u64,
    /// Their `cpu=` summed, ns.
    cpu_ns: u64,
    /// Their durations summed (wall time), ns.
    wall_ns: u64,
}

/// The op paths the sweep met (an op's path: the ops open around it on
/// its thread, outermost first), each with its spans' calls and CPU.
/// A child path's id is always above its parent's.
#[derive(Debug, Default)]
struct Tree {
    nodes: Vec<PathNode>,
    stats: Vec<PathStats>,
    index: HashMap<(Option<u32>, u32), u32>,
    /// Spans nested deeper than [`MAX_DEPTH`], counted in their ancestor.
    folded: u64,
    /// The spans' `hook=` and `hook_in=` summed per (path, pid) (`hooks`).
    hooks: HashMap<(u32, u32), [u64; 2]>,
}

impl Tree {
    /// The path of op `op` under `parent`, made on first sight.
    fn intern(&mut self, parent: Option<u32>, op: u32) -> u32 {
        if let Some(&p) = self.index.get(&(parent, op)) {
            return p;
        }
        let depth = parent.map_or(0, |p| self.nodes[p as usize].depth + 1);
        let id = self.nodes.len() as u32;
        self.nodes.push(PathNode { parent, op, depth });
        self.stats.push(PathStats::default());
        self.index.insert((parent, op), id);
        id
    }

    /// `A/B/C`: the op names of path `p`, outermost first.
    fn name(&self, p: u32, ops: &[String]) -> String {
        self.parts(p, ops).join("/")
    }

    /// The op names of path `p`, outermost first.
    pub(crate) fn parts<'a>(&self, p: u32, ops: &'a [String]) -> Vec<&'a str> {
        let mut parts = Vec::new();
        let mut at = Some(p);
        while let Some(q) = at {
            let n = self.nodes[q as usize];
            parts.push(ops[n.op as usize].as_str());
            at = n.parent;
        }
        parts.reverse();
        parts
    }
}

/// A span open in the sweep, with its place in the tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Open {
    start: u64,
    end: u64,
    path: u32,
    id: u64,
}

/// The op spans open at the time of the last sample, per thread, and the
/// tree of the spans taken in so far.
struct Sweep<I: Iterator<Item = Result<SpanRec, SpillError>>> {
    spans: std::iter::Peekable<I>,
    open: HashMap<(u32, u32), Vec<Open>>,
    pushed: u64,
    tree: Tree,
    /// The op of the tracer's `gc` spans: a collection hands no pool work.
    gc_op: Option<u32>,
}

impl<I: Iterator<Item = Result<SpanRec, SpillError>>> Sweep<I> {
    fn new(spans: I) -> Self {
        Sweep {
            spans: spans.peekable(),
            open: HashMap::new(),
            pushed: 0,
            tree: Tree::default(),
            gc_op: None,
        }
    }

    /// [`Sweep::innermost`] less the `gc` spans: the op a pool works for
    /// (a collection running inside it calls no pool).
    fn caller(&mut self, pid: u32, tid: u32, t: u64) -> Option<Open> {
        let gc = self.gc_op;
        let nodes = &self.tree.nodes;
        let list = self.open.get_mut(&(pid, tid))?;
        list.retain(|s| s.end > t);
        list.iter()
            .rev()
            .find(|s| s.start <= t && Some(nodes[s.path as usize].op) != gc)
            .copied()
    }

    /// Takes in every span that starts at or before `t`. A span's parent
    /// is the innermost span open on its thread when it starts (spans are
    /// taken in by start, a parent before its children).
    fn advance(&mut self, t: u64) -> Result<(), SpillError> {
        while let Some(next) = self.spans.peek() {
            match next {
                Ok(s) if s.start > t => break,
                _ => {}
            }
            let s = self.spans.next().expect("peeked")?;
            let list = self.open.entry((s.pid, s.tid)).or_default();
            list.retain(|o| o.end > s.start);
            let parent = list.last().map(|o| o.path);
            let deep = parent.is_some_and(|p| self.tree.nodes[p as usize].depth + 1 >= MAX_DEPTH);
            let path = match parent {
                Some(p) if deep => {
                    self.tree.folded += 1;
                    p
                }
                _ => {
                    let path = self.tree.intern(parent, s.op);
                    let st = &mut self.tree.stats[path as usize];
                    st.calls += 1;
                    st.wall_ns = st.wall_ns.saturating_add(s.end.saturating_sub(s.start));
                    if s.cpu != NO_CPU {
                        st.with_cpu += 1;
                        st.cpu_ns = st.cpu_ns.saturating_add(s.cpu);
                    }
                    if s.hook > 0 || s.hook_in > 0 {
                        let h = self.tree.hooks.entry((path, s.pid)).or_default();
                        h[0] = h[0].saturating_add(s.hook);
                        h[1] = h[1].saturating_add(s.hook_in);
                    }
                    path
                }
            };
            list.push(Open {
                start: s.start,
                end: s.end,
                path,
                id: s.id,
            });
            self.pushed += 1;
            if self.pushed.is_multiple_of(4096) {
                // Spans come by start: one that ended by this one's start
                // is no parent of a later span, nor open at a later sample.
                let now = s.start;
                self.open.retain(|_, v| {
                    v.retain(|o| o.end > now);
                    !v.is_empty()
                });
            }
        }
        Ok(())
    }

    /// Takes in the spans left (those after the last sample), so that the
    /// tree counts every span.
    fn finish(mut self) -> Result<Tree, SpillError> {
        self.advance(u64::MAX)?;
        Ok(self.tree)
    }

    /// The innermost span open on thread (pid, tid) at `t`: the last
    /// taken in of those still open.
    fn innermost(&mut self, pid: u32, tid: u32, t: u64) -> Option<Open> {
        let list = self.open.get_mut(&(pid, tid))?;
        list.retain(|s| s.end > t);
        list.iter().rev().find(|s| s.start <= t).copied()
    }
}

/// Per-thread spans (sorted by start, not overlapping) met by samples in
/// time order: one cursor per thread, so each span is passed once.
struct SpanCursor {
    spans: HashMap<(u32, u32), Vec<(u64, u64)>>,
    at: HashMap<(u32, u32), usize>,
}

impl SpanCursor {
    fn new(spans: HashMap<(u32, u32), Vec<(u64, u64)>>) -> SpanCursor {
        SpanCursor {
            spans,
            at: HashMap::new(),
        }
    }

    /// Whether `time` lies in one of thread `tid` of `pid`'s spans; `None`
    /// when that thread has none. Times must not go back per thread.
    fn inside(&mut self, pid: u32, tid: u32, time: u64) -> Option<bool> {
        // Most traces have no such spans: no hashing per sample then.
        if self.spans.is_empty() {
            return None;
        }
        let spans = self.spans.get(&(pid, tid))?;
        let i = self.at.entry((pid, tid)).or_insert(0);
        while spans.get(*i).is_some_and(|b| b.1 <= time) {
            *i += 1;
        }
        Some(spans.get(*i).is_some_and(|b| b.0 <= time))
    }
}

/// What the logs hold: processes, op names, spans sorted.
struct Logs {
    roles: HashMap<u32, Role>,
    ops: Vec<String>,
    /// Threads with op spans of their own.
    traced_threads: HashSet<(u32, u32)>,
    /// Threads the tracer named as the DataLoader's own machinery
    /// (`kind=thread`: a queue's feeder thread, the resource sharer,
    /// lotus's watch): never an op's pool, whatever their rates.
    machinery_threads: HashSet<(u32, u32)>,
    /// The main processes' batch spans (the DataLoader at work in the
    /// main process: `num_workers=0`), per thread, sorted by start.
    loader_spans: HashMap<(u32, u32), Vec<(u64, u64)>>,
    /// The workers' batch spans, per thread, sorted by start: their CPU
    /// outside every op is judged within them (a worker's start-up, its
    /// wait for the next index and its exit are no op's).
    worker_batches: HashMap<(u32, u32), Vec<(u64, u64)>>,
    spans: Spool<SpanRec>,
    /// Per process, the bounds of its phases (on the samples' clock),
    /// which split its samples outside every op (`phases`).
    phases: Phases,
    bad_lines: u64,
    /// Logs skipped (empty: the process wrote nothing), each with why.
    skipped_logs: Vec<String>,
}

/// The clock pairs of `log` (its `#` lines): a span's time needs those
/// on both sides of it, so they are read before its events. `Ok(Err(why))`
/// for a log with nothing in it (no complete line: the process wrote
/// nothing, or was killed, or the disk was full); an error for a log whose events
/// have no clock pairs, saying why (an older lotus's header, or the
/// original format).
fn clock_of(log: &LogFile) -> Result<Result<ClockMap, String>, Error> {
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", log.display));
    let file = log.open_file().map_err(io)?;
    let size = file.size();
    let mut pairs = Vec::new();
    let (mut header, mut content) = (false, false);
    lotus_sys::input::for_each_line(
        BufReader::new(file),
        lotus_trace::MAX_LINE_BYTES,
        |line| -> std::io::Result<()> {
            if !line.ended || line.bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            content = true;
            if line.bytes.first() == Some(&b'#') {
                header |= line.bytes.starts_with(lotus_trace::HEADER_TAG.as_bytes());
                if let Some(p) = std::str::from_utf8(line.bytes)
                    .ok()
                    .and_then(clock_pair_of_line)
                {
                    pairs.push(p);
                }
            }
            Ok(())
        },
    )
    .map_err(io)?;
    let clock = ClockMap::new(pairs);
    if !clock.is_empty() {
        return Ok(Ok(clock));
    }
    if !content {
        return Ok(Err(if size == 0 {
            "empty: the process wrote nothing (disk full, or killed before it wrote?)".into()
        } else {
            "no complete line: the process was stopped while writing its first line (disk full, or killed?)".into()
        }));
    }
    let path = log.display.clone();
    Err(if header {
        Error::NoClock { path }
    } else {
        Error::OriginalFormat { path }
    })
}

/// Reads the op spans of every log, through the reader `lotus trace view`
/// reads them with, so that a span's id (its place in reading order) is
/// the same in both.
fn read_logs(dir: &Path, budget: Budget) -> Result<Logs, Error> {
    let mut roles = HashMap::new();
    let mut ops: Vec<String> = Vec::new();
    let mut op_ids: HashMap<String, u32> = HashMap::new();
    let mut traced_threads = HashSet::new();
    let mut machinery_threads = HashSet::new();
    let mut loader_spans: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
    let mut worker_batches: HashMap<(u32, u32), Vec<(u64, u64)>> = HashMap::new();
    let mut phases = Phases::default();
    let mut sorter: Sorter<SpanRec> = Sorter::new(budget);
    let mut bad_lines = 0u64;
    // Each log's times are put on the samples' clock by the one walker
    // `lotus trace view --format firefox` draws its markers with.
    let summary = timeline::for_each_clocked_event(dir, |item| -> Result<(), Error> {
        let (e, start, end, id) = match item {
            ClockedItem::Log(log) => {
                roles.insert(log.name.pid, log.name.role);
                return Ok(());
            }
            ClockedItem::Event {
                event,
                start_ns,
                end_ns,
                id,
            } => (event, start_ns, end_ns, id),
        };
        phases.see(e, start, end);
        if e.kind == Kind::Batch {
            if let (Some(start), Some(end)) = (start, end) {
                let spans = match e.role {
                    Role::Main => &mut loader_spans,
                    Role::Worker => &mut worker_batches,
                };
                spans
                    .entry((e.pid, e.tid.unwrap_or(e.pid)))
                    .or_default()
                    .push((start, end));
            }
            return Ok(());
        }
        if e.kind == Kind::Thread {
            if let Some(tid) = e.tid {
                machinery_threads.insert((e.pid, tid));
            }
            return Ok(());
        }
        if e.kind != Kind::Op {
            return Ok(());
        }
        let (Some(start), Some(end)) = (start, end) else {
            bad_lines += 1;
            return Ok(());
        };
        let op = match op_ids.get(&*e.name) {
            Some(&op) => op,
            None => {
                let op = ops.len() as u32;
                ops.push(e.name.to_string());
                op_ids.insert(e.name.to_string(), op);
                op
            }
        };
        let pid = e.pid;
        let tid = e.tid.unwrap_or(pid);
        if tid != pid {
            traced_threads.insert((pid, tid));
        }
        sorter.push(SpanRec {
            start,
            end,
            pid,
            tid,
            op,
            id,
            cpu: e.cpu_ns.unwrap_or(NO_CPU),
            hook: e.hook_ns.unwrap_or(0),
            hook_in: e.hook_in_ns.unwrap_or(0),
        })?;
        Ok(())
    })?;
    bad_lines += summary.bad_lines;
    let skipped_logs = summary.skipped_logs;
    let mut spans = Spool::new(budget);
    for s in sorter.finish()? {
        spans.push(s?)?;
    }
    Ok(Logs {
        roles,
        ops,
        traced_threads,
        machinery_threads,
        loader_spans: {
            for v in loader_spans.values_mut() {
                v.sort_unstable();
            }
            loader_spans
        },
        worker_batches: {
            for v in worker_batches.values_mut() {
                v.sort_unstable();
            }
            worker_batches
        },
        spans,
        phases,
        bad_lines,
        skipped_logs,
    })
}

/// Per helper thread: samples inside / outside the main thread's ops, its
/// first and last sample, and the main thread's op time in between.
#[derive(Debug, Clone, Copy)]
struct HelperCounts {
    inside: u64,
    outside: u64,
    first: u64,
    last: u64,
    covered_ns: u64,
}

/// Whether a helper thread with these counts is an intra-op pool: it runs
/// (much) more while its main thread is in an op than while it is not.
///
/// Two tests, either enough:
/// - its sampling rate outside the main thread's ops is under
///   [`POOL_RATE_RATIO`] of its rate inside them;
/// - its share of samples inside ops is at least [`POOL_MIN_INSIDE`] and
///   stands [`POOL_MIN_Z`] standard errors above the share of its window
///   the ops cover (what a thread that runs regardless of the ops would
///   show). A pool's work ends a little after its op on a busy machine
///   (its last sample's CPU period straddles the op's end, it waits for a
///   CPU and the GIL to go back to its queue): 6% of a pool thread's
///   samples fell after its ops, in a worker whose ops covered 85% of the
///   window, and the rate test alone took it for an independent thread
///   (PoolBlur -24% to -49% in busy test runs). The share test does not
///   depend on how short the time outside ops is.
fn is_pool(h: &HelperCounts) -> bool {
    if h.inside == 0 {
        return false;
    }
    let window_ns = h.last.saturating_sub(h.first);
    let inside_ns = h.covered_ns;
    let outside_ns = window_ns.saturating_sub(inside_ns).max(1);
    let rate_in = if inside_ns > 0 {
        h.inside as f64 / inside_ns as f64
    } else {
        0.0
    };
    let rate_out = h.outside as f64 / outside_ns as f64;
    if h.outside == 0 || rate_out < POOL_RATE_RATIO * rate_in {
        return true;
    }
    let n = (h.inside + h.outside) as f64;
    let share = h.inside as f64 / n;
    let covered = (inside_ns as f64 / window_ns.max(1) as f64).clamp(0.0, 1.0);
    if share < POOL_MIN_INSIDE || covered >= 1.0 {
        return false;
    }
    let se = (covered * (1.0 - covered) / n).sqrt();
    se > 0.0 && (share - covered) / se >= POOL_MIN_Z
}

/// Adds to each helper thread the time its process's main thread spent
/// in ops (the union of its op spans) within the thread's first and last
/// sample: one pass over the spans, in start order.
fn main_op_time_in_windows(
    spans: &mut Spool<SpanRec>,
    helpers: &mut HashMap<(u32, u32), HelperCounts>,
) -> Result<(), SpillError> {
    let mut by_pid: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
    for key in helpers.keys() {
        by_pid.entry(key.0).or_default().push(*key);
    }
    let add = |pid: u32, a: u64, b: u64, helpers: &mut HashMap<(u32, u32), HelperCounts>| {
        for key in by_pid.get(&pid).into_iter().flatten() {
            let h = helpers.get_mut(key).expect("helper");
            let (lo, hi) = (a.max(h.first), b.min(h.last));
            h.covered_ns += hi.saturating_sub(lo);
        }
    };
    // Per process: the union interval being built.
    let mut open: HashMap<u32, (u64, u64)> = HashMap::new();
    for s in spans.iter()? {
        let s = s?;
        if s.tid != s.pid {
            continue;
        }
        match open.get_mut(&s.pid) {
            Some(cur) if s.start <= cur.1 => cur.1 = cur.1.max(s.end),
            Some(cur) => {
                let done = std::mem::replace(cur, (s.start, s.end));
                add(s.pid, done.0, done.1, helpers);
            }
            None => {
                open.insert(s.pid, (s.start, s.end));
            }
        }
    }
    for (pid, (a, b)) in open {
        add(pid, a, b, helpers);
    }
    Ok(())
}

/// Where the rule credits a sample: a row of the attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// The op path of this id (its place in the sweep's tree).
    Op(u32),
    Outside(Role),
    /// A main process's samples outside every op, by phase (only
    /// `attribute` splits them; the rule credits them `Outside`).
    Main(MainPhase),
    /// A worker's samples outside every op before its first batch or
    /// after its last (`phases`; the rule credits them `Outside`).
    Worker(WorkerPhase),
    /// The DataLoader's own threads (`kind=thread`; the rule credits
    /// them `Independent`).
    Threads(Role),
    Independent(Role),
    /// A pool's spin after the op of this path returned: the runtime's
    /// threads waiting for more work from it.
    Spin(u32),
    Untraced,
}

/// One sample as the rule credits it: its row and, for an op, the span
/// (its id: its place in reading order among the folder's events).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credit<'a> {
    pub(crate) sample: &'a Sample,
    pub(crate) target: Target,
    pub(crate) span: Option<u64>,
    /// Whether the sample is a pool thread's, credited to the op its
    /// process's main thread was in.
    pub(crate) pool: bool,
    /// The role of its process, where it wrote a log.
    pub(crate) role: Option<Role>,
    /// Its stack id in the folder's stack table (0: none).
    pub(crate) stack: u32,
}

fn samples_of(
    files: &SampleFiles,
) -> Result<lotus_samples::SampleReader<BufReader<lotus_sys::input::SizedFile>>, Error> {
    files.samples().map_err(|e| Error::Io(e.to_string()))
}

/// A sampled trace folder read and ready to credit: its sampling
/// description and symbols, its op spans sorted, its helper threads told
/// apart (pools or independent). [`SampledTrace::credit`] is the one place
/// the rule is applied: `lotus attribute DIR` sums what it credits per
/// row, `lotus trace view` per span.
pub(crate) struct SampledTrace {
    files: SampleFiles,
    meta: HashMap<String, String>,
    pub(crate) symbols: SymbolTable,
    pub(crate) frequency_hz: u64,
    pub(crate) interval_ns: u64,
    /// The counters each sample carries, in record order.
    pub(crate) counters: Vec<String>,
    /// Counters asked for and refused by the kernel, with its reason.
    pub(crate) counters_unsupported: Option<CountersUnsupported>,
    logs: Logs,
    /// The op tree of the spans, once [`SampledTrace::credit`] swept them.
    tree: Tree,
    pools: HashSet<(u32, u32)>,
    pool_threads: Vec<String>,
    independent_threads: Vec<String>,
    notes: Vec<String>,
    /// Bytes of a cut last record, once the samples are read.
    cut_bytes: usize,
    /// How helper threads are credited.
    rule: HelperRule,
    /// The stacks file, read once (why not, where it could not be).
    stacks: Result<std::rc::Rc<lotus_samples::StackTable>, String>,
    /// The samples' frames, read for what they say of helper threads.
    frames: cause::Frames,
    /// Helper threads their frames show a parallel runtime's pool.
    runtime_pools: HashMap<(u32, u32), cause::Runtime>,
}

impl SampledTrace {
    /// Reads the sampled trace folder `dir` (logs of prefix-independent
    /// names, samples of `prefix`): an error when it has no samples or its
    /// logs no clock pairs. Streams the samples once, to tell pools from
    /// independent threads.
    pub(crate) fn open(dir: &Path, prefix: &str, budget: Budget) -> Result<SampledTrace, Error> {
        SampledTrace::open_by(dir, prefix, budget, HelperRule::Cause)
    }

    /// [`SampledTrace::open`], crediting helper threads by `rule`.
    pub(crate) fn open_by(
        dir: &Path,
        prefix: &str,
        budget: Budget,
        rule: HelperRule,
    ) -> Result<SampledTrace, Error> {
        let files = SampleFiles::of(dir, prefix);
        let mut meta: HashMap<String, String> = HashMap::new();
        for (k, v) in files
            .read_sampling()
            .map_err(|e| Error::Io(e.to_string()))?
        {
            if k == "note" {
                continue;
            }
            if meta.contains_key(&k) {
                return Err(Error::Io(format!(
                    "{}: `{}=` is given twice: the file is damaged or was not written by lotus; trace again",
                    files.sampling.display(),
                    lotus_sys::input::escaped(&k)
                )));
            }
            meta.insert(k, v);
        }
        if meta.get("status").map(String::as_str) == Some("unavailable") {
            return Err(Error::NoSamples(format!(
                "{}: the trace was taken without samples: {}",
                dir.display(),
                lotus_sys::input::escaped(
                    meta.get("reason")
                        .map_or("perf could not run", String::as_str)
                )
            )));
        }
        let files = SampleFiles::open(dir, prefix).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NoSamples(e.to_string())
            } else {
                Error::Io(e.to_string())
            }
        })?;
        let symbols: SymbolTable = files.read_symbols().map_err(|e| Error::Io(e.to_string()))?;
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        let frequency_hz = num("frequency_hz").unwrap_or(1000).max(1);
        let interval_ns = num("interval_ns").unwrap_or(1_000_000_000 / frequency_hz);
        let counters = counter_names(&meta, &files)?;
        // Every CPU time is samples times the interval: one that cannot
        // hold the samples the file can hold is refused here, by name,
        // rather than wrapped later.
        let most_samples = samples_of(&files)?.most_records();
        if most_samples.checked_mul(interval_ns).is_none() {
            return Err(Error::Overflow {
                path: files.sampling.display().to_string(),
                field: format!("interval_ns={interval_ns}"),
                message: format!(
                    "the samples file holds up to {most_samples} samples, and that many times this interval is past what lotus can count in ns: the file is damaged or was not written by lotus; trace again"
                ),
            });
        }
        let counters_unsupported =
            meta.get("counters_unsupported")
                .map(|names| CountersUnsupported {
                    counters: names.split(',').map(str::to_string).collect(),
                    reason: meta.get("counters_reason").cloned().unwrap_or_default(),
                });
        let logs = read_logs(dir, budget)?;
        let mut notes = logs.skipped_logs.clone();
        notes.extend(symbols.skipped_note(&files.symbols));
        if let Some(u) = &counters_unsupported {
            let hardware = meta.get("counters_kind").map(String::as_str) == Some("hardware");
            notes.push(lotus_samples::unsupported_note(
                hardware,
                &lotus_sys::input::escaped(&u.reason),
            ));
        }
        // Sampling slows the sampled threads; where it did so noticeably
        // (an expensive timer interrupt, as in some virtual machines), the
        // CPU times include that and the shares of interrupt-sensitive code
        // shift: say so, with the figure the collection measured.
        if let Some(pct) = meta
            .get("sampling_slowdown_pct")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|&p| p >= SLOWDOWN_NOTE_PCT)
        {
            notes.push(format!(
                "sampling at {frequency_hz} Hz slowed the job's threads by about {pct:.0}% here ({} us a sample): CPU times include it; a lower --frequency disturbs less",
                lotus_sys::input::escaped(meta.get("sampling_cost_us").map_or("?", String::as_str))
            ));
        }
        if logs.bad_lines > 0 {
            notes.push(format!(
                "{} log lines could not be read and were skipped",
                logs.bad_lines
            ));
        }
        // Read once, for the rule's frames and for `--format folded`; a
        // stacks file that cannot be read leaves each sample its own
        // function in the rule, and `--format folded` says why.
        let stacks = files
            .read_stacks()
            .map(std::rc::Rc::new)
            .map_err(|e| e.to_string());
        let frames = cause::Frames::new(match rule {
            HelperRule::Cause => stacks.as_ref().ok().cloned(),
            HelperRule::Timing => None,
        });
        let mut trace = SampledTrace {
            files,
            meta,
            symbols,
            frequency_hz,
            interval_ns,
            counters,
            counters_unsupported,
            logs,
            tree: Tree::default(),
            pools: HashSet::new(),
            pool_threads: Vec::new(),
            independent_threads: Vec::new(),
            notes,
            cut_bytes: 0,
            rule,
            stacks,
            frames,
            runtime_pools: HashMap::new(),
        };
        trace.find_pools()?;
        Ok(trace)
    }

    /// Pass 1: each helper thread's samples inside and outside its main
    /// thread's ops, its first and last sample; the pools are the threads
    /// that run (much) more while the main thread is in an op.
    fn find_pools(&mut self) -> Result<(), Error> {
        let logs = &mut self.logs;
        let mut helpers: HashMap<(u32, u32), HelperCounts> = HashMap::new();
        // Per process, the end of its main thread's last op: a helper is
        // judged up to there. What a thread does at the process's
        // shutdown (a pool's threads torn down, and the samples the
        // sampler adds at a thread's exit for the unsampled tail of its
        // whole life, stamped at the exit: more of them the later its
        // timer fired, so the busier the machine) says nothing of whether
        // it ran with the ops; counted, a handful of them outside the ops
        // made a pool's thread "independent" on a busy machine, and its
        // op lost its samples. Those samples are still credited by the
        // rule (a pool's outside any op go to "outside any op").
        let mut ops_end: HashMap<u32, u64> = HashMap::new();
        for s in logs.spans.iter()? {
            let s = s?;
            if s.tid == s.pid {
                let end = ops_end.entry(s.pid).or_insert(s.end);
                *end = (*end).max(s.end);
            }
        }
        {
            let mut sweep = Sweep::new(logs.spans.iter()?);
            let mut reader = samples_of(&self.files)?;
            while let Some(s) = reader.next_with_stack() {
                let (s, stack) = s.map_err(|e| Error::Io(e.to_string()))?;
                sweep.advance(s.time_ns)?;
                if s.tid == s.pid
                    || !logs.roles.contains_key(&s.pid)
                    || logs.traced_threads.contains(&(s.pid, s.tid))
                {
                    continue;
                }
                if self.rule == HelperRule::Cause
                    && !logs.machinery_threads.contains(&(s.pid, s.tid))
                {
                    if let Some(rt) = self.frames.read(&self.symbols, stack, s.symbol).pool {
                        self.runtime_pools.insert((s.pid, s.tid), rt);
                    }
                }
                let inside = sweep.innermost(s.pid, s.pid, s.time_ns).is_some();
                let h = helpers.entry((s.pid, s.tid)).or_insert(HelperCounts {
                    inside: 0,
                    outside: 0,
                    first: s.time_ns,
                    last: s.time_ns,
                    covered_ns: 0,
                });
                if ops_end.get(&s.pid).is_some_and(|end| s.time_ns >= *end) {
                    // Listed (a thread seen only then is independent),
                    // not judged.
                    continue;
                }
                h.first = h.first.min(s.time_ns);
                h.last = h.last.max(s.time_ns);
                if inside {
                    h.inside += 1;
                } else {
                    h.outside += 1;
                }
            }
        }
        main_op_time_in_windows(&mut logs.spans, &mut helpers)?;
        let mut helper_keys: Vec<_> = helpers.keys().copied().collect();
        helper_keys.sort_unstable();
        for key in helper_keys {
            if let Some(rt) = self.runtime_pools.get(&key) {
                self.pool_threads
                    .push(format!("{}/{} ({})", key.0, key.1, rt.name()));
                continue;
            }
            let h = helpers[&key];
            // A thread seen only inside ops (its window all op time) is a
            // pool; one the tracer named as the DataLoader's machinery
            // never is (a queue's feeder thread runs right after each
            // batch, while the next one's ops run, and collects the
            // garbage of those ops: 120 ms credited to a dataset's row
            // in one run when it was taken for its pool).
            if !logs.machinery_threads.contains(&key) && is_pool(&h) {
                self.pools.insert(key);
                self.pool_threads.push(format!("{}/{}", key.0, key.1));
            } else {
                self.independent_threads
                    .push(format!("{}/{}", key.0, key.1));
            }
        }
        Ok(())
    }

    /// Pass 2, the rule: hands every sample, in time order, to `f` with
    /// the row (and for an op, the span) it is credited to. Returns how
    /// many samples were read; the notes then say whether the run was
    /// partial.
    pub(crate) fn credit(
        &mut self,
        mut f: impl FnMut(Credit<'_>) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        let logs = &mut self.logs;
        let mut total = 0u64;
        let mut reader = samples_of(&self.files)?;
        let mut sweep = Sweep::new(logs.spans.iter()?);
        sweep.gc_op = logs
            .ops
            .iter()
            .position(|n| n == "gc")
            .and_then(|i| u32::try_from(i).ok());
        let pool_pids: HashSet<u32> = self.runtime_pools.keys().map(|k| k.0).collect();
        let interval_ns = self.interval_ns;
        let mut causes = cause::Causes::default();
        while let Some(s) = reader.next_with_stack() {
            let (s, stack): (Sample, u32) = s.map_err(|e| Error::Io(e.to_string()))?;
            sweep.advance(s.time_ns)?;
            total += 1;
            let mut pool = false;
            let role = logs.roles.get(&s.pid).copied();
            let (target, span) = match role {
                None => (Target::Untraced, None),
                Some(role) => {
                    let own = sweep.innermost(s.pid, s.tid, s.time_ns);
                    let op_thread = s.tid == s.pid || logs.traced_threads.contains(&(s.pid, s.tid));
                    if op_thread && pool_pids.contains(&s.pid) {
                        // A thread inside a runtime's call hands its pool
                        // work now, for the op it is in.
                        if let Some(rt) = self.frames.read(&self.symbols, stack, s.symbol).hands_to
                        {
                            let caller = sweep.caller(s.pid, s.tid, s.time_ns);
                            causes.handed(s.pid, rt, s.time_ns, cause::Cause::of(caller, role));
                        }
                    }
                    if let Some(span) = own {
                        (Target::Op(span.path), Some(span.id))
                    } else if op_thread {
                        (Target::Outside(role), None)
                    } else if let Some(&rt) = self.runtime_pools.get(&(s.pid, s.tid)) {
                        let r = self.frames.read(&self.symbols, stack, s.symbol);
                        let c = if r.waits {
                            // Waiting before any work was seen handed to
                            // it: a pool starts in its wait loop (OpenBLAS
                            // spins from its creation, at numpy's import),
                            // for what its process ran when it started.
                            causes.last(s.pid, s.tid, rt).unwrap_or_else(|| {
                                let c =
                                    cause::Cause::of(sweep.caller(s.pid, s.pid, s.time_ns), role);
                                causes.worked(s.pid, s.tid, s.time_ns, c);
                                c
                            })
                        } else {
                            // Working: for whatever its process's main
                            // thread runs now, which waits for it.
                            let open = sweep.caller(s.pid, s.pid, s.time_ns);
                            let c = cause::Cause::of(open, role);
                            // A sample stands for its thread's CPU since
                            // its previous one: where most of that lies
                            // before the call began (a pool spinning until
                            // the work came: its first working sample), it
                            // is the spin after the work before.
                            // Straddling the call's start: the spin after
                            // the thread's own last work where it came less
                            // than half an interval after the start (see
                            // `Cause::credit`); not by the caller's hand-off,
                            // often seen first (it read OpenBLAS 5% high).
                            let before = causes.own_last(s.pid, s.tid).filter(|last| {
                                let since = causes.previous(s.pid, s.tid).unwrap_or(s.time_ns);
                                open.is_some_and(|o| {
                                    o.start > since
                                        && s.time_ns.saturating_sub(o.start) < interval_ns / 2
                                        && !last.is_span(o.id)
                                })
                            });
                            causes.worked(s.pid, s.tid, s.time_ns, c);
                            before.unwrap_or(c)
                        };
                        let previous = causes.previous(s.pid, s.tid);
                        causes.sampled(s.pid, s.tid, s.time_ns);
                        let (target, span, in_call) =
                            c.credit(s.time_ns, previous, interval_ns / 2);
                        pool = in_call;
                        (target, span)
                    } else if self.pools.contains(&(s.pid, s.tid)) {
                        match sweep.innermost(s.pid, s.pid, s.time_ns) {
                            Some(span) => {
                                pool = true;
                                (Target::Op(span.path), Some(span.id))
                            }
                            None => (Target::Outside(role), None),
                        }
                    } else {
                        (Target::Independent(role), None)
                    }
                }
            };
            f(Credit {
                sample: &s,
                target,
                span,
                pool,
                role,
                stack,
            })?;
        }
        self.tree = sweep.finish()?;
        if self.tree.folded > 0 {
            self.notes.push(format!(
                "{} op spans nested deeper than {MAX_DEPTH} levels were counted in their ancestor",
                self.tree.folded
            ));
        }
        self.cut_bytes = reader.cut_bytes();
        self.note_how_it_ended();
        Ok(total)
    }

    /// Adds the notes on a cut samples file, a run that did not end
    /// normally and samples the kernel lost.
    fn note_how_it_ended(&mut self) {
        let cut_bytes = self.cut_bytes;
        if cut_bytes > 0 {
            self.notes.push(format!(
                "the samples file ends in a cut record ({cut_bytes} bytes dropped): the run was stopped while writing"
            ));
        }
        if self.meta.get("status").map(String::as_str) != Some("complete") {
            self.notes.push(how_it_ended(&self.meta));
        }
        let lost = self.lost_samples();
        if lost > 0 {
            self.notes.push(format!(
                "{lost} samples were lost by the kernel (ring buffer full): not in any row"
            ));
        }
    }

    /// Whether the samples are those of a run cut short: the sampling
    /// did not end normally, or the file ends in a cut record.
    pub(crate) fn partial(&self) -> bool {
        self.cut_bytes > 0 || self.meta.get("status").map(String::as_str) != Some("complete")
    }

    fn lost_samples(&self) -> u64 {
        self.meta
            .get("lost")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The folder's stacks file, as [`SampledTrace::open`] read it.
    pub(crate) fn stacks(&self) -> Result<std::rc::Rc<lotus_samples::StackTable>, Error> {
        self.stacks.clone().map_err(Error::Io)
    }

    /// What is worth telling the user (after [`SampledTrace::credit`]).
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// Attributes the samples of the sampled trace folder `dir` (logs of
/// prefix-independent names, samples of `prefix`) to its ops, listing the
/// `top` functions of each row.
pub fn attribute_folder(
    dir: &Path,
    prefix: &str,
    budget: Budget,
    top: usize,
) -> Result<InPipelineAttribution, Error> {
    attribute_folder_by(dir, prefix, budget, top, HelperRule::Cause)
}

/// [`attribute_folder`], crediting helper threads by `rule`
/// (`HelperRule::Timing`: the earlier rule, for comparison).
pub fn attribute_folder_by(
    dir: &Path,
    prefix: &str,
    budget: Budget,
    top: usize,
    rule: HelperRule,
) -> Result<InPipelineAttribution, Error> {
    let mut trace = SampledTrace::open_by(dir, prefix, budget, rule)?;
    let mut counts: HashMap<Target, u64> = HashMap::new();
    let mut pools: HashMap<u32, u64> = HashMap::new();
    let mut worker_samples = 0u64;
    let mut functions: HashMap<(Target, u32), u64> = HashMap::new();
    let mut sums: HashMap<Target, Vec<u64>> = HashMap::new();
    // Counters whose sum went past what a u64 holds (saturated, said).
    let mut saturated: Vec<bool> = Vec::new();
    // The main processes' DataLoader at work (num_workers=0): samples of
    // the thread running a batch, and those of them outside every op.
    let mut loader = SpanCursor::new(std::mem::take(&mut trace.logs.loader_spans));
    let (mut in_loader, mut loader_outside) = (0u64, 0u64);
    let mut loader_functions: HashMap<u32, u64> = HashMap::new();
    // The workers' samples outside every op within their batches (where
    // a worker has no batch span at all, every one of them), and the
    // functions there.
    let mut batches = SpanCursor::new(std::mem::take(&mut trace.logs.worker_batches));
    let batched_pids: HashSet<u32> = batches.spans.keys().map(|&(pid, _)| pid).collect();
    let mut worker_outside = 0u64;
    let mut worker_functions: HashMap<u32, u64> = HashMap::new();
    let windows = Phases::take(&mut trace.logs);
    // The ops' samples (and their pools' spin after them), by (on a pool
    // thread, function).
    let mut op_symbols: HashMap<(bool, u32), u64> = HashMap::new();
    let total = trace.credit(|c| {
        let s = c.sample;
        let target = phased(&windows, &c);
        if c.role == Some(Role::Worker) && c.target == Target::Outside(Role::Worker) {
            let in_batch = !batched_pids.contains(&s.pid)
                || batches.inside(s.pid, s.tid, s.time_ns) == Some(true);
            if in_batch {
                worker_outside += 1;
                *worker_functions.entry(s.symbol).or_default() += 1;
            }
        }
        if c.role == Some(Role::Main) && loader.inside(s.pid, s.tid, s.time_ns) == Some(true) {
            in_loader += 1;
            if c.target == Target::Outside(Role::Main) {
                loader_outside += 1;
                *loader_functions.entry(s.symbol).or_default() += 1;
            }
        }
        *counts.entry(target).or_default() += 1;
        if let (true, Target::Op(p)) = (c.pool, target) {
            *pools.entry(p).or_default() += 1;
        }
        if matches!(target, Target::Op(_) | Target::Spin(_)) {
            *op_symbols.entry((c.pool, s.symbol)).or_default() += 1;
        }
        if c.role == Some(Role::Worker) {
            worker_samples += 1;
        }
        *functions.entry((target, c.sample.symbol)).or_default() += 1;
        if !c.sample.counters.is_empty() {
            let sum = sums
                .entry(target)
                .or_insert_with(|| vec![0; c.sample.counters.len()]);
            for (i, (acc, v)) in sum.iter_mut().zip(c.sample.counters.as_slice()).enumerate() {
                *acc = acc.checked_add(*v).unwrap_or_else(|| {
                    saturated.resize(saturated.len().max(i + 1), false);
                    saturated[i] = true;
                    u64::MAX
                });
            }
        }
        Ok(())
    })?;
    // Those by [on a pool thread][in a function that waits for work].
    let mut pool_figures = [[0u64; 2]; 2];
    for ((pool, sym), n) in op_symbols {
        let f = trace.symbols.get(sym);
        pool_figures[usize::from(pool)][usize::from(cause::is_wait(&f.function, &f.module))] += n;
    }
    let counters = trace.counters.clone();
    let partial = trace.partial();
    let interval_ns = trace.interval_ns;
    let logs = &trace.logs;
    let tree = &trace.tree;
    let mut figures = op_figures(tree, &counts, &pools, interval_ns);
    // A pool's spin after an op is that op's: in its inclusive figures
    // and its ancestors', a row of its own under it.
    for (t, &n) in &counts {
        if let Target::Spin(p) = *t {
            let mut at = Some(p);
            while let Some(q) = at {
                let f = &mut figures[q as usize];
                f.inclusive_samples += n;
                f.inclusive_basis += n;
                f.inclusive_cpu_ns = f
                    .inclusive_cpu_ns
                    .saturating_add(n.saturating_mul(interval_ns));
                at = tree.nodes[q as usize].parent;
            }
        }
    }

    let mut tops: HashMap<Target, Vec<(u32, u64)>> = HashMap::new();
    for ((target, symbol), n) in functions {
        tops.entry(target).or_default().push((symbol, n));
    }
    // Samples in functions that spin or wait for work, over every row and
    // every function (not only the top ones shown: the verdict's figure
    // does not depend on `--top`).
    let mut spin_samples: HashMap<u32, u64> = HashMap::new();
    let mut top_of = |target: Target, n: u64, top: usize| -> Vec<TopFunction> {
        let mut functions = tops.remove(&target).unwrap_or_default();
        for &(sym, k) in &functions {
            let s = trace.symbols.get(sym);
            if cause::is_wait(&s.function, &s.module) {
                *spin_samples.entry(sym).or_default() += k;
            }
        }
        functions.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        functions
            .into_iter()
            .take(top)
            .map(|(sym, k)| top_function(&trace.symbols, sym, k, k as f64 / n as f64, 0))
            .collect()
    };
    let row_counters = |target: Target| -> BTreeMap<String, u64> {
        match sums.get(&target) {
            Some(sum) => counters.iter().cloned().zip(sum.iter().copied()).collect(),
            None => counters.iter().map(|c| (c.clone(), 0)).collect(),
        }
    };
    let mut rows = Vec::new();
    // Ops, every path the sweep met (those that got no sample too), as a
    // tree: each after its parent, siblings by inclusive CPU.
    for p in tree_order(tree, &figures) {
        let f = &figures[p as usize];
        let node = tree.nodes[p as usize];
        let target = Target::Op(p);
        let calls = tree.stats[p as usize].calls;
        let op_counters = row_counters(target);
        rows.push(AttributedRow {
            name: logs.ops[node.op as usize].clone(),
            path: tree.name(p, &logs.ops),
            parent: node.parent.map(|q| tree.name(q, &logs.ops)),
            depth: node.depth,
            kind: RowKind::Op,
            samples: f.samples,
            inclusive_samples: f.inclusive_samples,
            pool_samples: f.pool_samples,
            cpu_ns: f.cpu_ns,
            inclusive_cpu_ns: f.inclusive_cpu_ns,
            cpu_source: f.source,
            uncertainty_ns: sampled_uncertainty_ns(f.basis, interval_ns),
            inclusive_uncertainty_ns: sampled_uncertainty_ns(f.inclusive_basis, interval_ns),
            share: 0.0,
            calls: Some(calls),
            cpu_per_call_ns: (calls > 0).then(|| f.inclusive_cpu_ns / calls),
            wall_ns: Some(tree.stats[p as usize].wall_ns),
            exclusive_wall_ns: Some(exclusive_wall(tree, p)),
            top_functions: top_of(target, f.samples, top),
            cpi: cpi_of(&op_counters),
            counters: op_counters,
        });
        let spin = Target::Spin(p);
        if let Some(&n) = counts.get(&spin) {
            let path = tree.name(p, &logs.ops);
            let mut r = sampled_row(
                SPIN_ROW.to_string(),
                RowKind::PoolSpin,
                n,
                interval_ns,
                top_of(spin, n, top),
                row_counters(spin),
            );
            r.path = format!("{path}/{SPIN_ROW}");
            r.parent = Some(path);
            r.depth = node.depth + 1;
            r.pool_samples = n;
            rows.push(r);
        }
    }
    let hooked: Vec<u64> = figures.iter().map(|f| f.hooks_ns).collect();
    rows.extend(hooks::rows(tree, &hooked, &logs.roles, &counters));
    let mut others: Vec<(Target, u64)> = counts
        .iter()
        .filter(|(t, _)| !matches!(t, Target::Op(_) | Target::Spin(_)))
        .map(|(t, n)| (*t, *n))
        .collect();
    // The workers' phases, then the main processes', last, in time order.
    others.sort_by_key(|(t, n)| (phase_order(t), Reverse(*n), row_name(t, &logs.ops)));
    for (target, n) in others {
        let kind = match target {
            Target::Op(_) => RowKind::Op,
            Target::Spin(_) => RowKind::PoolSpin,
            Target::Outside(_) | Target::Main(_) | Target::Worker(_) => RowKind::Outside,
            Target::Independent(_) | Target::Threads(_) => RowKind::Independent,
            Target::Untraced => RowKind::Untraced,
        };
        rows.push(sampled_row(
            row_name(&target, &logs.ops),
            kind,
            n,
            interval_ns,
            top_of(target, n, top),
            row_counters(target),
        ));
    }
    let mut spinning: Vec<TopFunction> = spin_samples
        .into_iter()
        .map(|(sym, k)| top_function(&trace.symbols, sym, k, 0.0, k.saturating_mul(interval_ns)))
        .collect();
    spinning.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.function.cmp(&b.function))
    });
    let total_cpu_ns = rows.iter().fold(0u64, |a, r| a.saturating_add(r.cpu_ns));
    for f in &mut spinning {
        f.share = if total_cpu_ns > 0 {
            f.cpu_ns as f64 / total_cpu_ns as f64
        } else {
            0.0
        };
    }
    for r in &mut rows {
        r.share = if total_cpu_ns > 0 {
            r.cpu_ns as f64 / total_cpu_ns as f64
        } else {
            0.0
        };
        for f in &mut r.top_functions {
            f.cpu_ns = (f.share * r.cpu_ns as f64).round() as u64;
        }
    }
    let mut counter_totals: BTreeMap<String, u64> =
        counters.iter().map(|c| (c.clone(), 0)).collect();
    for sum in sums.values() {
        for (i, (name, v)) in counters.iter().zip(sum).enumerate() {
            let t = counter_totals.entry(name.clone()).or_default();
            *t = t.checked_add(*v).unwrap_or_else(|| {
                saturated.resize(saturated.len().max(i + 1), false);
                saturated[i] = true;
                u64::MAX
            });
        }
    }
    for (name, _) in counters.iter().zip(&saturated).filter(|(_, s)| **s) {
        trace.notes.push(format!(
            "{}: counter '{}': its deltas add up past what lotus can count ({}): shown as that maximum; the file is damaged or was not written by lotus",
            trace.files.samples.display(),
            lotus_sys::input::escaped(name),
            u64::MAX
        ));
    }
    // The workers' CPU outside every op within their batches (outside
    // them: start-up, the wait for the next index, exit); the main
    // process's only within its batches (its CPU outside them is the
    // training step's).
    let mut unseen = Vec::new();
    // The top functions of `counts` (samples per symbol) of `of` samples.
    let tops = |counts: HashMap<u32, u64>, of: u64| -> Vec<TopFunction> {
        let mut by: Vec<(u32, u64)> = counts.into_iter().collect();
        by.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        by.into_iter()
            .take(top)
            .map(|(sym, k)| {
                top_function(
                    &trace.symbols,
                    sym,
                    k,
                    k as f64 / of as f64,
                    k.saturating_mul(interval_ns),
                )
            })
            .collect()
    };
    let worker_tops = tops(worker_functions, worker_outside);
    let loader_tops = tops(loader_functions, loader_outside);
    for (role, n, of, top_functions) in [
        (Role::Worker, worker_outside, worker_samples, worker_tops),
        (Role::Main, loader_outside, in_loader, loader_tops),
    ] {
        if of > 0 && n as f64 * 100.0 > UNSEEN_PCT * of as f64 {
            unseen.push(Unseen {
                role,
                samples: n,
                cpu_ns: n.saturating_mul(interval_ns),
                share: n as f64 / of as f64,
                top_functions,
            });
        }
    }
    let lost_samples = trace.lost_samples();
    let mut notes = trace.notes;
    notes.extend(unseen.iter().map(Unseen::message));
    if let Some(note) = uncertainty_note(&rows) {
        notes.push(note);
    }
    Ok(InPipelineAttribution {
        frequency_hz: trace.frequency_hz,
        interval_ns,
        total_samples: total,
        lost_samples,
        partial,
        total_cpu_ns,
        rows,
        unseen,
        counters,
        counter_totals,
        counters_unsupported: trace.counters_unsupported.clone(),
        pool_threads: trace.pool_threads,
        independent_threads: trace.independent_threads,
        notes,
        spinning,
        pool_figures,
    })
}

/// Symbol `sym`'s top-function entry: `samples` of it, `share` of its
/// row's, `cpu_ns`.
fn top_function(
    symbols: &SymbolTable,
    sym: u32,
    samples: u64,
    share: f64,
    cpu_ns: u64,
) -> TopFunction {
    let s = symbols.get(sym);
    TopFunction {
        function: s.function.clone(),
        module: s.module.clone(),
        samples,
        share,
        cpu_ns,
    }
}

/// A row of `n` samples whose CPU is their count times the interval (a
/// row of no calls: outside the ops, threads of no op, an op's pool spin),
/// at the top of the tree unless the caller places it.
fn sampled_row(
    name: String,
    kind: RowKind,
    n: u64,
    interval_ns: u64,
    top_functions: Vec<TopFunction>,
    counters: BTreeMap<String, u64>,
) -> AttributedRow {
    let cpu_ns = n.saturating_mul(interval_ns);
    let unc = sampled_uncertainty_ns(n, interval_ns);
    AttributedRow {
        path: name.clone(),
        name,
        parent: None,
        depth: 0,
        kind,
        samples: n,
        inclusive_samples: n,
        pool_samples: 0,
        cpu_ns,
        inclusive_cpu_ns: cpu_ns,
        cpu_source: CpuSource::Sampled,
        uncertainty_ns: unc,
        inclusive_uncertainty_ns: unc,
        share: 0.0,
        calls: None,
        cpu_per_call_ns: None,
        wall_ns: None,
        exclusive_wall_ns: None,
        top_functions,
        cpi: cpi_of(&counters),
        counters,
    }
}

/// The figures of one op path.
#[derive(Debug, Clone, Copy)]
struct Figures {
    samples: u64,
    pool_samples: u64,
    inclusive_samples: u64,
    cpu_ns: u64,
    inclusive_cpu_ns: u64,
    source: CpuSource,
    /// The samples `cpu_ns` rests on (for an exact row, its pool's).
    basis: u64,
    inclusive_basis: u64,
    /// lotus's cost it held (its children's `hook=`, its own spans'
    /// `hook_in=`), taken off `cpu_ns` (`hooks`).
    hooks_ns: u64,
}

/// Each path's exclusive and inclusive figures. A path's CPU comes from
/// the thread clock where every span of it says `cpu=`: its own thread's
/// CPU is its spans' `cpu=` less its children's (children run on the same
/// thread): their `cpu=` where every span of theirs says it (the row is
/// then exact), else their own-thread samples times the interval (the row
/// is then partly sampled: [`CpuSource::ClockLessSampled`]), less lotus's
/// own cost in it (`hooks::due`: shown as its own row); its pool
/// threads' samples (times the interval) are added. Otherwise it is its
/// samples times the interval. Inclusive figures sum the subtree's
/// exclusive ones (a child's id is above its parent's).
fn op_figures(
    tree: &Tree,
    counts: &HashMap<Target, u64>,
    pools: &HashMap<u32, u64>,
    interval_ns: u64,
) -> Vec<Figures> {
    let n = tree.nodes.len();
    let all_cpu = |p: usize| {
        let st = tree.stats[p];
        st.calls > 0 && st.with_cpu == st.calls
    };
    let samples: Vec<u64> = (0..n)
        .map(|p| counts.get(&Target::Op(p as u32)).copied().unwrap_or(0))
        .collect();
    let pool: Vec<u64> = (0..n)
        .map(|p| pools.get(&(p as u32)).copied().unwrap_or(0))
        .collect();
    // Samples of each subtree on its own thread (not its pools').
    let mut own_thread: Vec<u64> = (0..n).map(|p| samples[p] - pool[p]).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for p in (0..n).rev() {
        if let Some(q) = tree.nodes[p].parent {
            own_thread[q as usize] += own_thread[p];
            children[q as usize].push(p);
        }
    }
    let due = hooks::due(tree);
    let mut figures: Vec<Figures> = (0..n)
        .map(|p| {
            let mut hooks_ns = 0;
            let (cpu_ns, source, basis) = if all_cpu(p) {
                let (mut less, mut basis, mut sampled) = (0u64, pool[p], false);
                for &c in &children[p] {
                    if all_cpu(c) {
                        less = less.saturating_add(tree.stats[c].cpu_ns);
                    } else {
                        less = less.saturating_add(own_thread[c].saturating_mul(interval_ns));
                        basis += own_thread[c];
                        sampled = true;
                    }
                }
                let own = tree.stats[p].cpu_ns.saturating_sub(less);
                let (own, taken) = hooks::take(own, due[p]);
                hooks_ns = taken;
                (
                    own.saturating_add(pool[p].saturating_mul(interval_ns)),
                    if sampled {
                        CpuSource::ClockLessSampled
                    } else {
                        CpuSource::Exact
                    },
                    basis,
                )
            } else {
                (
                    samples[p].saturating_mul(interval_ns),
                    CpuSource::Sampled,
                    samples[p],
                )
            };
            Figures {
                samples: samples[p],
                pool_samples: pool[p],
                inclusive_samples: samples[p],
                cpu_ns,
                inclusive_cpu_ns: cpu_ns,
                source,
                basis,
                inclusive_basis: basis,
                hooks_ns,
            }
        })
        .collect();
    for p in (0..n).rev() {
        if let Some(q) = tree.nodes[p].parent {
            let c = figures[p];
            let f = &mut figures[q as usize];
            f.inclusive_samples += c.inclusive_samples;
            f.inclusive_cpu_ns = f.inclusive_cpu_ns.saturating_add(c.inclusive_cpu_ns);
            f.inclusive_basis += c.inclusive_basis;
        }
    }
    figures
}

/// Path `p`'s wall time less its direct children's (their spans lie in
/// its own, on its thread).
fn exclusive_wall(tree: &Tree, p: u32) -> u64 {
    let inner = tree
        .nodes
        .iter()
        .zip(&tree.stats)
        .filter(|(n, _)| n.parent == Some(p))
        .fold(0u64, |a, (_, st)| a.saturating_add(st.wall_ns));
    tree.stats[p as usize].wall_ns.saturating_sub(inner)
}

/// The paths in table order: depth first, siblings by inclusive CPU (most
/// first), then by name.
fn tree_order(tree: &Tree, figures: &[Figures]) -> Vec<u32> {
    let mut children: HashMap<Option<u32>, Vec<u32>> = HashMap::new();
    for (p, node) in tree.nodes.iter().enumerate() {
        children.entry(node.parent).or_default().push(p as u32);
    }
    for list in children.values_mut() {
        list.sort_by_key(|&p| (Reverse(figures[p as usize].inclusive_cpu_ns), p));
    }
    let mut order = Vec::with_capacity(tree.nodes.len());
    let mut stack: Vec<u32> = children
        .get(&None)
        .map(|l| l.iter().rev().copied().collect())
        .unwrap_or_default();
    while let Some(p) = stack.pop() {
        order.push(p);
        if let Some(l) = children.get(&Some(p)) {
            stack.extend(l.iter().rev());
        }
    }
    order
}

/// The note on op rows whose `±` passes [`UNCERTAIN_PCT`] of their CPU.
fn uncertainty_note(rows: &[AttributedRow]) -> Option<String> {
    let mut uncertain: Vec<(&AttributedRow, f64)> = rows
        .iter()
        .filter(|r| r.kind == RowKind::Op && r.cpu_ns > 0)
        .map(|r| (r, r.uncertainty_ns as f64 * 100.0 / r.cpu_ns as f64))
        .filter(|(_, pct)| *pct > UNCERTAIN_PCT)
        .collect();
    if uncertain.is_empty() {
        return None;
    }
    uncertain.sort_by(|a, b| b.1.total_cmp(&a.1));
    let named: Vec<String> = uncertain
        .iter()
        .take(5)
        .map(|(r, pct)| format!("{} (±{pct:.0}%)", r.path))
        .collect();
    let more = uncertain.len().saturating_sub(named.len());
    Some(format!(
        "{} op rows rest on too few samples to be known within {UNCERTAIN_PCT:.0}%: {}{}; ± is a 95% interval, 1.96·√n sampling intervals for n samples; a higher --frequency or a longer run narrows it (spans with cpu= from the tracer are exact on their own thread)",
        uncertain.len(),
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

/// The names of the counters the samples carry: `counters=` of the
/// sampling description, which must name as many as the records hold.
fn counter_names(
    meta: &HashMap<String, String>,
    files: &SampleFiles,
) -> Result<Vec<String>, Error> {
    let carried = samples_of(files)?.counters();
    let named: Vec<String> = meta
        .get("counters")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    // Each counter is a column of its own: one named twice would merge
    // two columns into one in silence.
    for (i, name) in named.iter().enumerate() {
        if named[..i].contains(name) {
            return Err(Error::Io(format!(
                "{}: counter '{}' is named twice in `counters=`: the file is damaged or was not written by lotus; trace again",
                files.sampling.display(),
                lotus_sys::input::escaped(name)
            )));
        }
    }
    if named.len() != carried {
        return Err(Error::Io(format!(
            "{}: its records carry {carried} counter values, but {} names {} (`counters=`): the two files are not of the same run; trace again",
            files.samples.display(),
            files.sampling.display(),
            named.len()
        )));
    }
    Ok(named)
}

/// Cycles per instruction of a row's counters, where both are read.
fn cpi_of(counters: &BTreeMap<String, u64>) -> Option<f64> {
    let cycles = *counters.get("cycles")?;
    let instructions = *counters.get("instructions")?;
    (instructions > 0).then(|| cycles as f64 / instructions as f64)
}

fn row_name(target: &Target, ops: &[String]) -> String {
    match target {
        Target::Op(op) => ops[*op as usize].clone(),
        Target::Outside(role) => format!("outside any op ({role})"),
        Target::Main(_) | Target::Worker(_) | Target::Threads(_) => {
            phase_row_name(target).unwrap_or_default().to_string()
        }
        Target::Independent(role) => format!("other threads, cause unknown ({role})"),
        Target::Spin(_) => SPIN_ROW.to_string(),
        Target::Untraced => "untraced processes".to_string(),
    }
}

/// The note on a sampling that did not end `complete`: it failed (and
/// why), or its status still says `running` and lotus, named by
/// `lotus_pid=` and `lotus_start=` (its start time, so a reused pid is not
/// taken for it), is gone (killed outright) or still running.
fn how_it_ended(meta: &HashMap<String, String>) -> String {
    const TAIL: &str = "what was written is analysed";
    match meta.get("status").map(String::as_str) {
        Some("failed") => format!(
            "partial: the sampling failed ({}); {TAIL}",
            meta.get("reason").map_or("no reason given", String::as_str)
        ),
        Some("running") => {
            let pid = meta.get("lotus_pid").and_then(|p| p.parse::<u32>().ok());
            let start = meta.get("lotus_start").and_then(|t| t.parse::<u64>().ok());
            match (pid, start) {
                (Some(pid), Some(start)) if process_start(pid) == Some(start) => format!(
                    "partial: lotus (pid {pid}) is still sampling this run; {TAIL} so far"
                ),
                (Some(pid), Some(_)) => format!(
                    "partial: lotus (pid {pid}) was killed while the job ran (its status still says running); {TAIL}"
                ),
                _ => format!(
                    "partial: the sampling did not end normally (lotus was stopped while the job ran); {TAIL}"
                ),
            }
        }
        _ => format!(
            "partial: the sampling did not end normally (lotus was stopped while the job ran); {TAIL}"
        ),
    }
}

/// Field 22 of `/proc/<pid>/stat` (the process's start time), or None when
/// there is no such process.
fn process_start(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lotus_samples::{SampleSink, SamplesWriter, Symbol};

    /// A sampled trace folder: the log `lotus_worker_pid_10` holding
    /// `log`, the samples (in time order) with their symbols, a complete
    /// sampling at `interval_ns`.
    pub(crate) fn sampled_folder(
        log: &str,
        symbols: &[(u32, Symbol)],
        samples: &[Sample],
        interval_ns: u64,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("lotus_worker_pid_10"), log).expect("log");
        let mut w = SamplesWriter::create(dir.path(), "lotus").expect("w");
        w.symbols(symbols).expect("s");
        w.samples(samples).expect("samples");
        w.finish().expect("finish");
        lotus_samples::write_sampling(
            &SampleFiles::of(dir.path(), "lotus").sampling,
            &[
                ("status", "complete".into()),
                ("frequency_hz", (1_000_000_000 / interval_ns).to_string()),
                ("interval_ns", interval_ns.to_string()),
            ],
        )
        .expect("sampling");
        dir
    }

    /// A folder: one worker (pid 10) whose main thread runs op A over
    /// [1000, 2000) and B over [3000, 4000) (monotonic), a pool thread 11
    /// busy only during them, an independent thread 12 busy throughout, and
    /// an untraced process 99.
    pub(crate) fn folder() -> tempfile::TempDir {
        folder_with(&[])
    }

    /// [`folder`] with `extra` samples added, after its own (in time order).
    pub(crate) fn folder_with(extra: &[Sample]) -> tempfile::TempDir {
        // wall = monotonic + 1_000_000.
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={} monotonic_ns=0\n\
             SA,{},1000,kind=op\nSB,{},1000,kind=op\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            off,
            1000 + off,
            3000 + off,
            5000 + off
        );
        let symbols = [
            (0, Symbol::new("ka", "/k.so")),
            (1, Symbol::new("kb", "/k.so")),
            (2, Symbol::new("spin", "/bg.so")),
            (3, Symbol::new("loop", "/py")),
        ];
        let mut samples = Vec::new();
        for t in (0..5000).step_by(100) {
            let in_a = (1000..2000).contains(&t);
            let in_b = (3000..4000).contains(&t);
            let sym = if in_a {
                0
            } else if in_b {
                1
            } else {
                3
            };
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: sym,
                kernel: false,
                counters: Default::default(),
            });
            if in_a || in_b {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 10,
                    tid: 11,
                    symbol: sym,
                    kernel: false,
                    counters: Default::default(),
                });
            }
            samples.push(Sample {
                time_ns: t + 2,
                pid: 10,
                tid: 12,
                symbol: 2,
                kernel: false,
                counters: Default::default(),
            });
            samples.push(Sample {
                time_ns: t + 3,
                pid: 99,
                tid: 99,
                symbol: 3,
                kernel: false,
                counters: Default::default(),
            });
        }
        samples.extend_from_slice(extra);
        sampled_folder(&log, &symbols, &samples, 100)
    }

    /// A pool's thread that runs (or is given the samples the sampler adds
    /// at its exit: the unsampled tail of its whole life, stamped at the
    /// exit) after the process's last op is still its pool: what it does
    /// at the process's shutdown says nothing of whether it ran with the
    /// ops. [`folder`]'s pool thread 11 with 5 samples at one instant past
    /// the last op (a burst like the one that made a pool thread of the
    /// kernel pipeline "independent" on a busy machine, its op losing half
    /// its time): a pool, its op rows as without the burst, the burst in
    /// "outside any op".
    #[test]
    fn a_pool_thread_busy_at_shutdown_is_still_a_pool() {
        let burst: Vec<Sample> = (0..5)
            .map(|_| Sample {
                time_ns: 4500,
                pid: 10,
                tid: 11,
                symbol: 1,
                kernel: false,
                counters: Default::default(),
            })
            .collect();
        let dir = folder_with(&burst);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        assert_eq!(a.pool_threads, vec!["10/11"], "{a:#?}");
        assert_eq!(a.independent_threads, vec!["10/12"]);
        assert_eq!(row("A").samples, 20);
        assert_eq!(row("B").samples, 20);
        assert_eq!(row("outside any op (worker)").samples, 35);
        assert_eq!(a.total_samples, 175);
    }

    #[test]
    fn empty_logs_are_skipped_and_unusable_logs_say_why() {
        let dir = folder();
        let budget = Budget::default();
        std::fs::write(dir.path().join("lotus_main_pid_5"), "").expect("empty");
        // Only a cut line: nothing complete was written either.
        std::fs::write(dir.path().join("lotus_worker_pid_6"), "#lotus-tr").expect("cut");
        let a = attribute_folder(dir.path(), "lotus", budget, 5).expect("attributed");
        for (log, why) in [
            ("lotus_main_pid_5", "empty: the process wrote nothing"),
            ("lotus_worker_pid_6", "no complete line"),
        ] {
            assert!(
                a.notes.iter().any(|n| n.contains(log) && n.contains(why)),
                "{:?}",
                a.notes
            );
        }
        assert!(a.rows.iter().any(|r| r.name == "A" && r.samples > 0));
        std::fs::write(dir.path().join("lotus_main_pid_5"), "SBatchWait_0,5,1000\n").expect("w");
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("original");
        assert!(matches!(e, Error::OriginalFormat { .. }), "{e}");
        assert!(e.to_string().contains("without `--format original`"), "{e}");
        std::fs::write(
            dir.path().join("lotus_main_pid_5"),
            "#lotus-trace v1 role=main pid=5\nSWait,5,1000,kind=wait\n",
        )
        .expect("w");
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("old");
        assert!(matches!(e, Error::NoClock { .. }), "{e}");
    }

    #[test]
    fn counter_sums_past_u64_saturate_and_say_so() {
        use lotus_samples::CounterValues;
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        std::fs::remove_file(&files.samples).expect("rm");
        std::fs::remove_file(&files.symbols).expect("rm");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 2).expect("w");
        let samples: Vec<Sample> = (0..3u64)
            .map(|i| Sample {
                time_ns: 1000 + i,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: CounterValues::new(&[u64::MAX / 2, 7]).expect("2"),
            })
            .collect();
        w.samples(&samples).expect("samples");
        w.finish().expect("finish");
        lotus_samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("counters", "cycles,instructions".into()),
            ],
        )
        .expect("sampling");
        let a = attribute_folder(dir.path(), "lotus", Budget::default(), 5).expect("attributed");
        assert_eq!(a.counter_totals["cycles"], u64::MAX);
        assert_eq!(a.counter_totals["instructions"], 21);
        let said: Vec<&String> = a
            .notes
            .iter()
            .filter(|n| n.contains("add up past"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", a.notes);
        assert!(said[0].contains("counter 'cycles'"), "{}", said[0]);
    }

    #[test]
    fn sampling_figures_that_cannot_be_trusted_are_refused_by_name() {
        let dir = folder();
        let budget = Budget::default();
        let sampling = SampleFiles::of(dir.path(), "lotus").sampling;
        let write = |pairs: &[(&str, String)]| {
            lotus_samples::write_sampling(&sampling, pairs).expect("sampling")
        };
        write(&[
            ("status", "complete".into()),
            ("interval_ns", u64::MAX.to_string()),
        ]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("overflow");
        assert!(matches!(e, Error::Overflow { .. }), "{e}");
        assert!(
            e.to_string().contains(&format!("interval_ns={}", u64::MAX)),
            "{e}"
        );
        // The largest interval the file's samples can be multiplied by
        // still reads.
        let records = samples_of(&SampleFiles::of(dir.path(), "lotus"))
            .expect("samples")
            .most_records();
        write(&[
            ("status", "complete".into()),
            ("interval_ns", (u64::MAX / records).to_string()),
        ]);
        attribute_folder(dir.path(), "lotus", budget, 5).expect("largest interval");
        write(&[("status", "complete".into()), ("status", "running".into())]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("twice");
        assert!(e.to_string().contains("`status=` is given twice"), "{e}");
        write(&[
            ("status", "complete".into()),
            ("counters", "\u{1b}x,\u{1b}x".into()),
        ]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("counter twice");
        assert!(
            e.to_string().contains("counter '\\x1bx' is named twice"),
            "{e}"
        );
    }

    #[test]
    fn the_rule_on_a_small_folder() {
        let dir = folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        // 10 samples of each op on the main thread, 10 of its pool thread.
        assert_eq!(row("A").samples, 20);
        assert_eq!(row("B").samples, 20);
        assert_eq!(row("A").top_functions[0].function, "ka");
        assert_eq!(row("A").calls, Some(1));
        assert_eq!(row("A").cpu_ns, 2000);
        assert_eq!(row("outside any op (worker)").samples, 30);
        assert_eq!(row("other threads, cause unknown (worker)").samples, 50);
        assert_eq!(row("untraced processes").samples, 50);
        assert_eq!(a.pool_threads, vec!["10/11"]);
        assert_eq!(a.independent_threads, vec!["10/12"]);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        assert_eq!(a.total_samples, 170);
        assert!(!a.partial);
    }

    /// The counts of a busy test run (5 CPU hogs on 2 CPUs): a pool
    /// thread with 16 of its 263 samples just after its ops, in a worker
    /// whose ops covered 85% of the window, is a pool (the rate test alone
    /// said independent); background threads that run regardless of the
    /// ops, with fewer of their samples inside than the ops cover, are not.
    #[test]
    fn a_pool_whose_work_runs_past_its_ops_is_still_a_pool() {
        let h = |inside: u64, outside: u64, covered_ns: u64, window_ns: u64| HelperCounts {
            inside,
            outside,
            first: 1_000,
            last: 1_000 + window_ns,
            covered_ns,
        };
        assert!(is_pool(&h(247, 16, 1_783_151_589, 2_102_130_292)));
        assert!(is_pool(&h(273, 0, 1_863_039_980, 2_027_945_216)));
        assert!(!is_pool(&h(293, 89, 1_900_540_371, 2_213_666_237)));
        assert!(!is_pool(&h(276, 50, 1_997_847_190, 2_188_549_128)));
        assert!(!is_pool(&h(0, 2, 599_069_068, 816_512_574)));
        // Uniform over a window the ops cover 85% of: independent.
        assert!(!is_pool(&h(850, 150, 850_000_000, 1_000_000_000)));
        // Few samples: no share test to pass.
        assert!(!is_pool(&h(9, 1, 850_000_000, 1_000_000_000)));
    }

    /// A thread the tracer names as the DataLoader's machinery
    /// (`kind=thread`: a queue's feeder thread) is never a pool, even busy
    /// only while ops run: [`folder`]'s pool thread 11, so named, is
    /// independent, and its samples leave the ops.
    /// Credit by cause: a thread its frames show an OpenBLAS pool's
    /// (`blas_thread_server`) works for op A (samples in a BLAS kernel
    /// while A is open), then spins through the gap and all of op B, which
    /// never calls BLAS. Its work is A's, its spin A's `pool spin` row,
    /// never B's; the same folder by timing gives B the spin (the thread
    /// runs far more while ops are open than between them).
    #[test]
    fn a_pools_spin_after_an_op_is_that_ops_not_the_next_ones() {
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
             SA,{},1000,kind=op\nSB,{},1000,kind=op\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            1000 + off,
            3000 + off,
            5000 + off
        );
        let blas = "/x/libscipy_openblas64_.so";
        let symbols = vec![
            (0, Symbol::new("a_work", "/py")),
            (1, Symbol::new("b_work", "/py")),
            (2, Symbol::new("dgemm_kernel_SKYLAKEX", blas)),
            (3, Symbol::new("blas_thread_server", blas)),
        ];
        let sample = sample_at;
        let mut samples = Vec::new();
        for t in (1000..4000).step_by(100) {
            if (1000..2000).contains(&t) {
                samples.push(sample(t, 10, 0));
                samples.push(sample(t + 1, 11, 2));
            } else {
                if (3000..4000).contains(&t) {
                    samples.push(sample(t, 10, 1));
                }
                // A spins through the gap (rarely: yielding) and B.
                if t >= 3000 || t % 500 == 0 {
                    samples.push(sample(t + 1, 11, 3));
                }
            }
        }
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attributed");
        let spin = row_at(&a, "A/pool spin");
        // Its sample 1 ns after A returned stands for CPU in A's call.
        assert_eq!(
            (spin.kind, spin.samples),
            (RowKind::PoolSpin, 11),
            "{:#?}",
            a.rows
        );
        assert_eq!(spin.parent.as_deref(), Some("A"));
        assert_eq!(row_at(&a, "A").samples, 21);
        assert_eq!(row_at(&a, "A").pool_samples, 11);
        assert_eq!(row_at(&a, "A").inclusive_samples, 32);
        assert_eq!(row_at(&a, "B").samples, 10);
        assert_eq!(a.pool_threads, vec!["10/11 (OpenBLAS)".to_string()]);
        // By timing, the thread is B's pool as much as A's.
        let t = attribute_folder_by(dir.path(), "lotus", Budget::new(64), 5, HelperRule::Timing)
            .expect("attributed");
        assert_eq!(row_at(&t, "B").samples, 20, "{:#?}", t.rows);
        assert!(!t.rows.iter().any(|r| r.kind == RowKind::PoolSpin));
    }

    /// Two calls of op A ([1000, 2000) and [3000, 4000)) hand work to an
    /// OpenBLAS thread (11) sampled every 100 ns of its CPU. A sample
    /// stands for its thread's CPU since its previous one, and a thread
    /// runs in the moments before it is sampled: one that straddles a
    /// call's edge goes to the side where more than half an interval of
    /// its wall time lies. So the pool's sample 10 ns after the first call
    /// returned (its previous in the call) is the call's, not its spin;
    /// and its first of the second call, 20 ns after the start (its
    /// previous at 2800, spinning), is the first call's spin, though the
    /// caller was seen handing work inside `exec_blas` at 3000 (the
    /// hand-off decided, and an OpenBLAS op's pool CPU read 5% high).
    #[test]
    fn a_pool_sample_straddling_a_calls_edge_goes_where_most_of_its_interval_lies() {
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
             SA,{},1000,kind=op\nSA,{},1000,kind=op\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            1000 + off,
            3000 + off,
            5000 + off
        );
        let blas = "/x/libscipy_openblas64_.so";
        let symbols = vec![
            (0, Symbol::new("a_work", "/py")),
            (1, Symbol::new("exec_blas", blas)),
            (2, Symbol::new("dgemm_kernel_SKYLAKEX", blas)),
            (3, Symbol::new("blas_thread_server", blas)),
        ];
        let sample = sample_at;
        // Spinning from its creation: known as OpenBLAS's by its frames.
        let mut samples = vec![sample(501, 11, 3)];
        for t in (1000..4000).step_by(100) {
            if (1000..2000).contains(&t) || (3000..4000).contains(&t) {
                samples.push(sample(t, 10, if t == 3000 { 1 } else { 0 }));
            }
            match t {
                1000..=1900 => samples.push(sample(t + 60, 11, 2)),
                2000 => samples.push(sample(2010, 11, 3)),
                2400 | 2800 => samples.push(sample(t, 11, 3)),
                3000..=3900 => samples.push(sample(t + 20, 11, 2)),
                _ => {}
            }
        }
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attributed");
        assert_eq!(a.pool_threads, vec!["10/11 (OpenBLAS)".to_string()]);
        // 10 in the first call and the one just after it, 9 in the
        // second; 3020 is the spin before it, with 2400 and 2800.
        assert_eq!(row_at(&a, "A").pool_samples, 20, "{:#?}", a.rows);
        assert_eq!(row_at(&a, "A/pool spin").samples, 3, "{:#?}", a.rows);
    }

    #[test]
    fn a_machinery_thread_is_never_a_pool() {
        let dir = folder();
        let log = dir.path().join("lotus_worker_pid_10");
        let mut text = std::fs::read_to_string(&log).expect("log");
        text.push_str("SQueueFeederThread,1001500,0,kind=thread,tid=11\n");
        std::fs::write(&log, text).expect("log");
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        assert!(a.pool_threads.is_empty(), "{:?}", a.pool_threads);
        assert_eq!(a.independent_threads, vec!["10/11", "10/12"]);
        assert_eq!(row("A").samples, 10);
        assert_eq!(row("B").samples, 10);
        // Its samples are the DataLoader's threads' row, not the job's
        // other threads'.
        assert_eq!(row("other threads, cause unknown (worker)").samples, 50);
        assert_eq!(row("DataLoader threads (worker)").samples, 20);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
    }

    /// [`folder`] with its samples rewritten to carry cycles and
    /// instructions: 300 and 100 for a sample in an op's kernel (symbols 0
    /// and 1), 10 and 10 otherwise.
    fn folder_with_counters() -> tempfile::TempDir {
        use lotus_samples::CounterValues;
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        let samples: Vec<Sample> = files.samples().expect("r").map(Result::unwrap).collect();
        let symbols = std::fs::read_to_string(&files.symbols).expect("symbols");
        std::fs::remove_file(&files.samples).expect("rm");
        std::fs::remove_file(&files.symbols).expect("rm");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 2).expect("w");
        let with: Vec<Sample> = samples
            .into_iter()
            .map(|s| Sample {
                counters: CounterValues::new(if s.symbol <= 1 {
                    &[300, 100]
                } else {
                    &[10, 10]
                })
                .expect("2"),
                ..s
            })
            .collect();
        w.samples(&with).expect("samples");
        w.finish().expect("finish");
        std::fs::write(&files.symbols, symbols).expect("symbols");
        lotus_samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("interval_ns", "100".into()),
                ("counters", "cycles,instructions".into()),
            ],
        )
        .expect("sampling");
        dir
    }

    #[test]
    fn counters_follow_their_samples_and_add_up() {
        let dir = folder_with_counters();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert_eq!(a.counters, vec!["cycles", "instructions"]);
        let row = |name: &str| a.rows.iter().find(|r| r.name == name).expect(name);
        // A's 20 samples (main thread and pool) are all in its kernel.
        assert_eq!(row("A").counters["cycles"], 20 * 300);
        assert_eq!(row("A").counters["instructions"], 20 * 100);
        assert_eq!(row("A").cpi, Some(3.0));
        assert_eq!(row("untraced processes").counters["cycles"], 50 * 10);
        assert_eq!(row("untraced processes").cpi, Some(1.0));
        for c in ["cycles", "instructions"] {
            let sum: u64 = a.rows.iter().map(|r| r.counters[c]).sum();
            assert_eq!(sum, a.counter_totals[c], "{c}");
        }
        assert_eq!(a.counter_totals["cycles"], 40 * 300 + 130 * 10);
        assert!(a.counters_unsupported.is_none());

        // A description that does not name what the records carry.
        let files = SampleFiles::of(dir.path(), "lotus");
        lotus_samples::write_sampling(&files.sampling, &[("status", "complete".into())])
            .expect("sampling");
        let err = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect_err("mismatch")
            .to_string();
        assert!(
            err.contains("lotus.samples") && err.contains("carry 2 counter values"),
            "{err}"
        );
    }

    #[test]
    fn refused_counters_are_said_once_never_as_zeros() {
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        lotus_samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("interval_ns", "100".into()),
                ("counters_unsupported", "cycles,instructions".into()),
                ("counters_reason", "cycles: no PMU".into()),
                ("counters_kind", "hardware".into()),
            ],
        )
        .expect("sampling");
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.counters.is_empty() && a.counter_totals.is_empty());
        assert!(a
            .rows
            .iter()
            .all(|r| r.counters.is_empty() && r.cpi.is_none()));
        let u = a.counters_unsupported.expect("unsupported");
        assert_eq!(u.counters, vec!["cycles", "instructions"]);
        assert_eq!(u.reason, "cycles: no PMU");
        let said: Vec<_> = a
            .notes
            .iter()
            .filter(|n| n.contains("not supported here"))
            .collect();
        assert_eq!(
            said,
            vec!["hardware counters: not supported here (cycles: no PMU)"]
        );
    }

    #[test]
    fn a_sampling_that_did_not_complete_says_how_it_ended() {
        let meta = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let failed = how_it_ended(&meta(&[("status", "failed"), ("reason", "disk full: x")]));
        assert!(
            failed.contains("the sampling failed (disk full: x)"),
            "{failed}"
        );
        let me = std::process::id();
        let start = process_start(me).expect("our start time").to_string();
        let mine = me.to_string();
        let running = how_it_ended(&meta(&[
            ("status", "running"),
            ("lotus_pid", &mine),
            ("lotus_start", &start),
        ]));
        assert!(running.contains("is still sampling"), "{running}");
        let other_start = (process_start(me).expect("start") + 1).to_string();
        let killed = how_it_ended(&meta(&[
            ("status", "running"),
            ("lotus_pid", &mine),
            ("lotus_start", &other_start),
        ]));
        assert!(
            killed.contains(&format!("lotus (pid {me}) was killed")),
            "{killed}"
        );
        let old = how_it_ended(&meta(&[("status", "running")]));
        assert!(old.contains("did not end normally"), "{old}");
    }

    #[test]
    fn a_noticeable_slowdown_by_sampling_is_said_with_its_figure() {
        for (pct, said) in [("12.5", true), ("1.9", false)] {
            let dir = folder();
            let files = SampleFiles::of(dir.path(), "lotus");
            lotus_samples::write_sampling(
                &files.sampling,
                &[
                    ("status", "complete".into()),
                    ("frequency_hz", "5000".into()),
                    ("sampling_cost_us", "25.00".into()),
                    ("sampling_slowdown_pct", pct.into()),
                ],
            )
            .expect("sampling");
            let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
                .expect("attribute");
            let notes = a.notes.join("\n");
            assert_eq!(
                notes.contains("slowed the job's threads by about 12%"),
                said,
                "{notes}"
            );
            assert_eq!(notes.contains("25.00 us a sample"), said, "{notes}");
        }
    }

    #[test]
    fn a_run_stopped_while_writing_is_analysed_and_marked_partial() {
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        lotus_samples::write_sampling(
            &files.sampling,
            &[("status", "running".into()), ("interval_ns", "100".into())],
        )
        .expect("sampling");
        let len = std::fs::metadata(&files.samples).expect("m").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&files.samples)
            .expect("open")
            .set_len(len - 30)
            .expect("cut");
        let a = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.partial);
        // The last record whole and 6 bytes of the one before it: 2 gone.
        assert_eq!(a.total_samples, 168);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("cut record") && notes.contains("partial"),
            "{notes}"
        );
    }

    /// A worker (pid 10) whose main thread runs op A over [1000, 5000)
    /// holding B over [2000, 3000) holding C over [2200, 2500), then C
    /// again at the top over [5200, 5400) (monotonic; the lines written in
    /// the order the spans end, as the tracer writes them, with `cpu`'s
    /// `cpu=` per span where given); the main thread sampled every 100 ns
    /// at `main_times`, a pool thread 11 one ns after each main sample in
    /// A.
    pub(crate) fn nested_folder(cpu: [Option<u64>; 4], main_times: &[u64]) -> tempfile::TempDir {
        let off = 1_000_000u64;
        let span = |name: &str, start: u64, end: u64, cpu: Option<u64>| {
            format!(
                "S{name},{},{},kind=op{}\n",
                start + off,
                end - start,
                cpu.map_or(String::new(), |c| format!(",cpu={c}"))
            )
        };
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n{}{}{}{}# lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            span("C", 2200, 2500, cpu[2]),
            span("B", 2000, 3000, cpu[1]),
            span("A", 1000, 5000, cpu[0]),
            span("C", 5200, 5400, cpu[3]),
            9000 + off
        );
        let symbols = [
            (0, Symbol::new("main_fn", "/py")),
            (1, Symbol::new("pool_fn", "/k.so")),
        ];
        let mut samples = Vec::new();
        for &t in main_times {
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: Default::default(),
            });
            if (1000..5000).contains(&t) {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 10,
                    tid: 11,
                    symbol: 1,
                    kernel: false,
                    counters: Default::default(),
                });
            }
        }
        sampled_folder(&log, &symbols, &samples, 100)
    }

    pub(crate) fn every_100_ns(from: u64, to: u64) -> Vec<u64> {
        (from..to).step_by(100).collect()
    }

    /// A sample of worker 10's thread `tid` at `time_ns` in function
    /// `symbol`, with no counters.
    pub(crate) fn sample_at(time_ns: u64, tid: u32, symbol: u32) -> Sample {
        Sample {
            time_ns,
            pid: 10,
            tid,
            symbol,
            kernel: false,
            counters: Default::default(),
        }
    }

    /// The row of path `path` (a test failure naming it where none is).
    pub(crate) fn row_at<'a>(a: &'a InPipelineAttribution, path: &str) -> &'a AttributedRow {
        a.rows
            .iter()
            .find(|r| r.path == path)
            .unwrap_or_else(|| panic!("{path}: {a:#?}"))
    }

    #[test]
    fn nested_spans_credit_the_innermost_and_form_a_tree() {
        let dir = nested_folder([None; 4], &every_100_ns(0, 6000));
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // Main thread: A 40 samples, of them B 10, of them C 3; the pool's
        // 40 follow the main thread's innermost op.
        let (ra, rb, rc) = (row_at(&a, "A"), row_at(&a, "A/B"), row_at(&a, "A/B/C"));
        assert_eq!(
            (ra.samples, ra.pool_samples, ra.inclusive_samples),
            (60, 30, 80)
        );
        assert_eq!(
            (rb.samples, rb.pool_samples, rb.inclusive_samples),
            (14, 7, 20)
        );
        assert_eq!(
            (rc.samples, rc.pool_samples, rc.inclusive_samples),
            (6, 3, 6)
        );
        assert_eq!((rc.name.as_str(), rc.depth), ("C", 2));
        assert_eq!(rc.parent.as_deref(), Some("A/B"));
        assert_eq!(rb.parent.as_deref(), Some("A"));
        assert_eq!(ra.parent, None);
        // C at the top is a row of its own.
        let top_c = row_at(&a, "C");
        assert_eq!((top_c.samples, top_c.depth, top_c.calls), (2, 0, Some(1)));
        // Old logs: no cpu=, every figure from the samples.
        assert!(a.rows.iter().all(|r| r.cpu_source == CpuSource::Sampled));
        assert_eq!((ra.cpu_ns, ra.inclusive_cpu_ns), (6000, 8000));
        assert_eq!(ra.uncertainty_ns, sampled_uncertainty_ns(60, 100));
        assert_eq!(sampled_uncertainty_ns(60, 100), 1518);
        assert_eq!(ra.inclusive_uncertainty_ns, sampled_uncertainty_ns(80, 100));
        // The tree in table order: A, its subtree, then C at the top.
        let paths: Vec<&str> = a
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Op)
            .map(|r| r.path.as_str())
            .collect();
        assert_eq!(paths, vec!["A", "A/B", "A/B/C", "C"]);
        // Exclusive figures add up to the totals.
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        assert_eq!(a.rows.iter().map(|r| r.cpu_ns).sum::<u64>(), a.total_cpu_ns);
        assert!((a.rows.iter().map(|r| r.share).sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(row_at(&a, "outside any op (worker)").samples, 18);
    }

    #[test]
    fn cpu_of_the_spans_is_exact_and_takes_precedence_over_samples() {
        let cpu = [Some(3000), Some(800), Some(250), Some(150)];
        let a = attribute_folder(
            nested_folder(cpu, &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        let (ra, rb, rc) = (row_at(&a, "A"), row_at(&a, "A/B"), row_at(&a, "A/B/C"));
        // Own thread: the spans' cpu= less their children's; pool samples
        // added (and only they make the figure uncertain).
        assert_eq!(rc.cpu_ns, 250 + 3 * 100);
        assert_eq!(rb.cpu_ns, 800 - 250 + 7 * 100);
        assert_eq!(ra.cpu_ns, 3000 - 800 + 30 * 100);
        assert_eq!(ra.inclusive_cpu_ns, ra.cpu_ns + rb.cpu_ns + rc.cpu_ns);
        assert_eq!(ra.cpu_source, CpuSource::Exact);
        assert_eq!(ra.uncertainty_ns, sampled_uncertainty_ns(30, 100));
        assert_eq!(ra.inclusive_uncertainty_ns, sampled_uncertainty_ns(40, 100));
        assert_eq!(row_at(&a, "C").cpu_ns, 150);
        // The samples divide the exact figure among the functions: A's
        // 30 main-thread samples and 30 pool samples, half each.
        let f: Vec<(&str, u64)> = ra
            .top_functions
            .iter()
            .map(|f| (f.function.as_str(), f.cpu_ns))
            .collect();
        assert_eq!(f, vec![("main_fn", 2600), ("pool_fn", 2600)]);
        assert_eq!(row_at(&a, "C").uncertainty_ns, 0);
        assert_eq!(ra.cpu_per_call_ns, Some(ra.inclusive_cpu_ns));
        assert_eq!(a.rows.iter().map(|r| r.cpu_ns).sum::<u64>(), a.total_cpu_ns);

        // A child without cpu=: it rests on samples, its parent's clock
        // less its samples; the grandparent, whose children all say, stays
        // exact.
        let cpu = [Some(3000), Some(800), None, Some(150)];
        let a = attribute_folder(
            nested_folder(cpu, &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        assert_eq!(row_at(&a, "A/B/C").cpu_source, CpuSource::Sampled);
        assert_eq!(row_at(&a, "A/B/C").cpu_ns, 600);
        // B: its clock less C's 3 own-thread samples, plus its pool's 7.
        assert_eq!(row_at(&a, "A/B").cpu_source, CpuSource::ClockLessSampled);
        assert_eq!(row_at(&a, "A/B").cpu_ns, 800 - 300 + 700);
        assert_eq!(
            row_at(&a, "A/B").uncertainty_ns,
            sampled_uncertainty_ns(7 + 3, 100)
        );
        assert_eq!(row_at(&a, "A").cpu_source, CpuSource::Exact);
        assert_eq!(row_at(&a, "A").cpu_ns, 3000 - 800 + 3000);
    }

    #[test]
    fn a_parent_and_child_of_one_start_and_end_nest_as_written() {
        let off = 1_000_000u64;
        // Q (the child) ends first, so its line comes first.
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\nSQ,{},1000,kind=op\nSP,{},1000,kind=op\n# lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            1000 + off,
            1000 + off,
            5000 + off
        );
        let samples: Vec<Sample> = every_100_ns(1000, 2000)
            .into_iter()
            .map(|t| sample_at(t, 10, 0))
            .collect();
        let dir = sampled_folder(&log, &[(0, Symbol::new("f", "/py"))], &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert_eq!(row_at(&a, "P/Q").samples, 10);
        assert_eq!(row_at(&a, "P").samples, 0);
        assert_eq!(row_at(&a, "P").inclusive_samples, 10);
    }

    #[test]
    fn work_outside_every_op_is_said_past_five_percent() {
        // 18 of the worker's 100 samples outside every op.
        let a = attribute_folder(
            nested_folder([None; 4], &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
        let u = &a.unseen[0];
        assert_eq!((u.role, u.samples, u.cpu_ns), (Role::Worker, 18, 1800));
        assert!((u.share - 0.18).abs() < 1e-9);
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("18% of the DataLoader workers' CPU")
                && notes.contains("main_fn (100%)")
                && notes.contains("--op MODULE:QUALNAME")
                && notes.contains("lotus_trace.span"),
            "{notes}"
        );
        // 2 of 82 (under 5%): nothing said.
        let mut times = every_100_ns(1000, 5000);
        times.extend([5200, 5300, 5500, 5600]);
        let a = attribute_folder(
            nested_folder([None; 4], &times).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        assert_eq!(row_at(&a, "outside any op (worker)").samples, 2);
        assert!(a.unseen.is_empty(), "{:?}", a.unseen);
        assert!(
            !a.notes.join("\n").contains("outside every op"),
            "{:?}",
            a.notes
        );
    }

    /// A worker's CPU outside every op is judged within its batches: its
    /// start-up before the first, its wait and its exit after the last are
    /// no op's, and say nothing (they are its start-up and shutdown rows).
    #[test]
    fn a_workers_work_outside_its_batches_is_not_said_unseen() {
        let times = every_100_ns(0, 9000);
        let plain = nested_folder([None; 4], &times);
        let a = attribute_folder(plain.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // No batch span: every sample outside the ops counts.
        assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
        assert_eq!(a.unseen[0].samples, 48);
        // The same worker with one batch over [1000, 5600): 4 of its
        // samples in the batch are outside every op (of 130: said nothing).
        let log = std::fs::read_to_string(plain.path().join("lotus_worker_pid_10")).expect("log");
        let batch = format!("SBatch,{},4600,kind=batch,batch=0\n", 1000 + 1_000_000u64);
        let log = log.replacen(
            "# lotus-trace: clock",
            &format!("{batch}# lotus-trace: clock"),
            1,
        );
        std::fs::write(plain.path().join("lotus_worker_pid_10"), log).expect("write");
        let a = attribute_folder(plain.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.unseen.is_empty(), "{:?}", a.unseen);
        let n = |name: &str| row_at(&a, name).samples;
        // Before the batch: [0, 1000), 10 samples; after its end and the
        // last op's: the rest.
        assert_eq!(n("start-up and imports (worker)"), 10);
        assert_eq!(
            n("start-up and imports (worker)")
                + n("outside any op (worker)")
                + n("shutdown and exit (worker)"),
            48
        );
        assert!(n("outside any op (worker)") <= 5, "{a:#?}");
    }

    /// A main process (pid 10, no workers) running batches itself over
    /// [1000, 3000) and [4000, 6000), op A over [1000, 1500) and
    /// [4000, 4500) in them, its training step over [6000, 9000); sampled
    /// every 100 ns throughout.
    fn main_only_folder() -> tempfile::TempDir {
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=main pid=10 wall_ns={off} monotonic_ns=0\n\
             SA,{},500,kind=op,batch=0\nSBatch,{},2000,kind=batch,batch=0\n\
             SA,{},500,kind=op,batch=1\nSBatch,{},2000,kind=batch,batch=1\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            1000 + off,
            1000 + off,
            4000 + off,
            4000 + off,
            9000 + off
        );
        let samples: Vec<Sample> = every_100_ns(0, 9000)
            .into_iter()
            .map(|t| Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: u32::from(!(1000..3000).contains(&t) && !(4000..6000).contains(&t)),
                kernel: false,
                counters: Default::default(),
            })
            .collect();
        let dir = sampled_folder(
            &log,
            &[
                (0, Symbol::new("decode", "/py")),
                (1, Symbol::new("train_step", "/py")),
            ],
            &samples,
            100,
        );
        std::fs::rename(
            dir.path().join("lotus_worker_pid_10"),
            dir.path().join("lotus_main_pid_10"),
        )
        .expect("rename");
        dir
    }

    #[test]
    fn a_main_process_batch_work_outside_every_op_is_said() {
        let dir = main_only_folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // In its batches: 40 samples, 10 in A, 30 outside every op; the
        // training step's 50 outside the batches are not judged.
        assert_eq!(row_at(&a, "A").samples, 10);
        // Outside every op: before its first batch, from it to its last
        // batch's end, after it.
        assert_eq!(row_at(&a, "start-up and imports (main)").samples, 10);
        assert_eq!(
            row_at(&a, "training loop, outside the DataLoader (main)").samples,
            41
        );
        assert_eq!(row_at(&a, "after the last batch (main)").samples, 29);
        assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
        let u = &a.unseen[0];
        assert_eq!((u.role, u.samples), (Role::Main, 30));
        assert!((u.share - 0.75).abs() < 1e-9);
        assert_eq!(u.top_functions[0].function, "decode");
        assert_eq!(
            u.top_functions.len(),
            1,
            "train_step is outside the batches"
        );
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("75% of the main process's CPU in its batches"),
            "{notes}"
        );
    }

    #[test]
    fn op_rows_have_their_spans_wall_time_inclusive_and_exclusive() {
        // A [1000, 5000) holds A/B [2000, 3000), which holds A/B/C
        // [2200, 2500); C [5200, 5400) at the top.
        let dir = nested_folder([None; 4], &every_100_ns(0, 6000));
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let wall = |p: &str| {
            let r = row_at(&a, p);
            (r.wall_ns, r.exclusive_wall_ns)
        };
        assert_eq!(wall("A"), (Some(4000), Some(3000)));
        assert_eq!(wall("A/B"), (Some(1000), Some(700)));
        assert_eq!(wall("A/B/C"), (Some(300), Some(300)));
        assert_eq!(wall("C"), (Some(200), Some(200)));
        for r in a.rows.iter().filter(|r| r.kind != RowKind::Op) {
            assert_eq!((r.wall_ns, r.exclusive_wall_ns), (None, None), "{}", r.name);
        }
    }

    /// A main process (pid 10) with two workers' batches handed to it:
    /// waits [2000, 2500) and [4000, 4200), consumptions at 2500 and 4200,
    /// op A in a worker (pid 20) over [2000, 2400); the main thread sampled
    /// every 100 ns over [0, 6000), the worker at 2000..2400.
    fn main_loop_folder() -> tempfile::TempDir {
        let off = 1_000_000u64;
        let main = format!(
            "#lotus-trace v1 role=main pid=10 wall_ns={off} monotonic_ns=0\n\
             SWait,{},500,kind=wait,batch=0,ready=0\nSConsume,{},0,kind=consume,batch=0\n\
             SWait,{},200,kind=wait,batch=1,ready=0\nSConsume,{},0,kind=consume,batch=1\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            2000 + off,
            2500 + off,
            4000 + off,
            4200 + off,
            9000 + off
        );
        let worker = format!(
            "#lotus-trace v1 role=worker pid=20 wall_ns={off} monotonic_ns=0\n\
             SA,{},400,kind=op,batch=0\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            2000 + off,
            9000 + off
        );
        let mut samples: Vec<Sample> = Vec::new();
        for t in every_100_ns(0, 6000) {
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: Default::default(),
            });
            if (2000..2400).contains(&t) {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 20,
                    tid: 20,
                    symbol: 1,
                    kernel: false,
                    counters: Default::default(),
                });
            }
        }
        let dir = sampled_folder(
            &worker,
            &[
                (0, Symbol::new("step", "/py")),
                (1, Symbol::new("decode", "/k.so")),
            ],
            &samples,
            100,
        );
        std::fs::rename(
            dir.path().join("lotus_worker_pid_10"),
            dir.path().join("lotus_worker_pid_20"),
        )
        .expect("rename");
        std::fs::write(dir.path().join("lotus_main_pid_10"), main).expect("main");
        dir
    }

    #[test]
    fn the_main_process_rows_are_split_by_phase_and_come_last() {
        let dir = main_loop_folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // [0, 2000): before the first request; [2000, 4200]: the loop;
        // after: the rest.
        let names: Vec<(&str, u64)> = a
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples))
            .collect();
        assert_eq!(
            names,
            [
                ("A", 4),
                ("start-up and imports (main)", 20),
                ("training loop, outside the DataLoader (main)", 23),
                ("after the last batch (main)", 17),
            ],
            "{a:#?}"
        );
        assert!(
            !a.rows.iter().any(|r| r.name == "outside any op (main)"),
            "{a:#?}"
        );
        let sum: u64 = a.rows.iter().map(|r| r.samples).sum();
        assert_eq!(sum, a.total_samples);
    }

    #[test]
    fn rows_resting_on_few_samples_are_said_uncertain() {
        let a = attribute_folder(
            nested_folder([None; 4], &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        let notes = a.notes.join("\n");
        // C at the top: 2 samples, ±138%.
        assert!(
            notes.contains("4 op rows rest on too few samples") && notes.contains("C (±138%)"),
            "{notes}"
        );
        // Exact rows with no pool are certain.
        let cpu = [Some(3000), Some(800), Some(250), Some(150)];
        let a = attribute_folder(
            nested_folder(cpu, &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        let notes = a.notes.join("\n");
        assert!(notes.contains("3 op rows rest on too few"), "{notes}");
        assert!(!notes.contains(" C (±"), "{notes}");
    }

    #[test]
    fn folders_without_samples_or_clock() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("lotus_main_pid_1"), "SA,1,2,kind=op\n").expect("w");
        let err = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect_err("no samples");
        assert!(err.to_string().contains("--sample"), "{err}");
        let mut w = SamplesWriter::create(dir.path(), "lotus").expect("w");
        w.finish().expect("f");
        let err = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect_err("no clock");
        assert!(err.to_string().contains("no clock pairs"), "{err}");
    }
}
