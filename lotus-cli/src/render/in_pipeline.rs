//! What `lotus attribute DIR`, `lotus top` and `lotus report` show of an
//! in-pipeline attribution: its table and its plot.

use anyhow::Result;
use lotus_attribute::{AttributedRow, CpuSource, InPipelineAttribution, RowKind, TopFunction};
use lotus_map::output::one_line;

use crate::render::svg::{labelled_bars, Colours, LabelledBar};
use crate::render::table::{self, md_escape};

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
pub(crate) fn table_of(
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
    // No functions asked for (`lotus top`'s default): no columns for them.
    if top == 0 {
        let columns = header
            .iter()
            .enumerate()
            .map(|(i, h)| match i {
                0 => table::Column::left(h),
                _ => table::Column::right(h),
            })
            .collect();
        return table::Grid::new(columns, rows).render(width);
    }
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
