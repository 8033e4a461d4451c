//! `lotus map --from-reports DIR`: a mapping from vendor reports already on
//! disk, laid out as `DIR/<Op>/<run>.csv` (what the original tool's scripts
//! produce).

use std::io::BufReader;
use std::path::{Path, PathBuf};

use lotus_core::{Mapping, MergeRule, Profiler};
use lotus_core::{OpAccumulator, OpFailure, Settings};

use crate::error::{full_message, Context, MapError, Result};
use crate::live::failure;

/// Report file extensions read from an op folder.
const REPORT_EXTENSIONS: &[&str] = &["csv", "tsv"];

/// One op folder and its reports, in run order.
#[derive(Debug)]
#[non_exhaustive]
pub struct OpReports {
    /// The op's name (the folder's name).
    pub name: String,
    /// The op's folder.
    pub dir: PathBuf,
    /// Report files, in run order (`1.csv`, `2.csv`, ..., `10.csv`).
    pub reports: Vec<PathBuf>,
}

/// Sort key that puts `2.csv` before `10.csv`.
fn run_order(path: &Path) -> (u64, String) {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    (stem.parse::<u64>().unwrap_or(u64::MAX), stem)
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

/// Lists `DIR/<Op>/<run>.csv`, checking the layout.
pub fn scan(dir: &Path) -> Result<Vec<OpReports>> {
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("--from-reports {}: cannot open the folder", dir.display()))?;
    if !meta.is_dir() {
        return Err(MapError::Folder(format!(
            "--from-reports {}: not a folder; expected a folder with one sub-folder per op holding one report per run (DIR/<Op>/<run>.csv)",
            dir.display()
        )));
    }
    let mut op_dirs = Vec::new();
    let mut loose_reports = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        if is_hidden(&path) {
            continue;
        }
        if path.is_dir() {
            op_dirs.push(path);
        } else if has_report_extension(&path) {
            loose_reports += 1;
        }
    }
    if op_dirs.is_empty() {
        let hint = if loose_reports > 0 {
            format!(
                " ({loose_reports} report file(s) lie directly in it: is this one op's folder? pass its parent)"
            )
        } else {
            String::new()
        };
        return Err(MapError::Folder(format!(
            "--from-reports {}: no op folders found{hint}; expected DIR/<Op>/<run>.csv, one sub-folder per op",
            dir.display()
        )));
    }
    op_dirs.sort();
    let mut ops = Vec::with_capacity(op_dirs.len());
    for op_dir in op_dirs {
        let name = op_dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        // Every report-named entry is kept, whatever it is: one that is
        // not a regular file (a fifo, a device, a folder) is refused by
        // name when read, not skipped in silence.
        let mut reports: Vec<PathBuf> = std::fs::read_dir(&op_dir)
            .with_context(|| format!("cannot list {}", op_dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| !is_hidden(p) && has_report_extension(p))
            .collect();
        reports.sort_by_key(|p| run_order(p));
        ops.push(OpReports {
            name,
            dir: op_dir,
            reports,
        });
    }
    Ok(ops)
}

fn has_report_extension(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| REPORT_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// What reading an op folder gave.
#[derive(Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// The mapping of every op that read cleanly.
    pub mapping: Mapping,
    /// Each op that failed, with why (left out of `mapping`).
    pub failures: Vec<OpFailure>,
}

impl Outcome {
    /// The mapping with the failed ops listed in it (`failures`), as
    /// `lotus map` writes it.
    pub fn into_mapping(self) -> Mapping {
        let mut mapping = self.mapping;
        mapping.failures = self.failures;
        mapping
    }
}

/// Reads every op's reports with `backend`'s reader and merges them.
pub fn build(backend: &dyn Profiler, dir: &Path, rule: MergeRule) -> Result<Outcome> {
    let ops = scan(dir)?;
    let mut finished = Vec::new();
    let mut failures = Vec::new();
    let mut max_runs = 0;
    for op in &ops {
        match read_op(backend, op) {
            Ok(acc) => {
                let merged = acc.finish(rule);
                // Each report's sum is finite; the runs' together must be
                // too, or the op's total is written as `null`.
                if !merged.samples.is_finite() {
                    failures.push(failure(
                        op.name.clone(),
                        format!(
                            "{}: the runs' values add up to more than a number can hold (are the reports garbled?)",
                            op.dir.display()
                        ),
                    ));
                    continue;
                }
                max_runs = max_runs.max(acc.runs());
                finished.push(merged);
            }
            Err(e) => failures.push(failure(
                op.name.clone(),
                format!("{}: {}", op.dir.display(), full_message(&e)),
            )),
        }
    }
    let settings = Settings {
        runs: Some(max_runs),
        warmup: None,
        rule,
    };
    Ok(Outcome {
        mapping: Mapping::new(backend.name(), backend.unit(), settings, finished),
        failures,
    })
}

fn read_op(backend: &dyn Profiler, op: &OpReports) -> Result<OpAccumulator> {
    if op.reports.is_empty() {
        return Err(MapError::Folder(
            "no reports in this op folder (expected <run>.csv files, one per run)".into(),
        ));
    }
    let mut acc = OpAccumulator::new(op.name.clone());
    for path in &op.reports {
        let file = lotus_sys::input::open_regular(path)
            .with_context(|| format!("cannot read the report {}", path.display()))?;
        let report = backend.read_report(&mut BufReader::new(file), &path.display().to_string())?;
        acc.add_run(&report);
    }
    Ok(acc)
}
