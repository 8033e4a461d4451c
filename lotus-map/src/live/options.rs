//! The settings of a live mapping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lotus_core::{CollectOptions, MergeRule, Profiler};

use super::threads::ThreadPlan;
use crate::error::{MapError, Result};
use crate::output::one_line;

/// Settings of a live mapping: [`LiveOptions::new`] gives the `lotus map`
/// defaults, the `with_*` methods change them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LiveOptions {
    /// Runs (processes) per op.
    pub runs: u32,
    /// Op calls before each window.
    pub warmup: u32,
    /// Sampling frequency, Hz.
    pub frequency: u64,
    /// The caller chose `frequency` ([`LiveOptions::with_frequency`]);
    /// else it is the backend's default ([`default_frequency`]). The
    /// mapping records which.
    pub frequency_given: bool,
    /// Samples a window should hold; sets the window's length with the
    /// frequency.
    pub min_samples: u64,
    /// Least window length.
    pub min_window: Duration,
    /// Least op calls per window.
    pub min_iterations: u64,
    /// Longest one run may take.
    pub timeout: Duration,
    /// The Python interpreter.
    pub python: PathBuf,
    /// The control library the profiled processes load
    /// (`liblotus_control.so`): the harness opens its windows through it,
    /// and where lotus switches the windows it is also their ITT
    /// collector. Run as root, give one only root can write.
    pub control_library: PathBuf,
    /// The control library's bytes, written into the harness's private
    /// folder for the mapping (and removed with it) in place of
    /// `control_library` ([`LiveOptions::with_control_library_bytes`]).
    pub control_library_bytes: Option<&'static [u8]>,
    /// Called with the harness's temporary folder once it is made (the
    /// `lotus` binary registers it for removal should memory run out).
    pub on_temp_folder: Option<fn(&Path)>,
    /// The merge rule.
    pub rule: MergeRule,
    /// Run the harness floor.
    pub baseline: bool,
    /// Drop functions the floor shows too.
    pub exclude_baseline: bool,
    /// The vendor analysis type (VTune `-collect`, uProf `--config`).
    pub collect_type: Option<String>,
    /// Keep each run's raw vendor results under this folder.
    pub keep_raw: Option<PathBuf>,
    /// The op processes' thread counts (see [`super::threads`]).
    pub threads: ThreadPlan,
    /// The folder every op runs in (made absolute by
    /// [`LiveOptions::with_cwd`]); `None`: each op's own folder.
    pub cwd: Option<PathBuf>,
    /// Each resume and pause waits for lotus (the reference mode), even
    /// where the backend takes edges the op process stamps itself.
    pub round_trip: bool,
    /// One interpreter per run even where the fork server could make the
    /// runs (under perf: one process per op imports it once and forks a
    /// child per run).
    pub no_fork_server: bool,
    /// The most window names of one script that are mapped: each name is
    /// mapped in runs of its own (a script giving `lotus.resume` N names
    /// costs 1 + N × `runs` runs), so past this many the first ones (in
    /// the order the script opened them) are mapped and the others left
    /// out, with a warning ([`MAX_WINDOW_NAMES`] by default).
    pub max_window_names: usize,
    /// Call stacks with the samples, into each op's
    /// [`lotus_core::OpMapping::stacks`] (perf; none by default).
    pub stacks: lotus_core::CallStacks,
}

/// The default of [`LiveOptions::max_window_names`]: more ops than one
/// pipeline has (the study's have under 20), few enough that a script
/// naming its windows per sample or per batch (`f"batch{i}"`) cannot make
/// lotus run it thousands of times.
pub const MAX_WINDOW_NAMES: usize = 64;

impl LiveOptions {
    /// The `lotus map` defaults: 3 runs of 3 warm-up calls each, windows
    /// of 3000 samples and at least 200 ms and one call, at
    /// [`DEFAULT_FREQUENCY_HZ`],
    /// 120 s per run, the union rule, the harness floor, one thread per
    /// runtime unless the environment sets them ([`ThreadPlan::from_env`]).
    pub fn new(python: impl Into<PathBuf>, control_library: impl Into<PathBuf>) -> LiveOptions {
        LiveOptions {
            runs: 3,
            warmup: 3,
            frequency: DEFAULT_FREQUENCY_HZ,
            frequency_given: false,
            min_samples: 3000,
            min_window: Duration::from_millis(200),
            min_iterations: 1,
            timeout: Duration::from_secs(120),
            python: python.into(),
            control_library: control_library.into(),
            control_library_bytes: None,
            on_temp_folder: None,
            rule: MergeRule::Union,
            baseline: true,
            exclude_baseline: false,
            collect_type: None,
            keep_raw: None,
            threads: ThreadPlan::from_env(None),
            cwd: None,
            round_trip: false,
            no_fork_server: false,
            max_window_names: MAX_WINDOW_NAMES,
            stacks: lotus_core::CallStacks::None,
        }
    }

