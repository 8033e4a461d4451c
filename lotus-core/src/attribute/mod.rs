//! Attribution: a whole-pipeline profile folded back onto the Python ops
//! through a [`Mapping`].
//!
//! Each profile row (one native function) is matched against the functions
//! of every op ([`MatchMode`]):
//!
//! - no op maps it: the row goes to the [`UNEXPLAINED`] entry, never
//!   dropped, so the entries add up to the profile's total;
//! - one op maps it: the whole row is that op's **exclusive** time;
//! - several ops map it: the row is divided among them, in proportion to
//!   the ops' own times ([`OpTimes`], e.g. from a trace) or equally when no
//!   times are given ([`Split`]). That is the ops' **shared** time.
//!
//! Counters are divided in the same proportion as the time. Two kinds of
//! per-function figures are told apart by name ([`metric_kind`]): counts
//! (`Clockticks`, `Instructions Retired`, times) are summed; metrics
//! (top-down percentages, `Average CPU Frequency`) are averaged, weighted
//! by each row's clockticks (times the row's part in the op). CPI is
//! recomputed as clockticks / instructions from the sums; VTune's per-row
//! `CPI Rate` is not averaged. A profile without a clockticks counter gets
//! no CPI or metric averages, and a note saying so.
//!
//! ## Matching
//!
//! A row matches a mapping function when the function names are equal and
//! the modules are equal after [`normalize_module`] (version suffixes after
//! `.so` dropped: `libjpeg.so.9` = `libjpeg.so.9.5.0`). Where either side
//! does not know the module (`[Unknown]`, as in VTune GUI exports), or with
//! [`MatchMode::Name`], the function name alone decides. A row that
//! several mapping entries of one op match counts once for that op.
//!
//! ```
//! use lotus_core::attribute::{attribute, Options, UNEXPLAINED};
//! use lotus_core::mapping::{Mapping, OpAccumulator, Settings};
//! use lotus_core::{MergeRule, Report, Row, Unit};
//!
//! let op = |name: &str, funcs: &[(&str, &str)]| {
//!     let mut acc = OpAccumulator::new(name);
//!     let rows = funcs.iter().map(|(f, m)| Row::new(f, m, 1.0)).collect();
//!     acc.add_run(&Report { unit: Unit::Seconds, rows });
//!     acc.finish(MergeRule::Union)
//! };
//! let mapping = Mapping::new("vtune", Unit::Seconds, Settings::default(), vec![
//!     op("Decode", &[("decode_mcu", "libjpeg.so.9"), ("memcpy", "libc.so.6")]),
//!     op("Crop", &[("resample", "_imaging.so"), ("memcpy", "libc.so.6")]),
//! ]);
//! let profile = Report { unit: Unit::Seconds, rows: vec![
//!     Row::new("decode_mcu", "libjpeg.so.9.5.0", 6.0),
//!     Row::new("memcpy", "libc.so.6", 2.0),
//!     Row::new("resample", "_imaging.so", 1.0),
//!     Row::new("PyEval", "python3", 1.0),
//! ]};
//! let a = attribute(&mapping, &profile, &Options::default()).unwrap();
//! let decode = a.op("Decode").unwrap();
//! assert_eq!((decode.value, decode.exclusive, decode.shared), (7.0, 6.0, 1.0));
//! assert_eq!(a.op(UNEXPLAINED).unwrap().value, 1.0);
//! assert_eq!(a.ops.iter().map(|o| o.value).sum::<f64>(), a.total);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;

use crate::mapping::Mapping;
use crate::row::{Report, Row, Unit, UNKNOWN_MODULE};

mod op_times;

pub use op_times::OpTimes;

/// The name of the entry that holds the time no op's mapping explains.
pub const UNEXPLAINED: &str = "(unexplained)";

/// Counter names read as clockticks (the weight of metric averages), in
/// order of preference.
pub const CLOCKTICK_COUNTERS: &[&str] = &[
    "Clockticks",
    "CPU_CLK_UNHALTED.THREAD",
    "CYCLES_NOT_IN_HALT",
    "cycles",
];

/// Counter names read as retired instructions, in order of preference.
pub const INSTRUCTION_COUNTERS: &[&str] = &[
    "Instructions Retired",
    "INST_RETIRED.ANY",
    "RETIRED_INST",
    "instructions",
];

