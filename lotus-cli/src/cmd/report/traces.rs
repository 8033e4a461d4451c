//! The trace sections of `lotus report`: ops, batches, waits and delays,
//! per configuration.

use anyhow::Result;
use lotus_trace::{ConfigComparison, OutlierRule};

use super::runs::cpu_per_call_ms;
use super::{cell, ms_cell, Page};
use crate::render::html::timeline::OpCpu;
use crate::render::html::{keyed, text, Cell};
use crate::render::svg::{box_plot, grouped_bars, Colours};
use lotus_attribute::SampledFolder;
use lotus_attribute::TraceFigures;

/// The trace sections: ops, batches, waits, delays, per configuration.
pub(super) fn traces(
    page: &mut Page,
    configs: &mut [TraceFigures],
    cpus: &[OpCpu],
    sampled: &[(String, SampledFolder)],
    colours: &Colours,
    rule: OutlierRule,
) -> Result<()> {
    let labels: Vec<String> = configs.iter().map(|c| c.label.clone()).collect();
    ops(page, configs, cpus, sampled, colours, &labels)?;
    batches(page, configs, rule)?;
    waits(page, configs, &labels)?;
    distributions(page, configs)
}

/// Each configuration's per-op table, and the op-time plot.
fn ops(
    page: &mut Page,
    configs: &[TraceFigures],
    cpus: &[OpCpu],
    sampled: &[(String, SampledFolder)],
    colours: &Colours,
    labels: &[String],
) -> Result<()> {
    page.h(2, "Ops");
    page.p(vec![text("Each op's spans in all processes: wall time (total, mean a call, percentiles) and CPU time a call (the spans' own thread CPU clock where the trace has it, else the op's samples; - where it has neither). Hover a shortened name for the whole of it.")]);
    for (i, (c, cpu)) in configs.iter().zip(cpus).enumerate() {
        page.h(3, c.label.clone());
        let samples = sampled.get(i).map(|s| &s.1);
        let rows = op_rows(c, cpu, samples, colours);
        page.table(
            &[
                "op",
                "calls",
                "total",
                "wall/call",
                "CPU/call",
                "p50",
                "p95",
                "std",
            ],
            rows,
        );
    }
    let mut ops: Vec<String> = configs
        .iter()
        .flat_map(|c| c.stats.ops.iter().map(|o| o.name.clone()))
        .collect();
    ops.sort();
    ops.dedup();
    let series: Vec<(String, Vec<f64>)> = ops
        .iter()
        .map(|op| {
            let v = configs
                .iter()
                .map(|c| {
                    c.stats
                        .ops
                        .iter()
                        .find(|o| &o.name == op)
                        .map_or(0.0, |o| o.summary.total_ns as f64 / 1e6)
                })
                .collect();
            (op.clone(), v)
        })
        .collect();
    if !series.is_empty() {
        let svg = grouped_bars(
            "Elapsed time per op, per configuration",
            "total time (ms)",
            labels,
            &series,
            colours,
        )?;
        page.plot(
            "op_time",
            "Total time of each op (all processes) per configuration.",
            svg,
        );
    }

    Ok(())
}

/// The rows of a configuration's per-op table.
fn op_rows(
    c: &TraceFigures,
    cpu: &OpCpu,
    samples: Option<&SampledFolder>,
    colours: &Colours,
) -> Vec<Vec<Cell>> {
    c.stats
        .ops
        .iter()
        .map(|o| {
            let k = |f: &str| format!("trace/{}/ops/{}/{f}", c.label, o.name);
            let s = &o.summary;
            vec![
                Cell::name(&o.name).swatch(crate::render::html::timeline::hex(colours, &o.name)),
                cell(&k("count"), s.count.to_string()),
                ms_cell(&k("total_ns"), s.total_ns as f64),
                ms_cell(&k("mean_ns"), s.mean_ns),
                cell(
                    &k("cpu_per_call_ms"),
                    cpu_per_call_ms(cpu, samples, &o.name)
                        .map_or("-".to_string(), |v| format!("{v:.3}")),
                ),
                ms_cell(&k("p50_ns"), s.p50_ns),
                ms_cell(&k("p95_ns"), s.p95_ns),
                ms_cell(&k("std_ns"), s.std_ns),
            ]
        })
        .collect()
}

