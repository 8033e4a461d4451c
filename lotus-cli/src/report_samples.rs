//! `lotus report`'s sections of sampled trace folders (`lotus trace run
//! --sample`): the in-pipeline attribution of each (`lotus attribute DIR`)
//! and the comparison of an isolated mapping with the in-pipeline one
//! (`lotus show MAPPING --against OTHER`). The in-pipeline mapping is
//! built from the samples here (as `lotus map --from-trace DIR`) unless
//! `--against` names one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use lotus_core::attribute::in_pipeline::{
    attribute_folder, InPipelineAttribution, InPipelineError, RowKind, TOP_FUNCTIONS,
};
use lotus_core::mapping::compare::{compare_mappings, ComparedFunction, MappingComparison};
use lotus_core::mapping::from_trace::mapping_from_trace;
use lotus_core::mapping::Mapping;
use lotus_core::spill::Budget;
use lotus_core::trace::samples::SampleFiles;

use crate::attribute_in_pipeline::{counter_cells, counter_headers, svg_of};
use crate::plots::{labelled_bars, Colours, LabelledBar};
use crate::report_cmd::{cell, esc, Page};

/// Missed and never-run functions shown per op (the JSON of `show
/// --against` lists 20 by default; a page cell holds fewer).
pub const TOP_COMPARED: usize = 5;

/// Top functions shown per in-pipeline row.
const TOP_IN_ROW: usize = 3;

/// A configuration's samples: attributed, or why there are none.
pub enum Sampled {
    /// The folder has no samples files at all: not a sampled trace.
    Not,
    /// It was traced with `--sample` but has no samples (perf could not
    /// run): the reason, shown on the page.
    Without(String),
    /// Its samples credited to its ops.
    With(Box<InPipelineAttribution>),
}

/// Reads `dir`'s samples of `prefix`, if it has any.
pub fn attribute(dir: &Path, prefix: &str, budget: Budget) -> Result<Sampled> {
    if SampleFiles::of(dir, prefix).existing().is_empty() {
        return Ok(Sampled::Not);
    }
    match attribute_folder(dir, prefix, budget, TOP_FUNCTIONS) {
        Ok(a) => Ok(Sampled::With(Box::new(a))),
        Err(InPipelineError::NoSamples(why)) => Ok(Sampled::Without(why)),
        Err(e) => {
            Err(e).with_context(|| format!("cannot attribute the samples in {}", dir.display()))
        }
    }
}

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
        let other = crate::attribute_cmd::load_mapping(path)
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

/// The section of each sampled configuration's attribution: its table
/// (the figures of `lotus attribute DIR --format json`) and its plot.
pub fn in_pipeline_section(
    page: &mut Page,
    sampled: &[(String, Sampled)],
    colours: &Colours,
) -> Result<()> {
    page.html += "<h2>Samples in the pipeline</h2>\n<p>Each sample of a sampled trace (<code>lotus trace run --sample</code>) credited to the innermost op span its thread was running, as <code>lotus attribute DIR</code>: an op inside another is shown by its path (<code>Outer/Inner</code>); CPU ms is the row's own (exclusive; the rows add up to the total), from the spans' thread CPU clock where the trace has it, else samples times the sampling interval; ± ms is its 95% interval from the samples (1.96·√n intervals); incl ms adds the ops inside it.</p>\n";
    for (i, (label, s)) in sampled.iter().enumerate() {
        let a = match s {
            Sampled::Not => continue,
            Sampled::Without(why) => {
                let _ = writeln!(
                    page.html,
                    "<h3>{}</h3><p>No samples: {}</p>",
                    esc(label),
                    esc(why)
                );
                continue;
            }
            Sampled::With(a) => a,
        };
        let _ = write!(
            page.html,
            "<h3>{}</h3><table><tr><th>row</th><th>kind</th><th>samples</th><th>CPU ms</th><th>± ms</th><th>incl ms</th><th>share %</th><th>calls</th><th>CPU ms/call</th>",
            esc(label)
        );
        let headers = counter_headers(a);
        for h in &headers {
            let _ = write!(page.html, "<th>{}</th>", esc(h));
        }
        page.html += "<th>top functions</th></tr>\n";
        for r in &a.rows {
            // Keyed and shown by path: an op may run at several places in
            // the op tree (`RandomApply/GaussianBlur`).
            let k = |f: &str| format!("in_pipeline/{label}/{}/{f}", r.path);
            let mut row = format!(
                "<tr><td>{}</td><td>{}</td>{}{}{}{}{}{}{}",
                esc(&r.path),
                format!("{:?}", r.kind).to_lowercase(),
                cell(&k("samples"), r.samples.to_string()),
                cell(&k("cpu_ms"), format!("{:.3}", r.cpu_ns as f64 / 1e6)),
                cell(
                    &k("uncertainty_ms"),
                    format!("{:.3}", r.uncertainty_ns as f64 / 1e6)
                ),
                cell(
                    &k("inclusive_cpu_ms"),
                    format!("{:.3}", r.inclusive_cpu_ns as f64 / 1e6)
                ),
                cell(&k("share"), format!("{:.2}", r.share * 100.0)),
                cell(&k("calls"), r.calls.map_or("-".into(), |c| c.to_string())),
                cell(
                    &k("cpu_ms_per_call"),
                    r.cpu_per_call_ns
                        .map_or("-".into(), |c| format!("{:.3}", c as f64 / 1e6))
                ),
            );
            for (h, v) in headers.iter().zip(counter_cells(a, r)) {
                row += &cell(&k(&format!("counters/{h}")), v);
            }
            let tops: Vec<String> = r
                .top_functions
                .iter()
                .take(TOP_IN_ROW)
                .map(|f| format!("{} ({:.0}%)", esc(&f.function), f.share * 100.0))
                .collect();
            let _ = writeln!(
                page.html,
                "{row}<td class=\"names\" data-key=\"{}\">{}</td></tr>",
                esc(&k("top")),
                tops.join("<br>")
            );
        }
        let _ = writeln!(
            page.html,
            "</table><p><span data-key=\"in_pipeline/{}/total_samples\">{}</span> samples at {} Hz{}.</p>",
            esc(label),
            a.total_samples,
            a.frequency_hz,
            if a.partial {
                "; PARTIAL: the collection did not end normally"
            } else {
                ""
            }
        );
        for note in &a.notes {
            let _ = writeln!(page.html, "<p>Note: {}</p>", esc(note));
        }
        page.plot(
            &format!("in_pipeline_{}", slug(label, i)),
            "CPU time of each op in the pipeline (its own, not the ops inside it), then of the rows outside any op (grey); under each bar its top function.",
            svg_of(a, colours)?,
        );
    }
    Ok(())
}

