//! `lotus attribute DIR`: a sampled trace folder's samples credited to its
//! ops (the rule: [`lotus_core::attribute::in_pipeline`]), as a table,
//! Markdown, CSV or JSON (`lotus.in-pipeline/1`), and with `--plot` as a
//! bar chart of CPU time per row.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use lotus_core::attribute::in_pipeline::{attribute_folder, InPipelineAttribution, RowKind};
use lotus_core::spill::Budget;
use serde_json::json;

use crate::attribute_cmd::AttributeFormat;
use crate::output::write_atomic;
use crate::plots::{labelled_bars, Colours, LabelledBar};

/// The JSON schema name.
pub const SCHEMA: &str = "lotus.in-pipeline/1";

/// Runs `lotus attribute DIR`.
pub fn run(
    dir: &Path,
    prefix: &str,
    top: usize,
    format: Option<AttributeFormat>,
    out: Option<&Path>,
    plot: Option<&Path>,
) -> Result<ExitCode> {
    let budget = Budget::from_env()?;
    let a = attribute_folder(dir, prefix, budget, top)
        .with_context(|| format!("cannot attribute the samples in {}", dir.display()))?;
    if let Some(path) = plot {
        write_atomic(path, &svg_of(&a)?)?;
        crate::usage::note!("lotus: wrote {}", path.display());
    }
    let format =
        format.unwrap_or_else(|| out.map_or(AttributeFormat::Table, AttributeFormat::from_path));
    let text = match format {
        AttributeFormat::Json => serde_json::to_string_pretty(&json_of(&a))? + "\n",
        AttributeFormat::Csv => csv_of(&a)?,
        AttributeFormat::Table => table_of(&a, false),
        AttributeFormat::Md => table_of(&a, true),
    };
    if out.is_some() || matches!(format, AttributeFormat::Json | AttributeFormat::Csv) {
        for note in &a.notes {
            eprintln!("lotus: note: {note}");
        }
    }
    match out {
        Some(path) => {
            write_atomic(path, &text)?;
            eprintln!("lotus: wrote {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `--plot`: one bar per row (ops, then the other rows, as the table
/// lists them), its CPU time, named with its top function.
fn svg_of(a: &InPipelineAttribution) -> Result<String> {
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
    let colours = Colours::new(
        a.rows
            .iter()
            .filter(|r| r.kind == RowKind::Op)
            .map(|r| r.name.as_str()),
    );
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
        &colours,
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

fn top_text(r: &lotus_core::attribute::in_pipeline::AttributedRow, n: usize) -> String {
    r.top_functions
        .iter()
        .take(n)
        .map(|f| format!("{} ({:.0}%)", f.function, f.share * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

fn table_of(a: &InPipelineAttribution, markdown: bool) -> String {
    let header = [
        "row",
        "kind",
        "samples",
        "CPU ms",
        "share %",
        "calls",
        "CPU ms/call",
        "top functions",
    ];
    let rows: Vec<Vec<String>> = a
        .rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                format!("{:?}", r.kind).to_lowercase(),
                r.samples.to_string(),
                ms(r.cpu_ns),
                format!("{:.1}", r.share * 100.0),
                r.calls.map_or(String::new(), |c| c.to_string()),
                r.cpu_per_call_ns
                    .map_or(String::new(), |c| format!("{:.3}", c as f64 / 1e6)),
                top_text(r, 3),
            ]
        })
        .collect();
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
    text += &format!(
        "{} samples at {} Hz ({} ms of CPU){}\n",
        a.total_samples,
        a.frequency_hz,
        ms(a.total_samples * a.interval_ns),
        if a.partial { "; PARTIAL" } else { "" }
    );
    for note in &a.notes {
        text += &format!("note: {note}\n");
    }
    text
}

fn csv_of(a: &InPipelineAttribution) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "row",
        "kind",
        "samples",
        "cpu_ns",
        "share",
        "calls",
        "cpu_per_call_ns",
        "top_function",
        "top_module",
    ])?;
    for r in &a.rows {
        let top = r.top_functions.first();
        w.write_record([
            r.name.clone(),
            format!("{:?}", r.kind).to_lowercase(),
            r.samples.to_string(),
            r.cpu_ns.to_string(),
            format!("{:.6}", r.share),
            r.calls.map_or(String::new(), |c| c.to_string()),
            r.cpu_per_call_ns.map_or(String::new(), |c| c.to_string()),
            top.map_or(String::new(), |f| f.function.clone()),
            top.map_or(String::new(), |f| f.module.clone()),
        ])?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}
