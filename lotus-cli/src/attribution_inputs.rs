//! The inputs of a mapping-based attribution, shared by `lotus attribute`
//! and `lotus report`: the mapping, the profiles (their format told by
//! content, folded onto the ops as they are read) and the ops' own times.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use lotus_attribute::{
    Attribution, Attributor, Error as AttrError, FunctionAttribution, FunctionMapping, OpTimes,
    Options,
};
use lotus_core::Profile;
use lotus_core::{Error as CoreError, Mapping};
use lotus_core::{Row, Unit};

/// The file a trace folder gives op times in.
pub const TRACE_OP_TIMES: &str = "op_times.csv";

/// A profile read from disk (its rows were folded onto the ops as they
/// were read, not kept).
#[derive(Debug)]
pub struct LoadedProfile {
    /// Short name: the file stem, or the path where stems repeat.
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// What it was read as: `vtune-csv`, `uprof-csv`, `lotus.profile/1`.
    pub format: &'static str,
    /// What its values count.
    pub unit: Unit,
    /// Whether some row names its module (not `[Unknown]`).
    pub modules_known: bool,
    /// Seconds per sample, for sample-count profiles where known.
    pub sample_interval_s: Option<f64>,
}

impl LoadedProfile {
    /// Seconds per unit of value: 1 for CPU-time profiles, the sample
    /// interval for sample counts where known.
    pub fn seconds_per_unit(&self) -> Option<f64> {
        match self.unit {
            Unit::Seconds => Some(1.0),
            Unit::Samples => self.sample_interval_s,
        }
    }
}

/// Reads the mapping, saying what the file is when it is not one.
pub(crate) fn load_mapping(path: &Path) -> Result<Mapping> {
    let name = path.display().to_string();
    if path.is_dir() {
        bail!("--mapping {name}: is a folder; give a mapping file (lotus map --out FILE)");
    }
    let mut file = lotus_sys::input::open_regular(path)
        .with_context(|| format!("cannot read mapping {name}"))?;
    // The first bytes tell a CSV or text report given by mistake.
    let mut head = [0u8; 64];
    let n =
        read_head(&mut file, &mut head).with_context(|| format!("cannot read mapping {name}"))?;
    let head_text = String::from_utf8_lossy(&head[..n]);
    let first = head_text.trim_start_matches('\u{feff}').trim_start();
    let looks_like_json = first.is_empty() || first.starts_with('{');
    // Streamed: the file is never held as text nor as a JSON tree.
    Mapping::from_reader(file, &name).map_err(|e| {
        let hint = match &e {
            CoreError::Json { .. } | CoreError::InvalidMapping { .. } | CoreError::NotAMapping { .. }
                if !looks_like_json =>
            {
                " (this looks like a CSV or text report, not a mapping: pass profiles with --profile, mappings come from `lotus map`)"
            }
            CoreError::UnknownMappingSchema { found, .. } if found.contains("lotus.profile/") => {
                " (this is a profile: pass it with --profile)"
            }
            _ => "",
        };
        anyhow::anyhow!("--mapping {e}{hint}")
    })
}

/// Reads up to `buf.len()` bytes from the start of `file`, then rewinds it.
fn read_head(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::{Read, Seek};
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    file.rewind()?;
    Ok(n)
}

/// Reads `--op-times`: a CSV, or a trace folder (its logs, read through
/// `lotus_trace`: each op's total time; else its `op_times.csv`).
pub(crate) fn load_op_times(path: &Path) -> Result<OpTimes> {
    let file = if path.is_dir() {
        if let Some((times, warnings)) = OpTimes::read_trace_dir(path)? {
            for bad in &warnings.shown {
                crate::usage::say!("lotus: warning: {bad} (line skipped)");
            }
            if warnings.not_shown() > 0 {
                crate::usage::say!(
                    "lotus: warning: {} more bad line(s) skipped, not shown",
                    warnings.not_shown()
                );
            }
            return Ok(times);
        }
        let f = path.join(TRACE_OP_TIMES);
        if f.symlink_metadata().is_err() {
            bail!(
                "--op-times {}: a folder is read as a lotus trace (its <prefix>_main_pid_<pid> / <prefix>_worker_pid_<pid> logs, or an {TRACE_OP_TIMES}), and this one has none; give a CSV of op,seconds (one line per op) instead",
                path.display()
            );
        }
        // A file of the trace folder: opened inside it, as its logs are
        // (no link out of the folder, regular files only, bounded).
        let name = f.display().to_string();
        let opened = lotus_sys::input::Folder::open(path)
            .and_then(|dir| dir.open_file(Path::new(TRACE_OP_TIMES)))
            .with_context(|| format!("cannot open --op-times {name}"))?;
        return Ok(OpTimes::read_csv(&mut BufReader::new(opened), &name)?);
    } else {
        path.to_path_buf()
    };
    let name = file.display().to_string();
    let f = lotus_sys::input::open_regular(&file)
        .with_context(|| format!("cannot open --op-times {name}"))?;
    Ok(OpTimes::read_csv(&mut BufReader::new(f), &name)?)
}

/// How many bytes are looked at to tell a profile's format.
const SNIFF_BYTES: usize = 64 * 1024;

/// Folds rows onto the ops as they are read, noting whether any names its
/// module.
struct Fold<'m> {
    attributor: Attributor<'m>,
    /// Per function of the mapping too (`--by function`).
    functions: Option<Attributor<'m>>,
    modules_known: bool,
}

