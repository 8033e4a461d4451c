//! Live mapping: run each op file alone under a profiler and record which
//! native functions ran inside its window.
//!
//! For every op and run, one Python process runs the harness
//! ([`crate::harness`]) under the backend's [`Collection`], paused. The
//! harness calls `setup()`, warms up, asks for the window through the
//! control library, loops the op for the window's length, and closes it.
//! The control requests arrive here over a pipe; this process switches the
//! window ([`Collection::resume`] / [`Collection::pause`]) and acknowledges
//! before the op runs. After all runs, the op's reports are merged by the
//! rule. A harness floor (an empty op under the same harness) marks the
//! functions every op shows (interpreter loop, allocator) as `baseline`.
//!
//! Failures stay with their op: an op that raises, hangs past the timeout
//! or crashes is reported, and the other ops are still mapped.

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use lotus_backend_common::reaper::Reaper;
use lotus_control::host::ControlHost;
use lotus_core::control::{Reply, Request, ENV_BACKEND};
use lotus_core::mapping::{OpAccumulator, OpMapping, Settings, WindowSummary};
use lotus_core::{
    CollectOptions, Collection, Mapping, MergeRule, Profiler, Report, Target, Unit, WindowStats,
};

use crate::echo::Echo;
use crate::harness::{self, HarnessArgs, HarnessFiles, HarnessResult, HarnessStage};
use crate::output::one_line;

mod fork_server;
mod run_checks;
pub(crate) mod threads;
use crate::program::{find_program, ProgramError};
use fork_server::{fork_server_runs, run_server};
pub(crate) use run_checks::check_op_file;
use run_checks::{empty_run, window_names};

/// Settings of a live mapping.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Runs (processes) per op.
    pub runs: u32,
    /// Op calls before each window.
    pub warmup: u32,
    /// Sampling frequency, Hz.
    pub frequency: u64,
    /// `-F` was given (else `frequency` is the backend's default, see
    /// [`default_frequency`]).
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
    /// The op processes' thread counts (see [`threads`]).
    pub threads: threads::ThreadPlan,
    /// The folder every op runs in (absolute, see [`op_folder`]); `None`:
    /// each op's own folder.
    pub cwd: Option<PathBuf>,
    /// Each resume and pause waits for lotus (the reference mode), even
    /// where the backend takes edges the op process stamps itself.
    pub round_trip: bool,
    /// One interpreter per run even where the fork server could make the
    /// runs (see [`fork_server_runs`]).
    pub no_fork_server: bool,
}

impl LiveOptions {
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

/// What a live mapping produced.
pub struct LiveOutcome {
    /// Every op that finished all its runs.
    pub mapping: Mapping,
    /// One message per op that failed.
    pub failures: Vec<(String, String)>,
    /// Ctrl-C stopped the mapping early.
    pub interrupted: bool,
}

/// The sampling frequency: `given`, else the backend's default. Under
/// perf that is 10 kHz where a sample costs the op little, lower where it
/// costs more (see [`lotus_backend_perf::default_frequency_for`]); a
/// lowered default is said once.
pub fn default_frequency(backend: &str, given: Option<u64>) -> u64 {
    if let Some(hz) = given {
        return hz;
    }
    if backend != "perf" {
        return lotus_backend_perf::DEFAULT_FREQUENCY_HZ;
    }
    let cost = lotus_backend_perf::sampling_cost().ok();
    let hz = lotus_backend_perf::default_frequency_for(cost);
    if let Some(c) = cost.filter(|_| hz < lotus_backend_perf::DEFAULT_FREQUENCY_HZ) {
        crate::usage::note!(
            "lotus: note: sampling at {hz} Hz: here each sample costs the op {:.1} us, so {} Hz would slow it by {:.0}% and shift its functions' shares (-F {} to sample that fast anyway)",
            c.per_sample.as_secs_f64() * 1e6,
            lotus_backend_perf::DEFAULT_FREQUENCY_HZ,
            c.slowdown_at(lotus_backend_perf::DEFAULT_FREQUENCY_HZ) * 100.0,
            lotus_backend_perf::DEFAULT_FREQUENCY_HZ
        );
    }
    hz
}

/// The Python interpreter: `--python`, else `$LOTUS_PYTHON`, else the
/// active virtual environment's, else `python3` on PATH.
pub fn find_python(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return find_program(p).map_err(|e| match e {
            ProgramError::Missing(_) => anyhow!(
                "--python {}: no such interpreter (give the path of a python executable)",
                p.display()
            ),
            ProgramError::Unusable(why) => anyhow!("--python {}: {why}", p.display()),
        });
    }
    if let Some(p) = std::env::var_os("LOTUS_PYTHON") {
        return find_program(Path::new(&p)).map_err(|e| match e {
            ProgramError::Missing(_) => {
                anyhow!("LOTUS_PYTHON={}: no such interpreter", p.to_string_lossy())
            }
            ProgramError::Unusable(why) => anyhow!("LOTUS_PYTHON={}: {why}", p.to_string_lossy()),
        });
    }
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        let p = Path::new(&venv).join("bin").join("python");
        if p.is_file() {
            return Ok(harness::warn_if_others_can_change(p));
        }
    }
    which::which("python3")
        .or_else(|_| which::which("python"))
        .map(harness::warn_if_others_can_change)
        .map_err(|_| {
            anyhow!(
                "no Python found: python3 is not on PATH; install Python 3 or pass --python PATH"
            )
        })
}

