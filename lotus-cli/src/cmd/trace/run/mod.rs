//! `lotus trace run --out DIR -- python train.py ...`: the program runs
//! with tracing on and no change to its code: the arguments parsed, the
//! run made by [`lotus_runner::run_traced`] (how the tracer is put in the
//! job, the trace folder checked, signals and faults: see there), and what
//! it said and left printed. Below 10 file descriptors lotus refuses at
//! once, before it creates anything.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use lotus_runner::{MessageKind, Progress, TraceOptions, TraceRun};

/// `lotus trace run` arguments.
#[derive(Debug, clap::Args)]
pub struct TraceRunArgs {
    /// The trace folder (created if missing): one log per traced process.
    #[arg(long, short, value_name = "DIR")]
    pub out: PathBuf,
    /// Log file names: <PREFIX>_main_pid_<pid> and <PREFIX>_worker_pid_<pid>.
    #[arg(long, default_value = "lotus")]
    pub prefix: String,
    /// First remove the logs with this prefix already in DIR (default: keep them, and warn; a sampled run moves to DIR.old).
    #[arg(long)]
    pub clean: bool,
    /// Leave torch and torchvision unpatched: only what the program marks
    /// itself (lotus_trace.wrap, TracedDataset, worker_batch, main_wait) is traced.
    #[arg(long)]
    pub no_torch: bool,
    /// Also trace the ITT tasks the job's libraries begin and end (oneDNN's
    /// primitives, an instrumented library's own): lotus's ITT collector is
    /// loaded (when no other collector is set) and each task becomes an op
    /// span, the innermost where it runs inside an op. Off by default:
    /// library tasks would take their samples from the Python ops they run
    /// in, and fill the op tables with library primitives.
    #[arg(long)]
    pub itt_tasks: bool,
    /// Also sample every process and thread of the job through perf, into
    /// DIR beside the logs, for `lotus attribute DIR`.
    #[arg(long)]
    pub sample: bool,
    /// Sampling frequency in Hz (with --sample).
    #[arg(long, short = 'F', requires = "sample", default_value_t = crate::sampling::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,
    /// Counters read with each sample and summed per op by `lotus
    /// attribute DIR` (with --sample): comma-separated perf event names
    /// (cycles, instructions, task-clock, context-switches, page-faults),
    /// or `none` [default: cycles,instructions]. Where the kernel refuses
    /// them (no PMU) the run goes on without them and says why.
    #[arg(long, requires = "sample", value_name = "LIST",
          value_parser = crate::sampling::parse_counters)]
    pub counters: Option<crate::sampling::CounterList>,
    /// Call stacks with every sample (with --sample), into
    /// <PREFIX>.stacks for `lotus attribute DIR --format folded`: `dwarf`
    /// (the default) takes the kernel's frames from its call chain and
    /// copies up to 64 KiB of the user stack with each sample, unwound through
    /// the libraries' unwind tables (complete through code without frame
    /// pointers: CPython, libtorch); `fp` takes the kernel's frame-pointer
    /// chain (at most 127 frames; it stops at code without frame
    /// pointers); `none` keeps the sampled function alone.
    #[arg(long, value_enum, requires = "sample", default_value = "dwarf")]
    pub stacks: crate::sampling::StackMode,
    /// The log lines: `lotus` (a header, `key=value` fields) or `original`
    /// (the original fork's three columns only, which the study's scripts
    /// read: no header, no fields; batch ids in the names).
    #[arg(long, value_enum, default_value = "lotus")]
    pub format: LogFormat,
    #[command(flatten)]
    pub ops: super::OpArgs,
    /// The program and its arguments, e.g. `python train.py --epochs 1`.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `--format`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Header line and `key=value` fields.
    Lotus,
    /// `S<Name>,<start_ns>,<duration_ns>` only.
    Original,
}

/// Prints what the runner says as lotus's own lines: `lotus: ` and the
/// text on stderr (control characters escaped), notes dropped with
/// `--quiet`, errors as they are.
pub(super) struct Stderr;

