//! What a run's windows held: their count and length, the op's summary
//! they add to, and the warning for a run with too few samples.

use lotus_core::mapping::WindowSummary;
use lotus_core::Unit;

use super::RunOutput;
use crate::harness;

/// How many windows a run opened and how long they were open.
pub(super) struct RunWindows {
    pub(super) count: u64,
    pub(super) ns: u64,
}

impl RunWindows {
    /// Where lotus switched the windows it saw each one (and its length
    /// on the samples' clock): those count, ITT's included. Otherwise (the
    /// vendor's tool switched them) the harness's own account: the op
    /// loop's one window, or a script's windows opened through the `lotus`
    /// module and the stand-ins, timed around the calls.
    pub(super) fn of(out: &RunOutput) -> RunWindows {
        if !out.windows.is_empty() {
            return RunWindows {
                count: out.windows.len() as u64,
                ns: out.windows.iter().map(|w| w.duration_ns).sum(),
            };
        }
        let count = match out.result.mode {
            Some(harness::HarnessMode::Script) => out.result.windows.iter().map(|(_, n)| n).sum(),
            _ => u64::from(out.result.window_ns.is_some()),
        };
        RunWindows {
            count,
            ns: out.result.window_ns.unwrap_or(0),
        }
    }
}

/// The warning for a run whose windows held under half the samples asked
/// for. The op loop stops on CPU time, so few samples there mean the op
/// mostly waited; a script's windows hold only what it runs between resume
/// and pause (the study's scripts: one call each), so the cure is more
/// runs or a loop inside the window. `script`: that run's windows.
pub(super) fn low_samples_warning(
    shown: &str,
    run: u32,
    samples: u64,
    wanted: u64,
    script: Option<&RunWindows>,
) -> String {
    match script {
        Some(w) => format!(
            "{shown}: run {run}'s {} window(s) held only {samples} samples in {:.3} s (wanted {wanted}): a script's window holds only what the script runs inside it (one call, in the study's scripts); raise --runs, or loop the op between resume and pause",
            w.count,
            w.ns as f64 / 1e9
        ),
        None => format!(
            "{shown}: run {run}'s window held only {samples} samples (wanted {wanted}); the op may mostly wait rather than compute"
        ),
    }
}

/// Adds a run's windows to the op's summary; returns the run's samples.
pub(super) fn add_windows(
    summary: &mut WindowSummary,
    out: &RunOutput,
    windows: &RunWindows,
) -> u64 {
    summary.seconds += windows.ns as f64 / 1e9;
    summary.windows += windows.count;
    summary.iterations += out.result.iterations.unwrap_or(0);
    let mut samples = 0;
    for w in &out.windows {
        samples += w.samples;
        summary.lost_samples += w.lost_samples;
        for (k, v) in &w.counters {
            *summary.counters.entry(k.clone()).or_default() += v;
        }
        for (k, why) in &w.unsupported {
            summary.unsupported.insert(k.clone(), why.clone());
        }
    }
    if out.windows.is_empty() && out.report.unit == Unit::Samples {
        samples = out.report.total() as u64;
    }
    summary.samples += samples;
    samples
}
