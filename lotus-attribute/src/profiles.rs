//! Profiles read from disk for an attribution through a mapping: their
//! format told by content (`lotus.profile/1` JSON, or a vendor report that
//! a linked backend reads), their rows folded onto the ops (and the
//! mapping's functions) as they are read, never all kept.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use lotus_core::{Mapping, Profile, Row, Unit};

use crate::error::with_causes;
use crate::{Attribution, Attributor, Error, FunctionAttribution, FunctionMapping, Options};

/// This module's results.
type Result<T> = std::result::Result<T, Error>;

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
        self.modules_known |= !crate::is_unknown_module(&row.module);
        self.attributor.add(row);
        if let Some(f) = &mut self.functions {
            f.add(row);
        }
    }
}

/// A profile read, its attribution to the ops, and to the functions where
/// asked for.
pub type LoadedAttribution = (LoadedProfile, Attribution, Option<FunctionAttribution>);

/// Reads one profile, telling its format by content (`lotus.profile/1`
/// JSON, or a vendor report that a linked backend's
/// [`ReportFormat`](lotus_core::ReportFormat) reads), and attributes it to
/// the ops of `mapping` (`mapping_name` in messages) and to its
/// `functions`, where given, as its rows are read. `warn` gets what the
/// user should know of it (a partial profile).
pub fn load_profile(
    path: &Path,
    mapping: &Mapping,
    options: &Options,
    mapping_name: &str,
    functions: Option<&FunctionMapping>,
    warn: &mut dyn FnMut(String),
) -> Result<LoadedAttribution> {
    let name = path.display().to_string();
    if path.is_dir() {
        return Err(Error::Profile(format!("--profile {name}: is a folder; give a profile file (a VTune or uProf CSV report, or lotus.profile/1 JSON)")));
    }
    let file = lotus_sys::input::open_regular(path)
        .map_err(|e| Error::Profile(with_causes(format!("cannot open profile {name}"), &e)))?;
    let mut input = BufReader::with_capacity(SNIFF_BYTES, file);
    let head = input
        .fill_buf()
        .map_err(|e| Error::Profile(with_causes(format!("cannot read profile {name}"), &e)))?;
    let head_text = String::from_utf8_lossy(head);
    let first = head_text.trim_start_matches('\u{feff}').trim_start();
    if first.is_empty() {
        return Err(Error::Profile(format!("{name}: empty file, not a profile")));
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| name.clone());
    let attribution_error = |e: Error| {
        match e {
        Error::EmptyMapping(_) => Error::Profile(format!(
            "{mapping_name}: {e}; make one with `lotus map` (it must list each op's native functions)"
        )),
        Error::EmptyProfile => Error::Profile(format!("{name}: {e}")),
        other => other,
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
    let done = |format, fold: Fold, unit, sample_interval_s| -> Result<LoadedAttribution> {
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
            warn(format!(
                "{name} is a partial profile ({}: {}): it covers only part of its run",
                partial.reason, partial.message
            ));
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
        return Err(Error::Profile(format!("{name}: not a lotus.profile/1 JSON profile, and no backend that reads vendor reports is linked")));
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
        .map_err(|e| Error::Profile(with_causes(format!("cannot open profile {name}"), &e)))?;
    let mut input = BufReader::new(f);
    format
        .stated_interval_s(&mut input, name)
        .map_err(|e| Error::Profile(with_causes(format!("cannot read profile {name}"), &e)))
}

/// Gives each profile a short unique name: its file stem, or its path
/// where two stems are the same.
pub fn name_profiles(profiles: &mut [LoadedProfile]) {
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
