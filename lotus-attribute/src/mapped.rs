//! Attribution through a mapping (the crate documentation says how).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;

pub(crate) use crate::Error;
use lotus_core::quote_cut;
use lotus_core::Mapping;
use lotus_core::{Report, Row, Unit};

mod by_function;
mod op_times;

pub use by_function::{FunctionAttribution, FunctionMapping, FunctionShare, OpCredit};

pub use op_times::{OpTimes, TRACE_OP_TIMES};

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
#[non_exhaustive]
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

pub use lotus_core::is_unknown_module;

/// A module name with its shared-library version suffix dropped: every
/// trailing `.<digits>` group after `.so` goes (`libjpeg.so.9.5.0` and
/// `libjpeg.so.9` both become `libjpeg.so`). Other names are unchanged;
/// `libc-2.31.so` and `libc.so.6` stay different modules.
///
/// ```
/// use lotus_attribute::normalize_module;
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
#[non_exhaustive]
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
/// use lotus_attribute::{metric_kind, MetricKind};
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
#[non_exhaustive]
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
#[non_exhaustive]
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
#[non_exhaustive]
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

/// What one op gathers while rows are folded onto it.
#[derive(Default)]
struct Acc {
    value: f64,
    exclusive: f64,
    shared: f64,
    rows: usize,
    counters: BTreeMap<String, f64>,
    /// Per candidate clockticks counter (index in [`CLOCKTICK_COUNTERS`]):
    /// metric name -> (sum of weight x value, sum of weight). Which
    /// counter is the weight is known only once every row was seen.
    metrics: Vec<BTreeMap<String, (f64, f64)>>,
}

impl Acc {
    /// Adds `part` of `row`. `kinds` says what each of the row's counters
    /// is (in the row's order; `None`: left out); `clockticks` holds the
    /// row's value of each candidate clockticks counter it has, by index.
    fn add(
        &mut self,
        row: &Row,
        part: f64,
        exclusive: bool,
        kinds: &[Option<MetricKind>],
        clockticks: &[(usize, f64)],
    ) {
        let v = row.value * part;
        self.value += v;
        if exclusive {
            self.exclusive += v;
        } else {
            self.shared += v;
        }
        self.rows += 1;
        for ((name, x), kind) in row.counters.iter().zip(kinds) {
            match kind {
                None => {}
                Some(MetricKind::Count) => add_to(&mut self.counters, name, x * part),
                Some(MetricKind::Average) => {
                    for &(i, c) in clockticks {
                        if self.metrics.len() <= i {
                            self.metrics.resize_with(i + 1, BTreeMap::new);
                        }
                        let w = c * part;
                        match self.metrics[i].get_mut(name) {
                            Some(e) => {
                                e.0 += w * x;
                                e.1 += w;
                            }
                            None => {
                                self.metrics[i].insert(name.clone(), (w * x, w));
                            }
                        }
                    }
                }
            }
        }
    }

    fn finish(
        mut self,
        op: String,
        total: f64,
        clockticks: Option<usize>,
        instructions: Option<&str>,
    ) -> OpShare {
        let clockticks_name = clockticks.map(|i| CLOCKTICK_COUNTERS[i]);
        let cpi = match (
            clockticks_name.and_then(|c| self.counters.get(c)),
            instructions.and_then(|i| self.counters.get(i)),
        ) {
            (Some(&c), Some(&i)) if i > 0.0 => Some(c / i),
            _ => None,
        };
        let metrics = match clockticks {
            Some(i) if i < self.metrics.len() => std::mem::take(&mut self.metrics[i]),
            _ => BTreeMap::new(),
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
            metrics: metrics
                .into_iter()
                .filter(|(_, (_, w))| *w > 0.0)
                .map(|(k, (s, w))| (k, s / w))
                .collect(),
        }
    }
}

/// `map[name] += x`, copying the name only the first time.
fn add_to(map: &mut BTreeMap<String, f64>, name: &str, x: f64) {
    match map.get_mut(name) {
        Some(v) => *v += x,
        None => {
            map.insert(name.to_string(), x);
        }
    }
}

/// What attribution does with a counter, worked out once per name.
struct CounterInfo {
    name: String,
    /// `None`: left out (recomputed from other counters).
    kind: Option<MetricKind>,
    /// Its index in [`CLOCKTICK_COUNTERS`], where it is one.
    clockticks: Option<usize>,
    /// Its index in [`INSTRUCTION_COUNTERS`], where it is one.
    instructions: Option<usize>,
}

impl CounterInfo {
    fn new(name: &str) -> Self {
        CounterInfo {
            name: name.to_string(),
            kind: (!RECOMPUTED.contains(&name)).then(|| metric_kind(name)),
            clockticks: CLOCKTICK_COUNTERS.iter().position(|c| *c == name),
            instructions: INSTRUCTION_COUNTERS.iter().position(|c| *c == name),
        }
    }
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
) -> Result<Attribution, Error> {
    let mut a = Attributor::new(mapping, report.unit, options)?;
    for row in &report.rows {
        a.add(row);
    }
    a.finish()
}

