//! What a run's windows held: their count and length, the op's summary
//! they add to, and the warning for a run with too few samples.

use lotus_core::Unit;
use lotus_core::WindowSummary;

use super::RunOutput;
use crate::op_harness as harness;

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
        if out.windows.count > 0 {
            return RunWindows {
                count: out.windows.count,
                ns: out.windows.duration_ns,
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
    if let Some(u) = out.result.unsampled {
        let sum = summary.unsampled.get_or_insert_with(Default::default);
        sum.calls += u.calls;
        sum.seconds += u.wall_ns as f64 / 1e9;
        sum.cpu_seconds += u.cpu_ns as f64 / 1e9;
    }
    let w = &out.windows;
    let mut samples = w.samples;
    summary.lost_samples += w.lost_samples;
    for (k, v) in &w.counters {
        *summary.counters.entry(k.clone()).or_default() += v;
    }
    for (k, why) in &w.unsupported {
        summary.unsupported.insert(k.clone(), why.clone());
    }
    if w.count == 0 && out.report.unit == Unit::Samples {
        samples = out.report.total() as u64;
    }
    summary.samples += samples;
    samples
}

/// A slowdown from sampling past this many times the backend's aim (the
/// op's calls' CPU time in the windows against its unsampled calls') is
/// warned about: the aim is what the backend's default frequency keeps
/// the slowdown under
/// ([`SamplingCalibration::max_slowdown`](lotus_core::SamplingCalibration::max_slowdown)).
pub(super) const SLOWDOWN_WARNING_FACTOR: f64 = 2.0;

/// Fewer unsampled calls than this give too rough a reference to warn on.
const MIN_UNSAMPLED_CALLS: u64 = 10;

/// The run's progress words for what sampling cost its calls: `sampling
/// +48% CPU a call` (its window's CPU per call against its unsampled
/// calls', as [`WindowSummary::sampling_cost`] gives them for the run's
/// windows alone).
pub(super) fn run_sampling_cost(out: &RunOutput, windows: &RunWindows) -> Option<String> {
    let mut run = WindowSummary::default();
    add_windows(&mut run, out, windows);
    let cost = run.sampling_cost()?;
    Some(format!(
        "sampling {:+.0}% CPU a call",
        cost.slowdown() * 100.0
    ))
}

/// The warning for an op whose calls sampling slowed by more than
/// [`SLOWDOWN_WARNING_FACTOR`] times `aim` (the backend's
/// [`max_slowdown`](lotus_core::SamplingCalibration::max_slowdown)), with
/// what a sample cost it and the frequency that would keep the slowdown
/// at the aim; `None` below it, or without a reference of enough calls.
pub(super) fn sampling_cost_warning(
    shown: &str,
    summary: &WindowSummary,
    hz: u64,
    aim: f64,
) -> Option<String> {
    let cost = summary.sampling_cost()?;
    let unsampled = summary.unsampled?;
    let slowdown = cost.slowdown();
    // `sampling_cost` has checked that the windows counted calls.
    if unsampled.calls < MIN_UNSAMPLED_CALLS || slowdown <= SLOWDOWN_WARNING_FACTOR * aim {
        return None;
    }
    let samples_per_call = summary.samples as f64 / summary.iterations as f64;
    let per_sample_us =
        (cost.sampled_cpu_s - cost.unsampled_cpu_s) * 1e6 / samples_per_call.max(f64::MIN_POSITIVE);
    // The slowdown grows with the frequency: this one keeps it at the aim.
    let suggested = ((hz as f64 * aim / slowdown) / 100.0).floor() as u64 * 100;
    Some(format!(
        "{shown}: sampling at {hz} Hz made each call take {:.0}% more CPU time ({:.1} us against {:.1} us in {} calls with sampling stopped; a sample costs this op about {per_sample_us:.0} us here, more than on a compute loop, as for memory-heavy code in virtual machines): the windows' time per call is the sampled op's (the mapping keeps both); -F {} keeps the slowdown near {:.0}%",
        slowdown * 100.0,
        cost.sampled_cpu_s * 1e6,
        cost.unsampled_cpu_s * 1e6,
        unsampled.calls,
        suggested.max(100),
        aim * 100.0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_core::UnsampledCalls;

    /// The perf backend's aim (`lotus_backend_perf::MAX_SLOWDOWN`).
    const AIM: f64 = 0.10;

    fn summary(sampled_us: f64, unsampled_calls: u64) -> WindowSummary {
        let mut w = WindowSummary {
            iterations: 1000,
            samples: 800,
            ..WindowSummary::default()
        };
        w.counters
            .insert("task-clock-ns".into(), sampled_us * 1000.0 * 1000.0);
        w.unsampled = Some(UnsampledCalls::new(
            unsampled_calls,
            unsampled_calls as f64 * 100e-6,
            unsampled_calls as f64 * 100e-6,
        ));
        w
    }

    #[test]
    fn a_slowdown_past_the_limit_is_warned_with_the_cost_and_a_frequency() {
        // 150 us a call sampled against 100 us: +50% at 5000 Hz, 0.8
        // samples a call, so 62.5 us a sample; 10% needs 1000 Hz.
        let why = sampling_cost_warning("Flip", &summary(150.0, 200), 5000, AIM).expect("warned");
        assert!(why.contains("50% more CPU time"), "{why}");
        assert!(
            why.contains("150.0 us against 100.0 us in 200 calls"),
            "{why}"
        );
        assert!(why.contains("about 62 us"), "{why}");
        assert!(why.contains("-F 1000 "), "{why}");
        // Under the limit, or with too few unsampled calls: no warning.
        assert_eq!(
            sampling_cost_warning("Flip", &summary(115.0, 200), 5000, AIM),
            None
        );
        assert_eq!(
            sampling_cost_warning("Flip", &summary(150.0, 3), 5000, AIM),
            None
        );
        // The suggestion never goes below 100 Hz.
        let why = sampling_cost_warning("Flip", &summary(10_000.0, 200), 100, AIM).expect("warned");
        assert!(why.contains("-F 100 "), "{why}");
    }
}
