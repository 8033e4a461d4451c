//! `lotus report`'s sections of sampled trace folders (`lotus trace run
//! --sample`): the in-pipeline attribution of each (`lotus attribute DIR`)
//! and the comparison of an isolated mapping with the in-pipeline one
//! (`lotus show MAPPING --against OTHER`). The in-pipeline mapping is
//! built from the samples here (as `lotus map --from-trace DIR`) unless
//! `--against` names one.

use lotus_trace::Dir;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lotus_attribute::mapping_from_trace;
use lotus_attribute::{compare_mappings, ComparedFunction, MappingComparison, OpComparison};
use lotus_attribute::{AttributedRow, InPipelineAttribution, OpsFrom, RowKind, SampledFolder};
use lotus_core::Mapping;
use lotus_sort::Budget;

use crate::cmd::report::{cell, Page};
use crate::render::html::{code, keyed, short_name, text, Cell, Part, RunInfo, VerdictView};
use crate::render::in_pipeline::svg_of;
use crate::render::svg::{labelled_bars, Colours, LabelledBar};
use lotus_runner::RunRecord;

/// Missed and never-run functions shown per op (the JSON of `show
/// --against` lists 20 by default; a page cell holds fewer).
pub const TOP_COMPARED: usize = 5;

/// Top functions shown per in-pipeline row.
const TOP_IN_ROW: usize = 3;

/// Reads `dir`'s samples of `prefix`, if it has any
/// ([`SampledFolder::read`]).
pub fn attribute<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
) -> Result<(SampledFolder, Option<Folds>)> {
    let dir = dir.into();
    SampledFolder::read_folded(dir, prefix, budget)
        .with_context(|| format!("cannot attribute the samples in {}", dir.path().display()))
}

/// A sampled configuration's collapsed stacks, from its attribution's
/// pass, or why they cannot be read.
pub type Folds = Result<lotus_attribute::FoldedStacks, lotus_attribute::Error>;

/// One comparison of the isolated mapping against an in-pipeline one.
pub struct Compared {
    /// What the in-pipeline mapping is (a file, or a configuration's
    /// samples).
    pub against: String,
    /// The comparison.
    pub comparison: MappingComparison,
}

/// The comparisons of `mapping` (named `name`): against `against` when
/// given, else against the in-pipeline mapping of each sampled
/// configuration (`(label, dir)`).
pub fn compare(
    mapping: &Mapping,
    against: Option<&Path>,
    sampled: &[(String, PathBuf)],
    prefix: &str,
    budget: Budget,
) -> Result<Vec<Compared>> {
    if let Some(path) = against {
        let other = crate::attribution_inputs::load_mapping(path)
            .with_context(|| format!("--against {}", path.display()))?;
        return Ok(vec![Compared {
            against: path.display().to_string(),
            comparison: compare_mappings(mapping, &other, TOP_COMPARED),
        }]);
    }
    sampled
        .iter()
        .map(|(label, dir)| {
            let other = mapping_from_trace(dir, prefix, budget).with_context(|| {
                format!(
                    "cannot build the in-pipeline mapping of {} (as `lotus map --from-trace`)",
                    dir.display()
                )
            })?;
            Ok(Compared {
                against: format!("{label} (its samples)"),
                comparison: compare_mappings(mapping, &other, TOP_COMPARED),
            })
        })
        .collect()
}

/// A plot's file name part for a configuration: its label where that is
/// safe in a file name, else its position.
fn slug(label: &str, i: usize) -> String {
    if !label.is_empty()
        && label
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        && !label.starts_with('.')
    {
        label.to_string()
    } else {
        format!("{}", i + 1)
    }
}