/// Attribution fed one row at a time ([`Attributor::add`]), for profiles
/// read as a stream: memory is that of the mapping and the ops' sums,
/// whatever the number of rows. [`attribute`] is this over a [`Report`];
/// both give the same result.
pub struct Attributor<'m> {
    match_mode: MatchMode,
    unit: Unit,
    op_names: Vec<String>,
    split: Split,
    weights: Option<Vec<f64>>,
    notes: Vec<String>,
    /// Function name -> (normalized module or None when unknown, op index).
    index: HashMap<&'m str, Vec<(Option<&'m str>, usize)>>,
    accs: Vec<Acc>,
    total: f64,
    rows: usize,
    matched_rows: usize,
    equal_fallback: BTreeSet<String>,
    /// Which [`CLOCKTICK_COUNTERS`] / [`INSTRUCTION_COUNTERS`] some row has.
    clockticks_seen: Vec<bool>,
    instructions_seen: Vec<bool>,
    hit: Vec<usize>,
    parts: Vec<f64>,
    clockticks: Vec<(usize, f64)>,
    /// Every counter name seen, and what it is.
    counter_info: Vec<CounterInfo>,
    /// The last row's counters as indices into `counter_info`: rows of a
    /// report have the same counters, so the guess is nearly always right.
    counter_order: Vec<usize>,
    /// What each counter of the row being added is.
    kinds: Vec<Option<MetricKind>>,
}

