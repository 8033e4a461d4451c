//! Trace folders read for their statistics, shared by `lotus trace stats`
//! and `lotus report`: one trace loaded (its bad lines said), the
//! configurations several folders make, one configuration's statistics
//! ([`Computed`]) and the attribution of the samples beside its logs.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use lotus_attribute::Verdict;
use lotus_attribute::TOP_FUNCTIONS;
use lotus_attribute::{attribute_folder, InPipelineAttribution};
use lotus_samples::SampleFiles;
use lotus_sort::Budget;
use lotus_trace::{loop_figures, LoopFigures, OutlierRule, PerBatchRows, TraceStats};
use lotus_trace::{rank_stats_with, RankStats};
use lotus_trace::{Dir, SharedFolder, TraceFolder, TraceIndex, Warnings};

/// The most of a configuration's files held in memory, read once for all
/// its readers (past it, a file is read again by each reader).
const READ_ONCE_BYTES: u64 = 1 << 30;

/// `--outliers`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutliersArg {
    /// Flag below Q1 - 1.5 IQR or above Q3 + 1.5 IQR; keep them.
    Flag,
    /// The study's rule: remove below Q1 - 2 IQR, recompute.
    Study,
}

impl From<OutliersArg> for OutlierRule {
    fn from(a: OutliersArg) -> OutlierRule {
        match a {
            OutliersArg::Flag => OutlierRule::Flag,
            OutliersArg::Study => OutlierRule::Study,
        }
    }
}

/// The verdict's advice made predictions (`lotus predict`'s model): the
/// changes predicted to shorten the loop of the run traced in `dir`,
/// best first, at most three. Where the run cannot be modelled (no
/// loop, an unreadable log), the verdict keeps its rules' advice.
pub(crate) fn with_predictions<'a>(
    v: &mut Verdict,
    dir: impl Into<Dir<'a>>,
    a: Option<&InPipelineAttribution>,
) {
    let Ok(obs) = lotus_predict::observe(dir, cpus()) else {
        return;
    };
    with_observed(v, obs, a);
}

/// The CPUs the predictions take the job to have had: this machine's.
fn cpus() -> f64 {
    crate::render::verdict::cpus_here().unwrap_or(1) as f64
}

/// [`with_predictions`] of the run as `obs` read it (its pools' CPU from
/// `a`, where given).
fn with_observed(
    v: &mut Verdict,
    mut obs: lotus_predict::Observed,
    a: Option<&InPipelineAttribution>,
) {
    if let Some(a) = a {
        with_pools(&mut obs, a);
    }
    if let Ok(p) = lotus_predict::ranked(&obs) {
        v.with_predictions(lotus_predict::advice(&p, 3));
        // Spinning mostly in the ops' pools is the model's (`--threads
        // 1`, proposed where it helps); elsewhere (the training step's
        // pools) the rule says it.
        if let Some(a) = a {
            let spin_ns = a
                .spinning
                .iter()
                .fold(0u64, |t, f| t.saturating_add(f.cpu_ns));
            let (_, pools_spin, ops_waiting) = a.pool_cpu_ns();
            if spin_ns > 0 && pools_spin.saturating_add(ops_waiting).saturating_mul(2) >= spin_ns {
                v.without_spin_rule();
            }
        }
    }
}

/// The run traced in `dir` as `lotus predict`'s model reads it, on
/// `cpus` CPUs, with its helper pools' CPU from `a`, its samples'
/// attribution, where given (what `--threads 1` needs).
pub(crate) fn observe<'a>(
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

/// Prints the bad lines (the first [`Warnings::KEEP`]) to stderr.
fn report_warnings(w: &Warnings) {
    for bad in &w.shown {
        crate::usage::say!("lotus: warning: {bad} (line skipped)");
    }
    if w.not_shown() > 0 {
        crate::usage::say!(
            "lotus: warning: {} more bad line(s) skipped, not shown",
            w.not_shown()
        );
    }
}

/// Reads the whole trace once (batches, waits, consumptions and, with
/// `durations`, every duration kept within the `LOTUS_SORT_BUFFER` budget,
/// in temporary files past it).
pub(crate) fn load<'a>(
    dir: impl Into<Dir<'a>>,
    durations: bool,
) -> Result<(TraceFolder, TraceIndex)> {
    load_feeding(dir.into(), durations, None)
}

/// [`load`], handing `model` the events the predictions' model reads in
/// the same pass.
fn load_feeding(
    dir: Dir<'_>,
    durations: bool,
    model: Option<&mut lotus_predict::Observer>,
) -> Result<(TraceFolder, TraceIndex)> {
    let folder = TraceFolder::scan(dir)?;
    // An empty log (a disk-full trace, a process killed before it wrote)
    // has no events: said by name, the others are read.
    for log in &folder.logs {
        if log.open_file().is_ok_and(|f| f.size() == 0) {
            crate::usage::note!(
                "lotus: note: {}: empty: the process wrote nothing (disk full, or killed before it wrote?); skipped",
                log.display
            );
        }
    }
    let budget = Budget::from_env()?;
    let index = match model {
        Some(m) => TraceIndex::load_with(
            &folder,
            durations,
            budget,
            |_| {},
            lotus_predict::Observer::reads,
            |e| m.event(e),
        )?,
        None => TraceIndex::load(&folder, durations, budget, |_| {})?,
    };
    report_warnings(&index.warnings);
    if index.events == 0 {
        bail!(
            "{}: no readable events in {} log file(s) ({} bad line(s))",
            dir.path().display(),
            folder.logs.len(),
            index.warnings.total
        );
    }
    Ok((folder, index))
}

