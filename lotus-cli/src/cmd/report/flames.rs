//! The report's flame graphs: for each sampled run whose samples carry
//! call stacks (`lotus trace run --sample`, `--stacks fp`), each op's
//! flame graph, as `lotus attribute DIR --flamegraph FILE.svg --op PATH`
//! draws it (its own samples and those of the ops inside it, under its
//! path), collapsed under a line that says its samples.
//!
//! Each graph is an `<img>` of inferno's SVG as a `data:` URL, not the SVG
//! inline: inferno's SVG carries a script (zoom, search) and fixed ids
//! (`frames`, `details`, `background`...), so two inline copies would
//! clash, and its script would run in the page; an image runs no script,
//! keeps its ids to itself and makes no request. It is static (no zoom,
//! no tooltips): each says the command that writes the interactive one.
//!
//! Big pages: an op gets a graph only where it holds at least
//! [`MIN_SHARE_PCT`]% of the run's samples in ops, at most [`MAX_FLAMES`] ops a
//! run (those with the most samples), and frames narrower than
//! [`MIN_WIDTH_PX`] of the graph's 1200 pixels are left out (inferno's
//! `--minwidth`); the section says so. A run without stacks gets no
//! section (a note says why where no run has one).

use std::path::Path;

use crate::cmd::report::samples::Folds;

use anyhow::Result;
use lotus_attribute::{InPipelineAttribution, OpsFrom, RowKind};

use super::Page;
use crate::render::flame;
use crate::render::html::{code, flame_block, text, Block};
use lotus_attribute::SampledFolder;

/// An op gets a flame graph where it holds at least this share of its
/// run's samples in ops (its own and its inner ops', over every op row's
/// own).
pub const MIN_SHARE_PCT: f64 = 1.0;
/// At most this many flame graphs a run.
pub const MAX_FLAMES: usize = 12;
/// Frames narrower than this (pixels of 1200) are left out.
pub const MIN_WIDTH_PX: f64 = 1.2;

/// One op's graph, before it goes on the page.
struct Drawn {
    path: String,
    samples: u64,
    block: Block,
}

/// What a run's flame graphs are.
enum Flames {
    /// Its ops' graphs, and how many ops have none (too few samples).
    Drawn(Vec<Drawn>, usize),
    /// Why there are none (its stacks could not be read).
    Failed(String),
}

/// The flame graphs of one run (`dir`, attributed as `a`). None where its
/// samples carry no stacks.
fn run_flames(
    label: &str,
    dir: &Path,
    folded: Folds,
    a: &InPipelineAttribution,
) -> Result<Option<Flames>> {
    // A stacks file that cannot be read (a fifo, a link out of the
    // folder...): the rest of the page stands, and says why there is no
    // graph.
    let f = match folded {
        Ok(f) => f,
        Err(e) => return Ok(Some(Flames::Failed(format!("{e:#}")))),
    };
    if !f.with_stacks || f.samples == 0 {
        return Ok(None);
    }
    let mut drawn = Vec::new();
    let mut small = 0usize;
    // The samples in ops (each op row's own): the threshold's base, so
    // that a run whose training loop takes most of the CPU still shows
    // its ops.
    let in_ops: u64 = a
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::Op)
        .map(|r| r.samples)
        .sum();
    for r in a.rows.iter().filter(|r| r.kind == RowKind::Op) {
        let Some(root) = f.op_root(&r.path) else {
            continue;
        };
        let (lines, samples) = f.lines_under(&[&root]);
        if lines.is_empty() {
            continue;
        }
        let share = 100.0 * samples as f64 / f.samples as f64;
        if 100.0 * samples as f64 / (in_ops.max(1) as f64) < MIN_SHARE_PCT {
            small += 1;
            continue;
        }
        let title = format!("{} (CPU samples)", lotus_sys::text::printable(&r.path));
        let svg = flame::svg(&lines, &title, MIN_WIDTH_PX, true)?;
        drawn.push(Drawn {
            path: r.path.clone(),
            samples,
            block: flame_block(
                format!("{label}/{}", r.path),
                format!(
                    "{}: {samples} samples ({share:.1}% of the run's), {} stacks",
                    r.path,
                    lines.len()
                ),
                format!("flame graph of {} in {label}", r.path),
                &svg,
                format!(
                    "lotus attribute {} --flamegraph flame.svg --op {}",
                    dir.display(),
                    r.path
                ),
            ),
        });
    }
    if drawn.len() > MAX_FLAMES {
        let mut by_samples: Vec<(u64, String)> =
            drawn.iter().map(|d| (d.samples, d.path.clone())).collect();
        by_samples.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| x.1.cmp(&y.1)));
        let kept: Vec<String> = by_samples
            .into_iter()
            .take(MAX_FLAMES)
            .map(|(_, p)| p)
            .collect();
        small += drawn.len() - MAX_FLAMES;
        drawn.retain(|d| kept.contains(&d.path));
    }
    Ok(Some(Flames::Drawn(drawn, small)))
}

/// The flame graphs section: for each sampled run with stacks (`dirs`:
/// each configuration's folder, in `sampled`'s order; its ops from
/// `from`), its ops' graphs. Nothing where no run has stacks.
pub(crate) fn flames_section(
    page: &mut Page,
    sampled: &[(String, SampledFolder)],
    (dirs, from): (&[&Path], OpsFrom),
    folds: Vec<Option<Folds>>,
) -> Result<()> {
    let mut runs = Vec::new();
    for (((label, s), folded), dir) in sampled.iter().zip(folds).zip(dirs) {
        let (SampledFolder::With(a), Some(folded)) = (s, folded) else {
            continue;
        };
        match run_flames(label, dir, folded, a)? {
            Some(Flames::Drawn(drawn, left_out)) if !drawn.is_empty() => {
                runs.push((label, drawn, left_out, None));
            }
            Some(Flames::Failed(why)) => runs.push((label, Vec::new(), 0, Some(why))),
            _ => {}
        }
    }
    if runs.is_empty() {
        return Ok(());
    }
    page.h(2, "Flame graphs");
    page.p(vec![
        text("Each op's call stacks ("),
        code(from.said()[1]),
        text(" records them), as "),
        code("lotus attribute DIR --flamegraph FILE.svg --op PATH"),
        text(format!(
            " draws them: the op's own samples and those of the ops inside it, each frame as wide as its samples, callers below their callees. Click an op's line to open its graph. Shown for ops with at least {MIN_SHARE_PCT}% of their run's samples in ops, at most {MAX_FLAMES} a run; frames under 0.1% of the graph's width are left out. The images are static: the command under each writes the interactive SVG (zoom, search)."
        )),
    ]);
    for (label, drawn, left_out, failed) in runs {
        page.h(3, label.clone());
        if let Some(why) = failed {
            page.p(vec![text(format!("No flame graphs: {why}"))]);
        }
        for d in drawn {
            page.push(d.block);
        }
        if left_out > 0 {
            page.p(vec![text(format!(
                "{left_out} more op(s) with fewer samples have no graph here."
            ))]);
        }
    }
    Ok(())
}
