//! `lotus map`: its arguments, the progress it shows, and where the
//! mapping goes. The mapping itself is made by the `lotus_map` engine.

pub mod from_trace;
mod stacks;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use lotus_core::Mapping;
use lotus_core::MergeRule;
use lotus_map::live::{self, LiveOptions};
use lotus_map::output::{one_line, Format};
use lotus_map::progress::{MessageKind, Progress};
use lotus_map::{from_reports, harness};

use crate::render::mapping::{render_mapping, MapFormat};
use crate::usage::{self, note, usage};

#[derive(Debug, clap::Args)]
pub struct MapArgs {
    /// Profiler backend (see `lotus backends`); by default the one that
    /// can run here (where several can, say which).
    #[arg(long)]
    pub backend: Option<String>,
    /// Read a sampled trace folder (`lotus trace run --sample --out DIR`)
    /// instead of running anything: each op's native functions as measured
    /// inside the pipeline (the in-pipeline attribution's, see `lotus
    /// attribute DIR`).
    #[arg(long, value_name = "DIR", conflicts_with = "from_reports")]
    pub from_trace: Option<PathBuf>,
    /// With --from-trace: the samples' prefix in DIR (as `trace run --prefix`).
    #[arg(long, default_value = "lotus", requires = "from_trace")]
    pub prefix: String,
    /// Read existing vendor reports, DIR/<Op>/<run>.csv, instead of running anything.
    #[arg(long, value_name = "DIR")]
    pub from_reports: Option<PathBuf>,
    /// Op files to run and map (live mapping).
    #[arg(value_name = "OP_FILE")]
    pub ops: Vec<PathBuf>,
    /// Merge rule across runs: union, majority, all or min:K.
    #[arg(long, default_value = "union", value_parser = crate::usage::parse_rule)]
    pub rule: MergeRule,
    /// Write the mapping here (format from --format, else from the extension; JSON by default; `-`: standard output).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Output format; a readable table on the terminal when neither this nor --out is given.
    #[arg(long, value_enum)]
    pub format: Option<MapFormat>,
    /// Functions shown per op in table and Markdown output (0: all).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Tables show full function names (by default long C++ names are shortened to fit the terminal).
    #[arg(long)]
    pub wide: bool,
    /// Live: runs (one process each) per op.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Live: op calls before the window opens.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Live: sampling frequency in Hz (perf: the kernel caps it at perf_event_max_sample_rate, and the mapping records the frequency used; VTune and uProf get it as their sampling interval, see the README). Default under perf: 10000 (a window gets its 3000 samples in 0.3 s), lowered where a sample costs more, so that sampling slows a compute loop by under 10% (lotus measures that at start, about 0.1 s, and records it in the mapping; each op's own cost is measured too, by calls timed with sampling stopped, and warned about past 20%); VTune and uProf: 10000.
    #[arg(long, short = 'F', value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: Option<u64>,
    /// Live: samples each window should hold; with the backend's sampling interval it sets the window's length.
    #[arg(long, default_value_t = 3000)]
    pub min_samples: u64,
    /// Live: least window length in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub min_window_ms: u64,
    /// Live: least op calls per window.
    #[arg(long, default_value_t = 1)]
    pub min_iterations: u64,
    /// Live: seconds one run may take before it is stopped.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Live: the Python interpreter (default: $LOTUS_PYTHON, the active virtual environment's, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Live: skip the harness floor (the empty-op run that marks `baseline` functions).
    #[arg(long)]
    pub no_baseline: bool,
    /// Live, perf: each resume and pause waits for lotus to mark the window and read its counters (cycles and instructions included). By default the op process stamps its window edges itself, reads its own CPU time, page faults and context switches, and goes on without waiting.
    #[arg(long)]
    pub round_trip: bool,
    /// Live, perf: start one interpreter per run. By default the op is imported once per op and each run is a fresh process forked from it before the op's first call (setup, warm-up and window in the child).
    #[arg(long)]
    pub no_fork_server: bool,
    /// Live: the most window names of one script that are mapped (a script that opens windows under N names is run once, then `--runs` times per name); past it the first ones opened are mapped and the others left out, with a warning.
    #[arg(long, value_name = "N", default_value_t = live::MAX_WINDOW_NAMES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_window_names: usize,
    /// Live: the vendor analysis (VTune -collect TYPE, e.g. uarch-exploration; uProf --config TYPE).
    #[arg(long, value_name = "TYPE")]
    pub collect_type: Option<String>,
    /// Live: keep each run's raw vendor results (VTune result folder, uProf session) under DIR/<op>-run<N>.
    #[arg(long, value_name = "DIR")]
    pub keep_raw: Option<PathBuf>,
    /// Live: print the exact commands and environment the backend would use, and run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Live: drop functions the harness floor shows too (interpreter loop, allocator).
    #[arg(long, conflicts_with = "no_baseline")]
    pub exclude_baseline: bool,
    /// Live: threads for torch, OpenMP, MKL and OpenBLAS in each op process (default: 1, as in a DataLoader worker; see the README).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: Option<u32>,
    /// Live: run every op in DIR (`--cwd .`: where lotus was started, for scripts that open files by paths relative to it) instead of in the op file's folder; the op's folder stays importable.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Live, perf: call stacks with every sample, into each op's `stacks` in the mapping (JSON): `dwarf` unwinds the user stack through the libraries' unwind tables, `fp` takes the kernel's frame-pointer chain (see `lotus trace run --stacks`); `none` (the default) keeps the sampled function alone.
    #[arg(long, value_enum, default_value = "none")]
    pub stacks: crate::sampling::StackMode,
    /// With --stacks: write each op's call stacks, collapsed (`op;outer;inner count` lines, as inferno, flamegraph.pl and speedscope read them), to FILE.
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// With --stacks: draw each op's call stacks as one interactive flame graph (SVG, the ops as root frames) into FILE.
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
}

