//! `lotus attribute DIR --by caller --function NAME [--op OP]`: who calls
//! NAME in each op, from the samples' call stacks
//! ([`lotus_attribute::callers_folder`] says how they are merged and
//! counted).
//!
//! Each row (op) whose stacks hold NAME shows its samples, NAME's samples
//! in it, and NAME's callers nearest first, each caller's own callers
//! indented under it (`└ `), three levels up; `(no caller: outermost
//! frame)` where a stack ends. Every caller's `%` is of NAME's samples in
//! the row: the first level adds up to 100%, and the callers under a
//! caller add up to its share. As a table (names shortened to the width,
//! their modules beside them), Markdown, CSV (one line per caller, its
//! `path`: the callers from NAME outwards, `;`-separated) or JSON
//! (`lotus.callers/1`: [`lotus_attribute::Callers`] as it is).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_attribute::{callers_csv, callers_document, Callers, FunctionCallers, ROOT_FRAME};
use lotus_sort::Budget;
use lotus_sys::text::printable;

use crate::cmd::attribute::in_pipeline::write_or_print;
use crate::cmd::attribute::AttributeFormat;
use crate::render::table;
use lotus_map::output::one_line;

/// Runs `lotus attribute DIR --by caller --function NAME`.
pub(crate) fn run(
    dir: &Path,
    prefix: &str,
    function: &str,
    op: Option<&str>,
    format: Option<AttributeFormat>,
    out: Option<&Path>,
    wide: bool,
) -> Result<ExitCode> {
    let format =
        format.unwrap_or_else(|| out.map_or(AttributeFormat::Table, AttributeFormat::from_path));
    if format == AttributeFormat::Folded {
        return Err(crate::usage::usage(
            "--by caller is a table, csv, md or json; --format folded gives the stacks themselves",
        ));
    }
    let budget = Budget::from_env()?;
    let mut c = lotus_attribute::callers_folder(dir, prefix, budget, function)
        .with_context(|| format!("cannot read the call stacks in {}", dir.display()))?;
    check(dir, &c)?;
    if let Some(op) = op {
        let named = |r: &FunctionCallers| r.row.split('/').any(|p| p == op) || r.row == op;
        if !c.rows.iter().any(named) {
            bail!(
                "--op {}: no op of {} whose stacks hold {} is that op (those that do: {})",
                printable(op),
                dir.display(),
                printable(function),
                printable(
                    &c.rows
                        .iter()
                        .map(|r| r.row.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            );
        }
        c.rows.retain(named);
    }
    let text = match format {
        AttributeFormat::Json => serde_json::to_string_pretty(&callers_document(&c))? + "\n",
        AttributeFormat::Csv => callers_csv(&c)?,
        AttributeFormat::Md => printable(&grid(&c, false).markdown()).into_owned(),
        AttributeFormat::Table | AttributeFormat::Folded => {
            let width = (!wide).then(table::width);
            let mut text = grid(&c, width.is_some()).render(width);
            for line in footer(&c) {
                match width {
                    Some(w) => text += &table::wrap(&line, w),
                    None => text += &line,
                }
                text.push('\n');
            }
            printable(&text).into_owned()
        }
    };
    if out.is_some() || matches!(format, AttributeFormat::Json | AttributeFormat::Csv) {
        for note in &c.notes {
            crate::usage::say!("lotus: note: {note}");
        }
    }
    write_or_print(out, &text)?;
    Ok(ExitCode::SUCCESS)
}

/// An error where there is nothing to show: a folder without stacks, a
/// function no stack holds (naming the nearest names).
fn check(dir: &Path, c: &Callers) -> Result<()> {
    if !c.with_stacks {
        bail!(
            "{}: the samples carry no call stacks (traced with `--stacks none`, or by an older lotus), so their callers are not known; trace again with `lotus trace run --sample --stacks dwarf` (the default)",
            dir.display()
        );
    }
    if c.rows.is_empty() {
        let near = c
            .suggestions
            .iter()
            .map(|s| one_line(s))
            .collect::<Vec<_>>()
            .join(", ");
        let contains = c
            .suggestions
            .first()
            .is_some_and(|s| s.to_lowercase().contains(&c.function.to_lowercase()));
        bail!(
            "--function {}: no call stack in {} holds that function; {}: {near} (give one whole, as `lotus attribute DIR --format folded` names its frames)",
            printable(&c.function),
            dir.display(),
            if contains {
                "functions whose name contains it"
            } else {
                "the functions in the most samples"
            }
        );
    }
    Ok(())
}

/// A caller as the table shows it: indented under its callee by its
/// depth, marked `└ ` (Markdown keeps the mark: it drops leading spaces).
fn indented(depth: usize, name: &str) -> String {
    if depth <= 1 {
        name.to_string()
    } else {
        format!("{}└ {name}", "  ".repeat(depth - 2))
    }
}

/// The table: per row, the function's samples there (of the row's), then
/// its callers one a line with their modules, samples and share. `short`:
/// the caller names shortened to the room the other columns leave.
fn grid(c: &Callers, short: bool) -> table::Grid<'_> {
    let header = [
        "op / row",
        "fn samples",
        "caller",
        "module",
        "samples",
        "% of fn",
    ];
    let columns: Vec<table::Column> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            if matches!(i, 0 | 2 | 3) {
                table::Column::left(h)
            } else {
                table::Column::right(h)
            }
        })
        .collect();
    let mut rows = Vec::new();
    let mut callers: Vec<(usize, String)> = Vec::new();
    for r in &c.rows {
        for (i, (depth, _, n)) in r.lines().into_iter().enumerate() {
            let first = i == 0;
            let root = n.frame == ROOT_FRAME;
            rows.push(vec![
                if first {
                    one_line(&r.row)
                } else {
                    String::new()
                },
                if first {
                    format!("{} of {}", r.samples, r.row_samples)
                } else {
                    String::new()
                },
                String::new(),
                if root {
                    String::new()
                } else {
                    one_line(&table::module_name(&n.module))
                },
                n.samples.to_string(),
                format!("{:.1}", n.share * 100.0),
            ]);
            callers.push((depth, one_line(&n.frame)));
        }
    }
    let g = table::Grid::new(columns, rows);
    g.names(2, 1, table::NAME_MIN, move |room| {
        // The stacks' end is no function name: never shortened.
        let names: Vec<&str> = callers
            .iter()
            .filter(|(_, n)| n != ROOT_FRAME)
            .map(|(_, n)| n.as_str())
            .collect();
        let mut shown = if short && room != usize::MAX {
            table::short_names(&names, room.saturating_sub(2 * (c.depth - 1)).max(8))
        } else {
            names.iter().map(|n| n.to_string()).collect()
        }
        .into_iter();
        callers
            .iter()
            .map(|(depth, name)| {
                let name = if name == ROOT_FRAME {
                    name.clone()
                } else {
                    shown.next().unwrap_or_default()
                };
                indented(*depth, &name)
            })
            .collect()
    })
}

/// The lines under the table: what the figures are.
fn footer(c: &Callers) -> Vec<String> {
    let mut lines = vec![format!(
        "callers of {} in {} row(s) of {} samples, nearest first, {} levels up (each caller's own callers under it, `└ `): % is of the function's samples in the row; a sample counts once (where the function recurses, its outermost call)",
        one_line(&c.function),
        c.rows.len(),
        c.samples,
        c.depth
    )];
    lines.extend(c.notes.iter().map(|n| format!("note: {n}")));
    lines
}
