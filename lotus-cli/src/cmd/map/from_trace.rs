//! `lotus map --from-trace DIR`: the in-pipeline mapping of a sampled
//! trace folder ([`lotus_attribute`]), written like any
//! other mapping.

use std::path::Path;

use anyhow::{Context, Result};
use lotus_attribute::mapping_from_trace_with_notes;
use lotus_core::Mapping;
use lotus_sort::Budget;

use crate::usage::usage;

/// The options `--from-trace` cannot take: they run or read something else.
pub fn check_alone(
    backend: Option<&str>,
    ops: usize,
    from_reports: bool,
    dry_run: bool,
) -> Result<()> {
    if ops > 0 || from_reports || dry_run {
        return Err(usage(
            "--from-trace DIR reads a sampled trace folder: give no op files, --from-reports or --dry-run with it",
        ));
    }
    // A trace's samples come from the backend that streams them.
    let streams = |b: &str| lotus_core::backend(b).is_ok_and(|p| p.streaming().is_some());
    if let Some(b) = backend.filter(|b| !streams(b)) {
        let by = lotus_core::streaming_backend()
            .map_or_else(|| "streaming".to_string(), |p| p.name().to_string());
        return Err(usage(format!(
            "--from-trace DIR: the samples of a trace are taken by the {by} backend, not {b}; leave --backend out"
        )));
    }
    Ok(())
}

/// Builds the mapping of `dir`'s samples (prefix `prefix`).
pub fn build(dir: &Path, prefix: &str) -> Result<Mapping> {
    let budget = Budget::from_env()?;
    let (mapping, notes) = mapping_from_trace_with_notes(dir, prefix, budget)
        .with_context(|| format!("cannot map the samples in {}", dir.display()))?;
    // On stderr: stdout carries only the mapping.
    for note in notes {
        eprintln!("lotus: note: {note}");
    }
    Ok(mapping)
}