/// Progress across ops and runs: a bar on a terminal, lines otherwise
/// (none under `--quiet`; errors and warnings are printed all the same).
struct TerminalProgress {
    bar: Option<ProgressBar>,
    total: u64,
    done: u64,
}

impl TerminalProgress {
    fn new() -> Self {
        let bar = (std::io::stderr().is_terminal() && !usage::quiet()).then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        TerminalProgress {
            bar,
            total: 0,
            done: 0,
        }
    }

    fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(lotus_sys::text::printable(line)),
            None => crate::usage::say!("lotus: {line}"),
        }
    }
}

impl Progress for TerminalProgress {
    fn runs_added(&mut self, runs: u64) {
        self.total += runs;
        if let Some(bar) = &self.bar {
            bar.inc_length(runs);
        }
    }

    fn run_started(&mut self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(lotus_sys::text::one_line(what).into_owned());
        }
    }

    fn run_done(&mut self, line: &str) {
        self.done += 1;
        match &self.bar {
            Some(bar) => {
                bar.inc(1);
                bar.println(lotus_sys::text::printable(line));
            }
            None => note!("lotus: [{}/{}] {line}", self.done, self.total),
        }
    }

    fn message(&mut self, kind: MessageKind, text: &str) {
        match kind {
            MessageKind::Error => self.say(&format!("error: {text}")),
            MessageKind::Warning => self.say(&format!("warning: {text}")),
            MessageKind::Note if usage::quiet() => {}
            MessageKind::Note => self.say(&format!("note: {text}")),
            _ => self.say(text),
        }
    }

    fn finished(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Where a mapping goes and in which format.
pub(crate) fn emit(
    mapping: &Mapping,
    out: Option<&Path>,
    format: Option<MapFormat>,
    top: usize,
    wide: bool,
) -> Result<()> {
    match out {
        Some(path) if usage::is_stdout(path) => {
            print!(
                "{}",
                render_mapping(
                    mapping,
                    format.map_or(Format::Json, Format::from),
                    top,
                    wide
                )?
            );
        }
        Some(path) => {
            let format = format.map_or_else(|| Format::from_path(path), Format::from);
            lotus_sys::write_file(path, render_mapping(mapping, format, top, wide)?.as_bytes())?;
            note!(
                "lotus: wrote {} ({} op(s))",
                one_line(&path.display().to_string()),
                mapping.ops.len()
            );
        }
        None => print!(
            "{}",
            render_mapping(
                mapping,
                format.map_or(Format::Table, Format::from),
                top,
                wide
            )?
        ),
    }
    Ok(())
}

/// [`emit`] where and as `args` ask.
fn emit_as_asked(mapping: &Mapping, args: &MapArgs) -> Result<()> {
    emit(
        mapping,
        args.out.as_deref(),
        args.format,
        args.top,
        args.wide,
    )?;
    stacks::write(mapping, args.folded.as_deref(), args.flamegraph.as_deref())
}

/// Runs `lotus map`.
pub fn run(args: MapArgs) -> Result<ExitCode> {
    if let Some(dir) = &args.from_trace {
        return map_from_trace(&args, dir);
    }
    let (backend_name, backend) = usage::backend_or_usable(args.backend.as_deref())?;
    let backend_name = backend_name.as_str();
    stacks::check_args(&args, backend.as_ref())?;
    let (mapping, interrupted) = match &args.from_reports {
        Some(dir) => {
            if !args.ops.is_empty() {
                return Err(usage(
                    "give either op files or --from-reports DIR, not both",
                ));
            }
            if backend.report_format().is_none() {
                return Err(usage(format!("--from-reports reads a vendor tool's reports (VTune, uProf): use --backend vtune or --backend uprof ({backend_name} reads none: it maps live, lotus map --backend {backend_name} ops/*.py)")));
            }
            let outcome = from_reports::build(backend.as_ref(), dir, args.rule)?;
            (outcome.into_mapping(), false)
        }
        None => {
            if args.ops.is_empty() {
                return Err(usage(format!(
                    "nothing to map: give op files (lotus map --backend {backend_name} ops/*.py), --from-reports DIR or --from-trace DIR"
                )));
            }
            let python = crate::program::find_python(args.python.as_deref())?;
            let opts = live_options(&args, python, backend_name)?;
            for op in args.ops.iter().filter(|op| op.is_file()) {
                if let Some(w) = lotus_sys::trust::op_folder_warning(op) {
                    crate::usage::say!("lotus: warning: {w}");
                }
            }
            if args.dry_run {
                for op in &args.ops {
                    live::check_op_file(op)?;
                }
                // Paths and a tool's notes: control characters escaped.
                let plan = live::dry_run(backend.as_ref(), &args.ops, &opts)?;
                print!("{}", lotus_sys::text::printable(&plan));
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(out) = args.out.as_deref().filter(|o| !usage::is_stdout(o)) {
                // Find out now, not after minutes of profiling.
                lotus_sys::check_writable(out)?;
            }
            let interrupted = Arc::new(AtomicBool::new(false));
            let flag = interrupted.clone();
            // A second Ctrl-C while stopping is ignored: the children are
            // being stopped and finished ops written.
            let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
            let mut progress = TerminalProgress::new();
            let outcome = live::map_live(
                backend.as_ref(),
                &args.ops,
                &opts,
                &mut progress,
                &interrupted,
            )?;
            let interrupted = outcome.interrupted;
            (outcome.into_mapping(), interrupted)
        }
    };
    let failures = &mapping.failures;
    // A live mapping reports each failure as it happens.
    if args.from_reports.is_some() {
        for f in &mapping.failures {
            crate::usage::say!("lotus: error: op {}: {}", one_line(&f.op), f.error);
        }
    }
    if failures.is_empty() && !interrupted {
        emit_as_asked(&mapping, &args)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Keep what finished: the ops that mapped are written, with the
    // failures listed in the mapping itself.
    if !mapping.ops.is_empty() {
        emit_as_asked(&mapping, &args)?;
    }
    if interrupted {
        crate::usage::say!(
            "lotus: interrupted: stopped the running op; {} finished op(s) kept",
            mapping.ops.len()
        );
        return Ok(ExitCode::from(130));
    }
    bail!(
        "{} of {} op(s) could not be mapped{}",
        failures.len(),
        failures.len() + mapping.ops.len(),
        if mapping.ops.is_empty() {
            ""
        } else {
            "; the others were written"
        }
    );
}

/// `lotus map --from-trace DIR`: the mapping of a sampled trace's ops
/// (alone: no backend, op files, reports or dry run).
fn map_from_trace(args: &MapArgs, dir: &Path) -> Result<ExitCode> {
    from_trace::check_alone(
        args.backend.as_deref(),
        args.ops.len(),
        args.from_reports.is_some(),
        args.dry_run,
    )?;
    let mapping = from_trace::build(dir, &args.prefix)?;
    emit_as_asked(&mapping, args)?;
    Ok(ExitCode::SUCCESS)
}

/// The live engine's options as `args` ask (the backend's default
/// frequency, said, where `--frequency` is not given), with the control
/// library.
fn live_options(args: &MapArgs, python: PathBuf, backend_name: &str) -> Result<LiveOptions> {
    let default_hz = args.frequency.is_none().then(|| {
        let (hz, said) = live::default_frequency(backend_name);
        if let Some(said) = said {
            note!("lotus: note: {said}");
        }
        hz
    });
    let opts = LiveOptions::new(python, harness::CONTROL_LIBRARY)
        .with_runs(args.runs)
        .with_warmup(args.warmup)
        .with_frequency(args.frequency.unwrap_or_default())
        .with_min_samples(args.min_samples)
        .with_min_window(Duration::from_millis(args.min_window_ms))
        .with_min_iterations(args.min_iterations)
        .with_timeout(Duration::from_secs(args.timeout))
        .with_rule(args.rule)
        .with_baseline(!args.no_baseline, args.exclude_baseline)
        .with_collect_type(args.collect_type.clone())
        .with_keep_raw(args.keep_raw.clone())
        .with_threads(live::threads::ThreadPlan::from_env(args.threads))
        .with_cwd(args.cwd.as_deref())?
        .with_round_trip(args.round_trip)
        .with_fork_server(!args.no_fork_server)
        .with_max_window_names(args.max_window_names)
        .with_stacks(args.stacks.call_stacks())
        .with_temp_folder_hook(lotus_runner::remove_on_oom);
    let opts = with_control_library(opts);
    Ok(match default_hz {
        Some(hz) => opts.with_default_frequency(hz),
        None => opts,
    })
}

/// The control library the op processes load: `$LOTUS_CONTROL_LIB` when
/// it names a file, else the copy this binary carries, which the engine
/// writes into its own private harness folder (removed with it, also when
/// lotus is killed: the harness removes its folder when lotus is gone).
fn with_control_library(opts: LiveOptions) -> LiveOptions {
    match lotus_map::harness::named_control_library() {
        Some(path) => {
            let mut opts = opts;
            opts.control_library = path;
            opts
        }
        None => opts.with_control_library_bytes(crate::control_lib::embedded()),
    }
}
