//! One configuration of traced runs read for its figures (`lotus trace
//! stats`, `lotus report`): its statistics, rank statistics, main loops
//! and verdict, the verdict's advice made of the model's predictions
//! (`lotus-predict`) on the run traced.

use std::path::PathBuf;

use lotus_samples::SampleFiles;
use lotus_sort::Budget;
use lotus_sys::input::Dir;
use lotus_trace::{loop_figures, node_stats_with, rank_stats_with, LoopFigures, NodeStats};
use lotus_trace::{
    JobHosts, NamedSummary, RankStats, Straggler, TraceFolder, TraceIndex, TraceStats,
};
use lotus_trace::{OutlierRule, PerBatchRows};

use crate::{
    attribute_and_fold, attribute_folder, Error, FoldedStacks, InPipelineAttribution, Verdict,
    TOP_FUNCTIONS,
};

/// The CPUs this process may run on: what the verdict's "M CPUs here"
/// counts, and the machine the model predicts for.
pub fn cpus_here() -> Option<u64> {
    std::thread::available_parallelism()
        .ok()
        .map(|n| n.get() as u64)
}

/// The run traced in `dir` as `lotus predict`'s model reads it, on
/// `cpus` CPUs, with its helper pools' CPU from `a`, its samples'
/// attribution, where given (what `--threads 1` needs).
pub fn observe_run<'a>(
    dir: impl Into<Dir<'a>>,
    cpus: f64,
    a: Option<&InPipelineAttribution>,
) -> Result<lotus_predict::Observed, lotus_predict::PredictError> {
    let mut obs = lotus_predict::observe(dir, cpus)?;
    if let Some(a) = a {
        with_pools(&mut obs, a);
    }
    Ok(obs)
}

/// The helper pools' CPU of the run `obs`, from its samples' attribution
/// `a` (what `--threads 1` needs).
fn with_pools(obs: &mut lotus_predict::Observed, a: &InPipelineAttribution) {
    let (work, spin, waiting) = a.pool_cpu_ns();
    obs.inputs.pools = Some(lotus_predict::Pools {
        work_ns: work as f64,
        spin_ns: spin as f64,
        waiting_ns: waiting as f64,
    });
}

impl Verdict {
    /// The verdict's advice made predictions (`lotus predict`'s model):
    /// the changes predicted to shorten the loop of the run as `obs` read
    /// it (its helper pools' CPU from `a`, its samples' attribution, where
    /// sampled), best first, at most three. A run that cannot be modelled
    /// (no loop, an unreadable log) has no `obs`: the verdict then keeps
    /// its rules' advice.
    pub fn with_predictions_of(
        &mut self,
        mut obs: lotus_predict::Observed,
        a: Option<&InPipelineAttribution>,
    ) {
        if let Some(a) = a {
            with_pools(&mut obs, a);
        }
        if let Ok(advice) = lotus_predict::ranked_advice(&obs, 3) {
            self.with_predictions(advice);
            // Spinning mostly in the ops' pools is the model's (`--threads
            // 1`, proposed where it helps); elsewhere (the training step's
            // pools) the rule says it.
            if let Some(a) = a {
                let spin_ns = a
                    .spinning
                    .iter()
                    .fold(0u64, |t, f| t.saturating_add(f.cpu_ns));
                let (_, pools_spin, ops_waiting) = a.pool_cpu_ns();
                if spin_ns > 0
                    && pools_spin.saturating_add(ops_waiting).saturating_mul(2) >= spin_ns
                {
                    self.without_spin_rule();
                }
            }
        }
    }

    /// The verdict on the sampled trace `dir` attributed as `a`: its main
    /// loops read from its logs, with `a`'s CPU facts and the model's
    /// predictions; a folder of samples alone attributed from its frames
    /// ([`crate::attribute_frames`]) has no loop to read, and its verdict
    /// rests on `a` alone.
    pub fn of_sampled_folder<'a>(
        dir: impl Into<Dir<'a>>,
        a: &InPipelineAttribution,
        budget: Budget,
    ) -> Result<Verdict, Error> {
        let dir = dir.into();
        let folder = match TraceFolder::scan(dir) {
            Ok(f) => f,
            Err(lotus_trace::TraceError::NoLogs { .. }) if a.ops_from == crate::OpsFrom::Frames => {
                return Ok(Verdict::of(
                    &LoopFigures::default(),
                    Some(a),
                    &[],
                    cpus_here(),
                ));
            }
            Err(e) => return Err(e.into()),
        };
        // The model is fed by the loop's own pass over the logs.
        let mut model = lotus_predict::Observer::default();
        let mut index = model.load_index(&folder, false, budget)?;
        let loops = loop_figures(&mut index)?;
        let mut v = Verdict::of(&loops, Some(a), &[], cpus_here());
        let cpus = cpus_here().unwrap_or(1) as f64;
        if let Ok(obs) = model.finish(dir.path(), cpus) {
            v.with_predictions_of(obs, Some(a));
        }
        Ok(v)
    }
}

