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
    attribute_folder_from, in_pipeline_csv, in_pipeline_document, AttributedRow, CpuSource,
    HelperRule, InPipelineAttribution, RowKind, TopFunction,
};
use lotus_samples::SampleFiles;
use lotus_sort::Budget;

use crate::cmd::attribute::render::md_escape;
use crate::cmd::attribute::AttributeFormat;
use crate::render::in_pipeline::svg_of;
use crate::render::svg::Colours;
use crate::render::table;
use lotus_map::output::one_line;
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

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

/// The first `top` of a row's top functions.
fn listed(r: &AttributedRow, top: usize) -> impl Iterator<Item = &TopFunction> {
    r.top_functions.iter().take(top)
}

/// How many columns a module's name may take in a terminal table `width`
/// wide (longer ones are cut at their end): a sixth of the width, 16 to
/// 28 (`libpython3.11.so.1.0` whole from 120 columns).
fn module_max(width: usize) -> usize {
    (width / 6).clamp(16, 28)
}

/// Per row, its top functions (at most `top`), their modules' file names
/// and their shares: three cells, one function a line, the names as
/// [`table::short_names`] gives them for `room` columns (`usize::MAX`:
/// whole).
fn top_columns(
    a: &InPipelineAttribution,
    top: usize,
    room: usize,
    module_max: usize,
) -> Vec<[String; 3]> {
    let full: Vec<String> = a
        .rows
        .iter()
        .flat_map(|r| listed(r, top))
        .map(|f| one_line(&f.function))
        .collect();
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let shown = table::short_names(&refs, room);
    let module = |f: &TopFunction| {
        let m = one_line(&table::module_name(&f.module));
        if room == usize::MAX {
            m
        } else {
            table::cut_right(&m, module_max)
        }
    };
    let mut at = 0;
    a.rows
        .iter()
        .map(|r| {
            let fs: Vec<&TopFunction> = listed(r, top).collect();
            let names = shown[at..at + fs.len()].join("\n");
            at += fs.len();
            [
                names,
                fs.iter().map(|f| module(f)).collect::<Vec<_>>().join("\n"),
                fs.iter()
                    .map(|f| format!("{:.0}%", f.share * 100.0))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ]
        })
        .collect()
}

/// A row's name as the table shows it: an op inside another under its
/// parent, marked `└ ` and indented by its depth, so the rows show the
/// tree (Markdown keeps the mark: it drops leading spaces).
fn tree_name(r: &AttributedRow) -> String {
    if r.depth == 0 {
        r.name.clone()
    } else {
        format!("{}└ {}", "  ".repeat(r.depth as usize - 1), r.name)
    }
}

/// The table (Markdown when `markdown`), each row with its `top`
/// functions and their modules; `width`: the width a terminal table fits,
/// its function names shortened to it ([`table::short_names`]), `None`
/// for the names whole (`--wide`).
/// Columns: the row (ops as a tree), its samples, its exclusive CPU with
/// that figure's 95% `±` (one cell: the table stays narrower), its
/// wall time (ops: its spans' durations, inclusive), its
/// inclusive CPU (only where ops nest: else it is the exclusive one), its
/// share of the total, its calls and inclusive CPU per call, counters, top
/// functions.
fn table_of(
    a: &InPipelineAttribution,
    markdown: Option<bool>,
    top: usize,
    width: Option<usize>,
) -> String {
    let (header, rows) = header_and_rows(a);
    let mut text = String::new();
    if let Some(short) = markdown {
        text += &markdown_rows(a, top, short, header, rows);
    } else {
        text += &grid_rows(a, top, width, header, rows);
    }
    let footer = footer_of(a);
    // The lines under the table fit the width the table fits.
    let width = width.filter(|_| markdown.is_none());
    for line in footer {
        match width {
            Some(w) => text += &table::wrap(&line, w),
            None => text += &line,
        }
        text.push('\n');
    }
    text
}

/// The table's header and rows: each row's figures and counters (the
/// inclusive column only where ops nest).
fn header_and_rows(a: &InPipelineAttribution) -> (Vec<String>, Vec<Vec<String>>) {
    let nested = a.rows.iter().any(|r| r.depth > 0);
    let mut header: Vec<String> = [
        "row",
        "samples",
        "CPU ms ±95%",
        "wall ms",
        "incl ms",
        "CPU %",
        "calls",
        "ms/call",
    ]
    .map(String::from)
    .to_vec();
    if !nested {
        header.remove(4);
    }
    header.extend(a.counter_headers().iter().map(|h| one_line(h)));
    let rows: Vec<Vec<String>> = a
        .rows
        .iter()
        .map(|r| {
            // Names come from a trace folder (often received from
            // elsewhere): control characters are shown escaped.
            let mut cells = vec![
                one_line(&tree_name(r)),
                r.samples.to_string(),
                format!("{} ±{}", ms(r.cpu_ns), ms(r.uncertainty_ns)),
                r.wall_ns.map_or(String::new(), ms),
                if r.kind == RowKind::Op {
                    ms(r.inclusive_cpu_ns)
                } else {
                    String::new()
                },
                format!("{:.1}", r.share * 100.0),
                r.calls.map_or(String::new(), |c| c.to_string()),
                r.cpu_per_call_ns
                    .map_or(String::new(), |c| format!("{:.3}", c as f64 / 1e6)),
            ];
            if !nested {
                cells.remove(4);
            }
            cells.extend(a.counter_cells(r));
            cells
        })
        .collect();
    (header, rows)
}