/// A row's top functions: each shortened, with its module's file name and
/// its share; the whole names in the cell's tooltip.
fn functions_cell<'a>(
    key: String,
    fs: impl Iterator<Item = (&'a str, &'a str, f64)>,
    more: usize,
) -> Cell {
    let (mut full, mut short) = (Vec::new(), Vec::new());
    for (f, module, share) in fs {
        let base = module.rsplit('/').next().unwrap_or(module);
        full.push(format!("{f} ({module}, {:.0}%)", share * 100.0));
        short.push(format!(
            "{} ({}, {:.0}%)",
            short_name(f, 40),
            short_name(base, 24),
            share * 100.0
        ));
    }
    if more > 0 {
        short.push(format!("and {more} more"));
    }
    Cell::names(key, &full, short)
}

/// The section of each sampled configuration's attribution: its table
/// (the figures of `lotus attribute DIR --format json`) and its plot;
/// its ops from `ops_from`.
pub fn in_pipeline_section(
    page: &mut Page,
    sampled: &[(String, SampledFolder)],
    colours: &Colours,
    ops_from: OpsFrom,
) -> Result<()> {
    page.h(2, "Samples in the pipeline");
    let [of, by, to] = ops_from.said();
    page.p(vec![
        text(format!("Each sample of {of} (")),
        code(by),
        text(format!(") credited to {to}, as ")),
        code("lotus attribute DIR"),
        text(": an op inside another is shown by its path ("),
        code("Outer/Inner"),
        text("); CPU ms is the row's own (exclusive; the rows add up to the total), from the spans' thread CPU clock where the trace has it, else samples times the sampling interval; ± ms is its 95% interval from the samples (1.96·√n intervals); incl ms adds the ops inside it. Hover a function for its whole name and module."),
    ]);
    for (i, (label, s)) in sampled.iter().enumerate() {
        let a = match s {
            SampledFolder::Not => continue,
            SampledFolder::Without(why) => {
                page.h(3, label.clone());
                page.p(vec![text(format!("No samples: {why}"))]);
                continue;
            }
            SampledFolder::With(a) => a,
        };
        page.h(3, label.clone());
        let headers = a.counter_headers();
        // Calls only where spans counted them (not from frames alone).
        let calls = a.rows.iter().any(|r| r.calls.is_some());
        let mut head = vec![
            "row", "kind", "samples", "CPU ms", "± ms", "incl ms", "share %",
        ];
        if calls {
            head.extend(["calls", "CPU ms/call"]);
        }
        head.extend(headers.iter().map(String::as_str));
        let rows = a
            .rows
            .iter()
            .map(|r| in_pipeline_row(label, a, r, (&headers, calls), colours))
            .collect();
        page.table(&head, rows);
        let mut parts = vec![
            keyed(
                format!("in_pipeline/{label}/total_samples"),
                a.total_samples.to_string(),
            ),
            text(format!(" samples at {} Hz", a.frequency_hz)),
        ];
        if a.partial {
            parts.push(text("; PARTIAL: the collection did not end normally"));
        }
        parts.push(text("."));
        page.p(parts);
        for note in &a.notes {
            page.p(vec![text(format!("Note: {note}"))]);
        }
        page.plot(
            &format!("in_pipeline_{}", slug(label, i)),
            "CPU time of each op in the pipeline (its own, not the ops inside it), then of the rows outside any op (grey); under each bar its top function.",
            svg_of(a, colours)?,
        );
    }
    Ok(())
}

