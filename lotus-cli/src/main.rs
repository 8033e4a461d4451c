//! `lotus`: where the CPU time of ML data preprocessing goes, from the
//! Python op down to the native function.
//!
//! Subcommands: `backends` (what can profile here), `map` (which native
//! functions each op runs), `show` (a mapping as a table), `attribute`
//! (whole-pipeline profiles folded back onto the ops), `trace` (timelines
//! and statistics of a pipeline trace).

// The argument structs' doc comments are clap's help text, printed as
// written: placeholders such as `<pid>` must stay bare there, which rustdoc
// would read as HTML tags.
#![allow(rustdoc::invalid_html_tags)]

mod attribute_cmd;
mod attribute_in_pipeline;
mod compare_cmd;
mod control_lib;
mod docs_cmd;
mod echo;
mod from_reports;
mod harness;
mod live;
mod map_from_trace;
mod mapping_against;
mod names;
mod oom;
mod output;
mod plots;
mod profile_cmd;
mod program;
mod report_cmd;
mod report_samples;
mod sampled_trace;
mod trace_cmd;
mod trace_run;
mod usage;

// Each backend crate registers itself through `inventory`; naming the crates
// here keeps the linker from dropping them (and their registrations).
use lotus_backend_perf as _;
use lotus_backend_uprof as _;
use lotus_backend_vtune as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use lotus_core::mapping::{Mapping, OpFailure};
use lotus_core::MergeRule;

use output::{render, write_atomic, Format, NameWidth};
use usage::{env_help, note, usage};

/// Out of memory is a clear error and exit status 1, not an abort (see
/// [`oom`]).
#[global_allocator]
static ALLOCATOR: oom::ExitOnOom = oom::ExitOnOom;

#[derive(Debug, Parser)]
#[command(
    name = "lotus",
    version = VERSION,
    about = "Where the CPU time of ML data preprocessing goes: Python op -> native function -> hardware counters",
    after_help = "Exit status: 0 done; 1 an error (bad input, a failed op or program, a missing tool); 2 a usage error; 130 interrupted. `lotus <command> --help` lists the environment variables each command reads."
)]
struct Cli {
    /// No progress and no notes on stderr (warnings and errors are still printed).
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// `lotus --version`: the version and the commit it was built from
/// (`-dirty` with uncommitted changes; `unknown` outside a git checkout),
/// which build.rs finds.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LOTUS_GIT_COMMIT"),
    ")"
);

#[derive(Debug, Subcommand)]
enum Command {
    /// List the profiler backends and whether each can run here.
    #[command(after_help = env_help::backends())]
    Backends {
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: DataFormat,
        /// The same as --format json (kept for scripts).
        #[arg(long, conflicts_with = "format")]
        json: bool,
    },
    /// Map Python ops to the native functions they run.
    #[command(after_help = env_help::map())]
    Map(MapArgs),
    /// Show a mapping (lotus.mapping/1 or the original tool's schema) as a table.
    #[command(after_help = env_help::show())]
    Show(ShowArgs),
    /// Ops of live mappings from different hosts side by side: latency and
    /// CPU per call, with ratios to the first.
    Compare(compare_cmd::CompareArgs),
    /// Profile a whole program (all its processes and threads), or the windows it opens.
    #[command(after_help = env_help::profile())]
    Profile(profile_cmd::ProfileArgs),
    /// Fold whole-pipeline profiles back onto the Python ops through a mapping.
    #[command(after_help = env_help::attribute())]
    Attribute(attribute_cmd::AttributeArgs),
    /// One self-contained HTML page of a run: traces (configurations side
    /// by side), attributions, plots.
    #[command(after_help = env_help::attribute())]
    Report(report_cmd::ReportArgs),
    /// Pipeline traces: when each op, sample and batch ran in every process.
    Trace {
        #[command(subcommand)]
        command: trace_cmd::TraceCommand,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs_cmd::CompletionsArgs),
    /// Print the man page lotus(1), or write one page per command into a folder.
    Man(docs_cmd::ManArgs),
}

/// The formats of commands whose data has a table and a JSON form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataFormat {
    /// A readable table.
    Table,
    /// JSON.
    Json,
}

