//! Ops side by side across mappings made on different hosts (the study
//! compares CPU models for preprocessing servers): each op's latency and
//! CPU time per call, derived from what a live mapping's windows measured
//! ([`WindowSummary`](crate::mapping::WindowSummary): seconds open, calls, `task-clock-ns`), and their
//! ratios to the first mapping's.
//!
//! - latency per call = window seconds / calls;
//! - CPU per call = `task-clock-ns` / 1e9 / calls (the op's own process's
//!   CPU time inside its windows);
//! - unsampled CPU per call = the CPU per call of the op's calls timed
//!   with sampling stopped after its windows
//!   ([`WindowSummary::unsampled`](crate::mapping::WindowSummary::unsampled)):
//!   the op's own cost, free of what sampling cost it on that host (a
//!   sample costs more on some machines than on others);
//! - ratio = this mapping's figure / the first mapping's (above 1: slower
//!   here).
//!
//! A mapping made from vendor reports has no windows: its figures are
//! `None`, and so are ratios that need them.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::mapping::{Mapping, OpMapping};

/// The counter of a window's CPU time, in ns.
pub const TASK_CLOCK_NS: &str = "task-clock-ns";

/// One op's figures per call in one mapping.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PerCall {
    /// Calls measured (inside windows, over all runs).
    pub calls: u64,
    /// Wall-clock seconds per call.
    pub latency_s: Option<f64>,
    /// CPU seconds per call.
    pub cpu_s: Option<f64>,
    /// CPU seconds per call with sampling stopped (mappings that timed
    /// the op so).
    pub unsampled_cpu_s: Option<f64>,
}

impl PerCall {
    /// The per-call figures of `op`, `None` without windows or calls.
    pub fn of(op: &OpMapping) -> Option<PerCall> {
        let w = op.window.as_ref()?;
        if w.iterations == 0 {
            return None;
        }
        let n = w.iterations as f64;
        Some(PerCall {
            calls: w.iterations,
            latency_s: (w.seconds > 0.0).then(|| w.seconds / n),
            cpu_s: w.counters.get(TASK_CLOCK_NS).map(|ns| ns / 1e9 / n),
            unsampled_cpu_s: w.sampling_cost().map(|c| c.unsampled_cpu_s),
        })
    }
}

/// One op across the mappings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OpAcross {
    /// The op.
    pub op: String,
    /// Its figures in each mapping (`None`: not in it, or no windows).
    pub per_mapping: Vec<Option<PerCall>>,
    /// Latency per call over the first mapping's, per mapping.
    pub latency_ratio: Vec<Option<f64>>,
    /// CPU per call over the first mapping's, per mapping.
    pub cpu_ratio: Vec<Option<f64>>,
    /// Unsampled CPU per call over the first mapping's, per mapping.
    pub unsampled_cpu_ratio: Vec<Option<f64>>,
}

