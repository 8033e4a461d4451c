//! `lotus trace attach PID --out DIR [--duration S]`: a running job
//! sampled where it runs, with its workers ([`lotus_runner::attach`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::sampling::{CounterList, StackMode};

/// `lotus trace attach` arguments.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The job's main process: it, its threads and its descendants (the
    /// DataLoader workers running now and those started later) are sampled.
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// The trace folder (created if missing).
    #[arg(long, short, value_name = "DIR")]
    pub out: PathBuf,
    /// Stop after this many seconds; the job runs on [default: until it
    /// ends, or Ctrl-C, which stops lotus and not the job].
    #[arg(long, value_name = "S", value_parser = seconds)]
    pub duration: Option<Duration>,
    /// First remove an earlier run in DIR (default: it moves to DIR.old).
    #[arg(long)]
    pub clean: bool,
    /// Sampling frequency in Hz.
    #[arg(long, short = 'F', default_value_t = crate::sampling::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,
    /// Counters read with each sample, as `trace run --counters` [default: cycles,instructions].
    #[arg(long, value_name = "LIST", value_parser = crate::sampling::parse_counters)]
    pub counters: Option<CounterList>,
    /// Call stacks with every sample, as `trace run --stacks`.
    #[arg(long, value_enum, default_value = "dwarf")]
    pub stacks: StackMode,
}

/// `--duration`: seconds, above 0.
pub(super) fn seconds(text: &str) -> std::result::Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds above 0")),
    }
}

/// Runs `lotus trace attach`.
pub fn attach(args: AttachArgs) -> Result<ExitCode> {
    if crate::usage::is_stdout(&args.out) {
        return Err(crate::usage::usage(
            "trace attach --out names a folder, not `-`",
        ));
    }
    lotus_runner::check_descriptor_limit().map_err(super::run::with_descriptor_hint)?;
    let sampling = crate::sampling::runner_sampling(args.frequency, &args.counters, args.stacks)?;
    let options = lotus_runner::AttachOptions::new(args.pid, &args.out, sampling)
        .with_duration(args.duration)
        .with_clean(args.clean);
    let run = lotus_runner::attach(&options, &mut super::run::Stderr)
        .map_err(super::run::with_descriptor_hint)?;
    let (pid, out) = (args.pid, run.out.display());
    let runs_on = [" (the job runs on)", ""][usize::from(run.job_ended)];
    crate::usage::note!("lotus: samples of {pid} in {out}{runs_on}; next: lotus attribute {out}");
    Ok(ExitCode::SUCCESS)
}