#[derive(Debug, clap::Args)]
struct MapArgs {
    /// Profiler backend (see `lotus backends`).
    #[arg(long, required_unless_present = "from_trace")]
    backend: Option<String>,
    /// Read a sampled trace folder (`lotus trace run --sample --out DIR`)
    /// instead of running anything: each op's native functions as measured
    /// inside the pipeline (the in-pipeline attribution's, see `lotus
    /// attribute DIR`).
    #[arg(long, value_name = "DIR", conflicts_with = "from_reports")]
    from_trace: Option<PathBuf>,
    /// With --from-trace: the samples' prefix in DIR (as `trace run --prefix`).
    #[arg(long, default_value = "lotus", requires = "from_trace")]
    prefix: String,
    /// Read existing vendor reports, DIR/<Op>/<run>.csv, instead of running anything.
    #[arg(long, value_name = "DIR")]
    from_reports: Option<PathBuf>,
    /// Op files to run and map (live mapping).
    #[arg(value_name = "OP_FILE")]
    ops: Vec<PathBuf>,
    /// Merge rule across runs: union, majority, all or min:K.
    #[arg(long, default_value = "union", value_parser = parse_rule)]
    rule: MergeRule,
    /// Write the mapping here (format from --format, else from the extension; JSON by default; `-`: standard output).
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Output format; a readable table on the terminal when neither this nor --out is given.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Functions shown per op in table and Markdown output (0: all).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Tables show full function names (by default long C++ names are shortened to fit the terminal).
    #[arg(long)]
    wide: bool,
    /// Live: runs (one process each) per op.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Live: op calls before the window opens.
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Live: sampling frequency in Hz (perf: the kernel caps it at perf_event_max_sample_rate, and the mapping records the frequency used; VTune and uProf get it as their sampling interval, see the README). Default under perf: 10000 (a window gets its 3000 samples in 0.3 s), lowered where each sample costs the op more, so that sampling slows it by under 10% (lotus measures the cost of a sample at start, about 0.1 s, and records it in the mapping); VTune and uProf: 10000.
    #[arg(long, short = 'F', value_parser = clap::value_parser!(u64).range(1..))]
    frequency: Option<u64>,
    /// Live: samples each window should hold; with the backend's sampling interval it sets the window's length.
    #[arg(long, default_value_t = 3000)]
    min_samples: u64,
    /// Live: least window length in milliseconds.
    #[arg(long, default_value_t = 200)]
    min_window_ms: u64,
    /// Live: least op calls per window.
    #[arg(long, default_value_t = 1)]
    min_iterations: u64,
    /// Live: seconds one run may take before it is stopped.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Live: the Python interpreter (default: $LOTUS_PYTHON, the active virtual environment's, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Live: skip the harness floor (the empty-op run that marks `baseline` functions).
    #[arg(long)]
    no_baseline: bool,
    /// Live, perf: each resume and pause waits for lotus to mark the window and read its counters (cycles and instructions included). By default the op process stamps its window edges itself, reads its own CPU time, page faults and context switches, and goes on without waiting.
    #[arg(long)]
    round_trip: bool,
    /// Live, perf: start one interpreter per run. By default the op is imported once per op and each run is a fresh process forked from it before the op's first call (setup, warm-up and window in the child).
    #[arg(long)]
    no_fork_server: bool,
    /// Live: the vendor analysis (VTune -collect TYPE, e.g. uarch-exploration; uProf --config TYPE).
    #[arg(long, value_name = "TYPE")]
    collect_type: Option<String>,
    /// Live: keep each run's raw vendor results (VTune result folder, uProf session) under DIR/<op>-run<N>.
    #[arg(long, value_name = "DIR")]
    keep_raw: Option<PathBuf>,
    /// Live: print the exact commands and environment the backend would use, and run nothing.
    #[arg(long)]
    dry_run: bool,
    /// Live: drop functions the harness floor shows too (interpreter loop, allocator).
    #[arg(long, conflicts_with = "no_baseline")]
    exclude_baseline: bool,
    /// Live: threads for torch, OpenMP, MKL and OpenBLAS in each op process (default: 1, as in a DataLoader worker; see the README).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Live: run every op in DIR (`--cwd .`: where lotus was started, for scripts that open files by paths relative to it) instead of in the op file's folder; the op's folder stays importable.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The mapping file.
    file: PathBuf,
    /// Re-apply a stricter merge rule (needs a mapping with run counts).
    #[arg(long, value_parser = parse_rule)]
    rule: Option<MergeRule>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Functions shown per op (0: all).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Tables show full function names (by default long C++ names are shortened to fit the terminal).
    #[arg(long)]
    wide: bool,
    /// Compare with another mapping of the same ops (e.g. the in-pipeline one, `lotus map --from-trace`): per op, the share of its samples in OTHER that fall in functions FILE lists, the top functions FILE misses, and those it lists that OTHER's op never ran.
    #[arg(long, value_name = "OTHER")]
    against: Option<PathBuf>,
}