/// The folder `lotus map --cwd DIR` runs the ops in: DIR made absolute
/// (the harness changes folder before it runs the op), refused with the
/// flag's name when it is not a folder.
pub fn op_folder(dir: &Path) -> Result<PathBuf> {
    let shown = one_line(&dir.display().to_string());
    let abs = dir
        .canonicalize()
        .with_context(|| format!("--cwd {shown}: cannot use it as the ops' working folder"))?;
    if !abs.is_dir() {
        bail!("--cwd {shown}: not a folder (give the folder the ops should run in, e.g. --cwd . for this one)");
    }
    Ok(abs)
}

/// Why one run failed.
#[derive(Debug)]
pub(crate) enum RunError {
    /// Ctrl-C (or SIGTERM).
    Interrupted,
    /// Still running at the time limit (it was stopped); each command
    /// words it for what it runs.
    TimedOut(Duration),
    /// Anything else, in words.
    Failed(String),
}

impl RunError {
    /// The failure as a map run reports it.
    fn op_message(self) -> String {
        match self {
            RunError::Interrupted => "interrupted".into(),
            RunError::TimedOut(timeout) => format!(
                "still running after --timeout {} s: stopped it and everything it started (is the op stuck, or does it need a longer --timeout?)",
                timeout.as_secs_f64()
            ),
            RunError::Failed(why) => why,
        }
    }
}

impl From<anyhow::Error> for RunError {
    fn from(e: anyhow::Error) -> Self {
        RunError::Failed(format!("{e:#}"))
    }
}

/// One finished run.
struct RunOutput {
    report: Report,
    result: HarnessResult,
    windows: Vec<WindowStats>,
}

/// One op to map: its file, and whether it is the empty floor.
struct OpSpec<'a> {
    file: &'a Path,
    empty: bool,
    label: String,
}

/// How many runs `spec` gets: `--runs` for an op; one for the harness
/// floor, which only marks the functions every op shows (interpreter loop,
/// allocator) and at `--runs` runs cost as much as an op (a third of a
/// two-op mapping's time).
fn runs_of(spec: &OpSpec, opts: &LiveOptions) -> u32 {
    if spec.empty {
        1
    } else {
        opts.runs
    }
}

/// The runs to make: the harness floor first (when asked for), then each
/// op file.
fn op_specs(ops: &[PathBuf], baseline: bool) -> Vec<OpSpec<'_>> {
    let floor = ops.first().filter(|_| baseline).map(|first| OpSpec {
        file: first.as_path(),
        empty: true,
        label: "(harness floor)".into(),
    });
    floor
        .into_iter()
        .chain(ops.iter().map(|f| {
            OpSpec {
                file: f.as_path(),
                empty: false,
                label: f
                    .file_stem()
                    .map(|s| s.to_string_lossy().to_string())
                    .unwrap_or_default(),
            }
        }))
        .collect()
}

