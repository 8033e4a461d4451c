//! The runs side by side in `lotus report`: the figures at a glance, and
//! each run against the first per op.
use super::Page;
use crate::render::html::timeline::OpCpu;
use crate::render::html::{keyed, short_name, text, Block, Cell, Part};
use lotus_attribute::SampledFolder;
use lotus_attribute::TraceFigures;

/// CPU ms per call of `op` in a configuration: from its spans' thread CPU
/// clock where they carry it, else from its samples (`lotus attribute
/// DIR`'s row of the op).
pub(super) fn cpu_per_call_ms(
    cpu: &OpCpu,
    sampled: Option<&SampledFolder>,
    op: &str,
) -> Option<f64> {
    if let Some(&(ns, with, _)) = cpu.get(op) {
        if with > 0 {
            return Some(ns as f64 / with as f64 / 1e6);
        }
    }
    match sampled {
        Some(SampledFolder::With(a)) => a.op_cpu_per_call_ns(op).map(|ns| ns as f64 / 1e6),
        _ => None,
    }
}

/// A few figures of each run at a glance.
pub(super) fn glance(configs: &[TraceFigures], cpus: &[OpCpu]) -> Vec<Vec<Part>> {
    let mut out = Vec::new();
    for (c, cpu) in configs.iter().zip(cpus) {
        let s = &c.stats;
        let workers = s.processes.iter().filter(|p| p.role == "worker").count();
        let batches = s.batches.summary.as_ref().map_or(0, |b| b.count);
        let mut parts = vec![text(format!(
            "{}: {workers} worker(s), {batches} batch(es)",
            c.label
        ))];
        if let Some(w) = &s.wait.summary {
            parts.push(text("; the main process waited for data "));
            parts.push(keyed(
                format!("glance/{}/wait_ms", c.label),
                format!("{:.1}", w.total_ns as f64 / 1e6),
            ));
            parts.push(text(format!(" ms in all ({} wait(s))", w.count)));
        }
        if let Some((n, cpu_ns, op)) = c.glance_op() {
            parts.push(text(match cpu_ns {
                Some(_) => "; the op that costs most CPU: ",
                None => "; the op that takes longest: ",
            }));
            parts.push(keyed(
                format!("glance/{}/top_op", c.label),
                short_name(n, 48),
            ));
            let mut figures: Vec<String> = (cpu_ns.iter())
                .map(|ns| format!("{:.1} ms of CPU", *ns as f64 / 1e6))
                .collect();
            if let Some(o) = op {
                figures.push(format!(
                    "{:.1} ms in all, {:.3} ms a call",
                    o.summary.total_ns as f64 / 1e6,
                    o.summary.mean_ns / 1e6
                ));
                if let Some(c) = cpu_per_call_ms(cpu, None, &o.name) {
                    figures.push(format!("{c:.3} ms CPU a call"));
                }
            }
            if !figures.is_empty() {
                parts.push(text(format!(" ({})", figures.join(", "))));
            }
        }
        parts.push(text("."));
        out.push(parts);
    }
    out
}

/// `new` against `old`: the difference and its share of `old`.
fn delta_cells(key: &str, old: Option<f64>, new: Option<f64>) -> [Cell; 4] {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let (d, pct) = match (old, new) {
        (Some(a), Some(b)) => (
            format!("{:+.3}", b - a),
            if a > 0.0 {
                format!("{:+.1}", 100.0 * (b - a) / a)
            } else {
                "-".to_string()
            },
        ),
        _ => ("-".to_string(), "-".to_string()),
    };
    [
        Cell::plain_num(f(old)),
        Cell::plain_num(f(new)),
        Cell::num(format!("{key}_delta_ms"), d),
        Cell::num(format!("{key}_delta_pct"), pct),
    ]
}

/// Two runs or more: each against the first, per op: time and CPU per
/// call, and how much they changed.
pub(super) fn runs_compared(
    page: &mut Page,
    configs: &[TraceFigures],
    cpus: &[OpCpu],
    sampled: &[(String, SampledFolder)],
) {
    let base = &configs[0];
    page.h(2, "Runs compared");
    page.p(vec![text(format!(
        "Each run against {} (the first given), per op: wall time a call (the mean of its spans) and CPU time a call (its spans' own thread CPU clock, or its samples), in ms; Δ: the change, in ms and as a share of {}'s (negative: faster).",
        base.label, base.label
    ))]);
    for (i, c) in configs.iter().enumerate().skip(1) {
        page.h(3, format!("{} against {}", c.label, base.label));
        let mut ops: Vec<&str> = base
            .stats
            .ops
            .iter()
            .chain(&c.stats.ops)
            .map(|o| o.name.as_str())
            .collect();
        ops.sort_unstable();
        ops.dedup();
        let mean = |cc: &TraceFigures, op: &str| {
            cc.stats
                .ops
                .iter()
                .find(|o| o.name == op)
                .map(|o| o.summary.mean_ns / 1e6)
        };
        let rows = ops
            .iter()
            .map(|op| {
                let k = |f: &str| format!("compare/{}/{op}/{f}", c.label);
                let mut row = vec![Cell::name(op)];
                row.extend(delta_cells(
                    &k("time_per_call"),
                    mean(base, op),
                    mean(c, op),
                ));
                row.extend(delta_cells(
                    &k("cpu_per_call"),
                    cpu_per_call_ms(&cpus[0], sampled.first().map(|s| &s.1), op),
                    cpu_per_call_ms(&cpus[i], sampled.get(i).map(|s| &s.1), op),
                ));
                row
            })
            .collect();
        let a = &base.label;
        let b = &c.label;
        let headers = [
            "op".to_string(),
            format!("wall/call {a}"),
            format!("wall/call {b}"),
            "Δ".to_string(),
            "Δ %".to_string(),
            format!("CPU/call {a}"),
            format!("CPU/call {b}"),
            "Δ".to_string(),
            "Δ %".to_string(),
        ];
        page.push(Block::Table {
            headers: headers.to_vec(),
            rows,
        });
    }
}
