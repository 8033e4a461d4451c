//! `lotus trace stats`: per-op figures, batches, waits and delays of one
//! trace or of several configurations, as tables, JSON, CSV or Markdown
//! (see the [module above](super) for the JSON).

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_attribute::{trace_stats_csv, ConfigsDocument, OpTimes, Verdict};
use lotus_sys::text::{one_line, printable};
use lotus_trace::{ConfigComparison, OutlierRule, PerBatchRows, TraceIndex};
use serde::Serialize;

use lotus_sys::write_file;

use super::tables::{fit_lines, mode_of, render, render_comparison, render_ranks};
use crate::traces::{configurations_of, is_sampled, sampled_attribution, OutliersArg};

/// `lotus trace stats`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The trace: a folder of logs (searched recursively) or one log file.
    /// Several: one configuration each, reported side by side; or, where
    /// their logs name one distributed job, each host's folder of it,
    /// merged (`--hosts`).
    #[arg(value_name = "DIR", required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// The DIRs are the folders of one job's hosts (torchrun, srun, Ray):
    /// merge them, or say why they are not (done without the flag where
    /// their logs name one job).
    #[arg(long, conflicts_with = "configs")]
    pub hosts: bool,
    /// `rank`: each op's figures on each rank (a table; `ops_by_rank` in
    /// JSON, a `rank` field on every row); `node`: on each node (of a Ray
    /// cluster, of a multi-node job; `ops_by_node`).
    #[arg(long, value_enum)]
    pub by: Option<StatsBy>,
    /// Each DIR is a parent folder: each of its sub-folders holding logs is
    /// one configuration (the study's layout, e.g. b128_gpu4/, b256_gpu4/).
    #[arg(long)]
    pub configs: bool,
    /// What to do with outlying batch preprocessing times: `flag` (below
    /// Q1 - 1.5 IQR or above Q3 + 1.5 IQR, listed, kept in the figures) or
    /// `study` (the original study's --remove_outliers: below Q1 - 2 IQR
    /// removed, every batch figure recomputed).
    #[arg(long, value_enum, default_value = "flag")]
    pub outliers: OutliersArg,
    /// Output format: tables (fitted to the width), lotus.trace-stats/2
    /// JSON (lotus.trace-stats-configs/1 for several configurations), CSV
    /// (one row per op, span kind, and the batch, wait and delay
    /// summaries) or Markdown.
    #[arg(long, value_enum, default_value = "table")]
    pub format: StatsFormat,
    /// The same as --format json (kept for scripts).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Also write each op's total time as op,seconds (for `lotus
    /// attribute --op-times`).
    #[arg(long, value_name = "FILE")]
    pub op_times: Option<PathBuf>,
}

/// `lotus trace stats --by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsBy {
    /// Each op on each rank.
    Rank,
    /// Each op on each node.
    Node,
}

/// `lotus trace stats --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsFormat {
    /// Tables fitted to the terminal's width.
    Table,
    /// `lotus.trace-stats/2` JSON.
    Json,
    /// One row per op, span kind and summary.
    Csv,
    /// Markdown tables.
    Md,
}

/// The verdict's lines, wrapped to the terminal's width.
pub(super) fn verdict_text(v: &Verdict) -> String {
    printable(&crate::render::verdict::text(
        v,
        Some(crate::render::table::width()),
    ))
    .into_owned()
}

/// The configurations `args` names: each DIR, or with `--configs` each
/// sub-folder of each DIR that holds logs.
pub(super) fn configurations(args: &StatsArgs) -> Result<Vec<(String, PathBuf)>> {
    configurations_of(&args.dirs, args.configs)
}

pub(super) fn write_json(value: &impl Serialize) -> Result<()> {
    let mut stdout = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    serde_json::to_writer_pretty(&mut stdout, value)
        .map_err(anyhow::Error::from)
        .and_then(|()| Ok(writeln!(stdout)?))
        .and_then(|()| Ok(stdout.flush()?))
        .context("cannot write the statistics")
}