    /// Call stacks with the samples as `stacks` says (see
    /// [`LiveOptions::stacks`]).
    pub fn with_stacks(mut self, stacks: lotus_core::CallStacks) -> Self {
        self.stacks = stacks;
        self
    }

    /// The most window names of one script that are mapped (at least 1;
    /// see [`LiveOptions::max_window_names`]).
    pub fn with_max_window_names(mut self, names: usize) -> Self {
        self.max_window_names = names.max(1);
        self
    }

    /// Runs (processes) per op; at least one.
    pub fn with_runs(mut self, runs: u32) -> Self {
        self.runs = runs.max(1);
        self
    }

    /// Op calls before each window.
    pub fn with_warmup(mut self, warmup: u32) -> Self {
        self.warmup = warmup;
        self
    }

    /// The control library as bytes (a binary that carries its own): the
    /// engine writes them into its private harness folder (see
    /// [`crate::op_harness::write_control_library`]), which goes with the
    /// harness when the mapping ends, even when lotus is killed, and loads
    /// that copy instead of `control_library`.
    pub fn with_control_library_bytes(mut self, bytes: &'static [u8]) -> Self {
        self.control_library_bytes = Some(bytes);
        self
    }

    /// Sampling frequency in Hz (perf: the kernel caps it at
    /// `perf_event_max_sample_rate`; vendor tools get the matching
    /// interval).
    pub fn with_frequency(mut self, hz: u64) -> Self {
        self.frequency = hz.max(1);
        self.frequency_given = true;
        self
    }

    /// The backend's default frequency, as [`default_frequency`] gives it:
    /// recorded in the mapping as the default, not as chosen.
    pub fn with_default_frequency(mut self, hz: u64) -> Self {
        self.frequency = hz.max(1);
        self.frequency_given = false;
        self
    }

    /// Samples each window should hold; with the backend's sampling
    /// interval it sets the window's length.
    pub fn with_min_samples(mut self, samples: u64) -> Self {
        self.min_samples = samples;
        self
    }

    /// Least window length.
    pub fn with_min_window(mut self, window: Duration) -> Self {
        self.min_window = window;
        self
    }

    /// Least op calls per window.
    pub fn with_min_iterations(mut self, calls: u64) -> Self {
        self.min_iterations = calls;
        self
    }

    /// Longest one run may take before it is stopped.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The merge rule across runs.
    pub fn with_rule(mut self, rule: MergeRule) -> Self {
        self.rule = rule;
        self
    }

    /// Whether to run the harness floor (the empty op whose functions are
    /// marked `baseline`), and whether to drop those functions.
    pub fn with_baseline(mut self, run: bool, exclude: bool) -> Self {
        self.baseline = run;
        self.exclude_baseline = run && exclude;
        self
    }

    /// The vendor analysis type (VTune `-collect`, uProf `--config`).
    pub fn with_collect_type(mut self, collect_type: Option<String>) -> Self {
        self.collect_type = collect_type;
        self
    }

    /// Keep each run's raw vendor results under `dir/<op>-run<N>`.
    pub fn with_keep_raw(mut self, dir: Option<PathBuf>) -> Self {
        self.keep_raw = dir;
        self
    }

    /// The op processes' thread counts.
    pub fn with_threads(mut self, plan: ThreadPlan) -> Self {
        self.threads = plan;
        self
    }

    /// Runs every op in `dir` instead of its own folder (the op's folder
    /// stays importable). The error names the folder when it is not one.
    pub fn with_cwd(mut self, dir: Option<&Path>) -> Result<Self> {
        self.cwd = dir.map(op_folder).transpose()?;
        Ok(self)
    }

