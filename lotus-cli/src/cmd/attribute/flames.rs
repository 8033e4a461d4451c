//! `lotus attribute DIR --flamegraph FILE.svg [--op NAME]`: the folded
//! stacks of the folder drawn as an interactive flame graph
//! ([`crate::render::flame`]).

use std::path::Path;

use anyhow::{Context, Result};
use lotus_sort::Budget;
use lotus_sys::write_file;

use crate::render::flame;

/// The folded stacks of the folder (every row, or the op rows NAME names:
/// an op's name anywhere in its path, or its whole path `A/B`) drawn by
/// inferno as an interactive SVG flame graph, the rows as the root frames.
pub(crate) fn flamegraph_of(
    dir: &Path,
    prefix: &str,
    budget: Budget,
    svg: &Path,
    op: Option<&str>,
) -> Result<()> {
    let f = lotus_attribute::folded_folder(dir, prefix, budget)
        .with_context(|| format!("cannot fold the samples in {}", dir.display()))?;
    for note in &f.notes {
        crate::usage::say!("lotus: note: {note}");
    }
    let roots: Vec<&String> = match op {
        None => f.row_samples.keys().collect(),
        Some(name) => {
            let roots = f.rows_named(name);
            if roots.is_empty() {
                anyhow::bail!(
                    "--op {}: no row of {} is that op (its rows: {})",
                    lotus_sys::text::printable(name),
                    dir.display(),
                    lotus_sys::text::printable(
                        &f.row_samples
                            .keys()
                            .map(|r| r.replace(';', "/"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                );
            }
            roots
        }
    };
    let (lines, samples) = f.lines_under(&roots);
    if lines.is_empty() {
        anyhow::bail!("no samples in {} to draw a flame graph of", dir.display());
    }
    let title = match op {
        Some(name) => format!("lotus: {} (CPU samples)", lotus_sys::text::printable(name)),
        None => "lotus: CPU samples per row".to_string(),
    };
    let drawn = flame::svg(&lines, &title, 0.1, false)
        .with_context(|| format!("cannot draw the flame graph of {}", dir.display()))?;
    write_file(svg, drawn.as_bytes())?;
    crate::usage::say!(
        "lotus: wrote {} ({} stack(s), {samples} sample(s))",
        svg.display(),
        lines.len()
    );
    Ok(())
}
