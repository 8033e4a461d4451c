//! The in-pipeline mapping (`lotus map --from-trace DIR`): each op's native
//! functions as measured inside the real pipeline, from a sampled trace
//! folder, written as a `lotus.mapping/1` [`Mapping`].
//!
//! The per-op function tallies are the in-pipeline attribution's
//! ([`crate::attribute::in_pipeline::attribute_folder`], asked for every
//! function of each row): one sweep, one rule, so the mapping and
//! `lotus attribute DIR` can never disagree. Only op rows become ops; the
//! other rows (outside any op, independent threads, untraced processes)
//! are not ops and are left out, their samples counted in `environment`.

use std::path::Path;

use crate::attribute::in_pipeline::{attribute_folder, InPipelineError, RowKind};
use crate::row::Unit;
use crate::spill::Budget;
use crate::trace::samples::SampleFiles;

use super::{FunctionEntry, Mapping, OpMapping, Settings};

/// The `environment["method"]` of a mapping measured inside the pipeline.
pub const METHOD_IN_PIPELINE: &str = "in-pipeline";

/// Builds the in-pipeline mapping of the sampled trace folder `dir`
/// (samples of `prefix`). Every function an op's samples fell in is
/// listed, with its samples and its share of the op's samples (the shares
/// of an op with samples sum to 1). Ops that ran but got no sample are
/// listed with no functions.
pub fn mapping_from_trace(
    dir: &Path,
    prefix: &str,
    budget: Budget,
) -> Result<Mapping, InPipelineError> {
    mapping_from_trace_with_notes(dir, prefix, budget).map(|(m, _)| m)
}

/// [`mapping_from_trace`], with what is worth telling the user about the
/// folder (the attribution's notes: logs skipped, symbols lines skipped, a
/// partial run).
pub fn mapping_from_trace_with_notes(
    dir: &Path,
    prefix: &str,
    budget: Budget,
) -> Result<(Mapping, Vec<String>), InPipelineError> {
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
    let ops: Vec<OpMapping> = a
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::Op)
        .map(|r| {
            op_samples += r.samples;
            OpMapping {
                name: r.name.clone(),
                runs: 1,
                samples: r.samples as f64,
                functions: r
                    .top_functions
                    .iter()
                    .map(|f| FunctionEntry {
                        function: f.function.clone(),
                        module: module_file_name(&f.module),
                        samples: f.samples as f64,
                        share: f.share,
                        runs_seen: 1,
                        module_path: f.module.contains('/').then(|| f.module.clone()),
                        baseline: None,
                    })
                    .collect(),
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
    env.insert("trace_dir".into(), dir.display().to_string());
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
    use super::module_file_name;

    #[test]
    fn modules_are_named_by_file_name() {
        assert_eq!(module_file_name("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(module_file_name("[kernel]"), "[kernel]");
    }
}
