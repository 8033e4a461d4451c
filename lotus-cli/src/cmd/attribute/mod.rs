//! `lotus attribute`: whole-pipeline profiles folded back onto the Python
//! ops through a mapping ([`lotus_attribute`] does the arithmetic).
//!
//! ```text
//! lotus attribute --mapping M --profile P [--profile P2 ...] [--op-times T]
//!                 [--match auto|name] [--format table|csv|json|md] [--out FILE]
//!                 [--plot FILE.svg] [--by op|function]
//! lotus attribute DIR [--prefix lotus] [--top 5] [--format ...] [--out FILE]
//!                 [--plot FILE.svg]
//! ```
//!
//! `--by function` gives one row per native function of the mapping
//! instead of per op (the study's per-C-function hardware table):
//! [`by_function`] says what it holds.
//!
//! A profile is recognized by its content: JSON is `lotus.profile/1` (what
//! `lotus profile` writes); a text file with a `HOTTEST FUNCTIONS` section
//! (or an `AMD uProf` banner) is a uProf report; anything else is read as
//! a VTune function-grouped report (hotspots or microarchitecture
//! exploration, comma or TAB), whose columns are found by name.
//!
//! ## JSON output (`lotus.attribution/1`)
//!
//! ```json
//! {"schema": "lotus.attribution/1", "mapping": "M", "match": "auto",
//!  "split": "equal",
//!  "profiles": [
//!    {"name": "b1024_gpu4_dataloader8", "file": "...", "format": "vtune-csv",
//!     "unit": "seconds", "sample_interval_s": null,
//!     "total_cpu_time_s": 12345.6, "split": "equal",
//!     "rows": 327, "matched_rows": 81,
//!     "clockticks": "Clockticks", "instructions": "Instructions Retired",
//!     "unmatched_ops": [], "notes": [],
//!     "ops": [
//!       {"op": "Loader", "cpu_time_s": 4321.0, "share": 0.35,
//!        "exclusive_s": 4000.0, "shared_s": 321.0, "rows": 20,
//!        "counters": {"Clockticks": 1.4e13, "Instructions Retired": 2.9e13},
//!        "cpi": 0.48, "topdown": {"Retiring": 55.1, "Front-End Bound": 6.0}},
//!       {"op": "(unexplained)", ...}]}]}
//! ```
//!
//! `*_s` fields are seconds of CPU time. A profile that counts samples
//! (`"unit": "samples"`) also has `total_samples`, and per op `samples`,
//! `exclusive_samples` and `shared_samples`; its `*_s` fields are the
//! samples times `sample_interval_s` where that is known (uProf reports
//! state it; a `lotus.profile/1` file may) and `null` where it is not.
//! `share` is of the profile's total and is always there; the entries
//! (the `(unexplained)` one included) add up to the total. `topdown`
//! holds every per-function metric (top-down percentages as percent
//! values, `Average CPU Frequency` in GHz) averaged with clockticks as
//! weights; `cpi` is summed clockticks over summed instructions; both are
//! absent (`{}`, `null`) when the profile has no clockticks counter, which
//! `notes` then says.

/// The top-down metrics shown in tables where the profile has them: the
/// terminal table of `--by function` and the HTML report (every metric is
/// in the JSON, CSV and Markdown).
pub(crate) const TOP_DOWN_METRICS: &[&str] = &[
    "Retiring",
    "Front-End Bound",
    "Bad Speculation",
    "Back-End Bound",
    "Memory Bound",
    "Core Bound",
];

mod by_function;
pub mod in_pipeline;
mod plot;
mod render;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use lotus_attribute::{
    AttributeError, Attribution, Attributor, FunctionAttribution, FunctionMapping, MatchMode,
    OpTimes, Options,
};
use lotus_core::Profile;
use lotus_core::{Mapping, MappingError};
use lotus_core::{Row, Unit};

use lotus_map::write::write_atomic;
use render::View;

/// The schema tag of `lotus attribute --format json`.
pub const SCHEMA: &str = "lotus.attribution/1";

/// The file a trace folder gives op times in.
pub const TRACE_OP_TIMES: &str = "op_times.csv";

