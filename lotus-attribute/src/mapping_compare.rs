//! Two mappings of the same ops side by side (`lotus show MAPPING
//! --against OTHER`): how much of each op's work in OTHER (typically the
//! in-pipeline mapping, `lotus map --from-trace`) falls in the functions
//! MAPPING (typically an isolated `lotus map`) lists for that op. This
//! turns "the mapping is approximate" into a number per op.
//!
//! Per op in both: the **coverage** (OTHER's samples of the op in
//! functions MAPPING lists for it, over all of OTHER's samples of the op),
//! the functions OTHER ran most that MAPPING misses, and the functions
//! MAPPING lists that OTHER's op never ran. Functions match by name and
//! module ([`normalize_module`]: library version suffixes ignored), by
//! name alone where either side has no module (the original tool's schema).

use std::collections::HashSet;

use serde::Serialize;

use crate::mapped::normalize_module;

use lotus_core::{FunctionEntry, Mapping, OpMapping};

/// A function of one side, with its part of the op on that side.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ComparedFunction {
    /// The function.
    pub function: String,
    /// Its module.
    pub module: String,
    /// Samples (or seconds) on its side.
    pub samples: f64,
    /// Its share of the op's samples on its side (0..1).
    pub share: f64,
}

/// One op of both mappings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OpComparison {
    /// The op.
    pub op: String,
    /// Functions MAPPING lists for it.
    pub listed: usize,
    /// OTHER's samples of the op (all its functions).
    pub other_samples: f64,
    /// Share of OTHER's samples of the op in functions MAPPING lists
    /// (0..1); `None` when OTHER has no samples of it.
    pub coverage: Option<f64>,
    /// OTHER's functions of the op that MAPPING does not list, most
    /// samples first (the top `top`).
    pub missed: Vec<ComparedFunction>,
    /// How many such functions there are in all.
    pub missed_count: usize,
    /// MAPPING's functions of the op that OTHER's op never ran, most
    /// share first (the top `top`).
    pub not_run: Vec<ComparedFunction>,
    /// How many such functions there are in all.
    pub not_run_count: usize,
}

/// The comparison of two mappings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct MappingComparison {
    /// Ops in both, in MAPPING's op order.
    pub ops: Vec<OpComparison>,
    /// Ops only MAPPING has.
    pub only_in_mapping: Vec<String>,
    /// Ops only OTHER has.
    pub only_in_other: Vec<String>,
}

/// What two function entries are matched by.
fn key(f: &FunctionEntry) -> (&str, &str) {
    (f.function.as_str(), normalize_module(&f.module))
}

fn compared(f: &FunctionEntry, op_samples: f64) -> ComparedFunction {
    ComparedFunction {
        function: f.function.clone(),
        module: f.module.clone(),
        samples: f.samples,
        share: if op_samples > 0.0 {
            f.samples / op_samples
        } else {
            f.share
        },
    }
}

/// Compares one op: `mine` (MAPPING's) against `theirs` (OTHER's).
fn compare_op(mine: &OpMapping, theirs: &OpMapping, top: usize) -> OpComparison {
    let with_module: HashSet<(&str, &str)> = mine
        .functions
        .iter()
        .filter(|f| !f.module.is_empty())
        .map(key)
        .collect();
    let by_name: HashSet<&str> = mine.functions.iter().map(|f| f.function.as_str()).collect();
    let names_only: HashSet<&str> = mine
        .functions
        .iter()
        .filter(|f| f.module.is_empty())
        .map(|f| f.function.as_str())
        .collect();
    let listed = |f: &FunctionEntry| {
        names_only.contains(f.function.as_str())
            || (f.module.is_empty() && by_name.contains(f.function.as_str()))
            || with_module.contains(&key(f))
    };
    // OTHER's own function samples, not its `samples` field: a mapping
    // under a merge rule keeps fewer functions than the op ran.
    let total: f64 = theirs.functions.iter().map(|f| f.samples).sum();
    let mut covered = 0.0;
    let mut missed = Vec::new();
    for f in &theirs.functions {
        if listed(f) {
            covered += f.samples;
        } else {
            missed.push(compared(f, total));
        }
    }
    missed.sort_by(|a, b| {
        b.samples
            .total_cmp(&a.samples)
            .then_with(|| a.function.cmp(&b.function))
    });
    // What OTHER ran, to find what MAPPING lists in vain.
    let ran_with_module: HashSet<(&str, &str)> = theirs.functions.iter().map(key).collect();
    let ran_by_name: HashSet<&str> = theirs
        .functions
        .iter()
        .map(|f| f.function.as_str())
        .collect();
    let mine_total: f64 = mine.functions.iter().map(|f| f.samples).sum();
    let mut not_run: Vec<ComparedFunction> = mine
        .functions
        .iter()
        .filter(|f| {
            if f.module.is_empty() {
                !ran_by_name.contains(f.function.as_str())
            } else {
                !ran_with_module.contains(&key(f))
                    && !theirs
                        .functions
                        .iter()
                        .any(|t| t.module.is_empty() && t.function == f.function)
            }
        })
        .map(|f| compared(f, mine_total))
        .collect();
    not_run.sort_by(|a, b| {
        b.share
            .total_cmp(&a.share)
            .then_with(|| a.function.cmp(&b.function))
    });
    let (missed_count, not_run_count) = (missed.len(), not_run.len());
    missed.truncate(top);
    not_run.truncate(top);
    OpComparison {
        op: mine.name.clone(),
        listed: mine.functions.len(),
        other_samples: total,
        coverage: (total > 0.0).then(|| covered / total),
        missed,
        missed_count,
        not_run,
        not_run_count,
    }
}