impl Fold<'_> {
    fn add(&mut self, row: &Row) {
        self.modules_known |= !lotus_attribute::is_unknown_module(&row.module);
        self.attributor.add(row);
        if let Some(f) = &mut self.functions {
            f.add(row);
        }
    }
}

/// A profile read, its attribution to the ops, and to the functions where
/// asked for.
type Loaded = (LoadedProfile, Attribution, Option<FunctionAttribution>);

/// Reads one profile, telling its format by content, and attributes it to
/// the ops of `mapping` (and to its `functions`, where given) as its rows
/// are read.
pub fn load_profile(
    path: &Path,
    mapping: &Mapping,
    options: &Options,
    mapping_name: &str,
    functions: Option<&FunctionMapping>,
) -> Result<Loaded> {
    let name = path.display().to_string();
    if path.is_dir() {
        bail!("--profile {name}: is a folder; give a profile file (a VTune or uProf CSV report, or lotus.profile/1 JSON)");
    }
    let file = lotus_sys::input::open_regular(path)
        .with_context(|| format!("cannot open profile {name}"))?;
    let mut input = BufReader::with_capacity(SNIFF_BYTES, file);
    let head = input
        .fill_buf()
        .with_context(|| format!("cannot read profile {name}"))?;
    let head_text = String::from_utf8_lossy(head);
    let first = head_text.trim_start_matches('\u{feff}').trim_start();
    if first.is_empty() {
        bail!("{name}: empty file, not a profile");
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| name.clone());
    let attribution_error = |e: AttrError| {
        match e {
        AttrError::EmptyMapping(_) => anyhow::anyhow!(
            "{mapping_name}: {e}; make one with `lotus map` (it must list each op's native functions)"
        ),
        AttrError::EmptyProfile => anyhow::anyhow!("{name}: {e}"),
        other => anyhow::anyhow!(other),
    }
    };
    let fold = |unit| -> Result<Fold> {
        Ok(Fold {
            attributor: Attributor::new(mapping, unit, options).map_err(attribution_error)?,
            functions: functions
                .map(|f| f.attributor(unit))
                .transpose()
                .map_err(attribution_error)?,
            modules_known: false,
        })
    };
    let done = |format, fold: Fold, unit, sample_interval_s| -> Result<Loaded> {
        let per_function = match (functions, fold.functions) {
            (Some(fm), Some(f)) => Some(fm.finish(f.finish().map_err(attribution_error)?)),
            _ => None,
        };
        let a = fold.attributor.finish().map_err(attribution_error)?;
        let p = LoadedProfile {
            name: stem.clone(),
            path: path.to_path_buf(),
            format,
            unit,
            modules_known: fold.modules_known,
            sample_interval_s,
        };
        Ok((p, a, per_function))
    };
    if first.starts_with('{') || first.starts_with('[') {
        let p = Profile::read_json(&mut input, &name)?;
        if let Some(partial) = &p.partial {
            crate::usage::say!(
                "lotus: warning: {name} is a partial profile ({}: {}): it covers only part of its run",
                partial.reason, partial.message
            );
        }
        let mut f = fold(p.unit)?;
        p.rows.iter().for_each(|r| f.add(r));
        return done("lotus.profile/1", f, p.unit, p.sample_interval_s);
    }
    // A vendor report: the first registered format that recognizes it
    // (uProf's), else VTune's, which nothing in the file names.
    let backends = lotus_core::backends();
    let formats: Vec<&dyn lotus_core::ReportFormat> =
        backends.iter().filter_map(|b| b.report_format()).collect();
    let Some(format) = formats
        .iter()
        .find(|f| f.recognizes(&head_text))
        .or_else(|| formats.iter().find(|f| f.format_name() == "vtune-csv"))
    else {
        bail!("{name}: not a lotus.profile/1 JSON profile, and no backend that reads vendor reports is linked");
    };
    let unit = format.unit();
    let mut f = fold(unit)?;
    // Rows are folded one at a time, never all kept where the format
    // reads row by row (VTune reports can be large: a row per function
    // and thread).
    for row in format.rows(&mut input, &name)? {
        f.add(&row?);
    }
    drop(input);
    let dt = stated_interval(*format, path, &name)?;
    done(format.format_name(), f, unit, dt)
}

/// The sampling interval the report at `path` states in its own words,
/// where its `format` has it (uProf's MONITORED EVENTS section), in
/// seconds.
fn stated_interval(
    format: &dyn lotus_core::ReportFormat,
    path: &Path,
    name: &str,
) -> Result<Option<f64>> {
    let f = lotus_sys::input::open_regular(path)
        .with_context(|| format!("cannot open profile {name}"))?;
    let mut input = BufReader::new(f);
    format
        .stated_interval_s(&mut input, name)
        .with_context(|| format!("cannot read profile {name}"))
}

/// Gives each profile a short unique name: its file stem, or its path
/// where two stems are the same.
pub(crate) fn name_profiles(profiles: &mut [LoadedProfile]) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for p in profiles.iter() {
        *seen.entry(p.name.clone()).or_default() += 1;
    }
    for p in profiles.iter_mut() {
        if seen[&p.name] > 1 {
            p.name = p.path.display().to_string();
        }
    }
}
