//! `lotus attribute DIR`: a sampled trace folder's samples credited to its
//! ops (the rule: [`lotus_core::attribute::in_pipeline`]), as a table,
//! Markdown, CSV or JSON (`lotus.in-pipeline/1`), and with `--plot` as a
//! bar chart of CPU time per row. Ops nested in ops show as a tree (each
//! under its parent, indented); each row has its exclusive CPU (which add
//! up to the total), its 95% `±` and its inclusive CPU. Counters read with each sample add a
//! column each (CSV: named as in the samples), and CPI where cycles and
//! instructions are both read; JSON has them per row in `counters` (and
//! `cpi`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lotus_core::attribute::in_pipeline::{
    attribute_folder, AttributedRow, CpuSource, InPipelineAttribution, RowKind,
};
use lotus_core::spill::Budget;
use lotus_core::trace::samples::SampleFiles;
use serde_json::json;

use crate::attribute_cmd::AttributeFormat;
use crate::plots::{labelled_bars, Colours, LabelledBar};
use lotus_map::output::{one_line, widest, NameWidth};
use lotus_map::write::write_atomic;

/// The JSON schema name.
pub const SCHEMA: &str = "lotus.in-pipeline/1";

/// Runs `lotus attribute DIR`.
pub fn run(
    dir: &Path,
    prefix: &str,
    top: usize,
    format: Option<AttributeFormat>,
    out: Option<&Path>,
    wide: bool,
    plot: Option<&Path>,
) -> Result<ExitCode> {
    let budget = Budget::from_env()?;
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
    let mut a = attribute_folder(dir, prefix, budget, top)
        .with_context(|| format!("cannot attribute the samples in {}", dir.display()))?;
    // What the collection knew the samples miss (its `note=` lines), and
    // what they cover of the CPU the job ran (`cpu_ns=`) when short: said
    // with the rows, in every format.
    let files = SampleFiles::of(dir, prefix);
    let coverage = files
        .read_coverage()
        .with_context(|| format!("cannot read {}", files.sampling.display()))?;
    a.notes.extend(coverage.all_notes());
    if let Some(path) = plot {
        let colours = Colours::new(
            a.rows
                .iter()
                .filter(|r| r.kind == RowKind::Op)
                .map(|r| r.name.as_str()),
        );
        write_atomic(path, &svg_of(&a, &colours)?)?;
        crate::usage::note!("lotus: wrote {}", path.display());
    }
    let text = match format {
        AttributeFormat::Json => serde_json::to_string_pretty(&json_of(&a))? + "\n",
        AttributeFormat::Csv => csv_of(&a)?,
        // Names from the trace: control characters escaped.
        AttributeFormat::Table => {
            lotus_core::text::printable(&table_of(&a, false, NameWidth::from_wide(wide)))
                .into_owned()
        }
        AttributeFormat::Md => {
            lotus_core::text::printable(&table_of(&a, true, NameWidth::Full)).into_owned()
        }
        // Answered before the attribution; here for completeness.
        AttributeFormat::Folded => return folded(dir, prefix, budget, out),
    };
    if out.is_some() || matches!(format, AttributeFormat::Json | AttributeFormat::Csv) {
        for note in &a.notes {
            crate::usage::say!("lotus: note: {note}");
        }
    }
    match out {
        Some(path) => {
            write_atomic(path, &text)?;
            crate::usage::say!("lotus: wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `--format folded`: the collapsed stacks of the folder, each sample
/// under its row; the notes on standard error.
fn folded(dir: &Path, prefix: &str, budget: Budget, out: Option<&Path>) -> Result<ExitCode> {
    let f = lotus_core::attribute::in_pipeline::folded_folder(dir, prefix, budget)
        .with_context(|| format!("cannot fold the samples in {}", dir.display()))?;
    for note in &f.notes {
        crate::usage::say!("lotus: note: {note}");
    }
    // Names from the trace: control characters escaped.
    let text = lotus_core::text::printable(&f.text()).into_owned();
    match out {
        Some(path) => {
            write_atomic(path, &text)?;
            crate::usage::say!("lotus: wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `--plot` (and `lotus report`'s plot of it): one bar per row (ops, then
/// the other rows, as the table lists them), its CPU time, named with its
/// top function, coloured by `colours` (the other rows grey).
pub(crate) fn svg_of(a: &InPipelineAttribution, colours: &Colours) -> Result<String> {
    // Seconds once a bar would pass 10 000 ms: the axis stays readable.
    let top_ns = a.rows.iter().map(|r| r.cpu_ns).max().unwrap_or(0);
    let (unit, per_ns, decimals) = if top_ns >= 10_000_000_000 {
        ("s", 1e9, 2)
    } else {
        ("ms", 1e6, 1)
    };
    let bars: Vec<LabelledBar> = a
        .rows
        .iter()
        .map(|r| LabelledBar {
            label: r.name.clone(),
            value: r.cpu_ns as f64 / per_ns,
            note: r.top_functions.first().map_or(String::new(), |f| {
                format!("{} ({:.0}%)", f.function, f.share * 100.0)
            }),
        })
        .collect();
    let title = format!(
        "CPU time per row in the pipeline ({} samples at {} Hz{})",
        a.total_samples,
        a.frequency_hz,
        if a.partial { ", partial" } else { "" }
    );
    labelled_bars(
        &title,
        &format!("CPU time ({unit})"),
        &bars,
        decimals,
        colours,
    )
}

fn json_of(a: &InPipelineAttribution) -> serde_json::Value {
    let mut v = serde_json::to_value(a).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("schema".into(), json!(SCHEMA));
    }
    v
}

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

/// How many top functions a table row names.
const TOP_IN_TABLE: usize = 3;

/// A row's top functions, their names as the table shows them (`names`,
/// in order): in a terminal table one a line, in Markdown on one line.
fn top_text(r: &AttributedRow, names: &[String], markdown: bool) -> String {
    r.top_functions
        .iter()
        .zip(names)
        .map(|(f, name)| format!("{name} ({:.0}%)", f.share * 100.0))
        .collect::<Vec<_>>()
        .join(if markdown { ", " } else { "\n" })
}

/// Whether the rows have a CPI column: cycles and instructions both read.
fn has_cpi(a: &InPipelineAttribution) -> bool {
    ["cycles", "instructions"]
        .iter()
        .all(|c| a.counters.iter().any(|n| n == c))
}

/// A row's counter columns, in the samples file's order, then CPI.
pub(crate) fn counter_cells(a: &InPipelineAttribution, r: &AttributedRow) -> Vec<String> {
    let mut cells: Vec<String> = a
        .counters
        .iter()
        .map(|c| r.counters.get(c).copied().unwrap_or(0).to_string())
        .collect();
    if has_cpi(a) {
        cells.push(r.cpi.map_or(String::new(), |c| format!("{c:.2}")));
    }
    cells
}

/// The counter columns' headers.
pub(crate) fn counter_headers(a: &InPipelineAttribution) -> Vec<String> {
    let mut h = a.counters.clone();
    if has_cpi(a) {
        h.push("CPI".into());
    }
    h
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

/// The table (Markdown when `markdown`); `names`: whether the top
/// functions are shown whole or shortened to fit the width (C++ kernels
/// run to hundreds of characters: see [`lotus_map::output::NameWidth`]).
/// Columns: the row (ops as a tree), its samples, its exclusive CPU with
/// that figure's 95% `±` (one cell: the table stays narrower), its
/// inclusive CPU (only where ops nest: else it is the exclusive one), its
/// share of the total, its calls and inclusive CPU per call, counters, top
/// functions.
fn table_of(a: &InPipelineAttribution, markdown: bool, names: NameWidth) -> String {
    let nested = a.rows.iter().any(|r| r.depth > 0);
    let mut header: Vec<String> = [
        "row",
        "samples",
        "CPU ms ±95%",
        "incl ms",
        "share %",
        "calls",
        "ms/call",
    ]
    .map(String::from)
    .to_vec();
    if !nested {
        header.remove(3);
    }
    header.extend(counter_headers(a).iter().map(|h| one_line(h)));
    header.push("top functions".into());
    let mut rows: Vec<Vec<String>> = a
        .rows
        .iter()
        .map(|r| {
            // Names come from a trace folder (often received from
            // elsewhere): control characters are shown escaped.
            let mut cells = vec![
                one_line(&tree_name(r)),
                r.samples.to_string(),
                format!("{} ±{}", ms(r.cpu_ns), ms(r.uncertainty_ns)),
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
                cells.remove(3);
            }
            cells.extend(counter_cells(a, r));
            cells
        })
        .collect();
    // The names get what the other columns (their widest cells) leave of
    // the width, less a share's " (100%)"; distinct names stay distinct.
    let mut others: Vec<usize> = (0..header.len() - 1)
        .map(|c| widest(&header[c], rows.iter().map(|r| &r[c])))
        .collect();
    others[0] += " (100%)".len();
    let full: Vec<String> = a
        .rows
        .iter()
        .flat_map(|r| r.top_functions.iter().take(TOP_IN_TABLE))
        .map(|f| one_line(&f.function))
        .collect();
    let shown = names.names(&full, &others);
    let mut at = 0;
    for (cells, r) in rows.iter_mut().zip(&a.rows) {
        let n = r.top_functions.len().min(TOP_IN_TABLE);
        cells.push(top_text(r, &shown[at..at + n], markdown));
        at += n;
    }
    let mut text = String::new();
    if markdown {
        text += &format!(
            "| {} |\n|{}\n",
            header.join(" | "),
            "---|".repeat(header.len())
        );
        for r in &rows {
            text += &format!("| {} |\n", r.join(" | ").replace('\n', " "));
        }
    } else {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
        for r in rows {
            t.add_row(r);
        }
        text += &format!("{t}\n");
    }
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
    // The lines under the table fit the width the table fits.
    let width = match names {
        NameWidth::Fit(w) if !markdown => Some(w),
        _ => None,
    };
    for line in footer {
        match width {
            Some(w) => text += &wrap(&line, w),
            None => text += &line,
        }
        text.push('\n');
    }
    text
}

/// `line` cut at spaces into lines of at most `width` characters (a word
/// longer than that stands alone), the ones after the first indented by
/// two spaces. Hand-written: a dozen lines, where a crate (textwrap)
/// would bring its own dependencies for the one use.
fn wrap(line: &str, width: usize) -> String {
    let width = width.max(20);
    let mut out = String::new();
    let mut current = String::new();
    for word in line.split(' ') {
        let len = current.chars().count();
        if len > 0 && len + 1 + word.chars().count() > width {
            out += &current;
            out.push('\n');
            current = format!("  {word}");
        } else {
            if len > 0 {
                current.push(' ');
            }
            current += word;
        }
    }
    out + &current
}

fn csv_of(a: &InPipelineAttribution) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "row",
        "kind",
        "samples",
        "cpu_ns",
        "share",
        "calls",
        "cpu_per_call_ns",
        "path",
        "parent",
        "depth",
        "inclusive_samples",
        "pool_samples",
        "inclusive_cpu_ns",
        "cpu_source",
        "uncertainty_ns",
        "inclusive_uncertainty_ns",
        "top_function",
        "top_module",
    ]
    .map(String::from)
    .to_vec();
    header.extend(counter_headers(a).into_iter().map(|h| h.to_lowercase()));
    w.write_record(lotus_core::text::csv_record(&header))?;
    for r in &a.rows {
        let top = r.top_functions.first();
        let mut cells = vec![
            r.name.clone(),
            format!("{:?}", r.kind).to_lowercase(),
            r.samples.to_string(),
            r.cpu_ns.to_string(),
            format!("{:.6}", r.share),
            r.calls.map_or(String::new(), |c| c.to_string()),
            r.cpu_per_call_ns.map_or(String::new(), |c| c.to_string()),
            r.path.clone(),
            r.parent.clone().unwrap_or_default(),
            r.depth.to_string(),
            r.inclusive_samples.to_string(),
            r.pool_samples.to_string(),
            r.inclusive_cpu_ns.to_string(),
            serde_json::to_value(r.cpu_source)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            r.uncertainty_ns.to_string(),
            r.inclusive_uncertainty_ns.to_string(),
            top.map_or(String::new(), |f| f.function.clone()),
            top.map_or(String::new(), |f| f.module.clone()),
        ];
        cells.extend(counter_cells(a, r));
        w.write_record(lotus_core::text::csv_record(&cells))?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn lines_are_wrapped_at_spaces_to_the_width() {
        let text = "note: 12% of the DataLoader workers' CPU ran outside every op";
        let wrapped = wrap(text, 24);
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= 24),
            "{wrapped}"
        );
        assert_eq!(
            wrapped.split_whitespace().collect::<Vec<_>>().join(" "),
            text
        );
        assert!(
            wrapped.lines().skip(1).all(|l| l.starts_with("  ")),
            "{wrapped}"
        );
        assert_eq!(wrap("short", 80), "short");
    }
}