/// Output formats of an attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttributeFormat {
    /// Readable tables (the terminal default).
    Table,
    /// One row per (profile, op), every figure a column.
    Csv,
    /// `lotus.attribution/1` JSON.
    Json,
    /// Markdown tables.
    Md,
    /// Collapsed stacks, one line per distinct stack under its row (a
    /// sampled trace folder only): what inferno-flamegraph, flamegraph.pl
    /// and speedscope read.
    Folded,
}

impl AttributeFormat {
    /// The format a file name implies: `.json`, `.csv`, `.md`; a table
    /// otherwise.
    pub fn from_path(path: &Path) -> AttributeFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => AttributeFormat::Json,
            Some("csv") => AttributeFormat::Csv,
            Some("md") => AttributeFormat::Md,
            Some("folded") => AttributeFormat::Folded,
            _ => AttributeFormat::Table,
        }
    }
}

/// How profile rows are matched to the mapping's functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MatchArg {
    /// Function and module (library version suffixes ignored); the
    /// function name alone where the profile or mapping has no module.
    Auto,
    /// The function name alone.
    Name,
}

/// `lotus attribute`'s arguments.
#[derive(Debug, clap::Args)]
pub struct AttributeArgs {
    /// A sampled trace folder (`lotus trace run --sample --out DIR`): its
    /// samples credited to the innermost op span that was running, no
    /// mapping; ops inside ops shown as a tree, each with its own
    /// (exclusive) and inclusive CPU and a 95% ± where it rests on samples.
    #[arg(value_name = "DIR", conflicts_with_all = ["mapping", "profiles", "op_times"])]
    pub dir: Option<PathBuf>,
    /// The samples' prefix in DIR (as `trace run --prefix`).
    #[arg(long, default_value = "lotus", requires = "dir")]
    pub prefix: String,
    /// Top functions listed per row (with DIR).
    #[arg(long, default_value_t = lotus_attribute::TOP_FUNCTIONS, requires = "dir")]
    pub top: usize,
    /// The mapping: lotus.mapping/1, or the original tool's mapping_funcs.json.
    #[arg(long, short, value_name = "FILE", required_unless_present = "dir")]
    pub mapping: Option<PathBuf>,
    /// A whole-pipeline profile: VTune CSV (hotspots or uarch), uProf CSV,
    /// or lotus.profile/1 JSON. Repeat for one column per profile.
    #[arg(
        long = "profile",
        short,
        value_name = "FILE",
        required_unless_present = "dir"
    )]
    pub profiles: Vec<PathBuf>,
    /// The ops' own times, to divide shared functions: a CSV of op,seconds
    /// or a lotus trace folder. Equal split without it.
    #[arg(long, value_name = "CSV|DIR")]
    pub op_times: Option<PathBuf>,
    /// Matching of profile functions to mapping functions.
    #[arg(long = "match", value_enum, default_value = "auto")]
    pub match_mode: MatchArg,
    /// Output format; tables on the terminal when neither this nor --out
    /// is given, else from --out's extension.
    #[arg(long, value_enum)]
    pub format: Option<AttributeFormat>,
    /// Write the result here instead of the terminal (`-`: standard output).
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Draw a stacked bar chart of op time per profile (SVG); with DIR, a
    /// bar of CPU time per row (ops, then the other rows) named with its
    /// top function.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// With DIR: also draw its call stacks as an interactive flame graph
    /// (inferno's SVG), each row's samples under the row (its op path).
    #[arg(long, value_name = "FILE.svg", requires = "dir")]
    pub flamegraph: Option<PathBuf>,
    /// With --flamegraph: only the op rows of this name (anywhere in their
    /// path: `Loader`) or path (`ImageFolder/Loader`).
    #[arg(long, value_name = "NAME", requires = "flamegraph")]
    pub op: Option<String>,
    /// Tables show full op names (by default the metrics table shortens them).
    #[arg(long)]
    pub wide: bool,
    /// One row per op, or per native function of the mapping (its time,
    /// counters, CPI, top-down metrics and the ops it is credited to).
    #[arg(long, value_enum, default_value = "op")]
    pub by: ByArg,
}

/// `--by`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ByArg {
    /// Per Python op.
    Op,
    /// Per native function of the mapping.
    Function,
}

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

