//! Attribution per native function (the study's per-C-function hardware
//! table, its Fig. 5c): for each function of a mapping, the profile's time
//! and counters of the rows that match it, its CPI and clocktick-weighted
//! metrics (top-down), and the ops it is credited to with each op's part.
//!
//! The arithmetic is [`Attributor`]'s, run over a mapping with one entry
//! per function instead of per op ([`FunctionMapping`]): rows are matched
//! by the same rules ([`MatchMode`]), counts summed, metrics averaged with
//! clockticks as weights, CPI recomputed from the sums. A function is a
//! function name and its module as [`normalize_module`] gives it (unknown
//! modules match any); a row that matches several such functions (a
//! profile without modules, a name the mapping lists under two modules)
//! is divided equally among them, so the rows add up to the profile's
//! total with the unexplained remainder. An op's part of a function is the
//! split [`Attributor`] uses for shared functions: by the ops' own times
//! ([`Options::op_times`]) where they have any, else equal.

use std::collections::BTreeMap;

use super::{
    is_unknown_module, normalize_module, Attribution, Attributor, Error, OpShare, Options, Split,
};
use lotus_core::Unit;
use lotus_core::{FunctionEntry, Mapping, OpMapping, Settings};

/// One op's part of a function.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OpCredit {
    /// The op.
    pub op: String,
    /// Its part of the function's time (0 to 1; the parts sum to 1).
    pub part: f64,
}

/// One native function of the mapping, attributed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FunctionShare {
    /// The function's name.
    pub function: String,
    /// Its module, as the mapping names it first.
    pub module: String,
    /// The ops that list it, in the mapping's order, with their parts.
    pub ops: Vec<OpCredit>,
    /// The profile's figures of the rows that match it (`op` is the
    /// function's name): value, share, rows, counters, CPI, metrics.
    pub figures: OpShare,
}

/// A profile attributed per function of a mapping.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FunctionAttribution {
    /// What values count.
    pub unit: Unit,
    /// The profile's total.
    pub total: f64,
    /// How a function's time is divided among its ops.
    pub split: Split,
    /// Every function of the mapping, most time first (then by name).
    pub functions: Vec<FunctionShare>,
    /// The rows no function of the mapping matches.
    pub unexplained: OpShare,
    /// The counter used as clockticks, `None` when the profile has none.
    pub clockticks: Option<String>,
    /// The counter used as instructions.
    pub instructions: Option<String>,
}

/// A mapping's functions as entries of their own, for [`Attributor`].
#[derive(Debug, Clone)]
pub struct FunctionMapping {
    /// One entry per function (its name, module), in first-seen order.
    per_function: Mapping,
    /// Per function: the ops that list it and their parts.
    credits: Vec<Vec<OpCredit>>,
    split: Split,
    options: Options,
}

impl FunctionMapping {
    /// The functions of `mapping`; `options` as for the per-op attribution
    /// (its op times give the ops' parts).
    pub fn of(mapping: &Mapping, options: &Options) -> FunctionMapping {
        let mut keys: Vec<(String, Option<String>)> = Vec::new();
        let mut entries: Vec<FunctionEntry> = Vec::new();
        let mut ops_of: Vec<Vec<String>> = Vec::new();
        let mut at: BTreeMap<(String, Option<String>), usize> = BTreeMap::new();
        for op in &mapping.ops {
            for f in &op.functions {
                let module = (!is_unknown_module(&f.module))
                    .then(|| normalize_module(&f.module).to_string());
                let key = (f.function.clone(), module);
                let i = *at.entry(key.clone()).or_insert_with(|| {
                    keys.push(key);
                    entries.push(f.clone());
                    ops_of.push(Vec::new());
                    entries.len() - 1
                });
                if !ops_of[i].contains(&op.name) {
                    ops_of[i].push(op.name.clone());
                }
            }
        }
        let weight = |op: &str| {
            options
                .op_times
                .as_ref()
                .and_then(|t| t.seconds.get(op).copied())
        };
        let credits = ops_of
            .iter()
            .map(|ops| {
                let sum: f64 = ops.iter().filter_map(|o| weight(o)).sum();
                ops.iter()
                    .map(|o| OpCredit {
                        op: o.clone(),
                        part: if sum > 0.0 {
                            weight(o).unwrap_or(0.0) / sum
                        } else {
                            1.0 / ops.len() as f64
                        },
                    })
                    .collect()
            })
            .collect();
        // One op per function, named by its index: names must be unique,
        // and a function may be listed under the same name twice.
        let ops = entries
            .into_iter()
            .enumerate()
            .map(|(i, f)| OpMapping {
                stacks: Vec::new(),
                name: format!("#{i}"),
                runs: 1,
                samples: f.samples,
                functions: vec![f],
                window: None,
            })
            .collect();
        let split = match &options.op_times {
            Some(t) => Split::ByOpTime {
                source: t.source.clone(),
            },
            None => Split::Equal,
        };
        FunctionMapping {
            per_function: Mapping::new(&mapping.backend, mapping.unit, Settings::default(), ops),
            credits,
            split,
            // The functions' own entries take no op times.
            options: Options::new(options.match_mode, None),
        }
    }

    /// How many functions.
    pub fn len(&self) -> usize {
        self.credits.len()
    }

