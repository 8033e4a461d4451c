//! Rendering mappings: the formats, the terminal table (drawn with
//! comfy-table), names kept on one line.

use std::path::Path;

use crate::error::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table};
use lotus_core::Unit;
use lotus_core::{Mapping, OpMapping};

/// Output formats of a mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// A readable table (the terminal default).
    Table,
    /// `lotus.mapping/1` JSON.
    Json,
    /// The original Lotus tool's schema (`op_to_func`, `common_funcs_to_op`).
    Lotus,
    /// One row per (op, function).
    Csv,
    /// Markdown tables.
    Md,
}

impl Format {
    /// The format a file name implies (`.csv`, `.md`); JSON otherwise.
    pub fn from_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => Format::Csv,
            Some("md") => Format::Md,
            Some("txt") => Format::Table,
            _ => Format::Json,
        }
    }
}

/// How tables show function names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameWidth {
    /// In full (`--wide`).
    Full,
    /// Shortened so that each table fits this many columns (by
    /// [`lotus_core::short_names`], the rule of `lotus`'s own tables).
    Fit(usize),
}

impl NameWidth {
    /// `--wide`: full names; else fit [`lotus_core::table_width`]
    /// (`COLUMNS`, else the terminal's width, else 100 columns).
    pub fn from_wide(wide: bool) -> NameWidth {
        if wide {
            NameWidth::Full
        } else {
            NameWidth::Fit(lotus_core::table_width())
        }
    }

    /// A list of op names, cut to a third of the width when it is longer.
    fn ops(self, list: &str) -> String {
        match self {
            NameWidth::Fit(width) if list.chars().count() > (width / 3).max(20) => {
                let keep = (width / 3).max(20) - 1;
                list.chars().take(keep).collect::<String>() + "…"
            }
            _ => list.to_string(),
        }
    }

    /// The table's function names: full, or shortened to what is left of
    /// the width once `others` columns (their widest cells) are drawn.
    pub fn names(self, names: &[String], others: &[usize]) -> Vec<String> {
        match self {
            NameWidth::Full => names.to_vec(),
            NameWidth::Fit(width) => {
                // UTF8_FULL_CONDENSED: a bar at the left, then a space,
                // the cell, a space and a bar per column.
                let drawn = 1 + 3 * (others.len() + 1) + others.iter().sum::<usize>();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                lotus_core::short_names(&refs, width.saturating_sub(drawn))
            }
        }
    }
}

/// The widest of a column's cells and its header, in terminal columns
/// ([`lotus_core::display_width`], as names are shortened).
pub fn widest<'a>(header: &str, cells: impl Iterator<Item = &'a String>) -> usize {
    cells
        .map(|c| lotus_core::display_width(c))
        .chain(std::iter::once(lotus_core::display_width(header)))
        .max()
        .unwrap_or(0)
}

/// Renders `mapping` in `format`. `top` limits functions per op in the
/// table and Markdown views (0: all); `names` is how tables show function
/// names (JSON, CSV and Markdown keep them whole).
pub fn render(mapping: &Mapping, format: Format, top: usize, names: NameWidth) -> Result<String> {
    Ok(match format {
        Format::Json => mapping.to_json() + "\n",
        Format::Lotus => {
            serde_json::to_string_pretty(&mapping.to_lotus_format())
                .context("writing the original tool's schema")?
                + "\n"
        }
        Format::Csv => render_csv(mapping)?,
        // Names from the file are on one line already; the rest of the
        // text (backend, rule, what it was imported from) too is data.
        Format::Md => lotus_sys::text::printable(&render_md(mapping, top)).into_owned(),
        Format::Table => {
            lotus_sys::text::printable(&render_table(mapping, top, names)).into_owned()
        }
    })
}

/// A figure of the mapping as tables show it, bounded in width whatever
/// the file holds ([`lotus_sys::text::figure`]).
pub fn value_text(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Samples if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Unit::Samples => lotus_sys::text::figure(v, 1),
        Unit::Seconds => lotus_sys::text::figure(v, 3),
    }
}

fn render_csv(mapping: &Mapping) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(lotus_sys::text::csv_record([
        "op",
        "function",
        "module",
        mapping.unit.label(),
        "share",
        "runs_seen",
        "runs",
        "shared_with",
    ]))
    .context("writing CSV")?;
    // One lookup per row, not a scan of the shared list (a mapping may
    // hold a million functions).
    let shared: std::collections::HashMap<(&str, &str), &lotus_core::SharedFunction> = mapping
        .shared
        .iter()
        .map(|s| ((s.function.as_str(), s.module.as_str()), s))
        .collect();
    for op in &mapping.ops {
        for f in &op.functions {
            let others: Vec<&str> = shared
                .get(&(f.function.as_str(), f.module.as_str()))
                .map(|s| {
                    s.ops
                        .iter()
                        .filter(|o| **o != op.name)
                        .map(String::as_str)
                        .collect()
                })
                .unwrap_or_default();
            w.write_record(lotus_sys::text::csv_record([
                op.name.as_str(),
                &f.function,
                &f.module,
                &f.samples.to_string(),
                &format!("{:.6}", f.share),
                &f.runs_seen.to_string(),
                &op.runs.to_string(),
                &others.join(";"),
            ]))
            .context("writing CSV")?;
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| e.into_error())
        .context("writing CSV")?;
    String::from_utf8(bytes).context("writing CSV")
}