/// Batch preprocessing time: its table, the study's comparison, its box
/// plot.
fn batches(page: &mut Page, configs: &[TraceFigures], rule: OutlierRule) -> Result<()> {
    page.h(2, "Batch preprocessing time");
    let mut boxes = Vec::new();
    let mut rows = Vec::new();
    for c in configs.iter() {
        let b = &c.stats.batches;
        let k = |f: &str| format!("trace/{}/batches/{f}", c.label);
        if let (Some(s), Some(q1), Some(q3)) = (&b.summary, b.q1_ns, b.q3_ns) {
            rows.push(vec![
                Cell::text(c.label.clone()),
                cell(&k("count"), s.count.to_string()),
                ms_cell(&k("mean_ns"), s.mean_ns),
                ms_cell(&k("p50_ns"), s.p50_ns),
                ms_cell(&k("q1_ns"), q1),
                ms_cell(&k("q3_ns"), q3),
                ms_cell(&k("std_ns"), s.std_ns),
                ms_cell(&k("min_ns"), s.min_ns as f64),
                ms_cell(&k("max_ns"), s.max_ns as f64),
                cell(&k("outliers"), b.outliers.len().to_string()),
            ]);
            boxes.push((
                c.label.clone(),
                [s.min_ns as f64, q1, s.p50_ns, q3, s.max_ns as f64].map(|v| v / 1e6),
            ));
        }
    }
    page.table(
        &[
            "configuration",
            "batches",
            "mean",
            "p50",
            "Q1",
            "Q3",
            "std",
            "min",
            "max",
            "outliers",
        ],
        rows,
    );
    if configs.len() > 1 {
        let cmp = ConfigComparison::of(
            &configs
                .iter()
                .map(|c| (c.label.as_str(), &c.stats.batches))
                .collect::<Vec<_>>(),
        );
        let ratio = |v: Option<f64>| {
            v.map_or("- (the smallest is 0: no ratio)".to_string(), |r| {
                format!("{r:.2}x")
            })
        };
        page.p(vec![
            text("Across configurations (the study's comparison): maximum normalized IQR "),
            keyed(
                "trace/comparison/max_normalized_iqr",
                ratio(cmp.max_normalized_iqr),
            ),
            text(", maximum normalized standard deviation "),
            keyed(
                "trace/comparison/max_normalized_std",
                ratio(cmp.max_normalized_std),
            ),
            text("."),
        ]);
    }
    if !boxes.is_empty() {
        let svg = box_plot(
            &format!("Batch preprocessing time (outliers: {})", rule.as_str()),
            "preprocessing time per batch (ms)",
            &boxes,
        )?;
        page.plot(
            "batch_time",
            "Box: Q1 to Q3, red line: median, whiskers: min to max.",
            svg,
        );
    }

    Ok(())
}

/// The main process's waits and the delays to consumption: their table
/// and bars.
fn waits(page: &mut Page, configs: &[TraceFigures], labels: &[String]) -> Result<()> {
    page.h(2, "Waits and delays");
    let bucket_names: Vec<String> = lotus_trace::WaitBucket::ALL
        .iter()
        .map(|b| b.label().to_string())
        .collect();
    let mut wait_series: Vec<(String, Vec<f64>)> = bucket_names
        .iter()
        .map(|n| (n.clone(), Vec::new()))
        .collect();
    let delay_names = ["delay < 250 ms", "delay 250 - 500 ms", "delay > 500 ms"];
    let mut delay_series: Vec<(String, Vec<f64>)> = delay_names
        .iter()
        .map(|n| (n.to_string(), Vec::new()))
        .collect();
    let mut rows = Vec::new();
    for c in configs.iter() {
        rows.push(wait_row(c, &mut wait_series, &mut delay_series));
    }
    page.table(
        &[
            "configuration",
            "waits",
            "none",
            "< 1 ms",
            "1 ms - 500 ms",
            "> 500 ms",
            "delays",
            "delay p50",
            "delay p95",
            "< 250 ms",
            "> 500 ms",
        ],
        rows,
    );
    let fixed = Colours::new(bucket_names.iter().map(String::as_str).chain(delay_names));
    let svg = grouped_bars(
        "Main-process waits per batch, by bucket",
        "batches",
        labels,
        &wait_series,
        &fixed,
    )?;
    page.plot(
        "waits",
        "How long the main process waited for each batch.",
        svg,
    );
    let svg = grouped_bars(
        "Delay from end of preprocessing to consumption",
        "share of the batches (%)",
        labels,
        &delay_series,
        &fixed,
    )?;
    page.plot(
        "delays",
        "The study's delay shares: under 250 ms, between, over 500 ms.",
        svg,
    );
    Ok(())
}

