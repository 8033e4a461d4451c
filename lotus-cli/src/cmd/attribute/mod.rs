//! `lotus attribute`: whole-pipeline profiles folded back onto the Python
//! ops through a mapping ([`lotus_attribute`] does the arithmetic).
//!
//! ```text
//! lotus attribute --mapping M --profile P [--profile P2 ...] [--op-times T]
//!                 [--match auto|name] [--format table|csv|json|md] [--out FILE]
//!                 [--plot FILE.svg] [--by op|function]
//! lotus attribute DIR [--prefix lotus] [--top 5] [--format ...] [--out FILE]
//!                 [--plot FILE.svg] [--flamegraph FILE.svg [--op NAME]]
//! lotus attribute DIR --by caller --function NAME [--op NAME] [--format ...]
//! ```
//!
//! `--by function` gives one row per native function of the mapping
//! instead of per op (the study's per-C-function hardware table):
//! [`by_function`] says what it holds. With DIR, `--by caller --function
//! NAME [--op OP]` shows who calls NAME in each op, from the samples'
//! call stacks ([`callers`]).
//!
//! A profile is recognized by its content: JSON is `lotus.profile/1` (what
//! `lotus profile` writes); a text file with a `HOTTEST FUNCTIONS` section
//! (or an `AMD uProf` banner) is a uProf report; anything else is read as
//! a VTune function-grouped report (hotspots or microarchitecture
//! exploration, comma or TAB), whose columns are found by name.
//!
//! `--format json` prints `lotus.attribution/1`: its fields are
//! [`lotus_attribute::AttributionDocument`]'s.

mod by_function;
mod by_rank;
mod callers;
mod flames;
pub mod in_pipeline;
mod plot;
mod render;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::ValueEnum;
use lotus_attribute::{Attribution, FunctionMapping, HelperRule, MatchMode, Options};

use crate::attribution_inputs::{
    load_mapping, load_op_times, load_profile, name_profiles, LoadedProfile,
};
use lotus_sys::write_file;
use render::View;

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

/// What `lotus attribute` says when it is given neither a trace folder
/// nor a mapping and a profile.
const NOTHING_TO_ATTRIBUTE: &str = "give a sampled trace folder: `lotus attribute DIR` (DIR: what `lotus trace run --sample --out DIR -- python train.py` wrote); or fold a profiler's report onto ops with `lotus attribute --mapping M.json --profile P.csv` (both needed)";

/// `lotus attribute`'s arguments.
#[derive(Debug, clap::Args)]
pub struct AttributeArgs {
    /// A sampled trace folder (`lotus trace run --sample --out DIR`): its
    /// samples credited to the innermost op span that was running, no
    /// mapping; ops inside ops shown as a tree, each with its own
    /// (exclusive) and inclusive CPU and a 95% ± where it rests on samples.
    #[arg(value_name = "DIR", conflicts_with_all = ["mapping", "profiles", "op_times"])]
    pub dir: Option<PathBuf>,
    /// With DIR and `--by rank`: the folders of the same job's other hosts
    /// (merged where their logs name one job).
    #[arg(value_name = "MORE", requires = "dir")]
    pub more: Vec<PathBuf>,
    /// The samples' prefix in DIR (as `trace run --prefix`).
    #[arg(long, default_value = "lotus", requires = "dir")]
    pub prefix: String,
    /// Top functions listed per row (with DIR).
    #[arg(long, default_value_t = lotus_attribute::TOP_FUNCTIONS, requires = "dir")]
    pub top: usize,
    /// The mapping: lotus.mapping/1, or the original tool's mapping_funcs.json.
    #[arg(long, short, value_name = "FILE")]
    pub mapping: Option<PathBuf>,
    /// A whole-pipeline profile: VTune CSV (hotspots or uarch), uProf CSV,
    /// or lotus.profile/1 JSON. Repeat for one column per profile.
    #[arg(long = "profile", short, value_name = "FILE")]
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
    /// With --flamegraph or --by caller: only the op rows of this name
    /// (anywhere in their path: `Loader`) or path (`ImageFolder/Loader`).
    #[arg(long, value_name = "NAME", requires = "dir")]
    pub op: Option<String>,
    /// With DIR and `--by caller`: the function whose callers to show, as
    /// `--format folded` names its frames (the whole name, `inner`; a
    /// kernel function ends in `_[k]`).
    #[arg(long, value_name = "NAME", requires = "dir")]
    pub function: Option<String>,
    /// Tables show full op names (by default the metrics table shortens them).
    #[arg(long)]
    pub wide: bool,
    /// One row per op, or per native function of the mapping (its time,
    /// counters, CPI, top-down metrics and the ops it is credited to), or
    /// (with DIR and --function NAME) NAME's callers in each op, from the
    /// samples' call stacks: nearest caller first, each with its own
    /// callers indented under it (3 levels), with samples and their share
    /// of NAME's samples in the op.
    #[arg(long, value_enum, default_value = "op")]
    pub by: ByArg,
    /// With DIR: how the CPU of helper threads (threads with no op spans
    /// of their own) is credited: `cause`, a parallel runtime's pool
    /// thread (OpenMP, OpenBLAS, oneTBB, rayon, torch's pool: known by
    /// its frames) to the op that handed it its work, its spin after the
    /// op to a `pool spin` row under the op; `timing`, the earlier rule
    /// (a thread that runs more while ops are open is their pool), for
    /// comparison.
    #[arg(long, value_enum, default_value = "cause", requires = "dir")]
    pub helpers: HelpersArg,
    /// With DIR: where the op rows come from [default: the tracer's spans
    /// where DIR has its logs, else the samples' Python frames, as after
    /// `lotus trace attach`].
    #[arg(long, value_enum, requires = "dir")]
    pub ops_from: Option<OpsFromArg>,
}