/// Progress across ops and runs: a bar on a terminal, lines otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    total: u64,
    done: u64,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = (std::io::stderr().is_terminal() && !crate::usage::quiet()).then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Progress {
            bar,
            total,
            done: 0,
        }
    }

    /// More runs to make than counted at the start.
    fn add(&mut self, runs: u64) {
        self.total += runs;
        if let Some(bar) = &self.bar {
            bar.inc_length(runs);
        }
    }

    fn start(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_string());
        }
    }

    fn finish_run(&mut self, line: &str) {
        self.done += 1;
        match &self.bar {
            Some(bar) => {
                bar.inc(1);
                bar.println(line);
            }
            None => crate::usage::note!("lotus: [{}/{}] {line}", self.done, self.total),
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            // Errors and warnings come this way too: printed under --quiet.
            None => eprintln!("lotus: {line}"),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// What `lotus map --dry-run` prints: for each op (and the harness floor),
/// the exact commands and environment the backend would use, without
/// running anything. Works where the backend's tool is missing, with a note
/// saying so.
pub fn dry_run(backend: &dyn Profiler, ops: &[PathBuf], opts: &LiveOptions) -> Result<String> {
    let files = harness::write_harness()
        .context("cannot write the Python harness to a temporary folder")?;
    let control_lib = crate::control_lib::path_for_run(files.dir.path())?;
    let probe = backend.probe();
    let runs_made = if backend.switches_windows()
        && backend.takes_window_stamps()
        && !opts.no_fork_server
    {
        "an op's runs are children forked by the one process shown (--runs: the fork server; a script declines and gets one process per run like it)"
    } else {
        "each like run 1 below"
    };
    let mut out = format!(
        "lotus map --backend {} (dry run: nothing is run; {} run(s) per op and one of the harness floor; {runs_made})\n",
        backend.name(),
        opts.runs
    );
    if let Some(reason) = &probe.reason {
        out += &format!(
            "note: the {} backend cannot run here: {reason}\n",
            backend.name()
        );
    }
    out += &format!(
        "note: the harness is written to a new temporary folder per mapping (here {})\n",
        files.dir.path().display()
    );
    let specs = op_specs(ops, opts.baseline);
    let mut copts = CollectOptions::default();
    copts.frequency_hz = Some(opts.frequency);
    copts.collect_type.clone_from(&opts.collect_type);
    copts.keep_raw.clone_from(&opts.keep_raw);
    copts.window_stamps = opts.window_stamps(backend);
    for spec in &specs {
        let result = files.dir.path().join("result-1.json");
        let mut target = harness_target(
            backend,
            &files,
            &control_lib,
            spec,
            &result,
            opts,
            fork_server_runs(backend, spec, None, opts),
        );
        if backend.switches_windows() {
            target.env.push((
                lotus_core::control::ENV_CONTROL_FDS.into(),
                "<read_fd>,<write_fd> (a pipe pair lotus opens per run)".into(),
            ));
        }
        let plan = backend.plan(&target, &copts);
        out += &format!(
            "\n# {} ({})\n",
            one_line(&spec.label),
            one_line(&spec.file.display().to_string())
        );
        for (k, v) in &plan.env {
            out += &format!("export {k}={}\n", lotus_core::profiler::shell_quote(v));
        }
        for c in &plan.commands {
            out += c;
            out.push('\n');
        }
        for n in &plan.notes {
            out += &format!("note: {n}\n");
        }
    }
    Ok(out)
}

/// Maps `ops` live with `backend`.
pub fn map_live(
    backend: &dyn Profiler,
    ops: &[PathBuf],
    opts: &LiveOptions,
    interrupted: &Arc<AtomicBool>,
) -> Result<LiveOutcome> {
    for op in ops {
        check_op_file(op)?;
    }
    let probe = backend.probe();
    if !probe.available {
        bail!(
            "the {} backend cannot run here: {}",
            backend.name(),
            probe.reason.as_deref().unwrap_or("no reason given")
        );
    }
    let files = harness::write_harness()
        .context("cannot write the Python harness to a temporary folder")?;
    crate::oom::remove_on_oom(files.dir.path());
    if let Some(other) = std::env::var_os(ENV_ITT_COLLECTOR).filter(|_| backend.switches_windows())
    {
        crate::usage::note!(
            "lotus: note: {ENV_ITT_COLLECTOR}={} is set (oneAPI's environment sets it); under --backend {} lotus replaces it with its own collector so that ITT windows (ittapi.resume/pause) reach lotus",
            other.to_string_lossy(),
            backend.name()
        );
    }
    let control_lib = crate::control_lib::path_for_run(files.dir.path())?;

    let specs = op_specs(ops, opts.baseline);

    let mut progress = Progress::new(specs.iter().map(|s| u64::from(runs_of(s, opts))).sum());
    let mut finished: Vec<OpMapping> = Vec::new();
    let mut baseline: Option<OpMapping> = None;
    let mut failures = Vec::new();
    let mut was_interrupted = false;

    let ctx = RunContext {
        backend,
        files: &files,
        control_lib: &control_lib,
        opts,
        interrupted,
    };
    'ops: for spec in &specs {
        let mut mapped = Vec::new();
        match map_op(&ctx, spec, None, &mut progress) {
            OpOutcome::Mapped(op) => mapped.push(op),
            OpOutcome::Failed(name, why) => failures.push((name, why)),
            OpOutcome::Interrupted => {
                was_interrupted = true;
                break 'ops;
            }
            OpOutcome::Split(names) => {
                // A script that opens windows under several names: each
                // name is its own op, measured in runs of its own (the
                // first run, which mixed them, is not kept).
                progress.say(&format!(
                    "{}: the script opens windows for {} ops ({}): mapping each in runs of its own",
                    one_line(&spec.label),
                    names.len(),
                    one_line(&names.join(", "))
                ));
                // Each name's runs, in place of the file's runs after the
                // first.
                let runs = u64::from(opts.runs);
                progress.add(names.len() as u64 * runs - (runs - 1));
                for name in &names {
                    match map_op(&ctx, spec, Some(name), &mut progress) {
                        OpOutcome::Mapped(op) => mapped.push(op),
                        OpOutcome::Failed(name, why) => failures.push((name, why)),
                        OpOutcome::Split(_) => {}
                        OpOutcome::Interrupted => {
                            was_interrupted = true;
                            break 'ops;
                        }
                    }
                }
            }
        }
        for op in mapped {
            if spec.empty {
                let mut op = op;
                op.name = "(empty)".into();
                baseline = Some(op);
            } else if finished.iter().any(|o| o.name == op.name) {
                failures.push((
                    op.name.clone(),
                    format!(
                        "{}: another op (file, or window name in a script) has the same name; set NAME in one of them or rename its windows",
                        spec.file.display()
                    ),
                ));
            } else {
                finished.push(op);
            }
        }
    }
    progress.finish();

    let settings = Settings {
        runs: Some(opts.runs),
        warmup: Some(opts.warmup),
        rule: opts.rule,
    };
    let mut mapping = Mapping::new(backend.name(), backend.unit(), settings, finished);
    if let Some(floor) = baseline {
        mapping.mark_baseline(floor, opts.exclude_baseline);
    }
    mapping.environment = environment(backend, probe.version.clone(), opts);
    Ok(LiveOutcome {
        mapping,
        failures,
        interrupted: was_interrupted,
    })
}

/// What stays the same for every run of a mapping.
struct RunContext<'a> {
    backend: &'a dyn Profiler,
    files: &'a HarnessFiles,
    control_lib: &'a Path,
    opts: &'a LiveOptions,
    interrupted: &'a Arc<AtomicBool>,
}

