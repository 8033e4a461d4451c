//! The in-pipeline mapping (`lotus map --from-trace DIR`): each op's native
//! functions as measured inside the real pipeline, from a sampled trace
//! folder, written as a `lotus.mapping/1` [`Mapping`].
//!
//! The per-op function tallies are the in-pipeline attribution's
//! ([`crate::in_pipeline::attribute_folder`], asked for every
//! function of each row): one sweep, one rule, so the mapping and
//! `lotus attribute DIR` can never disagree. Only op rows become ops; the
//! other rows (outside any op, threads of unknown cause, untraced processes)
//! are not ops and are left out, their samples counted in `environment`.

use lotus_sys::input::Dir;
use std::path::Path;

use crate::in_pipeline::{attribute_folder, Error, RowKind};
use lotus_core::Unit;
use lotus_samples::SampleFiles;
use lotus_sort::Budget;

use lotus_core::{FunctionEntry, Mapping, OpMapping, Settings};

/// The `environment["method"]` of a mapping measured inside the pipeline.
pub const METHOD_IN_PIPELINE: &str = "in-pipeline";

/// Builds the in-pipeline mapping of the sampled trace folder `dir`
/// (samples of `prefix`). Every function an op's samples fell in is
/// listed, with its samples and its share of the op's samples (the shares
/// of an op with samples sum to 1). Ops that ran but got no sample are
/// listed with no functions.
pub fn mapping_from_trace<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
) -> Result<Mapping, Error> {
    let dir: Dir<'_> = dir.into();
    mapping_from_trace_with_notes(dir, prefix, budget).map(|(m, _)| m)
}

/// [`mapping_from_trace`], with what is worth telling the user about the
/// folder (the attribution's notes: logs skipped, symbols lines skipped, a
/// partial run).
pub fn mapping_from_trace_with_notes<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
) -> Result<(Mapping, Vec<String>), Error> {
    let dir: Dir<'_> = dir.into();
    let a = attribute_folder(dir, prefix, budget, usize::MAX)?;
    let backend = SampleFiles::of(dir, prefix)
        .read_sampling()
        .ok()
        .and_then(|meta| {
            meta.into_iter()
                .find(|(k, _)| k == "backend")
                .map(|(_, v)| v)
        })
        .unwrap_or_else(|| "perf".to_string());
    let mut op_samples = 0u64;
    // One op per name: an op that ran at several places in the op tree
    // (`Normalize` at the top and inside `RandomApply`) is one callable,
    // its rows' own (exclusive) samples and functions summed.
    let mut by_name: Vec<(String, u64, Vec<FunctionEntry>)> = Vec::new();
    let mut index: std::collections::HashMap<(usize, String, String), usize> =
        std::collections::HashMap::new();
    for r in a.rows.iter().filter(|r| r.kind == RowKind::Op) {
        op_samples += r.samples;
        let at = match by_name.iter().position(|(n, _, _)| *n == r.name) {
            Some(at) => at,
            None => {
                by_name.push((r.name.clone(), 0, Vec::new()));
                by_name.len() - 1
            }
        };
        let (_, samples, functions) = &mut by_name[at];
        *samples += r.samples;
        for f in &r.top_functions {
            let module = module_file_name(&f.module);
            match index.get(&(at, f.function.clone(), module.clone())) {
                Some(&i) => functions[i].samples += f.samples as f64,
                None => {
                    index.insert((at, f.function.clone(), module.clone()), functions.len());
                    functions.push(FunctionEntry {
                        function: f.function.clone(),
                        module,
                        samples: f.samples as f64,
                        share: 0.0,
                        runs_seen: 1,
                        module_path: f.module.contains('/').then(|| f.module.clone()),
                        baseline: None,
                    })
                }
            }
        }
    }
    let ops: Vec<OpMapping> = by_name
        .into_iter()
        .map(|(name, samples, mut functions)| {
            for e in &mut functions {
                e.share = if samples > 0 {
                    e.samples / samples as f64
                } else {
                    0.0
                };
            }
            functions.sort_by(|x, y| y.samples.total_cmp(&x.samples));
            OpMapping {
                stacks: Vec::new(),
                name,
                runs: 1,
                samples: samples as f64,
                functions,
                window: None,
            }
        })
        .collect();
    let settings = Settings {
        runs: Some(1),
        ..Settings::default()
    };
    let mut m = Mapping::new(&backend, Unit::Samples, settings, ops);
    let env = &mut m.environment;
    env.insert("method".into(), METHOD_IN_PIPELINE.into());
    env.insert("trace_dir".into(), dir.path().display().to_string());
    env.insert("frequency_hz".into(), a.frequency_hz.to_string());
    env.insert("interval_ns".into(), a.interval_ns.to_string());
    env.insert("total_samples".into(), a.total_samples.to_string());
    env.insert("op_samples".into(), op_samples.to_string());
    env.insert("lost_samples".into(), a.lost_samples.to_string());
    if a.partial {
        env.insert("partial".into(), "true".into());
    }
    Ok((m, a.notes))
}

/// A module's file name (`/usr/lib/libc.so.6` -> `libc.so.6`), as live
/// mappings name modules; `[kernel]` and the like stay as they are.
fn module_file_name(module: &str) -> String {
    Path::new(module)
        .file_name()
        .map_or_else(|| module.to_string(), |n| n.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_pipeline::tests::{every_100_ns, nested_folder};

    #[test]
    fn an_op_at_several_places_in_the_tree_is_one_op() {
        // C runs inside A/B (3 main and 3 pool samples) and at the top (2).
        let dir = nested_folder([None; 4], &every_100_ns(0, 6000));
        let m = mapping_from_trace(dir.path(), "lotus", Budget::new(64)).expect("mapping");
        let names: Vec<&str> = m.ops.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, vec!["A", "B", "C"]);
        let c = &m.ops[2];
        assert_eq!(c.samples, 8.0);
        let f: Vec<(&str, f64, f64)> = c
            .functions
            .iter()
            .map(|e| (e.function.as_str(), e.samples, e.share))
            .collect();
        assert_eq!(
            f,
            vec![("main_fn", 5.0, 5.0 / 8.0), ("pool_fn", 3.0, 3.0 / 8.0)]
        );
    }

    #[test]
    fn modules_are_named_by_file_name() {
        assert_eq!(module_file_name("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(module_file_name("[kernel]"), "[kernel]");
    }
}