/// Per-row figures that attribution leaves out: VTune's `CPI Rate` is
/// recomputed from the summed clockticks and instructions instead.
const RECOMPUTED: &[&str] = &["CPI Rate"];

/// How a profile row is matched to a mapping's functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchMode {
    /// Function and module (version suffixes ignored); the function name
    /// alone where either side's module is unknown.
    #[default]
    Auto,
    /// The function name alone, whatever the modules say.
    Name,
}

impl fmt::Display for MatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MatchMode::Auto => "auto",
            MatchMode::Name => "name",
        })
    }
}

impl FromStr for MatchMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(MatchMode::Auto),
            "name" => Ok(MatchMode::Name),
            _ => Err(format!("unknown match mode '{s}': use auto or name")),
        }
    }
}

/// Whether a module name says the module is unknown (`[Unknown]`, empty).
pub fn is_unknown_module(module: &str) -> bool {
    let m = module.trim();
    m.is_empty() || m.eq_ignore_ascii_case(UNKNOWN_MODULE) || m.eq_ignore_ascii_case("[unknown]")
}

/// A module name with its shared-library version suffix dropped: every
/// trailing `.<digits>` group after `.so` goes (`libjpeg.so.9.5.0` and
/// `libjpeg.so.9` both become `libjpeg.so`). Other names are unchanged;
/// `libc-2.31.so` and `libc.so.6` stay different modules.
///
/// ```
/// use lotus_core::attribute::normalize_module;
/// assert_eq!(normalize_module("libjpeg.so.9.5.0"), "libjpeg.so");
/// assert_eq!(normalize_module("libjpeg.so.9"), "libjpeg.so");
/// assert_eq!(normalize_module("libtorch_cpu.so"), "libtorch_cpu.so");
/// assert_eq!(normalize_module("libfoo.so.1a"), "libfoo.so.1a");
/// assert_eq!(normalize_module("python3.10"), "python3.10");
/// ```
pub fn normalize_module(module: &str) -> &str {
    let mut end = module.len();
    loop {
        let head = &module[..end];
        if head.ends_with(".so") {
            return head;
        }
        match head.rfind('.') {
            Some(dot)
                if dot + 1 < head.len() && head[dot + 1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                end = dot;
            }
            _ => return module,
        }
    }
}

/// How a per-function figure combines over the functions of an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A count or a time: summed (each row's part of it).
    Count,
    /// A rate or a percentage: averaged, weighted by clockticks.
    Average,
}

/// Whether the figure named `name` is a count (summed) or a metric
/// (clocktick-weighted average).
///
/// Counts: the clocktick and instruction counters ([`CLOCKTICK_COUNTERS`],
/// [`INSTRUCTION_COUNTERS`]); times (`CPU Time:Spin Time`, any name that
/// contains `Time`); names that contain `Count`, `Samples`, `Clockticks`
/// or `Instructions`; hardware event names (no lower-case letter and no
/// space: uProf's `CPU_TIME`, `RETIRED_INST`); perf event names (lower
/// case, no space: `cache-misses`). Everything else (VTune's top-down
/// percentages, `Average CPU Frequency`, any `... Rate`) is a metric.
///
/// ```
/// use lotus_core::attribute::{metric_kind, MetricKind};
/// assert_eq!(metric_kind("Clockticks"), MetricKind::Count);
/// assert_eq!(metric_kind("CPU Time:Spin Time"), MetricKind::Count);
/// assert_eq!(metric_kind("RETIRED_INST"), MetricKind::Count);
/// assert_eq!(metric_kind("Retiring"), MetricKind::Average);
/// assert_eq!(metric_kind("Front-End Bound"), MetricKind::Average);
/// assert_eq!(metric_kind("Average CPU Frequency"), MetricKind::Average);
/// ```
pub fn metric_kind(name: &str) -> MetricKind {
    let n = name.trim();
    let counts = CLOCKTICK_COUNTERS.contains(&n)
        || INSTRUCTION_COUNTERS.contains(&n)
        || n.contains("Time")
        || n.contains("Count")
        || n.contains("Samples")
        || n.contains("Clockticks")
        || n.contains("Instructions")
        || (!n.contains(' ') && !n.bytes().any(|b| b.is_ascii_lowercase()))
        || (!n.contains(' ') && !n.bytes().any(|b| b.is_ascii_uppercase()));
    if counts && !n.contains("Rate") && !n.contains("Frequency") {
        MetricKind::Count
    } else {
        MetricKind::Average
    }
}

