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
//!
//! A mapping from another host is data: [`check_figures`] refuses window
//! figures no window can have measured (see its bounds) before they are
//! compared, naming the file, the op and the field.

use crate::Error;
use std::collections::BTreeMap;

use serde::Serialize;

use crate::mapping::{Mapping, OpMapping};
use lotus_sys::text::{figure, one_line};

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

/// The most seconds an op's windows (or its unsampled calls) may add up
/// to over all runs of a mapping: about 116 days.
pub const MAX_SECONDS: f64 = 1e7;

/// The most CPUs a host may say it has (`environment.cpus`).
pub const MAX_CPUS: u64 = 65_536;

/// CPU time measured against wall-clock time: their clocks differ a little
/// (the counter and the window's edges are read apart), so a window may
/// show this much more CPU time than its seconds times the CPUs, plus
/// [`CPU_SLACK_S`].
pub const CPU_TOLERANCE: f64 = 1.25;

/// See [`CPU_TOLERANCE`].
pub const CPU_SLACK_S: f64 = 0.05;

/// Checks every op's window figures in `m` (read from `file`) before they
/// are compared; the first impossible one is the error. The bounds:
///
/// - every figure finite and not negative (JSON cannot hold NaN, but a
///   hand-made file can hold `1e308` or `-1`);
/// - `window.seconds` and `window.unsampled.seconds` at most
///   [`MAX_SECONDS`];
/// - CPU time (`window.counters.task-clock-ns`, `window.unsampled.cpu_seconds`)
///   at most the matching wall-clock seconds times the host's CPUs
///   (`environment.cpus`, 1 to [`MAX_CPUS`]; [`MAX_CPUS`] where the
///   mapping does not say), within [`CPU_TOLERANCE`] and [`CPU_SLACK_S`]:
///   so CPU per call is never more than latency per call times the CPUs;
/// - unsampled calls at least 1 where their CPU time is above 0.
///
/// Every other counter need only be finite and not negative.
pub fn check_figures(m: &Mapping, file: &str) -> Result<(), Error> {
    let bad = |op: &str, field: &str, value: f64, why: String| Error::BadFigure {
        file: file.to_string(),
        op: one_line(op).into_owned(),
        field: field.to_string(),
        value: figure(value, 3),
        why,
    };
    let cpus = match m.environment.get("cpus") {
        None => MAX_CPUS,
        Some(text) => match text.trim().parse::<u64>() {
            Ok(n) if (1..=MAX_CPUS).contains(&n) => n,
            _ => {
                return Err(Error::BadFigure {
                    file: file.to_string(),
                    op: "-".into(),
                    field: "environment.cpus".into(),
                    value: format!("'{}'", one_line(&crate::report_error::quote_cut(text, 40))),
                    why: format!("not a count of CPUs from 1 to {MAX_CPUS}"),
                })
            }
        },
    };
    let cpu_bound = |seconds: f64| seconds * cpus as f64 * CPU_TOLERANCE + CPU_SLACK_S;
    let plain = |op: &str, field: &str, v: f64, max: f64| {
        if !v.is_finite() || v < 0.0 {
            Err(bad(op, field, v, "not a figure of 0 or more".into()))
        } else if v > max {
            Err(bad(op, field, v, format!("more than {}", figure(max, 0))))
        } else {
            Ok(())
        }
    };
    for op in &m.ops {
        let Some(w) = &op.window else { continue };
        let name = op.name.as_str();
        plain(name, "window.seconds", w.seconds, MAX_SECONDS)?;
        for (k, v) in &w.counters {
            plain(
                name,
                &format!("window.counters.{}", one_line(k)),
                *v,
                f64::MAX,
            )?;
        }
        if let Some(ns) = w.counters.get(TASK_CLOCK_NS) {
            let max = cpu_bound(w.seconds);
            if ns / 1e9 > max {
                return Err(bad(
                    name,
                    &format!("window.counters.{TASK_CLOCK_NS}"),
                    *ns,
                    format!(
                        "{} s of CPU time in windows open {} s on {cpus} CPU(s)",
                        figure(ns / 1e9, 3),
                        figure(w.seconds, 3)
                    ),
                ));
            }
        }
        if let Some(u) = &w.unsampled {
            plain(name, "window.unsampled.seconds", u.seconds, MAX_SECONDS)?;
            plain(
                name,
                "window.unsampled.cpu_seconds",
                u.cpu_seconds,
                f64::MAX,
            )?;
            if u.cpu_seconds > cpu_bound(u.seconds) {
                return Err(bad(
                    name,
                    "window.unsampled.cpu_seconds",
                    u.cpu_seconds,
                    format!(
                        "more CPU time than {} s of calls on {cpus} CPU(s) can hold",
                        figure(u.seconds, 3)
                    ),
                ));
            }
            if u.calls == 0 && u.cpu_seconds > 0.0 {
                return Err(bad(
                    name,
                    "window.unsampled.calls",
                    0.0,
                    "CPU time without a call".into(),
                ));
            }
        }
    }
    Ok(())
}