pub(super) fn stats(args: StatsArgs) -> Result<ExitCode> {
    let rule = OutlierRule::from(args.outliers);
    let job = match args.configs {
        false => crate::traces::one_job(&args.dirs, args.hosts)?,
        true => None,
    };
    let configs = match job {
        Some(_) => Vec::new(),
        None => configurations(&args)?,
    };
    let several = args.configs || configs.len() > 1;
    if several && args.op_times.is_some() {
        return Err(crate::usage::usage("--op-times takes one trace, not several configurations: run `lotus trace stats DIR --op-times FILE` for each"));
    }
    let mut computed = Vec::new();
    if let Some(job) = job {
        computed.push(crate::traces::job_figures(job, rule)?);
    }
    for (label, dir) in configs {
        // One trace alone, sampled: its samples' attribution reads its
        // logs again.
        let read_again = !several && is_sampled(&dir, "lotus");
        computed.push(crate::traces::computed(label, dir, rule, read_again)?);
    }
    for c in &mut computed {
        c.by_rank = args.by == Some(StatsBy::Rank);
        c.by_node = args.by == Some(StatsBy::Node);
    }
    if let (Some(path), [one]) = (&args.op_times, computed.as_slice()) {
        write_op_times(path, &one.index)?;
    }
    if !several {
        let mut one = computed.pop().context("no trace")?;
        // A sampled trace: the verdict gets its CPU facts, and what ran
        // outside every op is said.
        let attribution = match one.job {
            None => sampled_attribution(one.source(), "lotus"),
            Some(_) => None,
        };
        let unseen: Vec<String> = attribution
            .iter()
            .flat_map(|a| a.unseen.iter().map(|u| u.message()))
            .collect();
        if let Some(a) = &attribution {
            one.with_samples(a);
        }
        if args.json {
            let rows = one.rows.take();
            write_json(&one.document(rows))?;
            for note in &unseen {
                crate::usage::say!("lotus: note: {note}");
            }
        } else if args.format == StatsFormat::Csv {
            print!("{}", trace_stats_csv(&[&one])?);
            for note in &unseen {
                crate::usage::say!("lotus: note: {note}");
            }
        } else {
            let mode = mode_of(args.format);
            let mut text = one
                .job
                .as_ref()
                .map_or(String::new(), |j| j.summary() + "\n\n");
            text += &verdict_text(&one.verdict);
            let dir = one
                .job
                .as_ref()
                .map_or(one.dir.as_path(), |_| Path::new(&one.label));
            text += &render(dir, &one.folder, &one.stats, mode);
            text += &printable(&render_ranks(&one, mode));
            for note in &unseen {
                text += &format!("{}\n", printable(&format!("note: {note}")));
            }
            print!("{}", fit_lines(&text, mode));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let comparison = ConfigComparison::of(
        &computed
            .iter()
            .map(|c| (c.label.as_str(), &c.stats.batches))
            .collect::<Vec<_>>(),
    );
    if args.json {
        let rows: Vec<Option<PerBatchRows>> = computed.iter_mut().map(|c| c.rows.take()).collect();
        write_json(&ConfigsDocument::new(
            rule,
            computed.iter().zip(rows),
            comparison,
        ))?;
    } else if args.format == StatsFormat::Csv {
        print!("{}", trace_stats_csv(&computed.iter().collect::<Vec<_>>())?);
    } else {
        let mode = mode_of(args.format);
        let mut text = String::new();
        for c in &computed {
            text += &format!("=== Configuration {} ===\n", one_line(&c.label));
            text += &verdict_text(&c.verdict);
            text += &render(&c.dir, &c.folder, &c.stats, mode);
            text += &printable(&render_ranks(c, mode));
            text.push('\n');
        }
        text += &printable(&render_comparison(&comparison, rule, mode));
        print!("{}", fit_lines(&text, mode));
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes each op's total time as `op,seconds`
/// ([`lotus_attribute::OpTimes::csv_of_trace`]).
pub(super) fn write_op_times(path: &Path, index: &TraceIndex) -> Result<()> {
    let Some((text, ops)) = OpTimes::csv_of_trace(index) else {
        bail!(
            "--op-times {}: the trace has no op events (lines of kind op, such as SLoader or S<Transform>)",
            path.display()
        );
    };
    write_file(path, text.as_bytes())?;
    crate::usage::note!("lotus: wrote {} ({ops} op(s))", path.display());
    Ok(())
}