/// What mapping one op (file, or one window name of a script) gave.
enum OpOutcome {
    /// Every run finished: the merged op.
    Mapped(OpMapping),
    /// A run failed: the op's name and why.
    Failed(String, String),
    /// The first run showed a script opening windows under several names
    /// (in first-seen order): each is mapped on its own.
    Split(Vec<String>),
    /// Ctrl-C.
    Interrupted,
}

/// Maps `spec` (with `only`, the windows of that one name of its script)
/// over `--runs` runs.
fn map_op(
    ctx: &RunContext,
    spec: &OpSpec,
    only: Option<&str>,
    progress: &mut Progress,
) -> OpOutcome {
    let opts = ctx.opts;
    let label = match only {
        Some(name) => format!("{} [{}]", spec.label, name),
        None => spec.label.clone(),
    };
    let shown = one_line(&label);
    let mut acc: Option<OpAccumulator> = None;
    let mut summary = WindowSummary::default();
    let runs = runs_of(spec, opts);
    // With the fork server all runs are made at once, in one process
    // that imports the op once; a script declines, and runs one process
    // per run as without it.
    let mut served = None;
    if let Some(n) = fork_server_runs(ctx.backend, spec, only, opts) {
        progress.start(&format!("{shown} runs 1-{n}/{runs} (fork server)"));
        match run_server(ctx, spec, n) {
            Ok(Some(outs)) => served = Some(outs.into_iter()),
            Ok(None) => {}
            Err(RunError::Interrupted) => return OpOutcome::Interrupted,
            Err(e) => served = Some(vec![Err(e)].into_iter()),
        }
    }
    for run in 1..=runs {
        progress.start(&format!("{shown} run {run}/{runs}"));
        let out = match served.as_mut() {
            Some(outs) => outs.next().unwrap_or_else(|| {
                Err(RunError::Failed(format!(
                    "the fork server made no run {run} (it stopped early without saying why)"
                )))
            }),
            None => run_once(
                ctx.backend,
                ctx.files,
                ctx.control_lib,
                spec,
                only,
                run,
                opts,
                ctx.interrupted,
            ),
        };
        let out = out.and_then(|out| match empty_run(ctx.backend, spec, only, &out) {
            Some(why) => Err(RunError::Failed(why)),
            None => Ok(out),
        });
        let out = match out {
            Ok(out) => out,
            Err(RunError::Interrupted) => return OpOutcome::Interrupted,
            Err(failure) => {
                let why = failure.op_message();
                let name = acc
                    .as_ref()
                    .map(|a| a.name().to_string())
                    .or_else(|| only.map(str::to_string))
                    .unwrap_or_else(|| spec.label.clone());
                progress.say(&format!(
                    "error: op {} ({}): run {run}: {why}",
                    one_line(&name),
                    one_line(&spec.file.display().to_string())
                ));
                return OpOutcome::Failed(
                    name,
                    format!("{}: run {run}: {why}", spec.file.display()),
                );
            }
        };
        if acc.is_none() {
            let names = window_names(&out.result);
            if only.is_none() && names.len() >= 2 {
                progress.finish_run(&format!(
                    "{shown} run {run}/{runs}: windows for {} ops, each mapped in runs of its own",
                    names.len()
                ));
                return OpOutcome::Split(names);
            }
            let name = only
                .map(str::to_string)
                .or_else(|| names.into_iter().next())
                .unwrap_or_else(|| out.result.name.clone());
            acc = Some(OpAccumulator::new(name));
        }
        let Some(acc) = acc.as_mut() else {
            continue;
        };
        acc.add_run(&out.report);
        let script = out.result.mode == Some(harness::HarnessMode::Script);
        let run_windows = RunWindows::of(&out);
        let samples = add_windows(&mut summary, &out, &run_windows);
        let what = if script {
            // A script's windows are its own: no op calls are counted.
            format!(
                "{} window(s) in {:.3} s",
                run_windows.count,
                run_windows.ns as f64 / 1e9
            )
        } else {
            format!(
                "{} calls in {:.2} s",
                out.result.iterations.unwrap_or(0),
                out.result.window_ns.unwrap_or(0) as f64 / 1e9
            )
        };
        progress.finish_run(&format!(
            "{shown} run {run}/{runs}: {} samples, {what}, {} functions",
            samples,
            out.report.rows.len()
        ));
        if let Some(why) = threads::spin_warning(&out.report, &opts.threads) {
            progress.say(&format!("warning: {shown}: run {run}: {why}"));
        }
        let lost: u64 = out.windows.iter().map(|w| w.lost_samples).sum();
        if lost > 0 {
            progress.say(&format!(
                "warning: {shown}: the kernel dropped {lost} samples in run {run}"
            ));
        }
        if samples > 0 && samples < opts.min_samples / 2 {
            progress.say(&low_samples_warning(
                &shown,
                run,
                samples,
                opts.min_samples,
                script.then_some(&run_windows),
            ));
        }
    }
    match acc {
        Some(acc) => {
            let mut op = acc.finish(opts.rule);
            if !op.samples.is_finite() {
                // Vendor reports are read with checked sums; their runs
                // together must not overflow either.
                return OpOutcome::Failed(
                    op.name,
                    format!(
                        "{}: the runs' values add up to more than a number can hold (are the reports garbled?)",
                        spec.file.display()
                    ),
                );
            }
            op.window = Some(summary);
            OpOutcome::Mapped(op)
        }
        None => OpOutcome::Failed(spec.label.clone(), "no run finished".into()),
    }
}