/// A row of the in-pipeline table of configuration `label`: its figures,
/// its calls (where `calls`), counters and top functions, keyed by its
/// path.
fn in_pipeline_row(
    label: &str,
    a: &InPipelineAttribution,
    r: &AttributedRow,
    (headers, calls): (&[String], bool),
    colours: &Colours,
) -> Vec<Cell> {
    // Keyed and shown by path: an op may run at several places
    // in the op tree (`RandomApply/GaussianBlur`).
    let k = |f: &str| format!("in_pipeline/{label}/{}/{f}", r.path);
    let mut name = Cell::name(&r.path).wrapping();
    if r.kind == RowKind::Op {
        name = name.swatch(crate::render::html::timeline::hex(colours, &r.name));
    }
    let mut row = vec![
        name,
        Cell::text(format!("{:?}", r.kind).to_lowercase()),
        cell(&k("samples"), r.samples.to_string()),
        cell(&k("cpu_ms"), format!("{:.3}", r.cpu_ns as f64 / 1e6)),
        cell(
            &k("uncertainty_ms"),
            format!("{:.3}", r.uncertainty_ns as f64 / 1e6),
        ),
        cell(
            &k("inclusive_cpu_ms"),
            format!("{:.3}", r.inclusive_cpu_ns as f64 / 1e6),
        ),
        cell(&k("share"), format!("{:.2}", r.share * 100.0)),
    ];
    if calls {
        row.push(cell(
            &k("calls"),
            r.calls.map_or("-".into(), |c| c.to_string()),
        ));
        row.push(cell(
            &k("cpu_ms_per_call"),
            r.cpu_per_call_ns
                .map_or("-".into(), |c| format!("{:.3}", c as f64 / 1e6)),
        ));
    }
    for (h, v) in headers.iter().zip(a.counter_cells(r)) {
        row.push(cell(&k(&format!("counters/{h}")), v));
    }
    row.push(
        functions_cell(
            k("top"),
            r.top_functions
                .iter()
                .take(TOP_IN_ROW)
                .map(|f| (f.function.as_str(), f.module.as_str(), f.share)),
            0,
        )
        .below("top functions"),
    );
    row
}

/// The comparison section: per op, the share of its in-pipeline samples
/// that fall in functions the isolated mapping lists, the top functions it
/// misses, those it lists that did not run in the pipeline (the figures of
/// `lotus show MAPPING --against OTHER --format json`), what to do, and a
/// plot of the share found.
pub fn comparison_section(
    page: &mut Page,
    mapping_name: &str,
    compared: &[Compared],
    colours: &Colours,
) -> Result<()> {
    page.h(2, "Isolated mapping against the pipeline");
    page.p(vec![
        code(mapping_name.to_string()),
        text(" against each in-pipeline mapping, as "),
        code("lotus show MAPPING --against OTHER"),
        text(": for each op, how much of its samples in the pipeline fall in functions the isolated mapping lists for it (found %), the functions the pipeline ran that the mapping misses, and those the mapping lists that did not run in the pipeline."),
    ]);
    for (i, c) in compared.iter().enumerate() {
        let m = &c.comparison;
        page.h(3, format!("against {}", c.against));
        let rows = m
            .ops
            .iter()
            .map(|o| comparison_row(c, o, colours))
            .collect();
        let low: Vec<String> = m
            .ops
            .iter()
            .filter(|o| o.coverage.is_some_and(|x| x < 0.8))
            .map(|o| o.op.clone())
            .collect();
        let bars: Vec<LabelledBar> = m
            .ops
            .iter()
            .filter_map(|o| {
                o.coverage.map(|x| LabelledBar {
                    label: o.op.clone(),
                    value: x * 100.0,
                    note: o.missed.first().map_or(String::new(), |f| {
                        format!("missed: {} ({:.0}%)", f.function, f.share * 100.0)
                    }),
                })
            })
            .collect();
        page.table(
            &[
                "op",
                "found %",
                "functions in the mapping",
                "samples in the pipeline",
                "run in the pipeline, not in the mapping",
                "how many",
                "in the mapping, not run in the pipeline",
                "how many",
            ],
            rows,
        );
        if !low.is_empty() {
            page.p(vec![
                text(format!(
                    "What to do: the isolated mapping misses much of what {} run in the pipeline; map the ops where they run, from the sampled trace itself (",
                    low.join(", ")
                )),
                code("lotus map --from-trace DIR --out M.json"),
                text("), and attribute with that mapping."),
            ]);
        }
        for (what, ops) in [
            ("only in the isolated mapping", &m.only_in_mapping),
            ("only in the pipeline", &m.only_in_other),
        ] {
            if !ops.is_empty() {
                page.p(vec![text(format!("Ops {what}: {}.", ops.join(", ")))]);
            }
        }
        if !bars.is_empty() {
            let svg = labelled_bars(
                &format!(
                    "Share of each op's samples in the pipeline found in the mapping ({})",
                    c.against
                ),
                "found in the mapping (%)",
                &bars,
                1,
                colours,
            )?;
            page.plot(
                &format!("coverage_{}", i + 1),
                "The share of each op's in-pipeline samples in functions the isolated mapping lists; under each bar the function it misses most.",
                svg,
            );
        }
    }
    Ok(())
}

