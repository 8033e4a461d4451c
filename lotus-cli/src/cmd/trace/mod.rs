//! `lotus trace`: the timeline and statistics of a pipeline trace (the
//! per-process logs `lotus trace run` or the original LotusTrace fork
//! writes; [`lotus_trace`] reads them).
//!
//! ```text
//! lotus trace attach PID --out DIR [--duration S]
//! lotus trace view DIR [--coarse] [--no-torch] --out trace.json|-
//! lotus trace view DIR --format firefox --out profile.json|-
//! lotus trace stats DIR... [--configs] [--outliers flag|study] [--format table|json] [--op-times FILE]
//! ```
//!
//! `view` writes Chrome trace event JSON (open it in Perfetto or
//! `chrome://tracing`): one track per process, every op, sample, batch,
//! fetch and wait as a span, arrows from a batch's preprocessing to its
//! consumption, and any PyTorch profiler trace in DIR merged in (see
//! [`lotus_trace`] and [`lotus_trace`]): its
//! events keep their pids and tids, their `ts` moved onto the view's time
//! base; its `process_name` for a pid lotus also traced gives way to
//! lotus's (main or worker, host, rank). The view is streamed: two passes
//! over the logs (the first finds the time base, the processes and which
//! batch each consumption takes), then every event is written as it is
//! read.
//!
//! `stats` prints per-op figures, per-batch preprocessing time with IQR
//! outliers, the main process's waits in buckets and the delay from
//! preprocessing to consumption, then, for a distributed job, a row per
//! rank; `--format json` prints `lotus.trace-stats/2` (its fields:
//! [`lotus_attribute::StatsDocument`]); several DIRs or `--configs PARENT`
//! one block per configuration and the study's comparison
//! (`lotus.trace-stats-configs/1`). `--op-times FILE` writes `op,seconds`
//! (each op's total time), which `lotus attribute --op-times` reads.

mod attach;
mod hints;
mod ops;
pub mod run;
mod stats;
mod tables;
pub mod top;
mod view;

use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

pub use ops::OpArgs;
pub use stats::StatsArgs;
pub use view::ViewArgs;

/// `lotus trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Run a program with tracing on, no change to its code:
    /// `lotus trace run --out DIR -- python train.py ...`.
    #[command(after_help = crate::usage::env_help::trace_run())]
    Run(run::TraceRunArgs),
    /// Sample a job that is already running, with its workers (those
    /// started later too): `lotus trace attach PID --out DIR`.
    Attach(attach::AttachArgs),
    /// Write a Chrome trace / Perfetto JSON of a trace: one track per
    /// process, every op, sample and batch as a span, arrows from each
    /// batch's preprocessing to its consumption (`--format firefox`: a
    /// Firefox Profiler profile, every sample with its call stack).
    #[command(after_help = crate::usage::env_help::trace_read())]
    View(ViewArgs),
    /// Per-op times, per-batch preprocessing time (IQR outliers), the main
    /// process's waits and the delay from preprocessing to consumption.
    #[command(after_help = crate::usage::env_help::trace_stats())]
    Stats(StatsArgs),
}

/// Runs a `lotus trace` subcommand.
pub fn run(command: TraceCommand) -> Result<ExitCode> {
    match command {
        TraceCommand::Run(args) => {
            if crate::usage::is_stdout(&args.out) {
                return Err(crate::usage::usage(
                    "trace run --out names the trace folder (one log per process); standard output (`-`) cannot hold it",
                ));
            }
            run::run(args)
        }
        TraceCommand::Attach(args) => attach::attach(args),
        TraceCommand::View(args) => view::view(args),
        TraceCommand::Stats(mut args) => {
            args.json |= args.format == stats::StatsFormat::Json;
            if args
                .op_times
                .as_deref()
                .is_some_and(crate::usage::is_stdout)
            {
                return Err(crate::usage::usage(
                    "--op-times -: standard output carries the statistics; give --op-times a file name",
                ));
            }
            stats::stats(args)
        }
    }
}