/// Every op of the mappings, in the first mapping's order, then ops only
/// later ones have.
pub fn compare(mappings: &[&Mapping]) -> Vec<OpAcross> {
    let mut names: Vec<&str> = Vec::new();
    for m in mappings {
        for op in &m.ops {
            if !names.contains(&op.name.as_str()) {
                names.push(&op.name);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let per: Vec<Option<PerCall>> = mappings
                .iter()
                .map(|m| m.ops.iter().find(|o| o.name == name).and_then(PerCall::of))
                .collect();
            let ratio = |f: fn(&PerCall) -> Option<f64>| -> Vec<Option<f64>> {
                let base = per.first().copied().flatten().and_then(|p| f(&p));
                per.iter()
                    .map(|p| match (p.and_then(|p| f(&p)), base) {
                        (Some(v), Some(b)) if b > 0.0 => Some(v / b),
                        _ => None,
                    })
                    .collect()
            };
            OpAcross {
                op: name.to_string(),
                latency_ratio: ratio(|p| p.latency_s),
                cpu_ratio: ratio(|p| p.cpu_s),
                unsampled_cpu_ratio: ratio(|p| p.unsampled_cpu_s),
                per_mapping: per,
            }
        })
        .collect()
}

/// What a mapping says of its host: `host`, `cpu_model`, `cpus`,
/// `cpu_cores`, `kernel` (see [`crate::host`]), those it has.
pub fn host_of(m: &Mapping) -> BTreeMap<String, String> {
    ["host", "cpu_model", "cpus", "cpu_cores", "kernel"]
        .iter()
        .filter_map(|k| Some((k.to_string(), m.environment.get(*k)?.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{Settings, WindowSummary};
    use crate::row::Unit;

    fn op(name: &str, seconds: f64, calls: u64, cpu_ns: Option<f64>) -> OpMapping {
        let mut w = WindowSummary {
            seconds,
            iterations: calls,
            ..WindowSummary::default()
        };
        if let Some(ns) = cpu_ns {
            w.counters.insert(TASK_CLOCK_NS.into(), ns);
        }
        OpMapping {
            name: name.into(),
            runs: 1,
            samples: 1.0,
            functions: Vec::new(),
            window: Some(w),
        }
    }

    #[test]
    fn per_call_figures_and_ratios() {
        let a = Mapping::new(
            "perf",
            Unit::Samples,
            Settings::default(),
            vec![op("A", 2.0, 100, Some(1.5e9)), op("B", 1.0, 10, None)],
        );
        let b = Mapping::new(
            "perf",
            Unit::Samples,
            Settings::default(),
            vec![op("A", 3.0, 50, Some(1.5e9)), op("C", 1.0, 1, Some(1e9))],
        );
        let c = compare(&[&a, &b]);
        let names: Vec<&str> = c.iter().map(|o| o.op.as_str()).collect();
        assert_eq!(names, ["A", "B", "C"]);
        let pa = c[0].per_mapping[0].expect("A in a");
        assert_eq!((pa.latency_s, pa.cpu_s), (Some(0.02), Some(0.015)));
        assert_eq!(c[0].latency_ratio, vec![Some(1.0), Some(3.0)]);
        assert_eq!(c[0].cpu_ratio, vec![Some(1.0), Some(2.0)]);
        assert_eq!(c[1].per_mapping[1], None);
        assert_eq!(c[1].cpu_ratio, vec![None, None]);
        assert_eq!(c[2].latency_ratio, vec![None, None]);
        assert_eq!(pa.unsampled_cpu_s, None, "no unsampled calls in a");
        assert_eq!(c[0].unsampled_cpu_ratio, vec![None, None]);
    }

    #[test]
    fn unsampled_figures_compare_the_ops_own_cost() {
        let timed = |cpu_ns: f64, unsampled_cpu_s: f64| {
            let mut o = op("A", 2.0, 100, Some(cpu_ns));
            if let Some(w) = o.window.as_mut() {
                w.unsampled = Some(crate::mapping::UnsampledCalls {
                    calls: 10,
                    seconds: unsampled_cpu_s,
                    cpu_seconds: unsampled_cpu_s,
                });
            }
            o
        };
        // Host b samples at a higher cost: its sampled CPU per call is
        // 1.5 times a's, its own cost only 1.2 times.
        let a = Mapping::new(
            "perf",
            Unit::Samples,
            Settings::default(),
            vec![timed(1e9, 0.08)],
        );
        let b = Mapping::new(
            "perf",
            Unit::Samples,
            Settings::default(),
            vec![timed(1.5e9, 0.096)],
        );
        let c = compare(&[&a, &b]);
        let pb = c[0].per_mapping[1].expect("A in b");
        assert!((pb.unsampled_cpu_s.expect("timed") - 0.0096).abs() < 1e-12);
        let r = c[0].unsampled_cpu_ratio[1].expect("ratio");
        assert!((r - 1.2).abs() < 1e-9, "{r}");
        assert!((c[0].cpu_ratio[1].expect("ratio") - 1.5).abs() < 1e-9);
    }
}
