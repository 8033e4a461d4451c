//! Live mapping: run each op file alone under a profiler and record which
//! native functions ran inside its window.
//!
//! For every op and run, one Python process runs the harness
//! ([`crate::harness`]) under the backend's [`Collection`](lotus_core::Collection), paused. The
//! harness calls `setup()`, warms up, asks for the window through the
//! control library, loops the op for the window's length, and closes it.
//! The control requests arrive here over a pipe; this process switches the
//! window ([`Collection::resume`](lotus_core::Collection::resume) / [`Collection::pause`](lotus_core::Collection::pause)) and acknowledges
//! before the op runs. After all runs, the op's reports are merged by the
//! rule. A harness floor (an empty op under the same harness) marks the
//! functions every op shows (interpreter loop, allocator) as `baseline`.
//!
//! Failures stay with their op: an op that raises, hangs past the timeout
//! or crashes is reported, and the other ops are still mapped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lotus_core::{CollectOptions, Mapping, Profiler, Report, WindowTotals};
use lotus_core::{OpAccumulator, OpFailure, OpMapping, Settings, WindowSummary};

use crate::error::{Context, MapError, Result};
use crate::op_harness::{self as harness, HarnessFiles, HarnessResult};
use crate::output::one_line;
use crate::progress::{MessageKind, Progress};

mod fork_server;
mod options;
mod process;
mod run;
mod run_checks;
mod serve;
pub mod threads;
mod windows;
use fork_server::{fork_server_runs, run_server};
pub use options::{default_frequency, LiveOptions, DEFAULT_FREQUENCY_HZ, MAX_WINDOW_NAMES};
pub(crate) use process::python_frames;
use process::{collect_options, environment, harness_target};
pub use process::{control_env, ENV_ITT_COLLECTOR};
use run::run_once;
pub use run_checks::check_op_file;
use run_checks::{empty_run, window_names};
pub use serve::{serve, RunError, REAP_LIMIT};
use windows::{
    add_windows, low_samples_warning, run_sampling_cost, sampling_cost_warning, RunWindows,
};

/// What a live mapping produced.
#[derive(Debug)]
#[non_exhaustive]
pub struct LiveOutcome {
    /// Every op that finished all its runs.
    pub mapping: Mapping,
    /// Each op that failed, with why (left out of `mapping`).
    pub failures: Vec<OpFailure>,
    /// Ctrl-C stopped the mapping early.
    pub interrupted: bool,
}

impl LiveOutcome {
    /// The mapping with the failed ops listed in it (`failures`), as
    /// `lotus map` writes it.
    pub fn into_mapping(self) -> Mapping {
        let mut mapping = self.mapping;
        mapping.failures = self.failures;
        mapping
    }
}

/// The failure of `op`, saying `error`.
pub(crate) fn failure(op: String, error: String) -> OpFailure {
    OpFailure { op, error }
}