/// Runs `lotus attribute`.
pub fn run(mut args: AttributeArgs) -> Result<ExitCode> {
    // `--out -` is standard output, as no --out is.
    args.out = args.out.filter(|p| !crate::usage::is_stdout(p));
    if let Some(dir) = &args.dir {
        return crate::cmd::attribute::in_pipeline::run(
            dir,
            &args.prefix,
            args.top,
            args.format,
            args.out.as_deref(),
            args.wide,
            args.plot.as_deref(),
            args.flamegraph.as_deref().map(|p| (p, args.op.as_deref())),
        );
    }
    let Some(mapping_path) = args.mapping.as_deref() else {
        return Err(crate::usage::usage(
            "give a sampled trace folder (lotus attribute DIR) or --mapping and --profile",
        ));
    };
    if args.format == Some(AttributeFormat::Folded)
        || (args.format.is_none()
            && args.out.as_deref().map(AttributeFormat::from_path) == Some(AttributeFormat::Folded))
    {
        return Err(crate::usage::usage(
            "--format folded needs call stacks: give a sampled trace folder (lotus attribute DIR), traced with `lotus trace run --sample`",
        ));
    }
    let mapping = load_mapping(mapping_path)?;
    let op_times = args.op_times.as_deref().map(load_op_times).transpose()?;
    let match_mode = match args.match_mode {
        MatchArg::Auto => MatchMode::Auto,
        MatchArg::Name => MatchMode::Name,
    };
    let options = Options::new(match_mode, op_times);
    if args.by == ByArg::Function && args.plot.is_some() {
        bail!("--plot draws op time per profile; leave it out with --by function (or use `lotus report`)");
    }
    let functions = (args.by == ByArg::Function).then(|| FunctionMapping::of(&mapping, &options));

    let mapping_name = mapping_path.display().to_string();
    // Each profile is folded onto the ops as it is read: memory does not
    // grow with its rows.
    let mut profiles = Vec::with_capacity(args.profiles.len());
    let mut results = Vec::with_capacity(args.profiles.len());
    let mut per_function = Vec::new();
    for path in &args.profiles {
        let (p, a, f) = load_profile(path, &mapping, &options, &mapping_name, functions.as_ref())?;
        profiles.push(p);
        results.push(a);
        per_function.extend(f);
    }
    name_profiles(&mut profiles);

    let format = args.format.unwrap_or_else(|| match &args.out {
        Some(p) => AttributeFormat::from_path(p),
        None => AttributeFormat::Table,
    });
    let notes_to_stderr =
        args.out.is_some() || matches!(format, AttributeFormat::Json | AttributeFormat::Csv);
    for (p, a) in profiles.iter().zip(&results) {
        check_matches(a, p, &mapping_name)?;
        // Tables and Markdown on the terminal show the notes themselves.
        if notes_to_stderr {
            for note in &a.notes {
                crate::usage::note!("lotus: note: {}: {note}", p.name);
            }
        }
    }

    let view = View {
        mapping: &mapping_name,
        op_count: mapping.ops.len(),
        profiles: &profiles,
        results: &results,
        wide: args.wide,
    };
    let text = if functions.is_some() {
        let fv = by_function::FunctionView {
            mapping: &mapping_name,
            match_mode: match_mode.to_string(),
            profiles: &profiles,
            results: &per_function,
            wide: args.wide,
        };
        match format {
            AttributeFormat::Json => fv.json()?,
            AttributeFormat::Csv => fv.csv()?,
            AttributeFormat::Table => fv.table(),
            AttributeFormat::Md | AttributeFormat::Folded => fv.markdown(),
        }
    } else {
        match format {
            AttributeFormat::Json => serde_json::to_string_pretty(&view.json())? + "\n",
            AttributeFormat::Csv => view.csv()?,
            AttributeFormat::Table => view.table(),
            AttributeFormat::Md | AttributeFormat::Folded => view.markdown(),
        }
    };
    if let Some(path) = &args.plot {
        let svg = view.svg()?;
        write_atomic(path, &svg)?;
        crate::usage::note!("lotus: wrote {}", path.display());
    }
    match &args.out {
        Some(path) => {
            write_atomic(path, &text)?;
            crate::usage::note!(
                "lotus: wrote {} ({} profile(s))",
                path.display(),
                results.len()
            );
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Warns about ops that match nothing; an error when no op matches
/// anything (every second would be unexplained).
fn check_matches(a: &Attribution, p: &LoadedProfile, mapping: &str) -> Result<()> {
    if a.unmatched_ops.is_empty() {
        return Ok(());
    }
    let hint = if !p.modules_known {
        "the profile names no modules, so functions are matched by name alone: was the mapping made for the same program and library versions?"
    } else if a.match_mode == MatchMode::Auto {
        "matching is on function and module (version suffixes after .so ignored); if the profile names modules differently (libc.so.6 vs libc-2.31.so), try --match name"
    } else {
        "no function name of these ops appears in the profile: was the mapping made for the same program?"
    };
    let ops = a.unmatched_ops.join(", ");
    if a.unmatched_ops.len() == a.ops.len() - 1 {
        bail!(
            "{}: no op of {mapping} matches any function of the profile (ops: {ops}); all of its time would be unexplained ({hint})",
            p.path.display()
        );
    }
    crate::usage::say!(
        "lotus: warning: {}: no function of op(s) {ops} matches a function of the profile ({hint})",
        p.path.display()
    );
    Ok(())
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
            MappingError::Json { .. } | MappingError::Invalid { .. } | MappingError::NotAMapping { .. }
                if !looks_like_json =>
            {
                " (this looks like a CSV or text report, not a mapping: pass profiles with --profile, mappings come from `lotus map`)"
            }
            MappingError::UnknownSchema { found, .. } if found.contains("lotus.profile/") => {
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
    let attribution_error = |e: AttributeError| {
        match e {
        AttributeError::EmptyMapping(_) => anyhow::anyhow!(
            "{mapping_name}: {e}; make one with `lotus map` (it must list each op's native functions)"
        ),
        AttributeError::EmptyProfile => anyhow::anyhow!("{name}: {e}"),
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
    let is_uprof = head_text.contains(lotus_backend_uprof::report::FUNCTION_SECTION)
        || head_text
            .lines()
            .next()
            .is_some_and(|l| l.contains("AMD uProf"));
    if is_uprof {
        let report = lotus_backend_uprof::report::read_report(&mut input, &name)?;
        drop(input);
        let dt = uprof_sample_interval(path, &name)?;
        let mut f = fold(report.unit)?;
        report.rows.iter().for_each(|r| f.add(r));
        return done("uprof-csv", f, report.unit, dt);
    }
    // VTune reports can be large (a row per function and thread): rows are
    // folded one at a time, never all kept.
    let mut f = fold(Unit::Seconds)?;
    for row in lotus_backend_vtune::report::HotspotRows::new(&mut input, &name)? {
        f.add(&row?);
    }
    done("vtune-csv", f, Unit::Seconds, None)
}

/// The CPU_TIME timer interval a uProf report states in its MONITORED
/// EVENTS section (`,"CPU_TIME","1.000 milliseconds",...`), in seconds.
/// Reads line by line up to the function table.
fn uprof_sample_interval(path: &Path, name: &str) -> Result<Option<f64>> {
    let f = lotus_sys::input::open_regular(path)
        .with_context(|| format!("cannot open profile {name}"))?;
    let mut input = BufReader::new(f);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut input)
            .take(1 << 20)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read profile {name}"))?;
        if n == 0 {
            return Ok(None);
        }
        let line = String::from_utf8_lossy(&buf);
        if line.contains(lotus_backend_uprof::report::FUNCTION_SECTION) {
            return Ok(None);
        }
        let fields: Vec<&str> = line
            .split(',')
            .map(|f| f.trim().trim_matches('"'))
            .collect();
        if let Some(i) = fields.iter().position(|f| *f == "CPU_TIME") {
            if let Some(dt) = fields.get(i + 1).and_then(|t| parse_interval(t)) {
                return Ok(Some(dt));
            }
        }
    }
}

/// `1.000 milliseconds` -> 0.001.
fn parse_interval(text: &str) -> Option<f64> {
    let (num, unit) = text.trim().split_once(' ')?;
    let v: f64 = num.trim().parse().ok()?;
    let scale = match unit.trim() {
        "seconds" | "second" | "s" => 1.0,
        "milliseconds" | "millisecond" | "ms" => 1e-3,
        "microseconds" | "microsecond" | "us" => 1e-6,
        _ => return None,
    };
    (v > 0.0 && v.is_finite()).then_some(v * scale)
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
