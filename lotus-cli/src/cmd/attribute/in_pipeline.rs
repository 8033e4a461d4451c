//! `lotus attribute DIR`: a sampled trace folder's samples credited to its
//! ops (the rule: [`lotus_attribute`]), as a table,
//! Markdown, CSV or JSON (`lotus.in-pipeline/1`), and with `--plot` as a
//! bar chart of CPU time per row. Ops nested in ops show as a tree (each
//! under its parent, indented); each row has its exclusive CPU (which add
//! up to the total), its 95% `±` and its inclusive CPU. Counters read with each sample add a
//! column each (CSV: named as in the samples), and CPI where cycles and
//! instructions are both read; JSON has them per row in `counters` (and
//! `cpi`). Above the table (and in the JSON, `verdict`) stands the
//! verdict ([`lotus_attribute`]): whether training waited for data and
//! what would help. Each op row has its wall time beside its CPU.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use lotus_attribute::Verdict;
use lotus_attribute::{
    attribute_folder_from, in_pipeline_csv, in_pipeline_document, HelperRule,
    InPipelineAttribution, RowKind,
};
use lotus_samples::SampleFiles;
use lotus_sort::Budget;

use crate::cmd::attribute::AttributeFormat;
use crate::render::in_pipeline::{svg_of, table_of};
use crate::render::svg::Colours;
use crate::render::table;
use lotus_sys::write_file;
use lotus_trace::Dir;

/// Runs `lotus attribute DIR`.
#[allow(clippy::too_many_arguments)] // the command's options, as given
pub fn run(
    dir: &Path,
    prefix: &str,
    top: usize,
    format: Option<AttributeFormat>,
    out: Option<&Path>,
    wide: bool,
    plot: Option<&Path>,
    flamegraph: Option<(&Path, Option<&str>)>,
    helpers: HelperRule,
    ops: Option<lotus_attribute::OpsFrom>,
) -> Result<ExitCode> {
    if dir.is_file() {
        return Err(crate::usage::usage(format!(
            "{}: a file, not a trace folder: give the folder `lotus trace run --sample --out DIR` wrote",
            lotus_sys::text::printable(&dir.display().to_string())
        )));
    }
    let budget = Budget::from_env()?;
    if let Some((svg, op)) = flamegraph {
        crate::cmd::attribute::flames::flamegraph_of(dir, prefix, budget, svg, op)?;
    }
    let format =
        format.unwrap_or_else(|| out.map_or(AttributeFormat::Table, AttributeFormat::from_path));
    if format == AttributeFormat::Folded {
        if plot.is_some() {
            return Err(crate::usage::usage(
                "--plot draws the rows' CPU time; leave it out with --format folded",
            ));
        }
        return folded(dir, prefix, budget, out);
    }
    // Its files read once, for the attribution and the verdict alike.
    let shared = crate::traces::shared_folder(dir)?;
    let source = Dir::of(dir, shared.as_ref());
    let mut a = attribute_folder_from(source, prefix, budget, top, helpers, ops)
        .with_context(|| format!("cannot attribute the samples in {}", dir.display()))?;
    // What the collection knew the samples miss (its `note=` lines), and
    // what they cover of the CPU the job ran (`cpu_ns=`) when short: said
    // with the rows, in every format.
    let files = SampleFiles::of(source, prefix);
    let coverage = files
        .read_coverage()
        .with_context(|| format!("cannot read {}", files.sampling.display()))?;
    a.notes.extend(coverage.all_notes());
    a.notes
        .extend(lotus_runner::RunRecord::notes_of(dir, prefix));
    let verdict = verdict_of(source, &a, budget)?;
    if let Some(path) = plot {
        let colours = Colours::new(
            a.rows
                .iter()
                .filter(|r| r.kind == RowKind::Op)
                .map(|r| r.name.as_str()),
        );
        write_file(path, svg_of(&a, &colours)?.as_bytes())?;
        crate::usage::note!("lotus: wrote {}", path.display());
    }
    let text = match format {
        AttributeFormat::Json => {
            serde_json::to_string_pretty(&in_pipeline_document(&a, &verdict))? + "\n"
        }
        AttributeFormat::Csv => in_pipeline_csv(&a)?,
        // Names from the trace: control characters escaped.
        AttributeFormat::Table => {
            let width = (!wide).then(table::width);
            lotus_sys::text::printable(
                &(crate::render::verdict::text(&verdict, width) + &table_of(&a, None, top, width)),
            )
            .into_owned()
        }
        AttributeFormat::Md => lotus_sys::text::printable(
            &(crate::render::verdict::markdown(&verdict) + &table_of(&a, Some(!wide), top, None)),
        )
        .into_owned(),
        // Answered before the attribution; here for completeness.
        AttributeFormat::Folded => return folded(dir, prefix, budget, out),
    };
    if out.is_some() || matches!(format, AttributeFormat::Json | AttributeFormat::Csv) {
        for note in &a.notes {
            crate::usage::say!("lotus: note: {note}");
        }
    }
    write_or_print(out, &text)?;
    Ok(ExitCode::SUCCESS)
}

/// `text` written to `out` (said on stderr), or to standard output.
pub(crate) fn write_or_print(out: Option<&Path>, text: &str) -> Result<()> {
    match out {
        Some(path) => {
            write_file(path, text.as_bytes())?;
            crate::usage::say!("lotus: wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// `--format folded`: the collapsed stacks of the folder, each sample
/// under its row; the notes on standard error.
fn folded(dir: &Path, prefix: &str, budget: Budget, out: Option<&Path>) -> Result<ExitCode> {
    let f = lotus_attribute::folded_folder(dir, prefix, budget)
        .with_context(|| format!("cannot fold the samples in {}", dir.display()))?;
    for note in &f.notes {
        crate::usage::say!("lotus: note: {note}");
    }
    // Names from the trace: control characters escaped.
    let text = lotus_sys::text::printable(&f.text()).into_owned();
    write_or_print(out, &text)?;
    Ok(ExitCode::SUCCESS)
}

/// The verdict on the sampled trace `dir` attributed as `a`
/// ([`Verdict::of_sampled_folder`]).
pub(crate) fn verdict_of<'a>(
    dir: impl Into<Dir<'a>>,
    a: &InPipelineAttribution,
    budget: Budget,
) -> Result<Verdict> {
    let dir = dir.into();
    Verdict::of_sampled_folder(dir, a, budget).with_context(|| {
        format!(
            "cannot read the training loop from the logs in {}",
            dir.path().display()
        )
    })
}