/// One configuration's figures (what `lotus trace stats` and `lotus
/// report` show).
pub struct TraceFigures {
    /// Its name (its folder's).
    pub label: String,
    /// Its trace folder.
    pub dir: PathBuf,
    /// Its logs.
    pub folder: TraceFolder,
    /// Its events, read once.
    pub index: TraceIndex,
    /// Its statistics.
    pub stats: TraceStats,
    /// Every batch, until its JSON takes them.
    pub rows: Option<PerBatchRows>,
    /// Its statistics per rank.
    pub ranks: Vec<RankStats>,
    /// The rank whose batches take longest, and the op that makes it so
    /// (`None` with one rank, or ranks that are even).
    pub straggler: Option<Straggler>,
    /// The job and its hosts' folders, where the trace is several hosts'
    /// folders merged ([`TraceFigures::with_job`]).
    pub job: Option<JobHosts>,
    /// Its statistics per node, where its logs name two nodes or more (a
    /// Ray cluster's, a multi-node job's).
    pub nodes: Vec<NodeStats>,
    /// Each op per rank goes in its JSON (`--by rank`).
    pub by_rank: bool,
    /// Each op per node goes in its JSON (`--by node`).
    pub by_node: bool,
    /// Its main loops.
    pub loops: LoopFigures,
    /// Its verdict, from the logs alone (see [`TraceFigures::with_samples`]).
    pub verdict: Verdict,
    /// The run as the predictions' model read it (`None` where it cannot
    /// be modelled).
    observed: Option<lotus_predict::Observed>,
}

impl TraceFigures {
    /// The figures of the trace in `folder` (read into `index` with its
    /// durations; `observed`: the run as the predictions' model read it,
    /// in the same pass, where it could) under `rule`.
    pub fn of(
        label: String,
        folder: TraceFolder,
        mut index: TraceIndex,
        observed: Option<lotus_predict::Observed>,
        rule: OutlierRule,
    ) -> Result<TraceFigures, Error> {
        let loops = loop_figures(&mut index)?;
        let (stats, rows) = TraceStats::compute_with(&mut index, rule)?;
        let ranks = rank_stats_with(&folder, &index, rule)?;
        let straggler = lotus_trace::straggler(&ranks);
        let nodes = node_stats_with(&folder, &index, rule)?;
        let mut verdict = Verdict::of(&loops, None, &stats.ops, cpus_here());
        if let Some(obs) = &observed {
            verdict.with_predictions_of(obs.clone(), None);
        }
        Ok(TraceFigures {
            label,
            dir: folder.root.clone(),
            folder,
            index,
            stats,
            rows: Some(rows),
            ranks,
            straggler,
            job: None,
            nodes,
            by_rank: false,
            by_node: false,
            loops,
            verdict,
            observed,
        })
    }

    /// The same figures, of the folders of `job`'s hosts merged: its
    /// documents and tables name the job and each host.
    pub fn with_job(mut self, job: JobHosts) -> TraceFigures {
        self.job = Some(job);
        self
    }