    /// Each resume and pause waits for lotus (the reference mode).
    pub fn with_round_trip(mut self, round_trip: bool) -> Self {
        self.round_trip = round_trip;
        self
    }

    /// One interpreter per run, no fork server.
    pub fn with_fork_server(mut self, fork_server: bool) -> Self {
        self.no_fork_server = !fork_server;
        self
    }

    /// Called with the harness's temporary folder once it is made.
    pub fn with_temp_folder_hook(mut self, hook: fn(&Path)) -> Self {
        self.on_temp_folder = Some(hook);
        self
    }

    /// Whether the op processes stamp their own window edges and go on
    /// without waiting for lotus: where the backend takes such edges
    /// (perf) and `--round-trip` is not given.
    pub fn window_stamps(&self, backend: &dyn Profiler) -> bool {
        backend.switches_windows() && backend.takes_window_stamps() && !self.round_trip
    }

    /// The time between two samples under `backend`: the interval its tool
    /// is given (VTune's and uProf's take only some), else one period of
    /// the frequency.
    pub fn sample_interval(&self, backend: &dyn Profiler) -> Duration {
        let mut copts = CollectOptions::default();
        copts.frequency_hz = Some(self.frequency);
        copts.collect_type.clone_from(&self.collect_type);
        backend
            .sample_interval(&copts)
            .unwrap_or_else(|| Duration::from_secs_f64(1.0 / self.frequency.max(1) as f64))
    }

    /// How long each window stays open: long enough for `min_samples` at
    /// the backend's interval, and at least `min_window`.
    pub fn window(&self, backend: &dyn Profiler) -> Duration {
        let for_samples = self
            .sample_interval(backend)
            .mul_f64(self.min_samples as f64);
        for_samples.max(self.min_window)
    }
}

/// The folder `lotus map --cwd DIR` runs the ops in: DIR made absolute
/// (the harness changes folder before it runs the op), refused with the
/// flag's name when it is not a folder.
fn op_folder(dir: &Path) -> Result<PathBuf> {
    let shown = one_line(&dir.display().to_string());
    let abs = dir.canonicalize().map_err(|e| {
        MapError::context(
            format!("--cwd {shown}: cannot use it as the ops' working folder"),
            e,
        )
    })?;
    if !abs.is_dir() {
        return Err(MapError::Folder(format!("--cwd {shown}: not a folder (give the folder the ops should run in, e.g. --cwd . for this one)")));
    }
    Ok(abs)
}

/// The sampling frequency asked of a backend that states no default of
/// its own (no [`SamplingCalibration`](lotus_core::SamplingCalibration)):
/// 10 kHz, the perf backend's full default too (vtune and uprof take it as
/// their interval, 0.1 ms).
pub const DEFAULT_FREQUENCY_HZ: u64 = 10_000;

/// The default sampling frequency under `backend` (its registered name),
/// and a note for the user when it is lower than usual. Under a backend
/// that calibrates ([`lotus_core::Profiler::calibration`]; perf) that is
/// its full default (10 kHz) where a sample costs the op little, lower
/// where it costs more, so that sampling slows the op by under its
/// [`max_slowdown`](lotus_core::SamplingCalibration::max_slowdown) (10%;
/// measured once per process, about 0.1 s); other backends (and a name not
/// registered) take [`DEFAULT_FREQUENCY_HZ`].
pub fn default_frequency(backend: &str) -> (u64, Option<String>) {
    let Ok(profiler) = lotus_core::backend(backend) else {
        return (DEFAULT_FREQUENCY_HZ, None);
    };
    let Some(calibration) = profiler.calibration() else {
        return (DEFAULT_FREQUENCY_HZ, None);
    };
    let full = calibration.default_frequency_hz();
    let cost = calibration.sampling_cost().ok();
    let hz = calibration.default_frequency_for(cost);
    let note = cost.filter(|_| hz < full).map(|c| {
        format!(
            "sampling at {hz} Hz: here each sample costs a compute loop {:.1} us of CPU, so {full} Hz would slow it by {:.0}% and shift an op's function shares (-F {full} to sample that fast anyway; each op's own cost is measured and warned about)",
            c.per_sample.as_secs_f64() * 1e6,
            c.slowdown_at(full) * 100.0,
        )
    });
    (hz, note)
}