/// Compares `mapping` against `other`, op by op (by name), listing the
/// `top` missed and not-run functions of each op.
pub fn compare_mappings(mapping: &Mapping, other: &Mapping, top: usize) -> MappingComparison {
    let mut ops = Vec::new();
    let mut only_in_mapping = Vec::new();
    for mine in &mapping.ops {
        match other.op(&mine.name) {
            Some(theirs) => ops.push(compare_op(mine, theirs, top)),
            None => only_in_mapping.push(mine.name.clone()),
        }
    }
    let only_in_other = other
        .ops
        .iter()
        .filter(|o| mapping.op(&o.name).is_none())
        .map(|o| o.name.clone())
        .collect();
    MappingComparison {
        ops,
        only_in_mapping,
        only_in_other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_core::Settings;
    use lotus_core::Unit;

    fn f(function: &str, module: &str, samples: f64) -> FunctionEntry {
        FunctionEntry {
            function: function.into(),
            module: module.into(),
            samples,
            share: 0.0,
            runs_seen: 1,
            module_path: None,
            baseline: None,
        }
    }

    fn mapping(ops: Vec<(&str, Vec<FunctionEntry>)>) -> Mapping {
        let ops = ops
            .into_iter()
            .map(|(name, functions)| OpMapping {
                stacks: Vec::new(),
                name: name.into(),
                runs: 1,
                samples: functions.iter().map(|f| f.samples).sum(),
                functions,
                window: None,
            })
            .collect();
        Mapping::new("perf", Unit::Samples, Settings::default(), ops)
    }

    #[test]
    fn coverage_missed_and_not_run() {
        let isolated = mapping(vec![
            (
                "A",
                vec![f("ka", "libk.so.1", 90.0), f("never", "libk.so", 10.0)],
            ),
            ("OnlyMine", vec![f("x", "m", 1.0)]),
        ]);
        let pipeline = mapping(vec![
            (
                "A",
                vec![
                    f("ka", "libk.so", 60.0),
                    f("ka", "other.so", 5.0),
                    f("memcpy", "libc.so.6", 35.0),
                ],
            ),
            ("OnlyTheirs", vec![f("y", "m", 1.0)]),
        ]);
        let c = compare_mappings(&isolated, &pipeline, 1);
        assert_eq!(c.only_in_mapping, vec!["OnlyMine"]);
        assert_eq!(c.only_in_other, vec!["OnlyTheirs"]);
        let a = &c.ops[0];
        // ka in libk.so matches across version suffixes; ka in another
        // module does not.
        assert_eq!(a.coverage, Some(0.6));
        assert_eq!(a.missed_count, 2);
        assert_eq!(a.missed[0].function, "memcpy");
        assert!((a.missed[0].share - 0.35).abs() < 1e-12);
        assert_eq!(a.not_run_count, 1);
        assert_eq!(a.not_run[0].function, "never");
    }

    #[test]
    fn names_alone_where_a_side_has_no_module_and_no_samples_is_no_coverage() {
        let isolated = mapping(vec![("A", vec![f("ka", "", 0.0)])]);
        let pipeline = mapping(vec![("A", vec![f("ka", "libk.so", 3.0), f("z", "q", 1.0)])]);
        let c = compare_mappings(&isolated, &pipeline, 5);
        assert_eq!(c.ops[0].coverage, Some(0.75));
        assert_eq!(c.ops[0].not_run_count, 0);
        let empty = mapping(vec![("A", vec![])]);
        assert_eq!(compare_mappings(&isolated, &empty, 5).ops[0].coverage, None);
    }
}
