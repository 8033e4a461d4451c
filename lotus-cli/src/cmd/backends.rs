//! `lotus backends`: the profiler backends and whether each can run here.

use std::process::ExitCode;

use anyhow::Result;

use crate::render::table;

/// The formats of `lotus backends`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataFormat {
    /// A readable table.
    Table,
    /// JSON.
    Json,
    /// One row per backend.
    Csv,
    /// A Markdown table.
    Md,
}

/// Runs `lotus backends`.
pub fn run(format: DataFormat) -> Result<ExitCode> {
    let probes: Vec<_> = lotus_core::backends()
        .iter()
        .map(|b| (b.description(), b.probe()))
        .collect();
    if matches!(format, DataFormat::Csv | DataFormat::Md) {
        let rows: Vec<[String; 6]> = probes
            .iter()
            .map(|(desc, p)| {
                [
                    p.backend.clone(),
                    if p.available { "yes" } else { "no" }.to_string(),
                    p.version.clone().unwrap_or_default(),
                    desc.to_string(),
                    p.reason.clone().unwrap_or_default(),
                    p.notes.join("; "),
                ]
            })
            .collect();
        let header = [
            "name",
            "available",
            "version",
            "description",
            "reason",
            "notes",
        ];
        if format == DataFormat::Csv {
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(lotus_sys::text::csv_record(header))?;
            for r in &rows {
                w.write_record(lotus_sys::text::csv_record(r))?;
            }
            print!("{}", String::from_utf8(w.into_inner()?)?);
        } else {
            let cell = |c: &str| lotus_sys::text::one_line(c).replace('|', "\\|");
            let mut out = format!("| {} |\n|{}\n", header.join(" | "), "---|".repeat(6));
            for r in &rows {
                out += &format!(
                    "| {} |\n",
                    r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
                );
            }
            print!("{}", lotus_sys::text::printable(&out));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if format == DataFormat::Json {
        let list: Vec<_> = probes
            .iter()
            .map(|(desc, p)| {
                serde_json::json!({
                    "name": p.backend,
                    "description": desc,
                    "available": p.available,
                    "version": p.version,
                    "reason": p.reason,
                    "notes": p.notes,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    // A tool's words (its version line, why it cannot run): control
    // characters (a coloured banner) escaped.
    use lotus_sys::text::{one_line, printable};
    let mut out = String::new();
    for (desc, p) in &probes {
        out += &format!(
            "{:<6} {:<4} {}\n",
            p.backend,
            if p.available { "yes" } else { "no" },
            one_line(p.version.as_deref().unwrap_or("-"))
        );
        out += &format!("       {desc}\n");
        if let Some(reason) = &p.reason {
            out += &format!("       not available: {}\n", printable(reason));
        }
        for note in &p.notes {
            out += &format!("       {}\n", printable(note));
        }
    }
    // Long reasons wrapped to the width, as tables are.
    print!("{}", table::wrap_lines(&out, table::width()));
    Ok(ExitCode::SUCCESS)
}
