//! The rows of an in-pipeline attribution, as users read them (JSON, CSV,
//! tables): what each row stands for and its figures.

use super::*;
use lotus_sys::input::Dir;

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
pub fn unseen_work<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
) -> Result<Vec<Unseen>, Error> {
    let dir: Dir<'_> = dir.into();
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

/// Where an attribution's op rows come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpsFrom {
    /// The tracer's op spans (`lotus trace run --sample`): each sample
    /// credited to the span open on its thread at its time, with calls,
    /// wall time and, where the spans say it, exact thread CPU.
    #[default]
    Spans,
    /// The samples' Python frames, no span read (a folder without tracer
    /// logs, `lotus trace attach`; [`attribute_frames`]): each sample
    /// credited to the ops its frames show; op rows have no calls and no
    /// wall time, their CPU is samples times the interval.
    Frames,
}

impl OpsFrom {
    /// In words, for a page: the folders whose op rows come this way, the
    /// command that makes one, and what each of their samples is credited
    /// to.
    pub fn said(self) -> [&'static str; 3] {
        match self {
            OpsFrom::Spans => [
                "a sampled trace",
                "lotus trace run --sample",
                "the innermost op span its thread was running",
            ],
            OpsFrom::Frames => [
                "a job sampled without the tracer",
                "lotus trace attach PID",
                "the ops its Python frames show",
            ],
        }
    }
}

/// The attribution of a sampled trace folder.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InPipelineAttribution {
    /// Where the op rows come from: the tracer's spans, or the samples'
    /// Python frames (`ops_from` in the JSON: `spans`, `frames`).
    pub ops_from: OpsFrom,
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