/// How shared functions were divided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// Equally among the ops that share them.
    Equal,
    /// In proportion to the ops' own times, read from `source`.
    ByOpTime {
        /// Where the times came from.
        source: String,
    },
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Split::Equal => f.write_str("equal"),
            Split::ByOpTime { source } => write!(f, "by op time from {source}"),
        }
    }
}

/// Attribution options.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Options {
    /// How rows are matched to mapping functions.
    pub match_mode: MatchMode,
    /// The ops' own times, to divide shared functions; equal split when
    /// `None`.
    pub op_times: Option<OpTimes>,
}

impl Options {
    /// Options with `match_mode` and `op_times`.
    pub fn new(match_mode: MatchMode, op_times: Option<OpTimes>) -> Self {
        Options {
            match_mode,
            op_times,
        }
    }
}

/// One op's part of a profile (or the [`UNEXPLAINED`] remainder).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OpShare {
    /// The op's name, or [`UNEXPLAINED`].
    pub op: String,
    /// Time (or samples), in the profile's unit: `exclusive + shared`.
    pub value: f64,
    /// From functions only this op uses.
    pub exclusive: f64,
    /// This op's part of functions it shares with other ops.
    pub shared: f64,
    /// `value` / the profile's total (0 for an empty profile).
    pub share: f64,
    /// Profile rows that gave this op something.
    pub rows: usize,
    /// Counts summed (each row's part of them): `Clockticks`,
    /// `Instructions Retired`, times.
    pub counters: BTreeMap<String, f64>,
    /// Clockticks / instructions, where both were counted.
    pub cpi: Option<f64>,
    /// Metrics (top-down percentages...) averaged, weighted by clockticks.
    pub metrics: BTreeMap<String, f64>,
}

/// A profile attributed to the ops of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribution {
    /// What values count.
    pub unit: Unit,
    /// The profile's total: the sum of every entry's value.
    pub total: f64,
    /// How shared functions were divided.
    pub split: Split,
    /// How rows were matched.
    pub match_mode: MatchMode,
    /// One entry per mapping op, in the mapping's order, then
    /// [`UNEXPLAINED`] last.
    pub ops: Vec<OpShare>,
    /// The counter used as clockticks, `None` when the profile has none.
    pub clockticks: Option<String>,
    /// The counter used as instructions, `None` when the profile has none.
    pub instructions: Option<String>,
    /// Ops whose functions match no row of the profile.
    pub unmatched_ops: Vec<String>,
    /// Profile rows.
    pub rows: usize,
    /// Profile rows that some op's mapping explains.
    pub matched_rows: usize,
    /// Things the reader of the result should know (no clockticks, ops
    /// without a time, shared functions that fell back to an equal split).
    pub notes: Vec<String>,
}

impl Attribution {
    /// The entry of `op` (or [`UNEXPLAINED`]).
    pub fn op(&self, op: &str) -> Option<&OpShare> {
        self.ops.iter().find(|o| o.op == op)
    }

    /// The unexplained remainder.
    pub fn unexplained(&self) -> &OpShare {
        // `attribute` always pushes it last.
        &self.ops[self.ops.len() - 1]
    }
}

/// Attribution cannot be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttributeError {
    /// The mapping has no ops, or no op has a function.
    #[error("the mapping is empty: {0}")]
    EmptyMapping(String),
    /// The profile has no rows.
    #[error("the profile has no rows")]
    EmptyProfile,
    /// An op-times file could not be read.
    #[error("{}: {message}", match line { Some(l) => format!("{file}:{l}"), None => file.clone() })]
    OpTimes {
        /// The file.
        file: String,
        /// 1-based line, where the problem has one.
        line: Option<u64>,
        /// What is wrong.
        message: String,
    },
    /// The op times name none of the mapping's ops.
    #[error("{file}: names none of the mapping's ops (it has {given}; the mapping has {ops})")]
    OpTimesMatchNoOp {
        /// Where the times came from.
        file: String,
        /// The ops it names.
        given: String,
        /// The mapping's ops.
        ops: String,
    },
}

/// What one op gathers while rows are folded onto it.
#[derive(Default)]
struct Acc {
    value: f64,
    exclusive: f64,
    shared: f64,
    rows: usize,
    counters: BTreeMap<String, f64>,
    /// Metric name -> (sum of weight x value, sum of weight).
    metrics: BTreeMap<String, (f64, f64)>,
}