/// How many windows a run opened and how long they were open.
struct RunWindows {
    count: u64,
    ns: u64,
}

impl RunWindows {
    /// Where lotus switched the windows it saw each one (and its length
    /// on the samples' clock): those count, ITT's included. Otherwise (the
    /// vendor's tool switched them) the harness's own account: the op
    /// loop's one window, or a script's windows opened through the `lotus`
    /// module and the stand-ins, timed around the calls.
    fn of(out: &RunOutput) -> RunWindows {
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
fn low_samples_warning(
    shown: &str,
    run: u32,
    samples: u64,
    wanted: u64,
    script: Option<&RunWindows>,
) -> String {
    match script {
        Some(w) => format!(
            "warning: {shown}: run {run}'s {} window(s) held only {samples} samples in {:.3} s (wanted {wanted}): a script's window holds only what the script runs inside it (one call, in the study's scripts); raise --runs, or loop the op between resume and pause",
            w.count,
            w.ns as f64 / 1e9
        ),
        None => format!(
            "warning: {shown}: run {run}'s window held only {samples} samples (wanted {wanted}); the op may mostly wait rather than compute"
        ),
    }
}

/// Adds a run's windows to the op's summary; returns the run's samples.
fn add_windows(summary: &mut WindowSummary, out: &RunOutput, windows: &RunWindows) -> u64 {
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

fn environment(
    backend: &dyn Profiler,
    backend_version: Option<String>,
    opts: &LiveOptions,
) -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::new();
    env.insert("lotus".into(), env!("CARGO_PKG_VERSION").into());
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        env.insert("host".into(), h.trim().into());
    }
    // CPU model, CPUs, cores, kernel: for comparing hosts (`lotus compare`).
    env.extend(lotus_core::host::facts());
    if let Some(v) = backend_version {
        env.insert("backend_version".into(), v);
    }
    env.insert("python".into(), opts.python.display().to_string());
    // Bounded: an interpreter wrapper that hangs must not hang the mapping.
    let mut version = std::process::Command::new(&opts.python);
    version.arg("--version");
    if let Ok(Some(out)) =
        lotus_core::process::output_within(&mut version, lotus_core::profiler::VERSION_WAIT)
    {
        let v = String::from_utf8_lossy(if out.stdout.is_empty() {
            &out.stderr
        } else {
            &out.stdout
        })
        .trim()
        .to_string();
        env.insert("python_version".into(), v);
    }
    // Under perf, the frequency the samplers ran at: the kernel caps it.
    let in_force = if backend.name() == "perf" {
        lotus_backend_perf::frequency_in_force(opts.frequency)
    } else {
        opts.frequency
    };
    env.insert("frequency_hz".into(), in_force.to_string());
    if in_force != opts.frequency {
        env.insert("frequency_requested_hz".into(), opts.frequency.to_string());
    }
    env.insert(
        "frequency_source".into(),
        if opts.frequency_given {
            "given (-F)"
        } else {
            "default"
        }
        .into(),
    );
    // What a sample costs the op here, and so how much it slowed it.
    if backend.name() == "perf" {
        if let Ok(cost) = lotus_backend_perf::sampling_cost() {
            env.insert(
                "sampling_cost_us".into(),
                format!("{:.2}", cost.per_sample.as_secs_f64() * 1e6),
            );
            env.insert(
                "sampling_slowdown_pct".into(),
                format!("{:.1}", cost.slowdown_at(in_force) * 100.0),
            );
        }
    }
    env.insert(
        "sample_interval_ms".into(),
        format!("{}", opts.sample_interval(backend).as_nanos() as f64 / 1e6),
    );
    opts.threads.record(&mut env);
    if backend.switches_windows() {
        let (edges, counters) = if opts.window_stamps(backend) {
            (
                "stamped by the op process on CLOCK_MONOTONIC, sent without waiting",
                "read by the op process itself: task-clock (CLOCK_PROCESS_CPUTIME_ID), page-faults and context-switches (getrusage) of its own threads; no cycles or instructions",
            )
        } else {
            (
                "marked by lotus on request (round trip)",
                "perf counters read by lotus at each edge (the process and everything it starts)",
            )
        };
        env.insert("window_edges".into(), edges.into());
        env.insert("window_counters".into(), counters.into());
    }
    env.insert(
        "window_ms".into(),
        opts.window(backend).as_millis().to_string(),
    );
    env
}

/// How long the end of a run may spend killing what it left behind.
pub(crate) const REAP_LIMIT: Duration = Duration::from_secs(5);

/// How often lotus reads the control channel while the process stamps its
/// own window edges (see [`serve_until`]).
const STAMP_POLL: Duration = Duration::from_millis(10);

/// How long the control loop keeps polling without sleeping after a
/// request.
const HOT_SPIN: Duration = Duration::from_millis(2);

/// The backend options of one run; `--keep-raw` gets a folder per op and
/// run.
fn collect_options(
    backend: &dyn Profiler,
    opts: &LiveOptions,
    spec: &OpSpec,
    run: u32,
) -> Result<CollectOptions> {
    let mut copts = CollectOptions::default();
    copts.frequency_hz = Some(opts.frequency);
    copts.collect_type.clone_from(&opts.collect_type);
    copts.window_stamps = opts.window_stamps(backend);
    if let Some(root) = &opts.keep_raw {
        let label: String = spec
            .label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = root.join(format!("{label}-run{run}"));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("--keep-raw: cannot create {}", dir.display()))?;
        copts.keep_raw = Some(dir);
    }
    Ok(copts)
}