fn parse_rule(s: &str) -> Result<MergeRule, String> {
    s.parse()
        .map_err(|e: lotus_core::mapping::BadRule| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    usage::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Backends { format, json } => cmd_backends(json || format == DataFormat::Json),
        Command::Map(args) => cmd_map(args),
        Command::Show(args) => cmd_show(args),
        Command::Compare(args) => compare_cmd::run(args),
        Command::Attribute(args) => attribute_cmd::run(args),
        Command::Profile(args) => profile_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Trace { command } => trace_cmd::run(command),
        Command::Completions(args) => docs_cmd::completions::<Cli>(args),
        Command::Man(args) => docs_cmd::man::<Cli>(args, VERSION),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lotus: error: {e:#}");
            ExitCode::from(usage::exit_status(&e))
        }
    }
}

fn cmd_backends(json: bool) -> Result<ExitCode> {
    let probes: Vec<_> = lotus_core::backends()
        .iter()
        .map(|b| (b.description(), b.probe()))
        .collect();
    if json {
        let list: Vec<_> = probes
            .iter()
            .map(|(desc, p)| {
                serde_json::json!({
                    "name": p.backend,
                    "description": desc,
                    "available": p.available,
                    "version": p.version,
                    "reason": p.reason,
                    "notes": p.notes,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (desc, p) in &probes {
        println!(
            "{:<6} {:<4} {}",
            p.backend,
            if p.available { "yes" } else { "no" },
            p.version.as_deref().unwrap_or("-")
        );
        println!("       {desc}");
        if let Some(reason) = &p.reason {
            println!("       not available: {reason}");
        }
        for note in &p.notes {
            println!("       {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a mapping goes and in which format.
fn emit(
    mapping: &Mapping,
    out: Option<&Path>,
    format: Option<Format>,
    top: usize,
    wide: bool,
) -> Result<()> {
    let names = NameWidth::from_wide(wide);
    match out {
        Some(path) if usage::is_stdout(path) => {
            print!(
                "{}",
                render(mapping, format.unwrap_or(Format::Json), top, names)?
            );
        }
        Some(path) => {
            let format = format.unwrap_or_else(|| Format::from_path(path));
            write_atomic(path, &render(mapping, format, top, names)?)?;
            note!(
                "lotus: wrote {} ({} op(s))",
                output::one_line(&path.display().to_string()),
                mapping.ops.len()
            );
        }
        None => print!(
            "{}",
            render(mapping, format.unwrap_or(Format::Table), top, names)?
        ),
    }
    Ok(())
}

fn cmd_map(args: MapArgs) -> Result<ExitCode> {
    if let Some(dir) = &args.from_trace {
        map_from_trace::check_alone(
            args.backend.as_deref(),
            args.ops.len(),
            args.from_reports.is_some(),
            args.dry_run,
        )?;
        let mapping = map_from_trace::build(dir, &args.prefix)?;
        emit(
            &mapping,
            args.out.as_deref(),
            args.format,
            args.top,
            args.wide,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let backend_name = args.backend.as_deref().unwrap_or_default();
    let backend = usage::backend(backend_name)?;
    let (mut mapping, failures, interrupted) = match &args.from_reports {
        Some(dir) => {
            if !args.ops.is_empty() {
                return Err(usage(
                    "give either op files or --from-reports DIR, not both",
                ));
            }
            if backend_name == "perf" {
                return Err(usage("--from-reports reads VTune or uProf reports: use --backend vtune or --backend uprof (perf maps live: lotus map --backend perf ops/*.py)"));
            }
            let outcome = from_reports::build(backend.as_ref(), dir, args.rule)?;
            (outcome.mapping, outcome.failures, false)
        }
        None => {
            if args.ops.is_empty() {
                return Err(usage(format!(
                    "nothing to map: give op files (lotus map --backend {backend_name} ops/*.py), --from-reports DIR or --from-trace DIR"
                )));
            }
            let opts = live::LiveOptions {
                runs: args.runs,
                warmup: args.warmup,
                frequency: live::default_frequency(backend_name, args.frequency),
                frequency_given: args.frequency.is_some(),
                min_samples: args.min_samples,
                min_window: Duration::from_millis(args.min_window_ms),
                min_iterations: args.min_iterations,
                timeout: Duration::from_secs(args.timeout),
                python: live::find_python(args.python.as_deref())?,
                rule: args.rule,
                baseline: !args.no_baseline,
                exclude_baseline: args.exclude_baseline,
                collect_type: args.collect_type.clone(),
                keep_raw: args.keep_raw.clone(),
                threads: live::threads::ThreadPlan::from_env(args.threads),
                cwd: args.cwd.as_deref().map(live::op_folder).transpose()?,
                round_trip: args.round_trip,
                no_fork_server: args.no_fork_server,
            };
            for op in args.ops.iter().filter(|op| op.is_file()) {
                harness::warn_if_op_folder_shared(op);
            }
            if args.dry_run {
                for op in &args.ops {
                    live::check_op_file(op)?;
                }
                print!("{}", live::dry_run(backend.as_ref(), &args.ops, &opts)?);
                return Ok(ExitCode::SUCCESS);
            }
            if let Some(out) = args.out.as_deref().filter(|o| !usage::is_stdout(o)) {
                // Find out now, not after minutes of profiling.
                output::check_writable(out)?;
            }
            let interrupted = Arc::new(AtomicBool::new(false));
            let flag = interrupted.clone();
            // A second Ctrl-C while stopping is ignored: the children are
            // being stopped and finished ops written.
            let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
            let outcome = live::map_live(backend.as_ref(), &args.ops, &opts, &interrupted)?;
            (outcome.mapping, outcome.failures, outcome.interrupted)
        }
    };
    mapping.failures = failures
        .iter()
        .map(|(op, error)| OpFailure {
            op: op.clone(),
            error: error.clone(),
        })
        .collect();
    // A live mapping reports each failure as it happens.
    if args.from_reports.is_some() {
        for f in &mapping.failures {
            eprintln!("lotus: error: op {}: {}", output::one_line(&f.op), f.error);
        }
    }
    if failures.is_empty() && !interrupted {
        emit(
            &mapping,
            args.out.as_deref(),
            args.format,
            args.top,
            args.wide,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    // Keep what finished: the ops that mapped are written, with the
    // failures listed in the mapping itself.
    if !mapping.ops.is_empty() {
        emit(
            &mapping,
            args.out.as_deref(),
            args.format,
            args.top,
            args.wide,
        )?;
    }
    if interrupted {
        eprintln!(
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

fn cmd_show(args: ShowArgs) -> Result<ExitCode> {
    let name = args.file.display().to_string();
    let file = lotus_core::input::open_regular(&args.file)
        .with_context(|| format!("cannot read {name}"))?;
    // Streamed: a mapping of a million functions is never held as text.
    let mut mapping = Mapping::from_reader(file, &name)?;
    if let Some(rule) = args.rule {
        if mapping.imported_from.is_some() {
            bail!("{name}: has no run counts (the original tool's schema), so --rule cannot be applied");
        }
        mapping.apply_rule(rule);
    }
    if let Some(other_path) = &args.against {
        let other_name = other_path.display().to_string();
        let file = lotus_core::input::open_regular(other_path)
            .with_context(|| format!("cannot read {other_name}"))?;
        let other = Mapping::from_reader(file, &other_name)?;
        return mapping_against::run(&mapping, &name, &other, &other_name, args.format, args.top);
    }
    if args.format == Format::Json {
        // Streamed: the JSON of a large mapping is never held whole.
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut out, &mapping)?;
        std::io::Write::write_all(&mut out, b"\n")?;
        std::io::Write::flush(&mut out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let names = NameWidth::from_wide(args.wide);
    print!("{}", render(&mapping, args.format, args.top, names)?);
    Ok(ExitCode::SUCCESS)
}