/// An op's row of the comparison: how much of its samples the mapping
/// finds, and the functions each side misses.
fn comparison_row(c: &Compared, o: &OpComparison, colours: &Colours) -> Vec<Cell> {
    let key = |op: &str, f: &str| format!("comparison/{}/{op}/{f}", c.against);
    let fs = |v: &[ComparedFunction]| -> Vec<(String, String, f64)> {
        v.iter()
            .map(|f| (f.function.clone(), f.module.clone(), f.share))
            .collect()
    };
    let k = |f: &str| key(&o.op, f);
    let missed = fs(&o.missed);
    let not_run = fs(&o.not_run);
    vec![
        Cell::name(&o.op).swatch(crate::render::html::timeline::hex(colours, &o.op)),
        cell(
            &k("coverage"),
            o.coverage
                .map_or("-".into(), |x| format!("{:.1}", x * 100.0)),
        ),
        cell(&k("listed"), o.listed.to_string()),
        cell(&k("other_samples"), format!("{}", o.other_samples)),
        functions_cell(
            k("missed"),
            missed.iter().map(|(f, m, s)| (f.as_str(), m.as_str(), *s)),
            o.missed_count.saturating_sub(o.missed.len()),
        ),
        cell(&k("missed_count"), o.missed_count.to_string()),
        functions_cell(
            k("not_run"),
            not_run.iter().map(|(f, m, s)| (f.as_str(), m.as_str(), *s)),
            o.not_run_count.saturating_sub(o.not_run.len()),
        ),
        cell(&k("not_run_count"), o.not_run_count.to_string()),
    ]
}

/// Where the page's folders are of samples alone (`alone`: `lotus trace
/// attach`), what it has of each besides its samples: its run where it
/// has a record (`runs`), its verdict from its samples (`verdicts`); and
/// the note of what it cannot show, for the page's top.
pub(crate) fn samples_alone(
    alone: bool,
    dirs: &[(String, PathBuf)],
    sampled: &[(String, SampledFolder)],
    prefix: &str,
    runs: &mut Vec<RunInfo>,
    verdicts: &mut Vec<VerdictView>,
) -> Result<Option<Vec<Part>>> {
    if !alone {
        return Ok(None);
    }
    for ((label, dir), (_, s)) in dirs.iter().zip(sampled) {
        match RunRecord::read(dir, prefix) {
            Ok(r) => runs.extend(r.map(|r| RunInfo::of(label, dir, Some(&r), &[], None))),
            Err(e) => crate::usage::say!("lotus: warning: {:#}", anyhow::Error::from(e)),
        }
        if let SampledFolder::With(a) = s {
            let v = lotus_attribute::Verdict::of_sampled_folder(dir, a, Budget::from_env()?)?;
            verdicts.push(VerdictView::of(&v, (dirs.len() > 1).then(|| label.clone())));
        }
    }
    let note = lotus_attribute::SAMPLES_ALONE_NOTE.iter().enumerate();
    let note = note.map(|(i, t)| if i % 2 == 0 { text(*t) } else { code(*t) });
    Ok(Some(note.collect()))
}

/// The op names of the sections, for colours that stay the same from
/// plot to plot.
pub fn op_names<'a>(
    sampled: &'a [(String, SampledFolder)],
    compared: &'a [Compared],
) -> impl Iterator<Item = &'a str> {
    let rows = sampled.iter().flat_map(|(_, s)| match s {
        SampledFolder::With(a) => a
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Op)
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    });
    let ops = compared
        .iter()
        .flat_map(|c| c.comparison.ops.iter().map(|o| o.op.as_str()));
    rows.chain(ops)
}
