//! `lotus map --stacks MODE [--folded FILE] [--flamegraph FILE.svg]`: each
//! op's call stacks (its samples' callers in the op alone, summed over its
//! runs), as collapsed lines and as a flame graph, the ops as root frames.

use std::path::Path;

use anyhow::Result;
use lotus_core::Mapping;

use super::MapArgs;
use crate::render::flame;
use crate::sampling::StackMode;
use crate::usage::usage;

/// Refuses what cannot give stacks ([`crate::sampling::check_stack_args`]), and `--stacks`
/// with a mapping read rather than run.
pub(super) fn check_args(args: &MapArgs, backend: &dyn lotus_core::Profiler) -> Result<()> {
    crate::sampling::check_stack_args(
        args.stacks,
        args.folded.is_some() || args.flamegraph.is_some(),
        backend,
    )?;
    if args.stacks != StackMode::None && (args.from_reports.is_some() || args.from_trace.is_some())
    {
        return Err(usage(
            "--stacks maps live ops under perf; a sampled trace has its own stacks (lotus attribute DIR --format folded)",
        ));
    }
    Ok(())
}

/// Writes the ops' stacks where asked, each op its stacks' root frame.
pub(super) fn write(mapping: &Mapping, folded: Option<&Path>, svg: Option<&Path>) -> Result<()> {
    let lines: Vec<String> = mapping
        .ops
        .iter()
        .flat_map(|op| flame::folded_lines(Some(&op.name), &op.stacks))
        .collect();
    flame::write_stacks(&lines, folded, svg, "lotus map: CPU samples per op")
}