/// What a mapping says of its host: `host`, `cpu_model`, `cpus`,
/// `cpu_cores`, `kernel` (see [`facts`](crate::facts)), those it has.
pub fn host_of(m: &Mapping) -> BTreeMap<String, String> {
    ["host", "cpu_model", "cpus", "cpu_cores", "kernel"]
        .iter()
        .filter_map(|k| Some((k.to_string(), m.environment.get(*k)?.clone())))
        .collect()
}

/// The schema of [`compare_document`].
pub const COMPARE_SCHEMA: &str = "lotus.mapping-compare/1";

/// A mapping as [`CompareDocument`] names it.
#[derive(Serialize)]
struct ComparedMapping<'a> {
    label: &'a str,
    file: String,
    host: BTreeMap<String, String>,
}

/// The `lotus.mapping-compare/1` document: each mapping's label, file and
/// host, and the ops across them. Serialize it (`serde_json`).
#[derive(Serialize)]
pub struct CompareDocument<'a> {
    schema: &'static str,
    mappings: Vec<ComparedMapping<'a>>,
    ops: &'a [OpAcross],
}

/// The `lotus.mapping-compare/1` document of `mappings` (each with its
/// label and file, as given) and their `ops` compared ([`compare`]).
pub fn compare_document<'a>(
    mappings: &[(&'a str, &std::path::Path, &Mapping)],
    ops: &'a [OpAcross],
) -> CompareDocument<'a> {
    CompareDocument {
        schema: COMPARE_SCHEMA,
        mappings: mappings
            .iter()
            .map(|(label, file, m)| ComparedMapping {
                label,
                file: file.display().to_string(),
                host: host_of(m),
            })
            .collect(),
        ops,
    }
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
            stacks: Vec::new(),
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
    fn impossible_figures_are_refused_naming_the_op_and_field() {
        let mut m = Mapping::new(
            "perf",
            Unit::Samples,
            Settings::default(),
            vec![op("A", 2.0, 100, Some(1.5e9))],
        );
        m.environment.insert("cpus".into(), "4".into());
        assert!(check_figures(&m, "m.json").is_ok());
        let field = |m: &Mapping| {
            check_figures(m, "m.json").map_err(|e| match e {
                Error::BadFigure { field, .. } => field,
                other => panic!("{other}"),
            })
        };
        let set = |f: &dyn Fn(&mut WindowSummary)| {
            let mut m = m.clone();
            f(m.ops[0].window.as_mut().expect("window"));
            m
        };
        assert_eq!(
            field(&set(&|w| w.seconds = 1e300)),
            Err("window.seconds".into())
        );
        assert_eq!(
            field(&set(&|w| w.seconds = -1.0)),
            Err("window.seconds".into())
        );
        // 2 s on 4 CPUs hold at most 10.05 s of CPU time.
        let tc = "window.counters.task-clock-ns".to_string();
        assert_eq!(
            field(&set(&|w| {
                w.counters.insert(TASK_CLOCK_NS.into(), 11e9);
            })),
            Err(tc.clone())
        );
        assert_eq!(
            field(&set(&|w| {
                w.counters.insert(TASK_CLOCK_NS.into(), -5.0);
            })),
            Err(tc)
        );
        assert_eq!(
            field(&set(&|w| {
                w.unsampled = Some(crate::mapping::UnsampledCalls::new(0, 1.0, 0.5));
            })),
            Err("window.unsampled.calls".into())
        );
        assert_eq!(
            field(&set(&|w| {
                w.unsampled = Some(crate::mapping::UnsampledCalls::new(3, 0.001, 1e300));
            })),
            Err("window.unsampled.cpu_seconds".into())
        );
        let mut bad_cpus = m.clone();
        bad_cpus
            .environment
            .insert("cpus".into(), "99999999999999999999".into());
        assert_eq!(field(&bad_cpus), Err("environment.cpus".into()));
        let e = check_figures(&set(&|w| w.seconds = 1e300), "m.json").expect_err("bad");
        let text = e.to_string();
        assert!(
            text.starts_with("m.json: op A: window.seconds = 1.000e300"),
            "{text}"
        );
        assert!(text.len() < 300, "{text}");
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