    /// Its trace folder as its readers take it: opened once where it was
    /// scanned through a shared folder, else its path.
    pub fn source(&self) -> Dir<'_> {
        self.folder.source()
    }

    /// The op its page names at a glance, so that it names the verdict's:
    /// the verdict's heaviest, with its CPU where the verdict measured CPU,
    /// else the longest by wall time; with its statistics' row, if any.
    pub fn glance_op(&self) -> Option<(&str, Option<u64>, Option<&NamedSummary>)> {
        let heaviest = self.verdict.heaviest_op.as_ref();
        let name = heaviest.map(|h| h.name.as_str());
        let op = match name {
            Some(n) => (self.stats.ops.iter())
                .find(|o| o.name == n || n.ends_with(&format!("/{}", o.name))),
            None => self.stats.ops.first(),
        };
        let cpu_ns = heaviest
            .filter(|h| h.basis != crate::Basis::WallSpans)
            .map(|h| h.time_ns);
        Some((name.or(op.map(|o| o.name.as_str()))?, cpu_ns, op))
    }

    /// How long its trace spans, ms: first event's start to last one's end.
    pub fn span_ms(&self) -> f64 {
        let base = self.index.min_start_ns.unwrap_or(0);
        let end = self.index.max_end_ns.unwrap_or(base).max(base + 1);
        (end - base) as f64 / 1e6
    }

    /// The hosts its processes ran on, sorted, each once.
    pub fn hosts(&self) -> Vec<String> {
        let mut h: Vec<String> = (self.stats.processes.iter())
            .filter_map(|p| p.host.clone())
            .collect();
        h.sort();
        h.dedup();
        h
    }

    /// Its verdict with the CPU facts of its samples' attribution.
    pub fn with_samples(&mut self, a: &InPipelineAttribution) {
        self.verdict = Verdict::of(&self.loops, Some(a), &self.stats.ops, cpus_here());
        if let Some(obs) = &self.observed {
            self.verdict.with_predictions_of(obs.clone(), Some(a));
        }
    }

    /// Every batch's delay to consumption and the main process's wait for
    /// it, ms (those it has), read from its rows (once: a second call
    /// gives nothing).
    pub fn delays_and_waits_ms(&mut self) -> Result<(Vec<f64>, Vec<f64>), Error> {
        let (mut delays, mut waits) = (Vec::new(), Vec::new());
        if let Some(rows) = self.rows.take() {
            for r in rows {
                let r = r?;
                delays.extend(r.delay_ns.map(|d| d as f64 / 1e6));
                waits.extend(r.wait_ns.map(|w| w as f64 / 1e6));
            }
        }
        Ok((delays, waits))
    }
}

/// A configuration's samples: attributed, or why there are none.
pub enum SampledFolder {
    /// The folder has no samples files at all: not a sampled trace.
    Not,
    /// It was traced with `--sample` but has no samples (perf could not
    /// run): the reason.
    Without(String),
    /// Its samples credited to its ops.
    With(Box<InPipelineAttribution>),
}

impl SampledFolder {
    /// Reads `dir`'s samples of `prefix`, if it has any.
    pub fn read<'a>(
        dir: impl Into<Dir<'a>>,
        prefix: &str,
        budget: Budget,
    ) -> Result<SampledFolder, Error> {
        let dir = dir.into();
        if SampleFiles::of(dir, prefix).existing().is_empty() {
            return Ok(SampledFolder::Not);
        }
        match attribute_folder(dir, prefix, budget, TOP_FUNCTIONS) {
            Ok(a) => Ok(SampledFolder::With(Box::new(a))),
            Err(Error::NoSamples(why)) => Ok(SampledFolder::Without(why)),
            Err(e) => Err(e),
        }
    }

    /// [`SampledFolder::read`], with its samples' collapsed stacks from
    /// the same pass where it has samples (or why they cannot be read).
    pub fn read_folded<'a>(
        dir: impl Into<Dir<'a>>,
        prefix: &str,
        budget: Budget,
    ) -> Result<(SampledFolder, Option<Result<FoldedStacks, Error>>), Error> {
        let dir = dir.into();
        if SampleFiles::of(dir, prefix).existing().is_empty() {
            return Ok((SampledFolder::Not, None));
        }
        match attribute_and_fold(dir, prefix, budget, TOP_FUNCTIONS) {
            Ok((a, f)) => Ok((SampledFolder::With(Box::new(a)), Some(f))),
            Err(Error::NoSamples(why)) => Ok((SampledFolder::Without(why), None)),
            Err(e) => Err(e),
        }
    }
}

impl InPipelineAttribution {
    /// The CPU per call of the op at `path` (its row's), ns.
    pub fn op_cpu_per_call_ns(&self, path: &str) -> Option<u64> {
        self.rows
            .iter()
            .find(|r| r.kind == crate::RowKind::Op && r.path == path)
            .and_then(|r| r.cpu_per_call_ns)
    }
}