impl<'m> Attributor<'m> {
    /// Attribution of a profile whose values count `unit` onto the ops of
    /// `mapping`. Errors for an empty mapping, or op times that name none
    /// of its ops.
    pub fn new(mapping: &'m Mapping, unit: Unit, options: &Options) -> Result<Self, Error> {
        if mapping.ops.is_empty() {
            return Err(Error::EmptyMapping("it has no ops".into()));
        }
        if mapping.ops.iter().all(|o| o.functions.is_empty()) {
            return Err(Error::EmptyMapping(format!(
                "none of its {} op(s) has a function",
                mapping.ops.len()
            )));
        }
        let op_names: Vec<String> = mapping.ops.iter().map(|o| o.name.clone()).collect();
        let mut seen = std::collections::HashSet::with_capacity(op_names.len());
        if let Some(twice) = op_names.iter().find(|n| !seen.insert(n.as_str())) {
            return Err(Error::DuplicateOp(quote_cut(twice, 80)));
        }
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
                    return Err(Error::OpTimesMatchNoOp {
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
        let accs = (0..=op_names.len()).map(|_| Acc::default()).collect();
        Ok(Attributor {
            match_mode: options.match_mode,
            unit,
            op_names,
            split,
            weights,
            notes,
            index,
            accs,
            total: 0.0,
            rows: 0,
            matched_rows: 0,
            equal_fallback: BTreeSet::new(),
            clockticks_seen: vec![false; CLOCKTICK_COUNTERS.len()],
            instructions_seen: vec![false; INSTRUCTION_COUNTERS.len()],
            hit: Vec::new(),
            parts: Vec::new(),
            clockticks: Vec::new(),
            counter_info: Vec::new(),
            counter_order: Vec::new(),
            kinds: Vec::new(),
        })
    }

    /// The index in `counter_info` of `name`, the row's `j`-th counter.
    fn counter_index(&mut self, j: usize, name: &str) -> usize {
        if let Some(&k) = self.counter_order.get(j) {
            if self.counter_info[k].name == name {
                return k;
            }
        }
        let k = match self.counter_info.iter().position(|c| c.name == name) {
            Some(k) => k,
            None => {
                self.counter_info.push(CounterInfo::new(name));
                self.counter_info.len() - 1
            }
        };
        if self.counter_order.len() <= j {
            self.counter_order.resize(j + 1, k);
        }
        self.counter_order[j] = k;
        k
    }

    /// Folds one profile row onto the ops.
    pub fn add(&mut self, row: &Row) {
        self.rows += 1;
        self.total += row.value;
        self.clockticks.clear();
        self.kinds.clear();
        for (j, (name, &x)) in row.counters.iter().enumerate() {
            let k = self.counter_index(j, name);
            let info = &self.counter_info[k];
            self.kinds.push(info.kind);
            if let Some(i) = info.clockticks {
                self.clockticks_seen[i] = true;
                self.clockticks.push((i, x));
            }
            if let Some(i) = info.instructions {
                self.instructions_seen[i] = true;
            }
        }
        let hit = &mut self.hit;
        hit.clear();
        if let Some(cands) = self.index.get(row.function.as_str()) {
            let by_name = self.match_mode == MatchMode::Name || is_unknown_module(&row.module);
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
        let (ck, kinds) = (&self.clockticks, &self.kinds);
        let unexplained = self.op_names.len();
        match hit.len() {
            0 => self.accs[unexplained].add(row, 1.0, true, kinds, ck),
            1 => {
                self.matched_rows += 1;
                self.accs[hit[0]].add(row, 1.0, true, kinds, ck);
            }
            n => {
                self.matched_rows += 1;
                let parts = &mut self.parts;
                parts.clear();
                let by_time = self.weights.as_ref().map(|w| hit.iter().map(|&i| w[i]));
                let sum: f64 = by_time.clone().map_or(0.0, |w| w.sum());
                match by_time {
                    Some(w) if sum > 0.0 => parts.extend(w.map(|x| x / sum)),
                    _ => {
                        if self.weights.is_some() && !self.equal_fallback.contains(&row.function) {
                            self.equal_fallback.insert(row.function.clone());
                        }
                        parts.extend(std::iter::repeat_n(1.0 / n as f64, n));
                    }
                }
                for (&i, &p) in hit.iter().zip(parts.iter()) {
                    if p > 0.0 {
                        self.accs[i].add(row, p, false, kinds, ck);
                    }
                }
            }
        }
    }

    /// The attribution of every row added. Errors when no row was.
    pub fn finish(self) -> Result<Attribution, Error> {
        if self.rows == 0 {
            return Err(Error::EmptyProfile);
        }
        let mut notes = self.notes;
        if !self.equal_fallback.is_empty() {
            let names: Vec<String> = self.equal_fallback.into_iter().collect();
            notes.push(format!(
                "no op sharing these functions has a time, so they are split equally: {}",
                list(&names)
            ));
        }
        let clockticks = self.clockticks_seen.iter().position(|&s| s);
        let instructions = self
            .instructions_seen
            .iter()
            .position(|&s| s)
            .map(|i| INSTRUCTION_COUNTERS[i]);
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

        let unmatched_ops: Vec<String> = self
            .op_names
            .iter()
            .zip(&self.accs)
            .filter(|(_, a)| a.rows == 0)
            .map(|(n, _)| n.clone())
            .collect();
        let total = self.total;
        let names = self.op_names.into_iter().chain([UNEXPLAINED.to_string()]);
        let names: Vec<String> = names.collect();
        for (a, n) in self.accs.iter().zip(&names) {
            let finite = [a.value, a.exclusive, a.shared]
                .iter()
                .chain(a.counters.values())
                .all(|v| v.is_finite());
            if !finite {
                return Err(Error::ValuesOverflow(quote_cut(n, 80)));
            }
        }
        if !total.is_finite() {
            return Err(Error::ValuesOverflow(
                "(all ops: the profile's total)".into(),
            ));
        }
        let ops = self
            .accs
            .into_iter()
            .zip(names)
            .map(|(a, n)| a.finish(n, total, clockticks, instructions))
            .collect();
        Ok(Attribution {
            unit: self.unit,
            total,
            split: self.split,
            match_mode: self.match_mode,
            ops,
            clockticks: clockticks.map(|i| CLOCKTICK_COUNTERS[i].to_string()),
            instructions: instructions.map(str::to_string),
            unmatched_ops,
            rows: self.rows,
            matched_rows: self.matched_rows,
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_core::MergeRule;
    use lotus_core::{OpAccumulator, Settings};

    fn mapping(ops: &[(&str, &[(&str, &str)])]) -> Mapping {
        let ops = ops
            .iter()
            .map(|(name, funcs)| {
                let mut acc = OpAccumulator::new(*name);
                acc.add_run(&Report {
                    stacks: Vec::new(),
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
            stacks: Vec::new(),
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
            Err(Error::EmptyMapping(_))
        ));
        let hollow = mapping(&[("A", &[])]);
        let e = attribute(&hollow, &p, &Options::default()).unwrap_err();
        assert!(e.to_string().contains("none of its 1 op(s)"), "{e}");
        assert!(matches!(
            attribute(&ab(), &profile(vec![]), &Options::default()),
            Err(Error::EmptyProfile)
        ));
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

    #[test]
    fn duplicate_ops_and_sums_past_a_number_are_refused_with_the_op() {
        let mut m = ab();
        let first = m.ops[0].name.clone();
        m.ops[1].name = first.clone();
        match Attributor::new(&m, Unit::Seconds, &Options::default()) {
            Err(Error::DuplicateOp(name)) => assert_eq!(name, first),
            other => panic!("{:?}", other.map(|_| ())),
        }
        let m = ab();
        let mut a = Attributor::new(&m, Unit::Seconds, &Options::default()).expect("new");
        for _ in 0..2 {
            a.add(&row("fa", "liba.so.1", 1e308, &[]));
        }
        let e = a.finish().map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(&format!("op '{}'", m.ops[0].name)), "{e}");
    }
}