/// What marks a function the harness floor shows too.
/// What a table adds to the name of a function the baseline mapping
/// holds too.
pub const BASELINE_TAG: &str = " [baseline]";

/// The mapping's settings in one line, as its tables head them: backend,
/// rule, runs and warm-up calls, and the schema it was read from.
pub fn header_line(mapping: &Mapping) -> String {
    let mut s = format!(
        "backend {}, rule {}",
        mapping.backend, mapping.settings.rule
    );
    if let Some(runs) = mapping.settings.runs {
        s += &format!(", {runs} run(s) per op");
    }
    if let Some(w) = mapping.settings.warmup {
        s += &format!(", {w} warm-up call(s)");
    }
    if let Some(from) = &mapping.imported_from {
        s += &format!(" (read from the {from} schema: no samples or run counts)");
    }
    s
}

/// An op's line above its functions in a table: its name, functions,
/// runs, samples (or seconds) and, for a live mapping, what sampling cost
/// its calls.
pub fn op_heading(mapping: &Mapping, op: &OpMapping) -> String {
    let cost = op
        .window
        .as_ref()
        .and_then(|w| w.sampling_cost())
        .map_or_else(String::new, |c| {
            // Bounded width, whatever figures the file holds.
            let slowdown = c.slowdown() * 100.0;
            format!(
                ", {} us CPU a call sampled against {} us unsampled ({}{}%)",
                lotus_sys::text::figure(c.sampled_cpu_s * 1e6, 1),
                lotus_sys::text::figure(c.unsampled_cpu_s * 1e6, 1),
                if slowdown >= 0.0 { "+" } else { "" },
                lotus_sys::text::figure(slowdown, 0)
            )
        });
    format!(
        "{}  ({} function(s), {} run(s), {} {}{cost})",
        one_line(&op.name),
        op.functions.len(),
        op.runs,
        value_text(mapping.unit, op.samples),
        mapping.unit.label()
    )
}

fn render_table(mapping: &Mapping, top: usize, width: NameWidth) -> String {
    let imported = mapping.imported_from.is_some();
    let mut out = format!("lotus mapping: {}\n", header_line(mapping));
    for op in &mapping.ops {
        out += &format!("\n{}\n", op_heading(mapping, op));
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header([
                "function",
                "module",
                mapping.unit.label(),
                "share",
                "runs seen",
            ]);
        let shown = if top == 0 {
            op.functions.len()
        } else {
            top.min(op.functions.len())
        };
        let functions = &op.functions[..shown];
        let rows: Vec<[String; 4]> = functions
            .iter()
            .map(|f| {
                let module = one_line(&f.module);
                if imported {
                    [module, "-".into(), "-".into(), "-".into()]
                } else {
                    [
                        module,
                        value_text(mapping.unit, f.samples),
                        format!("{:.1}%", 100.0 * f.share),
                        format!("{}/{}", f.runs_seen, op.runs),
                    ]
                }
            })
            .collect();
        let mut others: Vec<usize> = ["module", mapping.unit.label(), "share", "runs seen"]
            .iter()
            .enumerate()
            .map(|(i, h)| widest(h, rows.iter().map(|r| &r[i])))
            .collect();
        if functions.iter().any(|f| f.baseline == Some(true)) {
            others.push(BASELINE_TAG.len());
        }
        let full: Vec<String> = functions.iter().map(|f| one_line(&f.function)).collect();
        let names = width.names(&full, &others);
        for ((f, [module, v, share, seen]), mut name) in functions.iter().zip(rows).zip(names) {
            if f.baseline == Some(true) {
                name += BASELINE_TAG;
            }
            t.add_row(vec![
                Cell::new(name),
                Cell::new(module),
                Cell::new(v).set_alignment(CellAlignment::Right),
                Cell::new(share).set_alignment(CellAlignment::Right),
                Cell::new(seen).set_alignment(CellAlignment::Right),
            ]);
        }
        out += &t.to_string();
        out.push('\n');
        if shown < op.functions.len() {
            out += &format!(
                "  … {} more (use --top 0 to show all)\n",
                op.functions.len() - shown
            );
        }
    }
    out += &format!("\nshared functions: {}\n", mapping.shared.len());
    if !mapping.shared.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header(["function", "module", "ops"]);
        let shown = if top == 0 {
            mapping.shared.len()
        } else {
            top.min(mapping.shared.len())
        };
        let shared = &mapping.shared[..shown];
        let rows: Vec<[String; 2]> = shared
            .iter()
            .map(|s| [one_line(&s.module), width.ops(&one_line(&s.ops.join(", ")))])
            .collect();
        let others: Vec<usize> = ["module", "ops"]
            .iter()
            .enumerate()
            .map(|(i, h)| widest(h, rows.iter().map(|r| &r[i])))
            .collect();
        let full: Vec<String> = shared.iter().map(|s| one_line(&s.function)).collect();
        for (name, [module, ops]) in width.names(&full, &others).into_iter().zip(rows) {
            t.add_row(vec![name, module, ops]);
        }
        out += &t.to_string();
        out.push('\n');
        if shown < mapping.shared.len() {
            out += &format!(
                "  … {} more (use --top 0 to show all)\n",
                mapping.shared.len() - shown
            );
        }
    }
    out
}