fn functions_text(fs: &[ComparedFunction], count: usize) -> String {
    let mut names: Vec<String> = fs
        .iter()
        .map(|f| format!("{} ({:.0}%)", esc(&f.function), f.share * 100.0))
        .collect();
    if count > fs.len() {
        names.push(format!("and {} more", count - fs.len()));
    }
    names.join("<br>")
}

/// The comparison section: per op, the share of its in-pipeline samples
/// that fall in functions the isolated mapping lists, the top missed
/// functions, those listed but never run (the figures of `lotus show
/// MAPPING --against OTHER --format json`), and a plot of the coverage.
pub fn comparison_section(
    page: &mut Page,
    mapping_name: &str,
    compared: &[Compared],
    colours: &Colours,
) -> Result<()> {
    let _ = writeln!(
        page.html,
        "<h2>Isolated mapping against the pipeline</h2>\n<p>{} against each in-pipeline mapping, as <code>lotus show MAPPING --against OTHER</code>: coverage is the share of each op's samples in the pipeline that fall in functions the isolated mapping lists for it.</p>",
        esc(mapping_name)
    );
    for (i, c) in compared.iter().enumerate() {
        let m = &c.comparison;
        let _ = writeln!(
            page.html,
            "<h3>against {}</h3><table><tr><th>op</th><th>coverage %</th><th>listed</th><th>samples in the pipeline</th><th>top missed</th><th>missed</th><th>listed, never run</th><th>never run</th></tr>",
            esc(&c.against)
        );
        let key = |op: &str, f: &str| format!("comparison/{}/{op}/{f}", c.against);
        let mut bars = Vec::new();
        for o in &m.ops {
            let k = |f: &str| key(&o.op, f);
            let _ = writeln!(
                page.html,
                "<tr><td>{}</td>{}{}{}<td class=\"names\" data-key=\"{}\">{}</td>{}<td class=\"names\" data-key=\"{}\">{}</td>{}</tr>",
                esc(&o.op),
                cell(
                    &k("coverage"),
                    o.coverage
                        .map_or("-".into(), |x| format!("{:.1}", x * 100.0))
                ),
                cell(&k("listed"), o.listed.to_string()),
                cell(&k("other_samples"), format!("{}", o.other_samples)),
                esc(&k("missed")),
                functions_text(&o.missed, o.missed_count),
                cell(&k("missed_count"), o.missed_count.to_string()),
                esc(&k("not_run")),
                functions_text(&o.not_run, o.not_run_count),
                cell(&k("not_run_count"), o.not_run_count.to_string()),
            );
            if let Some(x) = o.coverage {
                bars.push(LabelledBar {
                    label: o.op.clone(),
                    value: x * 100.0,
                    note: o.missed.first().map_or(String::new(), |f| {
                        format!("missed: {} ({:.0}%)", f.function, f.share * 100.0)
                    }),
                });
            }
        }
        page.html += "</table>\n";
        for (what, ops) in [
            ("only in the isolated mapping", &m.only_in_mapping),
            ("only in the pipeline", &m.only_in_other),
        ] {
            if !ops.is_empty() {
                let _ = writeln!(page.html, "<p>Ops {what}: {}.</p>", esc(&ops.join(", ")));
            }
        }
        if !bars.is_empty() {
            let svg = labelled_bars(
                &format!(
                    "Coverage of each op's samples in the pipeline ({})",
                    c.against
                ),
                "coverage (%)",
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

/// The op names of the sections, for colours that stay the same from
/// plot to plot.
pub fn op_names<'a>(
    sampled: &'a [(String, Sampled)],
    compared: &'a [Compared],
) -> impl Iterator<Item = &'a str> {
    let rows = sampled.iter().flat_map(|(_, s)| match s {
        Sampled::With(a) => a
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