impl Acc {
    fn add(&mut self, row: &Row, part: f64, exclusive: bool, clockticks: Option<&str>) {
        let v = row.value * part;
        self.value += v;
        if exclusive {
            self.exclusive += v;
        } else {
            self.shared += v;
        }
        self.rows += 1;
        let weight = clockticks
            .and_then(|c| row.counters.get(c))
            .map(|c| c * part);
        for (name, x) in &row.counters {
            if RECOMPUTED.contains(&name.as_str()) {
                continue;
            }
            match metric_kind(name) {
                MetricKind::Count => *self.counters.entry(name.clone()).or_insert(0.0) += x * part,
                MetricKind::Average => {
                    if let Some(w) = weight {
                        let e = self.metrics.entry(name.clone()).or_insert((0.0, 0.0));
                        e.0 += w * x;
                        e.1 += w;
                    }
                }
            }
        }
    }

    fn finish(
        self,
        op: String,
        total: f64,
        clockticks: Option<&str>,
        instructions: Option<&str>,
    ) -> OpShare {
        let cpi = match (
            clockticks.and_then(|c| self.counters.get(c)),
            instructions.and_then(|i| self.counters.get(i)),
        ) {
            (Some(&c), Some(&i)) if i > 0.0 => Some(c / i),
            _ => None,
        };
        OpShare {
            op,
            value: self.value,
            exclusive: self.exclusive,
            shared: self.shared,
            share: if total > 0.0 { self.value / total } else { 0.0 },
            rows: self.rows,
            counters: self.counters,
            cpi,
            metrics: self
                .metrics
                .into_iter()
                .filter(|(_, (_, w))| *w > 0.0)
                .map(|(k, (s, w))| (k, s / w))
                .collect(),
        }
    }
}