/// The attribution of the samples in `dir` (of `prefix`), where it holds
/// some that can be read (else `None`, with a warning where they cannot).
pub(crate) fn sampled_attribution<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
) -> Option<InPipelineAttribution> {
    let dir = dir.into();
    if !dir.path().is_dir() || !SampleFiles::of(dir, prefix).samples.is_file() {
        return None;
    }
    let budget = match Budget::from_env() {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "lotus: warning: the samples in {} are not read: {e}",
                dir.path().display()
            );
            return None;
        }
    };
    match attribute_folder(dir, prefix, budget, TOP_FUNCTIONS) {
        Ok(a) => Some(a),
        Err(e) => {
            eprintln!(
                "lotus: warning: the samples in {} are not read (what ran outside every op is not said): {e}",
                dir.path().display()
            );
            None
        }
    }
}

/// One configuration's statistics (also what `lotus report` shows).
pub(crate) struct Computed {
    /// Its name (its folder's).
    pub(crate) label: String,
    /// Its trace folder.
    pub(crate) dir: PathBuf,
    /// That folder opened once: every reader of the configuration (the
    /// statistics, the predictions, the samples' attribution, the
    /// timeline, the flame graphs) reads each of its files once.
    shared: Option<SharedFolder>,
    pub(crate) folder: TraceFolder,
    pub(crate) index: TraceIndex,
    /// Its statistics.
    pub(crate) stats: TraceStats,
    /// Every batch, until its JSON takes them.
    pub(crate) rows: Option<PerBatchRows>,
    pub(crate) ranks: Vec<RankStats>,
    /// Its main loops.
    pub(crate) loops: LoopFigures,
    /// Its verdict, from the logs alone (see [`Computed::with_samples`]).
    pub(crate) verdict: Verdict,
    /// The run as the predictions' model read it, in the statistics'
    /// pass (`None` where it cannot be modelled).
    observed: Option<lotus_predict::Observed>,
}

impl Computed {
    /// The statistics of the trace in `dir` under `rule`.
    pub(crate) fn of(label: String, dir: PathBuf, rule: OutlierRule) -> Result<Computed> {
        // A log named alone is read as it is.
        let shared = dir
            .is_dir()
            .then(|| SharedFolder::open_reading_once(&dir, READ_ONCE_BYTES))
            .transpose()
            .with_context(|| format!("cannot open the trace folder {}", dir.display()))?;
        let source = match &shared {
            Some(f) => Dir::Shared(f),
            None => Dir::Path(&dir),
        };
        let mut model = lotus_predict::Observer::default();
        let (folder, mut index) = load_feeding(source, true, Some(&mut model))?;
        let observed = model.finish(&dir, cpus()).ok();
        let loops = loop_figures(&mut index)?;
        let (stats, rows) = TraceStats::compute_with(&mut index, rule)?;
        let ranks = rank_stats_with(&folder, &index, rule)?;
        let mut verdict = Verdict::of(
            &loops,
            None,
            &stats.ops,
            crate::render::verdict::cpus_here(),
        );
        if let Some(obs) = &observed {
            with_observed(&mut verdict, obs.clone(), None);
        }
        Ok(Computed {
            label,
            dir,
            shared,
            folder,
            index,
            stats,
            rows: Some(rows),
            ranks,
            loops,
            verdict,
            observed,
        })
    }

    /// Its trace folder as its readers take it: opened once, or the log
    /// named alone.
    pub(crate) fn source(&self) -> Dir<'_> {
        match &self.shared {
            Some(f) => Dir::Shared(f),
            None => Dir::Path(&self.dir),
        }
    }

    /// Its folder and index, for another pass over its events (`lotus
    /// report`'s timeline).
    pub(crate) fn folder_and_index(&mut self) -> (&TraceFolder, &mut TraceIndex) {
        (&self.folder, &mut self.index)
    }

    /// Its verdict with the CPU facts of its samples' attribution.
    pub(crate) fn with_samples(&mut self, a: &InPipelineAttribution) {
        self.verdict = Verdict::of(
            &self.loops,
            Some(a),
            &self.stats.ops,
            crate::render::verdict::cpus_here(),
        );
        if let Some(obs) = &self.observed {
            with_observed(&mut self.verdict, obs.clone(), Some(a));
        }
    }

    /// Every batch's delay to consumption and the main process's wait for
    /// it, ms (those it has), read from its rows (once: a second call
    /// gives nothing).
    pub(crate) fn delays_and_waits_ms(&mut self) -> Result<(Vec<f64>, Vec<f64>)> {
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

/// The configurations of `dirs` ([`lotus_trace::configurations_of`]),
/// its notes said.
pub(crate) fn configurations_of(dirs: &[PathBuf], configs: bool) -> Result<Vec<(String, PathBuf)>> {
    let mut note = |n: String| crate::usage::note!("lotus: {n}");
    Ok(lotus_trace::configurations_of(dirs, configs, &mut note)?)
}