    /// Whether the mapping has no function.
    pub fn is_empty(&self) -> bool {
        self.credits.is_empty()
    }

    /// An attributor of a profile whose values count `unit` onto the
    /// functions; give what it finishes with to [`FunctionMapping::finish`].
    pub fn attributor(&self, unit: Unit) -> Result<Attributor<'_>, Error> {
        Attributor::new(&self.per_function, unit, &self.options)
    }

    /// The per-function result of an attribution made with
    /// [`FunctionMapping::attributor`].
    pub fn finish(&self, a: Attribution) -> FunctionAttribution {
        let mut ops = a.ops;
        let unexplained = ops.pop().unwrap_or_default();
        let mut functions: Vec<FunctionShare> = ops
            .into_iter()
            .zip(&self.per_function.ops)
            .zip(&self.credits)
            .map(|((mut figures, entry), credits)| {
                let f = &entry.functions[0];
                figures.op = f.function.clone();
                FunctionShare {
                    function: f.function.clone(),
                    module: f.module.clone(),
                    ops: credits.clone(),
                    figures,
                }
            })
            .collect();
        functions.sort_by(|a, b| {
            b.figures
                .value
                .total_cmp(&a.figures.value)
                .then_with(|| a.function.cmp(&b.function))
                .then_with(|| a.module.cmp(&b.module))
        });
        FunctionAttribution {
            unit: a.unit,
            total: a.total,
            split: self.split.clone(),
            functions,
            unexplained,
            clockticks: a.clockticks,
            instructions: a.instructions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapped::OpTimes;
    use lotus_core::MergeRule;
    use lotus_core::OpAccumulator;
    use lotus_core::{Report, Row};

    fn mapping() -> Mapping {
        let op = |name: &str, funcs: &[(&str, &str)]| {
            let mut acc = OpAccumulator::new(name);
            let rows = funcs.iter().map(|(f, m)| Row::new(f, m, 1.0)).collect();
            acc.add_run(&Report {
                stacks: Vec::new(),
                unit: Unit::Seconds,
                rows,
            });
            acc.finish(MergeRule::Union)
        };
        Mapping::new(
            "t",
            Unit::Seconds,
            Settings::default(),
            vec![
                op("A", &[("fa", "liba.so.1"), ("memcpy", "libc.so.6")]),
                op("B", &[("fb", "libb.so"), ("memcpy", "libc.so.6")]),
            ],
        )
    }

    fn row(f: &str, m: &str, v: f64, ck: f64, inst: f64, ret: f64) -> Row {
        let mut r = Row::new(f, m, v);
        r.counters.insert("Clockticks".into(), ck);
        r.counters.insert("Instructions Retired".into(), inst);
        r.counters.insert("Retiring".into(), ret);
        r
    }

    #[test]
    fn each_function_gets_its_rows_and_its_ops() {
        let m = mapping();
        let fm = FunctionMapping::of(&m, &Options::default());
        assert_eq!(fm.len(), 3);
        let rows = [
            row("fa", "liba.so.1.2", 4.0, 40.0, 80.0, 50.0),
            row("memcpy", "libc.so.6", 2.0, 30.0, 10.0, 20.0),
            row("memcpy", "libc.so.6", 1.0, 10.0, 10.0, 60.0),
            row("other", "x.so", 1.0, 5.0, 5.0, 1.0),
        ];
        let mut at = fm.attributor(Unit::Seconds).expect("attributor");
        rows.iter().for_each(|r| at.add(r));
        let a = fm.finish(at.finish().expect("rows"));
        assert_eq!(a.total, 8.0);
        let names: Vec<&str> = a.functions.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["fa", "memcpy", "fb"]);
        let memcpy = &a.functions[1];
        assert_eq!((memcpy.figures.value, memcpy.figures.rows), (3.0, 2));
        assert_eq!(memcpy.figures.counters["Clockticks"], 40.0);
        assert_eq!(memcpy.figures.cpi, Some(2.0));
        // Retiring weighted by clockticks: (30*20 + 10*60) / 40.
        assert_eq!(memcpy.figures.metrics["Retiring"], 30.0);
        let ops: Vec<(&str, f64)> = memcpy.ops.iter().map(|c| (c.op.as_str(), c.part)).collect();
        assert_eq!(ops, [("A", 0.5), ("B", 0.5)]);
        assert_eq!(a.functions[2].figures.rows, 0);
        assert_eq!(a.unexplained.value, 1.0);

        // Op times divide a function among its ops.
        let times =
            OpTimes::read_csv(&mut "op,seconds\nA,3\nB,1\n".as_bytes(), "t.csv").expect("times");
        let fm = FunctionMapping::of(&m, &Options::new(Default::default(), Some(times)));
        let mut at = fm.attributor(Unit::Seconds).expect("attributor");
        rows.iter().for_each(|r| at.add(r));
        let a = fm.finish(at.finish().expect("rows"));
        let memcpy = a
            .functions
            .iter()
            .find(|f| f.function == "memcpy")
            .expect("memcpy");
        let ops: Vec<f64> = memcpy.ops.iter().map(|c| c.part).collect();
        assert_eq!(ops, [0.75, 0.25]);
        assert_eq!(a.split.to_string(), "by op time from t.csv");
    }
}