/// A configuration's row of the waits table; its waits per bucket and its
/// delay shares go to the series of the bars.
fn wait_row(
    c: &TraceFigures,
    wait_series: &mut [(String, Vec<f64>)],
    delay_series: &mut [(String, Vec<f64>)],
) -> Vec<Cell> {
    let s = &c.stats;
    let k = |f: &str| format!("trace/{}/{f}", c.label);
    let waits = s.wait.summary.as_ref().map_or(0, |w| w.count);
    let mut row = vec![
        Cell::text(c.label.clone()),
        cell(&k("wait/count"), waits.to_string()),
    ];
    for (i, b) in s.wait.buckets.iter().enumerate() {
        row.push(cell(
            &format!("trace/{}/wait/{}", c.label, b.bucket.as_str()),
            b.count.to_string(),
        ));
        wait_series[i].1.push(b.count as f64);
    }
    let d = &s.delay;
    let n = d.summary.as_ref().map_or(0, |x| x.count);
    row.push(cell(&k("delay/count"), n.to_string()));
    match &d.summary {
        Some(x) => {
            row.push(ms_cell(&k("delay/p50_ns"), x.p50_ns));
            row.push(ms_cell(&k("delay/p95_ns"), x.p95_ns));
        }
        None => {
            row.push(Cell::plain_num("-"));
            row.push(Cell::plain_num("-"));
        }
    }
    row.push(cell(&k("delay/under_250ms"), d.under_250ms.to_string()));
    row.push(cell(&k("delay/over_500ms"), d.over_500ms.to_string()));
    let mid = n.saturating_sub(d.under_250ms + d.over_500ms);
    for (i, v) in [d.under_250ms, mid, d.over_500ms].iter().enumerate() {
        delay_series[i].1.push(if n > 0 {
            100.0 * *v as f64 / n as f64
        } else {
            0.0
        });
    }
    row
}

/// Box plots of every wait and delay, from every batch.
fn distributions(page: &mut Page, configs: &mut [TraceFigures]) -> Result<()> {
    // The distributions themselves, from every batch.
    let (mut delay_boxes, mut wait_boxes) = (Vec::new(), Vec::new());
    for c in configs.iter_mut() {
        let (mut delays, mut waits) = c.delays_and_waits_ms()?;
        for (values, boxes) in [
            (&mut delays, &mut delay_boxes),
            (&mut waits, &mut wait_boxes),
        ] {
            if values.is_empty() {
                continue;
            }
            values.sort_by(f64::total_cmp);
            let q = |p| lotus_trace::percentile(values, p);
            boxes.push((
                c.label.clone(),
                [q(0.0), q(25.0), q(50.0), q(75.0), q(100.0)],
            ));
        }
    }
    if !wait_boxes.is_empty() {
        let svg = box_plot("Main-process wait per batch", "wait (ms)", &wait_boxes)?;
        page.plot(
            "wait_box",
            "Every wait: box Q1 to Q3, red line: median, whiskers: min to max.",
            svg,
        );
    }
    if !delay_boxes.is_empty() {
        let svg = box_plot(
            "Delay from end of preprocessing to consumption",
            "delay (ms)",
            &delay_boxes,
        )?;
        page.plot(
            "delay_box",
            "Every consumed batch: box Q1 to Q3, red line: median, whiskers: min to max.",
            svg,
        );
    }
    Ok(())
}