impl Progress for Stderr {
    fn message(&mut self, kind: MessageKind, text: &str) {
        match kind {
            MessageKind::Note => crate::usage::note!("lotus: {text}"),
            MessageKind::Error => eprintln!("lotus: {text}"),
            _ => crate::usage::say!("lotus: {text}"),
        }
    }
}

/// A runner's error as the command's, with the descriptor limit and its
/// fix named when it comes from running out of descriptors.
pub(super) fn with_descriptor_hint(error: lotus_runner::RunnerError) -> anyhow::Error {
    let hint = error.descriptor_hint();
    let error = anyhow::Error::from(error);
    match hint {
        Some(hint) => error.context(hint),
        None => error,
    }
}

/// Runs `lotus trace run`.
pub fn run(args: TraceRunArgs) -> Result<ExitCode> {
    let options = options(&args)?;
    let run = lotus_runner::run_traced(&options, &mut Stderr).map_err(with_descriptor_hint)?;
    Ok(say_run(&args, &run))
}

/// The runner's options for `args`, refused (before anything is created)
/// where they cannot run: a bad prefix (a usage error), too few file
/// descriptors, samples in the original format (a usage error).
fn options(args: &TraceRunArgs) -> Result<TraceOptions> {
    lotus_runner::check_prefix(&args.prefix).map_err(|e| crate::usage::usage(e.to_string()))?;
    lotus_runner::check_descriptor_limit().map_err(with_descriptor_hint)?;
    let mut options = TraceOptions::new(&args.out, args.command.clone())
        .with_prefix(&args.prefix)
        .with_clean(args.clean)
        .with_torch(!args.no_torch)
        .with_itt_tasks(args.itt_tasks)
        .with_format(match args.format {
            LogFormat::Lotus => lotus_runner::LogFormat::Lotus,
            LogFormat::Original => lotus_runner::LogFormat::Original,
        })
        .with_ops(args.ops.ops.clone())
        .with_control_library(Box::new(|private_dir: &Path| {
            crate::control_lib::path_for_run(private_dir).map_err(|e| e.to_string())
        }));
    if args.sample {
        options = options.with_sampling(crate::sampling::runner_sampling(
            args.frequency,
            &args.counters,
            args.stacks,
        )?);
    }
    lotus_runner::check_options(&options).map_err(|e| crate::usage::usage(e.to_string()))?;
    Ok(options)
}

/// Says what the run left: the logs written, notes on what to look at and
/// run next, the program's status, the processes that could not write
/// their logs; the exit code (the program's, or 1 for an incomplete trace
/// of a program that succeeded).
fn say_run(args: &TraceRunArgs, run: &TraceRun) -> ExitCode {
    let (out, new, status) = (&run.out, &run.logs, run.status);
    let (kind, line) = run.written();
    Stderr.message(kind, &line);
    // What the workers ran outside every op, said now rather than only by
    // a later `attribute` (issue 24: say what was not seen).
    if args.sample && !new.is_empty() {
        for note in super::hints::unseen_notes(out, &args.prefix) {
            crate::usage::say!("lotus: note: {note}");
        }
    }
    if !status.success() {
        crate::usage::say!("lotus: the program exited with {status}");
    }
    if run.failures.is_empty() && !new.is_empty() {
        crate::usage::note!(
            "{}",
            super::hints::next_hint(out, &args.prefix, args.sample)
        );
    }
    if !run.failures.is_empty() {
        say_failures(args, run);
        if status.success() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::from(run.exit_code())
}

/// Each lost log, then what that means ([`TraceRun::lost_logs`]).
fn say_failures(args: &TraceRunArgs, run: &TraceRun) {
    for failure in &run.failures {
        crate::usage::say!("lotus: {failure}");
    }
    for line in run.lost_logs(args.sample, &args.prefix) {
        crate::usage::say!("lotus: {line}");
    }
}