/// The harness command for one run of `spec`, with the environment every
/// backend gets (the channel's variables are added by the caller).
fn harness_target(
    backend: &dyn Profiler,
    files: &HarnessFiles,
    control_lib: &Path,
    spec: &OpSpec,
    result: &Path,
    opts: &LiveOptions,
    server_runs: Option<u32>,
) -> Target {
    let args = HarnessArgs {
        op_file: spec
            .file
            .canonicalize()
            .unwrap_or_else(|_| spec.file.to_path_buf()),
        warmup: opts.warmup,
        window: opts.window(backend),
        min_iterations: opts.min_iterations,
        result: result.to_path_buf(),
        empty: spec.empty,
        name: None,
        threads: opts.threads.torch_threads,
        cwd: opts.cwd.clone(),
        runs: server_runs,
        run_timeout: server_runs.map(|_| opts.timeout),
    };
    let mut target = Target::new(opts.python.clone());
    target.args = std::iter::once(files.harness.clone().into_os_string())
        .chain(args.to_args())
        .collect();
    // What an op prints is not the mapping: lotus's stdout carries
    // only lotus's output.
    target.stdout_to_stderr = true;
    target.env.extend(control_env(backend, Some(control_lib)));
    if opts.window_stamps(backend) {
        target
            .env
            .push((lotus_core::control::ENV_WINDOW_STAMPS.into(), "1".into()));
    }
    target.env.extend(opts.threads.env());
    target
}

/// The variables a profiled process needs to reach lotus: the backend's
/// name and the control library. Scripts that open their own windows with
/// ITT (`ittapi.resume()`, as the original Lotus op scripts do) reach
/// lotus's own ITT collector, the control library, wherever lotus switches
/// the windows, replacing any collector named in lotus's own environment
/// (`map_live` says so); under VTune and uProf the environment's is kept.
pub(crate) fn control_env(
    backend: &dyn Profiler,
    control_lib: Option<&Path>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = vec![(ENV_BACKEND.into(), backend.name().into())];
    if let Some(lib) = control_lib {
        env.push((harness::ENV_CONTROL_LIB.into(), lib.into()));
        // Where lotus switches the windows, ITT windows must reach its
        // collector: one named in lotus's environment (oneAPI's setvars.sh
        // sets VTune's) would take them, and the op would measure nothing.
        if backend.switches_windows() {
            env.push((ENV_ITT_COLLECTOR.into(), lib.into()));
        }
    }
    env
}

/// The variable the ITT static part reads to find its collector library.
pub const ENV_ITT_COLLECTOR: &str = "INTEL_LIBITTNOTIFY64";

/// Serves the control channel (when there is one) until the profiled
/// process exits: each request switches the window and is answered. Stops
/// the process on Ctrl-C or after `timeout`.
pub(crate) fn serve(
    collection: &mut dyn Collection,
    host: Option<&mut ControlHost>,
    timeout: Option<Duration>,
    interrupted: &Arc<AtomicBool>,
) -> Result<std::process::ExitStatus, RunError> {
    serve_until(collection, host, timeout, interrupted, &|| false, false)
        .map(|served| served.status)
}

/// How long a process that has written its result may take to exit before
/// it is stopped (see [`serve_until`]).
const DONE_GRACE: Duration = Duration::from_secs(2);

/// How a served process ended.
pub(crate) struct Served {
    /// Its exit status.
    pub status: std::process::ExitStatus,
    /// It had finished (`done` held) but did not exit within
    /// [`DONE_GRACE`], and was stopped: `status` is the stop's.
    pub stopped_after_done: bool,
}