/// One finished run.
pub(crate) struct RunOutput {
    report: Report,
    result: HarnessResult,
    /// Its windows summed: a run's memory does not grow with the windows
    /// a script opens (300,000 of them cost what one does).
    windows: WindowTotals,
    /// What the backend knows the run's samples miss, with the figures
    /// ([`lotus_core::Collection::finish`]).
    notes: Vec<String>,
    /// The runs `notes` are about ("run 2"; a fork server's notes are
    /// about all its runs, told with the first).
    notes_of: String,
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

/// The control library the op processes load: the carried bytes written
/// into the harness's folder (and removed with it), else the given path
/// made absolute: a bare name would send the loader through its search
/// path (LD_LIBRARY_PATH, the system's), and the op runs elsewhere.
fn control_library_for(opts: &LiveOptions, files: &HarnessFiles) -> Result<PathBuf> {
    let path = match opts.control_library_bytes {
        Some(bytes) => harness::write_control_library(files.dir.path(), bytes).map_err(|e| {
            MapError::ControlLibrary {
                path: files.dir.path().join(harness::CONTROL_LIBRARY),
                why: e.to_string(),
            }
        })?,
        None => opts
            .control_library
            .canonicalize()
            .map_err(|e| MapError::ControlLibrary {
                path: opts.control_library.clone(),
                why: e.to_string(),
            })?,
    };
    Ok(path)
}

/// What `lotus map --dry-run` prints: for each op (and the harness floor),
/// the exact commands and environment the backend would use, without
/// running anything. Works where the backend's tool is missing, with a note
/// saying so.
pub fn dry_run(backend: &dyn Profiler, ops: &[PathBuf], opts: &LiveOptions) -> Result<String> {
    let files = harness::write_harness()
        .context("cannot write the Python harness to a temporary folder")?;
    let control_lib = control_library_for(opts, &files)?;
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
                lotus_protocol::ENV_CONTROL_FDS.into(),
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
            out += &format!("export {k}={}\n", lotus_core::shell_quote(v));
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

/// Maps `ops` (op files) live with `backend`, one op after the other.
///
/// An op that fails (raises, crashes, hangs past the timeout, measures
/// nothing) is left out of the mapping and listed in
/// [`LiveOutcome::failures`]; the others are still mapped. Setting
/// `interrupted` (from a signal handler) stops the running op and returns
/// the ops finished until then. The error cases are those where nothing
/// can be mapped: a missing op file, a backend that cannot run here, no
/// control library, no temporary folder.
pub fn map_live(
    backend: &dyn Profiler,
    ops: &[PathBuf],
    opts: &LiveOptions,
    progress: &mut dyn Progress,
    interrupted: &AtomicBool,
) -> Result<LiveOutcome> {
    for op in ops {
        check_op_file(op)?;
    }
    let probe = backend.probe();
    if !probe.available {
        return Err(MapError::BackendUnavailable {
            backend: backend.name().to_string(),
            reason: probe
                .reason
                .clone()
                .unwrap_or_else(|| "no reason given".into()),
        });
    }
    if opts.control_library_bytes.is_none() && !opts.control_library.is_file() {
        return Err(MapError::ControlLibrary {
            path: opts.control_library.clone(),
            why: format!(
                "not a file; give the path of {} (cargo build -p lotus-control puts it in target/<profile>/)",
                harness::CONTROL_LIBRARY
            ),
        });
    }
    let files = harness::write_harness()
        .context("cannot write the Python harness to a temporary folder")?;
    if let Some(hook) = opts.on_temp_folder {
        hook(files.dir.path());
    }
    if let Some(other) = std::env::var_os(ENV_ITT_COLLECTOR).filter(|_| backend.switches_windows())
    {
        progress.message(
            MessageKind::Note,
            &format!(
                "{ENV_ITT_COLLECTOR}={} is set (oneAPI's environment sets it); under --backend {} lotus replaces it with its own collector so that ITT windows (ittapi.resume/pause) reach lotus",
                other.to_string_lossy(),
                backend.name()
            ),
        );
    }
    let control_lib = control_library_for(opts, &files)?;

    let specs = op_specs(ops, opts.baseline);

    progress.runs_added(specs.iter().map(|s| u64::from(runs_of(s, opts))).sum());
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
        start_gate: None,
        reap: true,
    };
    // The harness floor runs beside the first op's import (torch's takes
    // seconds) rather than before it; that op's runs wait for it.
    let beside = floor_beside_first_op(backend, &specs, opts);
    let gate = files
        .dir
        .path()
        .join(format!("floor-done-{}", std::process::id()));
    std::thread::scope(|scope| {
        let mut floor = None;
        'ops: for (i, spec) in specs.iter().enumerate() {
            if i == 0 && beside {
                let floor_ctx = RunContext { reap: false, ..ctx };
                let gate = gate.as_path();
                floor = Some(scope.spawn(move || {
                    let _open = OpenGate(gate);
                    let mut heard = Heard::default();
                    let outcome = map_op(&floor_ctx, spec, None, &mut heard);
                    (outcome, heard)
                }));
                continue;
            }
            let ctx = match floor {
                Some(_) => RunContext {
                    start_gate: Some(gate.as_path()),
                    ..ctx
                },
                None => ctx,
            };
            let outcome = map_op(&ctx, spec, None, progress);
            if let Some(handle) = floor.take() {
                let (floor_outcome, heard) = handle.join().unwrap_or_else(|_| {
                    (
                        OpOutcome::Failed(
                            specs[0].label.clone(),
                            "the thread that ran it panicked".into(),
                        ),
                        Heard::default(),
                    )
                });
                heard.replay(progress);
                match floor_outcome {
                    OpOutcome::Mapped(mut op) => {
                        op.name = "(empty)".into();
                        baseline = Some(op);
                    }
                    OpOutcome::Failed(name, why) => failures.push(failure(name, why)),
                    OpOutcome::Interrupted => was_interrupted = true,
                    OpOutcome::Split(_) => {}
                }
            }
            let mut mapped = Vec::new();
            match outcome {
                OpOutcome::Mapped(op) => mapped.push(op),
                OpOutcome::Failed(name, why) => failures.push(failure(name, why)),
                OpOutcome::Interrupted => {
                    was_interrupted = true;
                    break 'ops;
                }
                OpOutcome::Split(mut names) => {
                    // A script that opens windows under several names: each
                    // name is its own op, measured in runs of its own (the
                    // first run, which mixed them, is not kept); at most
                    // `max_window_names` of them.
                    let runs = u64::from(opts.runs);
                    let (info, warning) = split_messages(spec, &names, opts);
                    progress.message(MessageKind::Info, &info);
                    if let Some(warning) = warning {
                        progress.message(MessageKind::Warning, &warning);
                    }
                    names.truncate(opts.max_window_names);
                    // Each name's runs, in place of the file's runs after the
                    // first.
                    progress.runs_added(names.len() as u64 * runs - (runs - 1));
                    for name in &names {
                        match map_op(&ctx, spec, Some(name), progress) {
                            OpOutcome::Mapped(op) => mapped.push(op),
                            OpOutcome::Failed(name, why) => failures.push(failure(name, why)),
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
                    failures.push(failure(
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
            if was_interrupted {
                break 'ops;
            }
        }
    });
    progress.finished();

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
#[derive(Clone, Copy)]
struct RunContext<'a> {
    backend: &'a dyn Profiler,
    files: &'a HarnessFiles,
    control_lib: &'a Path,
    opts: &'a LiveOptions,
    interrupted: &'a AtomicBool,
    /// The fork server waits for this file before its first run (see
    /// [`floor_beside_first_op`]).
    start_gate: Option<&'a Path>,
    /// Each run ends what it left behind (see `run_once`).
    reap: bool,
}

/// Whether the harness floor (`specs[0]`, when asked for) runs beside the
/// first op rather than before it: under a backend whose runs are told
/// apart by process (perf), when that op's runs are made by the fork
/// server (which imports it, then waits for the floor: see
/// `--start-gate`) and there is a CPU for each. A torch op's import takes
/// seconds that the floor's run fills.
fn floor_beside_first_op(backend: &dyn Profiler, specs: &[OpSpec], opts: &LiveOptions) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    match specs {
        [floor, first, ..] => {
            floor.empty && cpus >= 2 && fork_server_runs(backend, first, None, opts).is_some()
        }
        _ => false,
    }
}

/// Creates the gate file when dropped: the floor beside the first op is
/// done (or failed, or panicked), and that op's runs may start.
struct OpenGate<'a>(&'a Path);

impl Drop for OpenGate<'_> {
    fn drop(&mut self) {
        // In the harness's private folder: no one else can have put a
        // file or link there.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.0);
    }
}

/// Waits (bounded by `limit`) until the gate file `gate` exists, or Ctrl-C.
pub(super) fn wait_for_gate(gate: &Path, limit: Duration, interrupted: &AtomicBool) {
    let deadline = Instant::now() + limit;
    while !gate.exists() && Instant::now() < deadline && !interrupted.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What a floor run beside an op reported, told to the caller's
/// [`Progress`] once it is joined (a `Progress` is not shared between
/// threads).
#[derive(Default)]
struct Heard(Vec<Heard1>);

enum Heard1 {
    Started(String),
    Done(String),
    Message(MessageKind, String),
}

impl Progress for Heard {
    fn run_started(&mut self, what: &str) {
        self.0.push(Heard1::Started(what.to_string()));
    }
    fn run_done(&mut self, line: &str) {
        self.0.push(Heard1::Done(line.to_string()));
    }
    fn message(&mut self, kind: MessageKind, text: &str) {
        self.0.push(Heard1::Message(kind, text.to_string()));
    }
}

impl Heard {
    fn replay(self, progress: &mut dyn Progress) {
        for heard in self.0 {
            match heard {
                Heard1::Started(what) => progress.run_started(&what),
                Heard1::Done(line) => progress.run_done(&line),
                Heard1::Message(kind, text) => progress.message(kind, &text),
            }
        }
    }
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

/// How many names of a split script are shown in its progress line.
const NAMES_SHOWN: usize = 8;

/// What a script that opens windows under several `names` is told: the
/// progress line (the names, and the runs mapping them takes), and the
/// warning when there are more than `max_window_names` (which are mapped,
/// how many are left out, what to do).
fn split_messages(spec: &OpSpec, names: &[String], opts: &LiveOptions) -> (String, Option<String>) {
    let script = one_line(&spec.label);
    let file = one_line(&spec.file.display().to_string());
    let mapped = names.len().min(opts.max_window_names);
    let runs = u64::from(opts.runs);
    let shown: Vec<&str> = names.iter().take(NAMES_SHOWN).map(String::as_str).collect();
    let more = if names.len() > NAMES_SHOWN {
        format!(", … {} more", names.len() - NAMES_SHOWN)
    } else {
        String::new()
    };
    let info = format!(
        "{script}: the script opens windows for {} ops ({}{more}): mapping {} in runs of its own, {} run(s) of the script after its first",
        names.len(),
        one_line(&shown.join(", ")),
        if mapped == names.len() {
            "each".to_string()
        } else {
            format!("the first {mapped}")
        },
        mapped as u64 * runs
    );
    let warning = (names.len() > mapped).then(|| {
        format!(
            "{script} ({file}): the script opens windows under {} names, more than the {} lotus maps of one script (each takes {runs} run(s) of its own): the first {mapped} (in the order opened) are mapped, the other {} left out; give the windows one name per op (not one per sample or batch), or raise --max-window-names",
            names.len(),
            opts.max_window_names,
            names.len() - mapped
        )
    });
    (info, warning)
}

/// Maps `spec` (with `only`, the windows of that one name of its script)
/// over `--runs` runs.
fn map_op(
    ctx: &RunContext,
    spec: &OpSpec,
    only: Option<&str>,
    progress: &mut dyn Progress,
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
        progress.run_started(&format!("{shown} runs 1-{n}/{runs} (fork server)"));
        match run_server(ctx, spec, n) {
            Ok(Some(outs)) => served = Some(outs.into_iter()),
            Ok(None) => {}
            Err(RunError::Interrupted) => return OpOutcome::Interrupted,
            Err(e) => served = Some(vec![Err(e)].into_iter()),
        }
    }
    for run in 1..=runs {
        progress.run_started(&format!("{shown} run {run}/{runs}"));
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
                ctx.reap,
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
                progress.message(
                    MessageKind::Error,
                    &format!(
                        "op {} ({}): run {run}: {why}",
                        one_line(&name),
                        one_line(&spec.file.display().to_string())
                    ),
                );
                return OpOutcome::Failed(
                    name,
                    format!("{}: run {run}: {why}", spec.file.display()),
                );
            }
        };
        if acc.is_none() {
            let names = window_names(&out.result);
            if only.is_none() && names.len() >= 2 {
                let each = if names.len() > opts.max_window_names {
                    format!("the first {}", opts.max_window_names)
                } else {
                    "each".to_string()
                };
                progress.run_done(&format!(
                    "{shown} run {run}/{runs}: windows for {} ops, {each} mapped in runs of its own",
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
        let cost =
            run_sampling_cost(&out, &run_windows).map_or_else(String::new, |c| format!(", {c}"));
        progress.run_done(&format!(
            "{shown} run {run}/{runs}: {} samples, {what}, {} functions{cost}",
            samples,
            out.report.rows.len()
        ));
        if let Some(why) = &out.result.unsampled_error {
            progress.message(
                MessageKind::Warning,
                &format!(
                    "{shown}: run {run}: lotus could not stop sampling to time the op unsampled ({}); the mapping has no sampling cost for it",
                    one_line(why)
                ),
            );
        }
        if let Some(why) = threads::spin_warning(&out.report, &opts.threads) {
            progress.message(MessageKind::Warning, &format!("{shown}: run {run}: {why}"));
        }
        for note in &out.notes {
            let of = &out.notes_of;
            progress.message(
                MessageKind::Warning,
                &format!("{shown}: {of}: {}", one_line(note)),
            );
            summary.notes.push(format!("{of}: {note}"));
        }
        let lost = out.windows.lost_samples;
        if lost > 0 {
            progress.message(
                MessageKind::Warning,
                &format!("{shown}: the kernel dropped {lost} samples in run {run}"),
            );
        }
        if samples > 0 && samples < opts.min_samples / 2 {
            progress.message(
                MessageKind::Warning,
                &low_samples_warning(
                    &shown,
                    run,
                    samples,
                    opts.min_samples,
                    script.then_some(&run_windows),
                ),
            );
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
            // The aim is the backend's (perf's 10%); a backend that does
            // not calibrate times no unsampled calls to warn on.
            let aim = ctx.backend.calibration().map(|c| c.max_slowdown());
            if let Some(why) =
                aim.and_then(|aim| sampling_cost_warning(&shown, &summary, opts.frequency, aim))
            {
                progress.message(MessageKind::Warning, &why);
            }
            op.window = Some(summary);
            OpOutcome::Mapped(op)
        }
        None => OpOutcome::Failed(spec.label.clone(), "no run finished".into()),
    }
}
