//! A mapping as `lotus map` and `lotus show` print it: the terminal
//! tables (fitted by [`crate::render::table`]), the other formats by
//! [`lotus_map::output::render`].

use anyhow::Result;
use lotus_core::Mapping;
use lotus_map::output::{
    header_line, one_line, op_heading, render, value_text, Format, NameWidth, BASELINE_TAG,
};

/// `--format` of `map` and `show`: the engine's formats as command-line
/// values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MapFormat {
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

impl From<MapFormat> for Format {
    fn from(f: MapFormat) -> Format {
        match f {
            MapFormat::Table => Format::Table,
            MapFormat::Json => Format::Json,
            MapFormat::Lotus => Format::Lotus,
            MapFormat::Csv => Format::Csv,
            MapFormat::Md => Format::Md,
        }
    }
}

/// A mapping rendered in `format`: the table fitted to the width (or,
/// with `wide`, its names whole) by [`crate::render::table`], the other formats
/// by [`lotus_map::output::render`].
pub(crate) fn render_mapping(
    mapping: &Mapping,
    format: Format,
    top: usize,
    wide: bool,
) -> Result<String> {
    if format != Format::Table {
        return Ok(render(mapping, format, top, NameWidth::Full)?);
    }
    let width = (!wide).then(crate::render::table::width);
    let text = lotus_sys::text::printable(&mapping_table(mapping, top, width)).into_owned();
    Ok(match width {
        Some(w) => crate::render::table::wrap_lines(&text, w),
        None => text,
    })
}

/// The terminal tables of a mapping: per op its functions (the first
/// `top`, 0: all) with their modules, samples, shares and runs seen, then
/// the functions several ops share.
fn mapping_table(mapping: &Mapping, top: usize, width: Option<usize>) -> String {
    use crate::render::table::{self, Column, Grid};
    let imported = mapping.imported_from.is_some();
    let unit = mapping.unit.label();
    let mut out = format!("lotus mapping: {}\n", header_line(mapping));
    let module = |m: &str| {
        let m = one_line(&table::module_name(m));
        if width.is_some() {
            table::cut_right(&m, 24)
        } else {
            m
        }
    };
    let shown_of = |n: usize| if top == 0 { n } else { top.min(n) };
    for op in &mapping.ops {
        out += &format!("\n{}\n", op_heading(mapping, op));
        let functions = &op.functions[..shown_of(op.functions.len())];
        let rows: Vec<Vec<String>> = functions
            .iter()
            .map(|f| {
                if imported {
                    vec![
                        String::new(),
                        module(&f.module),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                    ]
                } else {
                    vec![
                        String::new(),
                        module(&f.module),
                        value_text(mapping.unit, f.samples),
                        format!("{:.1}%", 100.0 * f.share),
                        format!("{}/{}", f.runs_seen, op.runs),
                    ]
                }
            })
            .collect();
        let full: Vec<String> = functions.iter().map(|f| one_line(&f.function)).collect();
        let baseline: Vec<bool> = functions.iter().map(|f| f.baseline == Some(true)).collect();
        let grid = Grid::new(
            vec![
                Column::left("function"),
                Column::left("module"),
                Column::right(unit),
                Column::right("share"),
                Column::right("runs seen"),
            ],
            rows,
        )
        .names(0, 0, table::NAME_MIN, |room| {
            let tagged = baseline.iter().any(|b| *b);
            let room = if tagged && room != usize::MAX {
                room.saturating_sub(BASELINE_TAG.len())
            } else {
                room
            };
            let refs: Vec<&str> = full.iter().map(String::as_str).collect();
            table::short_names(&refs, room)
                .into_iter()
                .zip(&baseline)
                .map(|(n, b)| if *b { n + BASELINE_TAG } else { n })
                .collect()
        });
        out += &grid.render(width);
        if functions.len() < op.functions.len() {
            out += &format!(
                "  … {} more (use --top 0 to show all)\n",
                op.functions.len() - functions.len()
            );
        }
    }
    out += &shared_table(mapping, top, width);
    out
}

/// The functions several ops share (the first `top`, 0: all), and which
/// ops.
fn shared_table(mapping: &Mapping, top: usize, width: Option<usize>) -> String {
    use crate::render::table::{self, Column, Grid};
    let module = |m: &str| {
        let m = one_line(&table::module_name(m));
        if width.is_some() {
            table::cut_right(&m, 24)
        } else {
            m
        }
    };
    let shown_of = |n: usize| if top == 0 { n } else { top.min(n) };
    let mut out = String::new();
    out += &format!("\nshared functions: {}\n", mapping.shared.len());
    if !mapping.shared.is_empty() {
        let shared = &mapping.shared[..shown_of(mapping.shared.len())];
        let rows: Vec<Vec<String>> = shared
            .iter()
            .map(|s| {
                vec![
                    String::new(),
                    module(&s.module),
                    one_line(&s.ops.join(", ")),
                ]
            })
            .collect();
        let full: Vec<String> = shared.iter().map(|s| one_line(&s.function)).collect();
        let grid = Grid::new(
            vec![
                Column::left("function"),
                Column::left("module"),
                Column::left("ops"),
            ],
            rows,
        )
        .names(0, 0, table::NAME_MIN, |room| {
            let refs: Vec<&str> = full.iter().map(String::as_str).collect();
            table::short_names(&refs, room)
        });
        out += &grid.render(width);
        if shared.len() < mapping.shared.len() {
            out += &format!(
                "  … {} more (use --top 0 to show all)\n",
                mapping.shared.len() - shared.len()
            );
        }
    }
    out
}