/// [`serve`], where `done` says the process has finished its work (its
/// result is written): from then on it gets [`DONE_GRACE`] to exit, and is
/// then stopped with everything it started, instead of keeping the run
/// going until `timeout` (a thread or process the op left behind).
///
/// With `stamped` (the process stamps its window edges and waits for no
/// reply), lotus does not wait on the channel: it reads what is there every
/// [`STAMP_POLL`]. A writer then wakes nobody, which on a busy machine
/// would cost it the CPU (the woken lotus preempts it); the few requests
/// that still wait for a reply (detach) wait up to that long.
pub(crate) fn serve_until(
    collection: &mut dyn Collection,
    mut host: Option<&mut ControlHost>,
    timeout: Option<Duration>,
    interrupted: &Arc<AtomicBool>,
    done: &dyn Fn() -> bool,
    stamped: bool,
) -> Result<Served, RunError> {
    let mut done_at: Option<Instant> = None;
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut channel_open = host.is_some();
    let mut last_request = Instant::now();
    // The channel had nothing to read last time.
    let mut idle = false;
    let status = loop {
        if let (true, Some(host)) = (channel_open, host.as_mut()) {
            // Right after a request, poll without sleeping for a moment: the
            // next one (a pause after a resume) often follows at once, and
            // waking an idle CPU costs more than the round trip itself.
            let wait = if last_request.elapsed() < HOT_SPIN {
                Duration::ZERO
            } else if stamped {
                if idle {
                    std::thread::sleep(STAMP_POLL);
                }
                Duration::ZERO
            } else {
                Duration::from_millis(20)
            };
            idle = false;
            match host.recv_line(Some(wait)) {
                Ok(Some(line)) => {
                    // A child that died mid-request cannot read a reply;
                    // its exit is seen below, so reply errors are ignored.
                    let request = match Request::decode(&line) {
                        Ok(r) => r,
                        Err(e) => {
                            last_request = Instant::now();
                            let _ = host.reply(&Reply::Error(e.to_string()));
                            continue;
                        }
                    };
                    if !request.wants_reply() {
                        // A window edge the process stamped itself: nobody
                        // waits, so no hot polling either.
                        if let Err(e) = apply_stamp(collection, &request) {
                            let _ = collection.kill();
                            return Err(RunError::Failed(e.to_string()));
                        }
                        continue;
                    }
                    last_request = Instant::now();
                    // The reply goes out as soon as the window is
                    // switched; the backend's slower bookkeeping follows
                    // while the op runs.
                    let mut replied = false;
                    let mut tell = || {
                        let _ = host.reply(&Reply::Ok);
                        replied = true;
                    };
                    let outcome = match request {
                        Request::Resume { .. } => collection.resume_then(&mut tell),
                        Request::Pause => collection.pause_then(&mut tell),
                        Request::Detach => Ok(()),
                        Request::OpenedAt { .. } | Request::ClosedAt { .. } => Ok(()),
                    };
                    match outcome {
                        Ok(()) if !replied => {
                            let _ = host.reply(&Reply::Ok);
                        }
                        Ok(()) => {}
                        Err(e) if !replied => {
                            let _ = host.reply(&Reply::Error(e.to_string()));
                        }
                        Err(e) => {
                            // The target was told the window switched, but
                            // the backend failed after: the run is not valid.
                            let _ = collection.kill();
                            return Err(RunError::Failed(e.to_string()));
                        }
                    }
                    continue;
                }
                Ok(None) => {
                    channel_open = false;
                    collection.stamps_done();
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => idle = true,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    // An over-long request: its writer waits for a reply.
                    last_request = Instant::now();
                    let _ = host.reply(&Reply::Error(e.to_string()));
                    continue;
                }
                Err(_) => channel_open = false,
            }
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
        if interrupted.load(Ordering::SeqCst) {
            let _ = collection.kill();
            return Err(RunError::Interrupted);
        }
        match collection.try_wait() {
            Ok(Some(status)) => {
                last_stamps(collection, host.as_deref_mut());
                break status;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = collection.kill();
                return Err(RunError::Failed(e.to_string()));
            }
        }
        match done_at {
            None if done() => done_at = Some(Instant::now()),
            Some(at) if at.elapsed() >= DONE_GRACE => {
                last_stamps(collection, host.as_deref_mut());
                collection
                    .kill()
                    .map_err(|e| RunError::Failed(e.to_string()))?;
                let status = collection
                    .try_wait()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| std::process::ExitStatus::from_raw(libc::SIGKILL));
                return Ok(Served {
                    status,
                    stopped_after_done: true,
                });
            }
            _ => {}
        }
        if let (Some(deadline), Some(timeout)) = (deadline, timeout) {
            if Instant::now() >= deadline {
                let _ = collection.kill();
                return Err(RunError::TimedOut(timeout));
            }
        }
    };
    Ok(Served {
        status,
        stopped_after_done: false,
    })
}

/// Applies a window edge the profiled process stamped itself.
fn apply_stamp(
    collection: &mut dyn Collection,
    request: &Request,
) -> Result<(), lotus_core::ProfilerError> {
    match request {
        Request::OpenedAt { edge, .. } => collection.resume_at(edge),
        Request::ClosedAt { edge } => collection.pause_at(edge),
        _ => Ok(()),
    }
}

/// The most lines [`last_stamps`] reads: a process that left a writer of
/// the channel behind cannot keep the run going.
const LAST_STAMPS: usize = 100_000;

/// Once the process is gone (or done): the stamped edges it wrote just
/// before, which nobody waited on, are read and applied; then the
/// collection knows no more will come.
fn last_stamps(collection: &mut dyn Collection, host: Option<&mut ControlHost>) {
    if let Some(host) = host {
        for _ in 0..LAST_STAMPS {
            match host.recv_line(Some(Duration::ZERO)) {
                Ok(Some(line)) => {
                    if let Ok(request) = Request::decode(&line) {
                        let _ = apply_stamp(collection, &request);
                    }
                }
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                Err(_) => break,
            }
        }
    }
    collection.stamps_done();
}

