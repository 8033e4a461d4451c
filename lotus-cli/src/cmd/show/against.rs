//! `lotus show MAPPING --against OTHER`: per op, how much of OTHER's work
//! the functions MAPPING lists explain ([`lotus_attribute`]),
//! as a table, Markdown, CSV or JSON (`lotus.mapping-comparison/1`).

use std::process::ExitCode;

use anyhow::Result;
use lotus_attribute::{compare_mappings, ComparedFunction, MappingComparison, OpComparison};
use lotus_core::Mapping;

use crate::render::mapping::MapFormat as Format;
use crate::usage::usage;
use lotus_map::output::one_line;

/// Prints the comparison of `mapping` (named `name`) against `other`
/// (named `other_name`), `top` missed / not-run functions per op (0: all);
/// a table fits `width` (`None`: names whole, `--wide`).
pub fn run(
    mapping: &Mapping,
    name: &str,
    other: &Mapping,
    other_name: &str,
    format: Format,
    top: usize,
    width: Option<usize>,
) -> Result<ExitCode> {
    let top = if top == 0 { usize::MAX } else { top };
    let c = compare_mappings(mapping, other, top);
    let text =
        match format {
            Format::Json => {
                let v = lotus_attribute::comparison_document(&c, name, other_name);
                serde_json::to_string_pretty(&v)? + "\n"
            }
            Format::Csv => lotus_attribute::comparison_csv(&c)?,
            Format::Table => table_of(&c, name, other_name, false, width),
            Format::Md => table_of(&c, name, other_name, true, None),
            Format::Lotus => return Err(usage(
                "--against prints a comparison, not a mapping: use --format table, json, csv or md",
            )),
        };
    // Names from the files: control characters escaped in the text views.
    match format {
        Format::Table => {
            let text = lotus_sys::text::printable(&text);
            match width {
                Some(w) => print!("{}", crate::render::table::wrap_lines(&text, w)),
                None => print!("{text}"),
            }
        }
        Format::Md => print!("{}", lotus_sys::text::printable(&text)),
        _ => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn percent(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |x| format!("{:.1}", x * 100.0))
}

fn names(fs: &[ComparedFunction]) -> String {
    fs.iter()
        .map(|f| {
            format!(
                "{} ({}, {:.0}%)",
                one_line(&f.function),
                one_line(&crate::render::table::module_name(&f.module)),
                f.share * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An op's missed then never-run functions, each with its list's name.
fn listed(o: &OpComparison) -> Vec<(&ComparedFunction, &'static str)> {
    o.missed
        .iter()
        .map(|f| (f, "missed"))
        .chain(o.not_run.iter().map(|f| (f, "never run")))
        .collect()
}

/// Per op, its missed then its never-run functions (as many as `--top`
/// kept): their names shortened for `room` columns, modules, shares and
/// which list each is in, one a line.
fn function_cells(c: &MappingComparison, room: usize) -> Vec<[String; 4]> {
    let full: Vec<String> = c
        .ops
        .iter()
        .flat_map(|o| listed(o))
        .map(|(f, _)| one_line(&f.function))
        .collect();
    let refs: Vec<&str> = full.iter().map(String::as_str).collect();
    let shown = crate::render::table::short_names(&refs, room);
    let mut at = 0;
    c.ops
        .iter()
        .map(|o| {
            let fs = listed(o);
            let names = shown[at..at + fs.len()].join("\n");
            at += fs.len();
            let module = |f: &ComparedFunction| {
                let m = one_line(&crate::render::table::module_name(&f.module));
                if room == usize::MAX {
                    m
                } else {
                    crate::render::table::cut_right(&m, 18)
                }
            };
            [
                names,
                fs.iter()
                    .map(|(f, _)| module(f))
                    .collect::<Vec<_>>()
                    .join("\n"),
                fs.iter()
                    .map(|(f, _)| format!("{:.0}%", f.share * 100.0))
                    .collect::<Vec<_>>()
                    .join("\n"),
                fs.iter().map(|(_, k)| *k).collect::<Vec<_>>().join("\n"),
            ]
        })
        .collect()
}

fn table_of(
    c: &MappingComparison,
    name: &str,
    other_name: &str,
    markdown: bool,
    width: Option<usize>,
) -> String {
    let mut text = format!(
        "{} against {}: coverage is the share of each op's samples in the second that fall in functions the first lists for it\n",
        one_line(name),
        one_line(other_name)
    );
    if markdown {
        text += &markdown_of(c);
    } else {
        text += &grid_of(c, width);
    }
    if !c.only_in_mapping.is_empty() {
        text += &format!(
            "only in {}: {}\n",
            one_line(name),
            one_line(&c.only_in_mapping.join(", "))
        );
    }
    if !c.only_in_other.is_empty() {
        text += &format!(
            "only in {}: {}\n",
            one_line(other_name),
            one_line(&c.only_in_other.join(", "))
        );
    }
    text
}

/// The comparison as a Markdown table, an op a row.
fn markdown_of(c: &MappingComparison) -> String {
    let header = [
        "op",
        "coverage %",
        "listed",
        "samples in other",
        "top missed",
        "listed, never run",
    ];
    let rows: Vec<Vec<String>> = c
        .ops
        .iter()
        .map(|o| {
            vec![
                one_line(&o.op),
                percent(o.coverage),
                o.listed.to_string(),
                format!("{}", o.other_samples),
                format!("{} of {}", names(&o.missed), o.missed_count),
                format!("{} of {}", names(&o.not_run), o.not_run_count),
            ]
        })
        .collect();
    let mut text = String::new();
    text += &format!(
        "\n| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for r in &rows {
        let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
        text += &format!("| {} |\n", cells.join(" | "));
    }
    text
}

/// The comparison as a terminal table: the functions one a line, with
/// their modules, shares and list, fitted to the width
/// ([`crate::render::table::Grid`]).
fn grid_of(c: &MappingComparison, width: Option<usize>) -> String {
    use crate::render::table::Column;
    let columns = vec![
        Column::left("op"),
        Column::right("coverage %"),
        Column::right("listed"),
        Column::right("samples in other"),
        Column::right("missed"),
        Column::right("never run"),
        Column::left("function"),
        Column::left("module"),
        Column::right("share"),
        Column::left("list"),
    ];
    let whole = function_cells(c, usize::MAX);
    let rows: Vec<Vec<String>> = c
        .ops
        .iter()
        .zip(whole)
        .map(|(o, [_, module, share, list])| {
            vec![
                one_line(&o.op),
                percent(o.coverage),
                o.listed.to_string(),
                format!("{}", o.other_samples),
                o.missed_count.to_string(),
                o.not_run_count.to_string(),
                String::new(),
                if width.is_some() {
                    module
                        .lines()
                        .map(|m| crate::render::table::cut_right(m, 18))
                        .collect::<Vec<_>>()
                        .join("\n")
                } else {
                    module
                },
                share,
                list,
            ]
        })
        .collect();
    let grid = crate::render::table::Grid::new(columns, rows).names(
        6,
        3,
        crate::render::table::NAME_MIN,
        |room| {
            function_cells(c, room)
                .into_iter()
                .map(|[names, ..]| names)
                .collect()
        },
    );
    grid.render(width)
}
