//! Trace folders read for their statistics, shared by `lotus trace stats`
//! and `lotus report`: one trace loaded (its bad lines said), the
//! configurations several folders make, one configuration's figures
//! ([`computed`]) and the attribution of the samples beside its logs.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use lotus_attribute::{attribute_folder, InPipelineAttribution, TraceFigures, TOP_FUNCTIONS};
use lotus_samples::SampleFiles;
use lotus_sort::Budget;
use lotus_trace::OutlierRule;
use lotus_trace::{Dir, JobHosts, SharedFolder, TraceFolder, TraceIndex, Warnings};

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

/// Prints the bad lines (the first [`Warnings::KEEP`]) to stderr.
pub(crate) fn report_warnings(w: &Warnings) {
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

/// [`load`] of a folder scanned (or of several hosts' merged).
pub(crate) fn load_folder(
    folder: TraceFolder,
    durations: bool,
) -> Result<(TraceFolder, TraceIndex)> {
    index_feeding(folder, durations, None)
}

/// [`load`], handing `model` the events the predictions' model reads in
/// the same pass.
fn load_feeding(
    dir: Dir<'_>,
    durations: bool,
    model: Option<&mut lotus_predict::Observer>,
) -> Result<(TraceFolder, TraceIndex)> {
    index_feeding(TraceFolder::scan(dir)?, durations, model)
}

/// [`load_feeding`] of a folder scanned (or merged) already.
fn index_feeding(
    folder: TraceFolder,
    durations: bool,
    model: Option<&mut lotus_predict::Observer>,
) -> Result<(TraceFolder, TraceIndex)> {
    for note in folder.empty_logs() {
        crate::usage::note!("lotus: {note}");
    }
    let budget = Budget::from_env()?;
    let index = match model {
        Some(m) => m.load_index(&folder, durations, budget)?,
        None => TraceIndex::load(&folder, durations, budget, |_| {})?,
    };
    report_warnings(&index.warnings);
    if index.events == 0 {
        bail!(
            "{}: no readable events in {} log file(s) ({} bad line(s))",
            folder.root.display(),
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
    if !is_sampled(dir.path(), prefix) {
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

/// Whether `dir` holds samples (of `prefix`).
pub(crate) fn is_sampled(dir: &std::path::Path, prefix: &str) -> bool {
    dir.is_dir() && SampleFiles::of(dir, prefix).samples.is_file()
}

/// The trace folder `dir` opened to be read once by all its readers
/// (`None` for a log named alone, read as it is).
pub(crate) fn shared_folder(dir: &std::path::Path) -> Result<Option<SharedFolder>> {
    dir.is_dir()
        .then(|| SharedFolder::open_reading_once(dir, READ_ONCE_BYTES))
        .transpose()
        .with_context(|| format!("cannot open the trace folder {}", dir.display()))
}

/// One configuration's figures ([`TraceFigures::of`]), the model fed by
/// the statistics' pass; its files held for all readers where more follow
/// (`read_again`: the samples' attribution, timeline, flames), else not.
pub(crate) fn computed(
    label: String,
    dir: PathBuf,
    rule: OutlierRule,
    read_again: bool,
) -> Result<TraceFigures> {
    let shared = if read_again {
        shared_folder(&dir)?
    } else {
        None
    };
    let source = Dir::of(&dir, shared.as_ref());
    figures_of(label, TraceFolder::scan(source)?, rule)
}

/// One trace's figures, of its folder scanned (or of several hosts'
/// folders merged).
fn figures_of(label: String, folder: TraceFolder, rule: OutlierRule) -> Result<TraceFigures> {
    let dir = folder.root.clone();
    let mut model = lotus_predict::Observer::default();
    let (folder, index) = index_feeding(folder, true, Some(&mut model))?;
    let cpus = lotus_attribute::cpus_here().unwrap_or(1) as f64;
    let observed = model.finish(&dir, cpus).ok();
    Ok(TraceFigures::of(label, folder, index, observed, rule)?)
}

/// The folders of one distributed job's hosts, merged
/// ([`JobHosts::merge`]), where `dirs` are that: tried where two or more
/// are given. Where they are not, `asked` (`--hosts`) makes it an error
/// naming the reason; else they are configurations, and where their logs
/// name jobs at all the reason is said.
pub(crate) fn one_job(dirs: &[PathBuf], asked: bool) -> Result<Option<(TraceFolder, JobHosts)>> {
    match JobHosts::of_dirs(dirs)? {
        Ok(merged) => Ok(Some(merged)),
        Err(e) if asked => Err(crate::usage::usage(format!("--hosts: {e}; give the folders one launch of the job wrote, one per host, or leave out --hosts to compare runs as configurations"))),
        Err(e) => {
            if e.named {
                crate::usage::note!("lotus: note: compared as configurations, not merged as one job's hosts: {e}");
            }
            Ok(None)
        }
    }
}

/// The figures of one job's hosts' folders merged ([`one_job`]).
pub(crate) fn job_figures(
    merged: (TraceFolder, JobHosts),
    rule: OutlierRule,
) -> Result<TraceFigures> {
    let (folder, job) = merged;
    let label = format!("job {}", job.job);
    Ok(figures_of(label, folder, rule)?.with_job(job))
}

/// The configurations of `dirs` ([`lotus_trace::configurations_of`]),
/// its notes said.
pub(crate) fn configurations_of(dirs: &[PathBuf], configs: bool) -> Result<Vec<(String, PathBuf)>> {
    let mut note = |n: String| crate::usage::note!("lotus: {n}");
    Ok(lotus_trace::configurations_of(dirs, configs, &mut note)?)
}