/// Runs one op once under the backend.
#[allow(clippy::too_many_arguments)]
fn run_once(
    backend: &dyn Profiler,
    files: &HarnessFiles,
    control_lib: &Path,
    spec: &OpSpec,
    only: Option<&str>,
    run: u32,
    opts: &LiveOptions,
    interrupted: &Arc<AtomicBool>,
) -> Result<RunOutput, RunError> {
    // Dropped last, on every way out: ends whatever the run left, also
    // daemons that left its process group (they would hold lotus's stdout
    // and stderr open).
    let _reaper = Reaper::new(REAP_LIMIT);
    let result_path = files
        .dir
        .path()
        .join(format!("result-{}-{run}.json", std::process::id()));
    let _ = std::fs::remove_file(&result_path);
    let mut target = harness_target(backend, files, control_lib, spec, &result_path, opts, None);
    if let Some(name) = only {
        target.env.push((harness::ENV_ONLY_OP.into(), name.into()));
    }
    // The control channel, where the lotus process switches the windows:
    // the harness writes requests into one pipe and reads replies from the
    // other. Vendor backends switch their own windows in the profiled
    // process, and get no channel.
    let mut host = if backend.switches_windows() {
        let host = ControlHost::new().context("cannot create the control channel's pipes")?;
        target.env.push(host.child_env());
        target.keep_fds = host.child_fds();
        Some(host)
    } else {
        None
    };
    // Its output goes through a pipe that lotus echoes, so that a failure
    // can say whether it printed anything (vendor tools log it instead).
    let mut echo = if backend.switches_windows() {
        Some(Echo::start().context("cannot create the pipe for the op's output")?)
    } else {
        None
    };
    target.output_fd = echo.as_ref().and_then(Echo::child_fd);
    let copts = collect_options(backend, opts, spec, run)?;

    let mut collection = backend
        .collect(&target, &copts)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    // Only the child keeps its ends: then the request pipe closes when the
    // child (and anything it started) is gone.
    if let Some(host) = host.as_mut() {
        host.close_child_ends();
    }
    if let Some(echo) = echo.as_mut() {
        echo.close_write_end();
    }

    // The harness leaves as soon as its result is written; should its
    // process linger all the same, the written result is the run's end.
    let served = serve_until(
        collection.as_mut(),
        host.as_mut(),
        Some(opts.timeout),
        interrupted,
        &|| result_path.exists(),
        copts.window_stamps,
    )?;
    let status = served.status;
    // Its last lines come before lotus's words about them.
    let printed = echo.as_ref().map(|echo| {
        echo.settle(ECHO_SETTLE);
        echo.printed()
    });

    let result = HarnessResult::read(&result_path).ok();
    // A written result ends the run, however the process went after it
    // (stopped because it lingered, an exit hook that failed): the result
    // says how the run went.
    let finished = status.success()
        || (served.stopped_after_done && result.is_some())
        || result.as_ref().is_some_and(|r| r.error.is_none());
    if !finished {
        let _ = collection.kill();
        return Err(RunError::Failed(describe_failure(
            status,
            result.as_ref(),
            printed,
        )));
    }
    let windows = collection.windows();
    let report = collection
        .report()
        .map_err(|e| RunError::Failed(e.to_string()))?;
    let result = result.ok_or_else(|| RunError::Failed(no_result(0, printed)))?;
    if let Some(err) = &result.error {
        return Err(RunError::Failed(err.clone()));
    }
    Ok(RunOutput {
        report,
        result,
        windows,
    })
}

/// How long lotus lets the echo of a run's output catch up before it
/// reports on the run.
const ECHO_SETTLE: Duration = Duration::from_millis(200);

/// A harness that exited with `code` without writing its result: the op
/// ended the process itself. `printed`: whether it printed anything (when
/// lotus saw its output).
fn no_result(code: i32, printed: Option<bool>) -> String {
    let output = match printed {
        Some(true) => "; see its output above",
        Some(false) => "; it printed nothing",
        None => "",
    };
    format!(
        "the Python process exited with status {code} without writing its result: the op (or \
         code it ran) ended the process itself, e.g. with os._exit({code}) or a C library's \
         exit(){output}; an op must return instead"
    )
}

fn describe_failure(
    status: std::process::ExitStatus,
    result: Option<&HarnessResult>,
    printed: Option<bool>,
) -> String {
    if let Some(sig) = status.signal() {
        return format!(
            "the Python process was killed by signal {sig} ({}){}",
            signal_name(sig),
            if sig == libc::SIGSEGV || sig == libc::SIGABRT || sig == libc::SIGBUS {
                ": the op crashed in native code"
            } else {
                ""
            }
        );
    }
    let code = status.code().unwrap_or(-1);
    match result {
        Some(r) => {
            let stage = match r.stage {
                Some(HarnessStage::Parse) => "the op file does not parse",
                Some(HarnessStage::Read) => "the op file cannot be read",
                Some(HarnessStage::Import) => "importing the op file raised",
                Some(HarnessStage::Setup) => "setup() raised",
                Some(HarnessStage::Warmup) => "the op raised during warm-up",
                Some(HarnessStage::Window) => "the op raised inside the window",
                Some(HarnessStage::Script) => "the script raised",
                Some(HarnessStage::Control) => "the control library failed",
                Some(HarnessStage::Interrupted) => "interrupted",
                _ => "the harness failed",
            };
            match &r.error {
                Some(e) => format!("{stage} (exit {code}):\n{}", indent(e.trim_end())),
                None => format!("{stage} (exit {code})"),
            }
        }
        None => no_result(code, printed),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        _ => "signal",
    }
}
