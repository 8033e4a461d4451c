//! `lotus top -- CMD` and `lotus top --pid PID`: the job's ops live, as
//! `lotus attribute DIR` prints the folder so far, redrawn in place on a
//! terminal, one view after another in a pipe ([`lotus_runner::watch`]).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use lotus_attribute::{attribute_folder_from, HelperRule, Verdict};
use lotus_runner::{Progress, Watched};
use lotus_sort::Budget;

/// `lotus top` arguments.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Attach to this running job (its main process) instead of starting
    /// CMD: as `lotus trace attach`, with its workers.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Keep the trace in DIR (an earlier run there moves to DIR.old)
    /// [default: a private temporary folder, removed at the end].
    #[arg(long, short, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seconds between views.
    #[arg(long, short = 'n', value_name = "S", default_value = "2", value_parser = super::attach::seconds)]
    pub interval: Duration,
    /// Top functions listed in each row (as `lotus attribute DIR --top`).
    #[arg(long, default_value_t = 0)]
    pub top: usize,
    /// Sampling frequency in Hz.
    #[arg(long, short = 'F', default_value_t = crate::sampling::DEFAULT_FREQUENCY_HZ,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,
    /// The job to run and watch: `lotus top -- python train.py ...`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    pub command: Vec<String>,
}

/// Runs `lotus top`.
pub fn top(args: TopArgs) -> Result<ExitCode> {
    if args.out.as_deref().is_some_and(crate::usage::is_stdout) {
        return Err(crate::usage::usage("top --out names a folder, not `-`"));
    }
    lotus_runner::check_descriptor_limit().map_err(super::run::with_descriptor_hint)?;
    // A private folder only where no --out keeps the trace.
    let private = (args.out.is_none())
        .then(|| lotus_sys::PrivateDir::new("lotus-top-"))
        .transpose()?;
    let dir = match &private {
        Some(p) => p.path().join("trace"),
        None => args.out.clone().unwrap_or_default(),
    };
    let stacks = crate::sampling::StackMode::Dwarf;
    let sampling = crate::sampling::runner_sampling(args.frequency, &None, stacks)?;
    let what = match args.pid {
        Some(pid) => Watched::Attach(lotus_runner::AttachOptions::new(pid, &dir, sampling)),
        None => {
            let options = lotus_runner::TraceOptions::new(&dir, args.command.clone())
                .with_control_library(Box::new(|private_dir: &Path| {
                    crate::control_lib::path_for_run(private_dir).map_err(|e| e.to_string())
                }))
                .with_sampling(sampling);
            lotus_runner::check_options(&options)
                .map_err(|e| crate::usage::usage(e.to_string()))?;
            Watched::Run(options)
        }
    };
    let tty = std::io::stdout().is_terminal();
    let run = lotus_runner::watch(what, args.interval, |at| {
        // No samples yet (the job starting): said as the view.
        let body = frame(&dir, args.top).unwrap_or_else(|e| format!("waiting: {e:#}\n"));
        let head = format!("lotus top: {:.1} s\n", at.as_secs_f64());
        let mut out = std::io::stdout().lock();
        let written = if tty {
            // In place: the screen cleared, the view cut to its height.
            let rows = lotus_sys::terminal_rows().unwrap_or(usize::MAX).max(3);
            let lines: Vec<&str> = body.lines().take(rows - 2).collect();
            writeln!(out, "\x1b[H\x1b[2J{head}{}", lines.join("\n"))
        } else {
            writeln!(out, "{head}{body}")
        };
        // A closed pipe ends the views, not the job.
        written.and_then(|()| out.flush()).is_ok()
    });
    let run = run.map_err(super::run::with_descriptor_hint)?;
    for (kind, text) in &run.messages {
        super::run::Stderr.message(*kind, text);
    }
    // The whole run, once more, as the last view.
    let text = frame(&dir, args.top).with_context(|| format!("cannot read {}", dir.display()))?;
    print!("lotus top: the whole run\n{text}");
    match &args.out {
        Some(out) => crate::usage::note!(
            "lotus: trace in {0}; next: lotus attribute {0}",
            out.display()
        ),
        None => crate::usage::note!("lotus: the trace was not kept (give --out DIR to keep it)"),
    }
    Ok(ExitCode::from(run.code))
}

/// The folder so far as `lotus attribute DIR` prints it: the verdict
/// (where the logs hold a training loop yet), then the table.
fn frame(dir: &Path, top: usize) -> Result<String> {
    let budget = Budget::from_env()?;
    let a = attribute_folder_from(dir, "lotus", budget, top, HelperRule::Cause, None)?;
    let width = Some(crate::render::table::width());
    let verdict = Verdict::of_sampled_folder(dir, &a, budget)
        .map(|v| crate::render::verdict::text(&v, width))
        .unwrap_or_default();
    let table = crate::render::in_pipeline::table_of(&a, None, top, width);
    Ok(lotus_sys::text::printable(&(verdict + &table)).into_owned())
}