/// `name` on one line: a newline or other control character (in a file
/// name, an op's `NAME`, a function) is shown escaped (`\\n`, `\\x1b`) so
/// that it cannot break a progress line, a table row or a Markdown heading,
/// nor drive the terminal; [`lotus_sys::text::one_line`] is the one rule.
/// CSV and JSON quote such names themselves and keep them as they are.
pub fn one_line(name: &str) -> String {
    lotus_sys::text::one_line(name).into_owned()
}

fn md_escape(s: &str) -> String {
    one_line(s).replace('|', "\\|")
}

fn render_md(mapping: &Mapping, top: usize) -> String {
    let mut out = format!("# lotus mapping\n\n{}\n", header_line(mapping));
    for op in &mapping.ops {
        out += &format!(
            "\n## {}\n\n{} run(s), {} {}\n\n| function | module | {} | share | runs seen |\n|---|---|---:|---:|---:|\n",
            md_escape(&op.name),
            op.runs,
            value_text(mapping.unit, op.samples),
            mapping.unit.label(),
            mapping.unit.label()
        );
        let shown = if top == 0 {
            op.functions.len()
        } else {
            top.min(op.functions.len())
        };
        for f in &op.functions[..shown] {
            out += &format!(
                "| `{}` | {} | {} | {:.1}% | {}/{} |\n",
                md_escape(&f.function).replace('`', "'"),
                md_escape(&f.module),
                value_text(mapping.unit, f.samples),
                100.0 * f.share,
                f.runs_seen,
                op.runs
            );
        }
        if shown < op.functions.len() {
            out += &format!("\n… {} more\n", op.functions.len() - shown);
        }
    }
    out += "\n## Shared functions\n\n| function | module | ops |\n|---|---|---|\n";
    for s in &mapping.shared {
        out += &format!(
            "| `{}` | {} | {} |\n",
            md_escape(&s.function).replace('`', "'"),
            md_escape(&s.module),
            md_escape(&s.ops.join(", "))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_core::{MergeRule, OpAccumulator, Report, Row, Settings};

    #[test]
    fn the_table_shortens_names_by_lotus_cores_rule_and_fits_the_width() {
        let stub = "at::TensorIteratorConfig::add_owned_const_input(at::TensorBase const&)@plt";
        let kernel = "void at::native::(anonymous namespace)::cpu_kernel_vec<at::TensorIteratorBase&, float (float)>(at::TensorIteratorBase&, float (float)&&)::{lambda()#1}::operator()() const";
        let mut op = OpAccumulator::new("Normalize");
        op.add_run(&Report::new(
            Unit::Samples,
            vec![
                Row::new(kernel, "/usr/lib/libtorch_cpu.so", 90.0),
                Row::new(stub, "/usr/lib/libtorch_cpu.so", 5.0),
                Row::new("__memmove_avx_unaligned_erms", "/usr/lib/libc.so.6", 5.0),
            ],
        ));
        let ops = vec![op.finish(MergeRule::Union)];
        let mapping = Mapping::new("perf", Unit::Samples, Settings::default(), ops);
        let text = render(&mapping, Format::Table, 0, NameWidth::Fit(100)).expect("render");
        for name in [
            "cpu_kernel_vec::λ1",
            "add_owned_const_input@plt",
            "__memmove_avx_unaligned_erms",
        ] {
            assert!(text.contains(name), "{name}:\n{text}");
        }
        assert!(
            text.lines().all(|l| lotus_core::display_width(l) <= 100),
            "{text}"
        );
        let whole = render(&mapping, Format::Table, 0, NameWidth::Full).expect("render");
        assert!(whole.contains(kernel), "{whole}");
    }
}
