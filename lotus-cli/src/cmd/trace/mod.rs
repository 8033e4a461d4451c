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
//! preprocessing to consumption ([`lotus_trace`] defines
//! them), then, for a distributed job, a row per rank; `--format json` prints
//! `lotus.trace-stats/2`, with each rank's full figures under `ranks`
//! (empty when no log names a rank; [`lotus_trace`]).
//! `--outliers study` applies the original study's `--remove_outliers`
//! (batches below Q1 - 2 IQR removed, batch figures recomputed;
//! `batches.outlier_rule` names the rule, `batches.before_removal` keeps
//! every batch's figures). Schema 2 renamed the wait bucket `over_1ms` to
//! `1ms_to_500ms` (what it holds) and added the delay shares.
//!
//! Several DIRs, or `--configs PARENT` (each sub-folder of logs one
//! configuration, as the study lays them out), give one block per
//! configuration, each equal to that folder's statistics alone, then the
//! study's comparison (IQR and std of batch preprocessing time over the
//! smallest configuration's, and their maxima); `--format json` prints
//! `lotus.trace-stats-configs/1`: `{"schema", "outliers", "configurations":
//! [{"label", ...one trace-stats/2 object...}], "comparison":
//! {"configurations": [...], "max_normalized_iqr", "max_normalized_std"}}`.
//!
//! ```json
//! {"schema": "lotus.trace-stats/2", "trace": "DIR",
//!  "percentiles": "...", "std": "population (ddof=0)",
//!  "events": 1200, "bad_lines": 0, "warnings": [],
//!  "processes": [{"pid": 41, "role": "main", "host": null, "rank": null, "folder": "", "events": 40}],
//!  "ops": [{"name": "Loader", "count": 512, "total_ns": 1, "mean_ns": 1.0, "p50_ns": 1.0,
//!           "p95_ns": 1.0, "p99_ns": 1.0, "std_ns": 0.0, "min_ns": 1, "max_ns": 1}],
//!  "kinds": [{"kind": "batch", "count": 16, ...}],
//!  "batches": {"outlier_rule": "flag-1.5iqr", "summary": {...}, "q1_ns": 1.0, "q3_ns": 1.0,
//!              "iqr_ns": 0.0, "low_fence_ns": 1.0, "high_fence_ns": 1.0, "before_removal": null,
//!              "outliers": [{"batch": 3, "pid": 42, "start_ns": 1, "dur_ns": 9, "side": "high", "removed": false}]},
//!  "wait": {"summary": {...}, "buckets": [{"bucket": "none", "count": 4, "share": 0.25, "total_ns": 0}, ...]},
//!  "delay": {"summary": {...}, "unconsumed": 0, "consumed_without_batch": 0,
//!            "under_250ms": 12, "under_250ms_share": 0.75, "over_500ms": 1, "over_500ms_share": 0.0625},
//!  "ranks": [{"rank": 0, "hosts": ["node1"], "files": ["DIR/lotus_main_pid_41"],
//!             "events": 600, "processes": [...], "ops": [...], ...}],
//!  "per_batch": [{"batch": 0, "pid": 42, "start_ns": 1, "dur_ns": 9, "end_ns": 10,
//!                 "consumed_ns": 12, "main_pid": 41, "delay_ns": 2, "wait_ns": 3, "wait_bucket": "under_1ms"}]}
//! ```
//!
//! `--op-times FILE` writes `op,seconds` (each op's total time), which
//! `lotus attribute --op-times` reads; it also reads a trace folder
//! directly.

mod attach;
mod hints;
mod ops;
pub mod run;
mod stats;
mod tables;
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
