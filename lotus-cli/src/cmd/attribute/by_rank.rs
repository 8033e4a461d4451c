//! `lotus attribute DIR [DIR...] --by rank|host`: each row's samples on
//! each rank or host, or with several folders and `--by op` summed over
//! them ([`lotus_attribute::rows_by_rank`]), of one folder or of the
//! folders of one job's hosts (merged only where their logs name one job).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use lotus_attribute::{rows_by_rank, RankRows, RowsBy};
use lotus_sort::Budget;

use super::{AttributeArgs, AttributeFormat, ByArg};
use crate::render::table::{self, Column, Grid};

/// Runs `lotus attribute DIR [DIR...] --by rank`.
pub fn run(dir: &Path, args: &AttributeArgs) -> Result<ExitCode> {
    let by = match args.by {
        ByArg::Rank => RowsBy::Rank,
        ByArg::Host => RowsBy::Host,
        ByArg::Op => RowsBy::All,
        _ => {
            return Err(crate::usage::usage(
                "several folders are one job's hosts: --by op (summed over them), rank or host",
            ))
        }
    };
    let dirs: Vec<PathBuf> = std::iter::once(dir.to_path_buf())
        .chain(args.more.iter().cloned())
        .collect();
    let job = crate::traces::one_job(&dirs, dirs.len() > 1)?;
    let paths: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let mut got = rows_by_rank(&paths, &args.prefix, Budget::from_env()?, args.top, by)
        .with_context(|| format!("cannot attribute the samples in {}", dir.display()))?;
    if let Some((_, job)) = job {
        got = got.with_job(job);
    }
    let text = match args.format.unwrap_or(AttributeFormat::Table) {
        AttributeFormat::Json => serde_json::to_string_pretty(&got)? + "\n",
        AttributeFormat::Table | AttributeFormat::Md => table_of(&got, args),
        other => {
            let name = format!("{other:?}").to_lowercase();
            return Err(crate::usage::usage(format!(
                "--by rank writes a table, Markdown or JSON, not {name}"
            )));
        }
    };
    match &args.out {
        Some(path) => lotus_sys::write_file(path, text.as_bytes())?,
        None => print!("{}", lotus_sys::text::printable(&text)),
    }
    for note in &got.notes {
        crate::usage::note!("lotus: note: {note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The rows as a table (or Markdown): rank (or host), host, row, CPU and
/// its `±`, share of the rank, samples, top function.
fn table_of(got: &RankRows, args: &AttributeArgs) -> String {
    let s = |ns: u64| format!("{:.3}", ns as f64 / 1e9);
    let room = if args.wide { usize::MAX } else { 40 };
    let rows = got.rows.iter().map(|r| {
        let top = r.top_functions.first().map_or(String::new(), |f| {
            let name = lotus_core::short_name(&f.function, room);
            format!("{name} ({:.0}%)", f.share * 100.0)
        });
        let share = format!("{:.1}%", r.share_of_rank * 100.0);
        let (cpu, pm, n) = (s(r.cpu_ns), s(r.uncertainty_ns), r.samples.to_string());
        vec![
            r.place(got.by),
            r.hosts.join(" "),
            r.row.clone(),
            cpu,
            pm,
            share,
            n,
            top,
        ]
    });
    let left = [got.by, "host", "row"].map(Column::left);
    let right = ["cpu s", "±", "share", "samples"].map(Column::right);
    let columns = left
        .into_iter()
        .chain(right)
        .chain([Column::left("top function")]);
    let grid = Grid::new(columns.collect(), rows.collect());
    let body = match args.format {
        Some(AttributeFormat::Md) => grid.markdown(),
        _ => grid.render((!args.wide).then(table::width)),
    };
    format!("{}\n{body}", got.heading())
}