/// `--ops-from`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpsFromArg {
    /// The tracer's op spans.
    Spans,
    /// The samples' Python frames, beside logs too.
    Frames,
}

/// `--helpers`' choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HelpersArg {
    /// By what the helper ran and who handed it work.
    Cause,
    /// By when it ran (the earlier rule).
    Timing,
}

/// `--by`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ByArg {
    /// Per Python op.
    Op,
    /// Per native function of the mapping.
    Function,
    /// A function's callers (with DIR and --function NAME).
    Caller,
    /// Each row on each rank (with DIR, and the other hosts' folders of
    /// its job): its samples' CPU, share of the rank, top function.
    Rank,
    /// Each row on each host (as `rank`).
    Host,
}

/// Runs `lotus attribute`.
pub fn run(mut args: AttributeArgs) -> Result<ExitCode> {
    // `--out -` is standard output, as no --out is.
    args.out = args.out.filter(|p| !crate::usage::is_stdout(p));
    match (args.by, &args.function, &args.dir) {
        (ByArg::Caller, Some(function), Some(dir)) => {
            if args.plot.is_some() {
                return Err(crate::usage::usage(
                    "--plot draws the rows' CPU time; leave it out with --by caller",
                ));
            }
            if let Some(svg) = &args.flamegraph {
                flames::flamegraph_of(
                    dir,
                    &args.prefix,
                    lotus_sort::Budget::from_env()?,
                    svg,
                    args.op.as_deref(),
                )?;
            }
            return callers::run(
                dir,
                &args.prefix,
                function,
                args.op.as_deref(),
                args.format,
                args.out.as_deref(),
                args.wide,
            );
        }
        (ByArg::Caller, None, _) => {
            return Err(crate::usage::usage(
                "--by caller needs --function NAME (the function whose callers to show)",
            ))
        }
        (ByArg::Caller, Some(_), None) => {
            return Err(crate::usage::usage(
                "--by caller needs call stacks: give a sampled trace folder (lotus attribute DIR), traced with `lotus trace run --sample`",
            ))
        }
        (_, Some(_), _) => {
            return Err(crate::usage::usage(
                "--function NAME goes with --by caller (lotus attribute DIR --by caller --function NAME)",
            ))
        }
        _ => {}
    }
    if args.op.is_some() && args.flamegraph.is_none() {
        return Err(crate::usage::usage(
            "--op NAME goes with --flamegraph FILE.svg or --by caller",
        ));
    }
    let by_place = matches!(args.by, ByArg::Rank | ByArg::Host);
    if let (Some(dir), true) = (&args.dir, by_place || !args.more.is_empty()) {
        return by_rank::run(dir, &args);
    }
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
            match args.helpers {
                HelpersArg::Cause => HelperRule::Cause,
                HelpersArg::Timing => HelperRule::Timing,
            },
            args.ops_from.map(|o| match o {
                OpsFromArg::Spans => lotus_attribute::OpsFrom::Spans,
                OpsFromArg::Frames => lotus_attribute::OpsFrom::Frames,
            }),
        );
    }
    // Nothing named, or half of the mapping's pair: the usual use first.
    let (Some(mapping_path), false) = (args.mapping.as_deref(), args.profiles.is_empty()) else {
        return Err(crate::usage::usage(NOTHING_TO_ATTRIBUTE));
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
    let fv = functions.is_some().then(|| by_function::FunctionView {
        mapping: &mapping_name,
        match_mode: match_mode.to_string(),
        profiles: &profiles,
        results: &per_function,
        wide: args.wide,
    });
    let text = text_of(&view, fv.as_ref(), format)?;
    write_out(&args, &view, &text)?;
    Ok(ExitCode::SUCCESS)
}

/// The attribution in `format`: per op (`view`), or per function (`fv`,
/// `--by function`).
fn text_of(
    view: &View,
    fv: Option<&by_function::FunctionView>,
    format: AttributeFormat,
) -> Result<String> {
    Ok(match fv {
        Some(fv) => match format {
            AttributeFormat::Json => fv.json()?,
            AttributeFormat::Csv => fv.csv()?,
            AttributeFormat::Table => fv.table(),
            AttributeFormat::Md | AttributeFormat::Folded => fv.markdown(),
        },
        None => match format {
            AttributeFormat::Json => serde_json::to_string_pretty(&view.json())? + "\n",
            AttributeFormat::Csv => view.csv()?,
            AttributeFormat::Table => view.table(),
            AttributeFormat::Md | AttributeFormat::Folded => view.markdown(),
        },
    })
}

/// Writes the plot (`--plot`) and the text (to `--out`, or the terminal).
fn write_out(args: &AttributeArgs, view: &View, text: &str) -> Result<()> {
    if let Some(path) = &args.plot {
        let svg = view.svg()?;
        write_file(path, svg.as_bytes())?;
        crate::usage::note!("lotus: wrote {}", path.display());
    }
    match &args.out {
        Some(path) => {
            write_file(path, text.as_bytes())?;
            crate::usage::note!(
                "lotus: wrote {} ({} profile(s))",
                path.display(),
                view.results.len()
            );
        }
        None => print!("{text}"),
    }
    Ok(())
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