/// The first of `names` that some row of `report` counts.
fn find_counter(report: &Report, names: &[&str]) -> Option<String> {
    names
        .iter()
        .find(|n| report.rows.iter().any(|r| r.counters.contains_key(**n)))
        .map(|n| n.to_string())
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Folds `report` onto the ops of `mapping`. See the module docs for the
/// rules. Errors only for an empty mapping or profile, or op times that
/// name none of the mapping's ops; ops that match nothing are listed in
/// [`Attribution::unmatched_ops`] for the caller to report.
pub fn attribute(
    mapping: &Mapping,
    report: &Report,
    options: &Options,
) -> Result<Attribution, AttributeError> {
    if mapping.ops.is_empty() {
        return Err(AttributeError::EmptyMapping("it has no ops".into()));
    }
    if mapping.ops.iter().all(|o| o.functions.is_empty()) {
        return Err(AttributeError::EmptyMapping(format!(
            "none of its {} op(s) has a function",
            mapping.ops.len()
        )));
    }
    if report.rows.is_empty() {
        return Err(AttributeError::EmptyProfile);
    }
    let op_names: Vec<String> = mapping.ops.iter().map(|o| o.name.clone()).collect();
    let mut notes = Vec::new();

    // Weights for shared functions.
    let (split, weights): (Split, Option<Vec<f64>>) = match &options.op_times {
        None => (Split::Equal, None),
        Some(t) => {
            let w: Vec<f64> = op_names
                .iter()
                .map(|n| t.seconds.get(n).copied().unwrap_or(0.0))
                .collect();
            let known: Vec<String> = op_names
                .iter()
                .filter(|n| t.seconds.contains_key(*n))
                .cloned()
                .collect();
            if known.is_empty() {
                return Err(AttributeError::OpTimesMatchNoOp {
                    file: t.source.clone(),
                    given: list(&t.seconds.keys().cloned().collect::<Vec<_>>()),
                    ops: list(&op_names),
                });
            }
            let missing: Vec<String> = op_names
                .iter()
                .filter(|n| !t.seconds.contains_key(*n))
                .cloned()
                .collect();
            if !missing.is_empty() {
                notes.push(format!(
                    "{} has no time for {}: they get no part of a function they share with an op that has a time",
                    t.source,
                    list(&missing)
                ));
            }
            let extra: Vec<String> = t
                .seconds
                .keys()
                .filter(|k| !op_names.contains(k))
                .cloned()
                .collect();
            if !extra.is_empty() {
                notes.push(format!(
                    "{} names ops the mapping does not have (ignored): {}",
                    t.source,
                    list(&extra)
                ));
            }
            (
                Split::ByOpTime {
                    source: t.source.clone(),
                },
                Some(w),
            )
        }
    };

    // Function name -> (normalized module or None when unknown, op index).
    let mut index: HashMap<&str, Vec<(Option<&str>, usize)>> = HashMap::new();
    for (i, op) in mapping.ops.iter().enumerate() {
        for f in &op.functions {
            let module = (!is_unknown_module(&f.module)).then(|| normalize_module(&f.module));
            index
                .entry(f.function.as_str())
                .or_default()
                .push((module, i));
        }
    }

    let clockticks = find_counter(report, CLOCKTICK_COUNTERS);
    let instructions = find_counter(report, INSTRUCTION_COUNTERS);
    let total = report.total();
    let mut accs: Vec<Acc> = (0..=op_names.len()).map(|_| Acc::default()).collect();
    let unexplained = op_names.len();
    let mut matched_rows = 0;
    let mut equal_fallback: Vec<String> = Vec::new();
    let mut hit: Vec<usize> = Vec::new();
    let mut parts: Vec<f64> = Vec::new();
    for row in &report.rows {
        hit.clear();
        if let Some(cands) = index.get(row.function.as_str()) {
            let by_name = options.match_mode == MatchMode::Name || is_unknown_module(&row.module);
            let module = normalize_module(&row.module);
            hit.extend(
                cands
                    .iter()
                    .filter(|(m, _)| by_name || m.is_none_or(|m| m == module))
                    .map(|(_, i)| *i),
            );
            hit.sort_unstable();
            hit.dedup();
        }
        let ck = clockticks.as_deref();
        match hit.len() {
            0 => accs[unexplained].add(row, 1.0, true, ck),
            1 => {
                matched_rows += 1;
                accs[hit[0]].add(row, 1.0, true, ck);
            }
            n => {
                matched_rows += 1;
                parts.clear();
                let by_time = weights.as_ref().map(|w| hit.iter().map(|&i| w[i]));
                let sum: f64 = by_time.clone().map_or(0.0, |w| w.sum());
                match by_time {
                    Some(w) if sum > 0.0 => parts.extend(w.map(|x| x / sum)),
                    _ => {
                        if weights.is_some() {
                            equal_fallback.push(row.function.clone());
                        }
                        parts.extend(std::iter::repeat_n(1.0 / n as f64, n));
                    }
                }
                for (&i, &p) in hit.iter().zip(&parts) {
                    if p > 0.0 {
                        accs[i].add(row, p, false, ck);
                    }
                }
            }
        }
    }

    if !equal_fallback.is_empty() {
        equal_fallback.sort();
        equal_fallback.dedup();
        notes.push(format!(
            "no op sharing these functions has a time, so they are split equally: {}",
            list(&equal_fallback)
        ));
    }
    if clockticks.is_none() {
        notes.push(format!(
            "the profile has no clockticks counter ({}): no CPI or clocktick-weighted metrics",
            CLOCKTICK_COUNTERS.join(", ")
        ));
    } else if instructions.is_none() {
        notes.push(format!(
            "the profile has no instructions counter ({}): no CPI",
            INSTRUCTION_COUNTERS.join(", ")
        ));
    }

    let unmatched_ops: Vec<String> = op_names
        .iter()
        .zip(&accs)
        .filter(|(_, a)| a.rows == 0)
        .map(|(n, _)| n.clone())
        .collect();
    let names = op_names.into_iter().chain([UNEXPLAINED.to_string()]);
    let ops = accs
        .into_iter()
        .zip(names)
        .map(|(a, n)| a.finish(n, total, clockticks.as_deref(), instructions.as_deref()))
        .collect();
    Ok(Attribution {
        unit: report.unit,
        total,
        split,
        match_mode: options.match_mode,
        ops,
        clockticks,
        instructions,
        unmatched_ops,
        rows: report.rows.len(),
        matched_rows,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{OpAccumulator, Settings};
    use crate::MergeRule;

    fn mapping(ops: &[(&str, &[(&str, &str)])]) -> Mapping {
        let ops = ops
            .iter()
            .map(|(name, funcs)| {
                let mut acc = OpAccumulator::new(*name);
                acc.add_run(&Report {
                    unit: Unit::Seconds,
                    rows: funcs.iter().map(|(f, m)| Row::new(f, m, 1.0)).collect(),
                });
                acc.finish(MergeRule::Union)
            })
            .collect();
        Mapping::new("t", Unit::Seconds, Settings::default(), ops)
    }

    fn row(f: &str, m: &str, v: f64, counters: &[(&str, f64)]) -> Row {
        let mut r = Row::new(f, m, v);
        for (k, x) in counters {
            r.counters.insert(k.to_string(), *x);
        }
        r
    }

    fn profile(rows: Vec<Row>) -> Report {
        Report {
            unit: Unit::Seconds,
            rows,
        }
    }

    fn ab() -> Mapping {
        mapping(&[
            ("A", &[("fa", "liba.so.1"), ("memcpy", "libc.so.6")]),
            ("B", &[("fb", "libb.so"), ("memcpy", "libc.so.6")]),
        ])
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn exclusive_shared_and_unexplained_add_up() {
        let p = profile(vec![
            row("fa", "liba.so.1.2.3", 4.0, &[]),
            row("fb", "libb.so", 2.0, &[]),
            row("memcpy", "libc.so.6", 3.0, &[]),
            row("other", "x.so", 1.0, &[]),
        ]);
        let a = attribute(&ab(), &p, &Options::default()).expect("attributes");
        assert_eq!(a.split, Split::Equal);
        let oa = a.op("A").expect("A");
        assert_eq!((oa.value, oa.exclusive, oa.shared), (5.5, 4.0, 1.5));
        let ob = a.op("B").expect("B");
        assert_eq!((ob.value, ob.exclusive, ob.shared), (3.5, 2.0, 1.5));
        assert_eq!(a.unexplained().value, 1.0);
        assert_eq!(a.unexplained().op, UNEXPLAINED);
        assert_eq!(a.total, 10.0);
        assert!(close(a.ops.iter().map(|o| o.share).sum(), 1.0));
        assert_eq!((a.rows, a.matched_rows), (4, 3));
        assert!(a.unmatched_ops.is_empty());
    }

    #[test]
    fn op_times_divide_shared_functions() {
        let p = profile(vec![row(
            "memcpy",
            "libc.so.6",
            8.0,
            &[("Clockticks", 80.0)],
        )]);
        let times = OpTimes {
            source: "t.csv".into(),
            seconds: [("A".to_string(), 3.0), ("B".to_string(), 1.0)].into(),
        };
        let a = attribute(&ab(), &p, &Options::new(MatchMode::Auto, Some(times))).expect("ok");
        assert_eq!(a.split.to_string(), "by op time from t.csv");
        assert_eq!(a.op("A").expect("A").shared, 6.0);
        assert_eq!(a.op("B").expect("B").shared, 2.0);
        assert_eq!(a.op("A").expect("A").counters["Clockticks"], 60.0);
    }

    #[test]
    fn op_without_time_gets_nothing_and_all_missing_falls_back() {
        let m = mapping(&[
            ("A", &[("s", "m.so")]),
            ("B", &[("s", "m.so"), ("t", "m.so")]),
            ("C", &[("t", "m.so")]),
        ]);
        let p = profile(vec![row("s", "m.so", 4.0, &[]), row("t", "m.so", 2.0, &[])]);
        let times = OpTimes {
            source: "t.csv".into(),
            seconds: [("A".to_string(), 1.0), ("Z".to_string(), 1.0)].into(),
        };
        let a = attribute(&m, &p, &Options::new(MatchMode::Auto, Some(times))).expect("ok");
        assert_eq!(a.op("A").expect("A").value, 4.0);
        // `t` is shared by B and C, neither has a time: equal split.
        assert_eq!(a.op("B").expect("B").value, 1.0);
        assert_eq!(a.op("C").expect("C").value, 1.0);
        let notes = a.notes.join("\n");
        assert!(notes.contains("no time for B, C"), "{notes}");
        assert!(notes.contains("does not have (ignored): Z"), "{notes}");
        assert!(notes.contains("split equally: t"), "{notes}");
    }

    #[test]
    fn op_times_for_other_ops_is_an_error() {
        let times = OpTimes {
            source: "t.csv".into(),
            seconds: [("Q".to_string(), 1.0)].into(),
        };
        let p = profile(vec![row("fa", "liba.so", 1.0, &[])]);
        let e = attribute(&ab(), &p, &Options::new(MatchMode::Auto, Some(times))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv: names none of the mapping's ops (it has Q; the mapping has A, B)"
        );
    }

    #[test]
    fn module_rules() {
        // Known and different module: no match in auto, a match by name.
        let p = profile(vec![
            row("fa", "other.so", 1.0, &[]),
            row("fb", "[Unknown]", 2.0, &[]),
        ]);
        let a = attribute(&ab(), &p, &Options::default()).expect("ok");
        assert_eq!(a.op("A").expect("A").value, 0.0);
        assert_eq!(a.op("B").expect("B").value, 2.0);
        assert_eq!(a.unmatched_ops, vec!["A".to_string()]);
        let a = attribute(&ab(), &p, &Options::new(MatchMode::Name, None)).expect("ok");
        assert_eq!(a.op("A").expect("A").value, 1.0);
        assert_eq!(a.match_mode.to_string(), "name");
    }

    #[test]
    fn one_row_counts_once_per_op() {
        let m = mapping(&[("A", &[("f", "a.so"), ("f", "b.so")])]);
        let p = profile(vec![row("f", "[Unknown]", 2.0, &[])]);
        let a = attribute(&m, &p, &Options::default()).expect("ok");
        assert_eq!(a.op("A").expect("A").value, 2.0);
        assert_eq!(a.op("A").expect("A").exclusive, 2.0);
    }

    #[test]
    fn cpi_and_weighted_metrics() {
        let m = mapping(&[("A", &[("f", "a.so"), ("g", "a.so")])]);
        let p = profile(vec![
            row(
                "f",
                "a.so",
                1.0,
                &[
                    ("Clockticks", 300.0),
                    ("Instructions Retired", 100.0),
                    ("Retiring", 10.0),
                    ("CPI Rate", 3.0),
                ],
            ),
            row(
                "g",
                "a.so",
                1.0,
                &[
                    ("Clockticks", 100.0),
                    ("Instructions Retired", 300.0),
                    ("Retiring", 50.0),
                    ("CPI Rate", 0.333),
                ],
            ),
        ]);
        let a = attribute(&m, &p, &Options::default()).expect("ok");
        let op = a.op("A").expect("A");
        assert_eq!(op.cpi, Some(1.0));
        assert_eq!(op.metrics["Retiring"], 20.0);
        assert!(!op.metrics.contains_key("CPI Rate"));
        assert!(!op.counters.contains_key("CPI Rate"));
        assert_eq!(op.counters["Clockticks"], 400.0);
        assert_eq!(a.clockticks.as_deref(), Some("Clockticks"));
        assert!(a.notes.is_empty(), "{:?}", a.notes);
    }

    #[test]
    fn no_clockticks_is_said() {
        let p = profile(vec![row("fa", "liba.so", 1.0, &[("Retiring", 5.0)])]);
        let a = attribute(&ab(), &p, &Options::default()).expect("ok");
        assert!(a.op("A").expect("A").metrics.is_empty());
        assert!(a.notes[0].contains("no clockticks"), "{:?}", a.notes);
    }

    #[test]
    fn empty_inputs_are_errors() {
        let p = profile(vec![row("fa", "liba.so", 1.0, &[])]);
        let empty = mapping(&[]);
        assert!(matches!(
            attribute(&empty, &p, &Options::default()),
            Err(AttributeError::EmptyMapping(_))
        ));
        let hollow = mapping(&[("A", &[])]);
        let e = attribute(&hollow, &p, &Options::default()).unwrap_err();
        assert!(e.to_string().contains("none of its 1 op(s)"), "{e}");
        assert_eq!(
            attribute(&ab(), &profile(vec![]), &Options::default()),
            Err(AttributeError::EmptyProfile)
        );
    }

    #[test]
    fn metric_kinds() {
        for c in [
            "Instructions Retired",
            "CPU Time:Effective Time",
            "cycles",
            "cache-misses",
            "CPU_TIME",
        ] {
            assert_eq!(metric_kind(c), MetricKind::Count, "{c}");
        }
        for m in [
            "CPI Rate",
            "Bad Speculation",
            "L1 Bound",
            "Memory Bandwidth",
            "Local DRAM",
        ] {
            assert_eq!(metric_kind(m), MetricKind::Average, "{m}");
        }
    }
}