/// The widest a function's name is in a Markdown cell.
const MD_NAME: usize = 48;

/// The rows as Markdown, each with its top functions in one cell, their
/// names shortened by the tables' rule where `short` (`--wide` gives them
/// whole: a C++ name can run to hundreds of characters), and `|` escaped.
fn markdown_rows(
    a: &InPipelineAttribution,
    top: usize,
    short: bool,
    mut header: Vec<String>,
    mut rows: Vec<Vec<String>>,
) -> String {
    let mut text = String::new();
    for (cells, r) in rows.iter_mut().zip(&a.rows) {
        let fs: Vec<_> = listed(r, top).collect();
        let functions: Vec<&str> = fs.iter().map(|f| f.function.as_str()).collect();
        let names = table::short_names(&functions, if short { MD_NAME } else { usize::MAX });
        let tops: Vec<String> = (fs.iter().zip(names))
            .map(|(f, name)| {
                format!(
                    "{} ({}) {:.0}%",
                    md_escape(&name),
                    md_escape(&table::module_name(&f.module)),
                    f.share * 100.0
                )
            })
            .collect();
        cells.push(tops.join(", "));
    }
    header.push("top functions".into());
    text += &format!(
        "| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for r in &rows {
        text += &format!("| {} |\n", r.join(" | ").replace('\n', " "));
    }
    text
}

/// The rows as a terminal table fitted to `width`, the top functions in
/// columns of their own.
fn grid_rows(
    a: &InPipelineAttribution,
    top: usize,
    width: Option<usize>,
    mut header: Vec<String>,
    mut rows: Vec<Vec<String>>,
) -> String {
    // The top functions get what the other columns leave of the
    // width (in a part of the table of their own where that is too
    // little: see [`table::Grid`]), their modules and shares beside
    // them.
    let module_width = width.map_or(usize::MAX, module_max);
    let tops = top_columns(
        a,
        top,
        if width.is_some() { 1 } else { usize::MAX },
        module_width,
    );
    let names_col = header.len();
    header.extend(["function", "module", "%"].map(String::from));
    let columns: Vec<table::Column> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            if i == 0 || i == names_col || i == names_col + 1 {
                table::Column::left(h)
            } else {
                table::Column::right(h)
            }
        })
        .collect();
    for (cells, [_, module, share]) in rows.iter_mut().zip(tops) {
        cells.extend([String::new(), module, share]);
    }
    let grid = table::Grid::new(columns, rows).names(names_col, 2, table::NAME_MIN, |room| {
        top_columns(a, top, room, module_width)
            .into_iter()
            .map(|[names, ..]| names)
            .collect()
    });
    grid.render(width)
}

/// The lines under the table: the samples and their CPU, how exact the
/// op rows are, the counters' totals, the notes.
fn footer_of(a: &InPipelineAttribution) -> Vec<String> {
    let mut footer = vec![format!(
        "{} samples at {} Hz, {} ms of CPU: the rows' CPU ms (each its own, not that of the ops inside it) add up to it{}",
        a.total_samples,
        a.frequency_hz,
        ms(a.total_cpu_ns),
        if a.partial { "; PARTIAL" } else { "" }
    )];
    let ops = a.rows.iter().filter(|r| r.kind == RowKind::Op).count();
    let source = |s: CpuSource| {
        a.rows
            .iter()
            .filter(|r| r.kind == RowKind::Op && r.cpu_source == s)
            .count()
    };
    let (exact, partly) = (
        source(CpuSource::Exact),
        source(CpuSource::ClockLessSampled),
    );
    footer.push(format!(
        "±: the 95% interval of a figure from samples (1.96·√n sampling intervals); {exact} of {ops} op rows exact from the spans' thread CPU clock (± from their pool threads' samples only){}",
        if partly > 0 {
            format!(", {partly} from it less the samples of ops inside them that lack it")
        } else {
            String::new()
        }
    ));
    if !a.counters.is_empty() {
        let totals: Vec<String> = a
            .counters
            .iter()
            .map(|c| {
                format!(
                    "{} {}",
                    one_line(c),
                    a.counter_totals.get(c).copied().unwrap_or(0)
                )
            })
            .collect();
        footer.push(format!("counters over every sample: {}", totals.join(", ")));
    }
    footer.extend(a.notes.iter().map(|n| format!("note: {n}")));
    footer
}
