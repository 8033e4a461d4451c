//! `lotus`: where the CPU time of ML data preprocessing goes, from the
//! Python op down to the native function.
//!
//! Subcommands: `backends` (what can profile here), `map` (which native
//! functions each op runs), `show` (a mapping as a table).

mod from_reports;
mod output;

// Each backend crate registers itself through `inventory`; naming the crates
// here keeps the linker from dropping them (and their registrations).
use lotus_backend_perf as _;
use lotus_backend_uprof as _;
use lotus_backend_vtune as _;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use lotus_core::mapping::Mapping;
use lotus_core::MergeRule;

use output::{render, write_atomic, Format};

#[derive(Debug, Parser)]
#[command(
    name = "lotus",
    version,
    about = "Where the CPU time of ML data preprocessing goes: Python op -> native function -> hardware counters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the profiler backends and whether each can run here.
    Backends {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Map Python ops to the native functions they run.
    Map(MapArgs),
    /// Show a mapping (lotus.mapping/1 or the original tool's schema) as a table.
    Show(ShowArgs),
}

#[derive(Debug, clap::Args)]
struct MapArgs {
    /// Profiler backend (see `lotus backends`).
    #[arg(long)]
    backend: String,
    /// Read existing vendor reports, DIR/<Op>/<run>.csv, instead of running anything.
    #[arg(long, value_name = "DIR")]
    from_reports: Option<PathBuf>,
    /// Op files to run and map (live mapping).
    #[arg(value_name = "OP_FILE")]
    ops: Vec<PathBuf>,
    /// Merge rule across runs: union, majority, all or min:K.
    #[arg(long, default_value = "union", value_parser = parse_rule)]
    rule: MergeRule,
    /// Write the mapping here (format from --format, else from the extension; JSON by default).
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Output format; a readable table on the terminal when neither this nor --out is given.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Functions shown per op in table and Markdown output (0: all).
    #[arg(long, default_value_t = 20)]
    top: usize,
}

#[derive(Debug, clap::Args)]
struct ShowArgs {
    /// The mapping file.
    file: PathBuf,
    /// Re-apply a stricter merge rule (needs a mapping with run counts).
    #[arg(long, value_parser = parse_rule)]
    rule: Option<MergeRule>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Functions shown per op (0: all).
    #[arg(long, default_value_t = 20)]
    top: usize,
}

fn parse_rule(s: &str) -> Result<MergeRule, String> {
    s.parse()
        .map_err(|e: lotus_core::mapping::BadRule| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Backends { json } => cmd_backends(json),
        Command::Map(args) => cmd_map(args),
        Command::Show(args) => cmd_show(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lotus: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn cmd_backends(json: bool) -> Result<ExitCode> {
    let probes: Vec<_> = lotus_core::backends()
        .iter()
        .map(|b| (b.description(), b.probe()))
        .collect();
    if json {
        let list: Vec<_> = probes
            .iter()
            .map(|(desc, p)| {
                serde_json::json!({
                    "name": p.backend,
                    "description": desc,
                    "available": p.available,
                    "version": p.version,
                    "reason": p.reason,
                    "notes": p.notes,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (desc, p) in &probes {
        println!(
            "{:<6} {:<4} {}",
            p.backend,
            if p.available { "yes" } else { "no" },
            p.version.as_deref().unwrap_or("-")
        );
        println!("       {desc}");
        if let Some(reason) = &p.reason {
            println!("       not available: {reason}");
        }
        for note in &p.notes {
            println!("       {note}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a mapping goes and in which format.
fn emit(mapping: &Mapping, out: Option<&Path>, format: Option<Format>, top: usize) -> Result<()> {
    match out {
        Some(path) => {
            let format = format.unwrap_or_else(|| Format::from_path(path));
            write_atomic(path, &render(mapping, format, top)?)?;
            eprintln!(
                "lotus: wrote {} ({} op(s))",
                path.display(),
                mapping.ops.len()
            );
        }
        None => print!("{}", render(mapping, format.unwrap_or(Format::Table), top)?),
    }
    Ok(())
}

fn cmd_map(args: MapArgs) -> Result<ExitCode> {
    let backend = lotus_core::backend(&args.backend)?;
    let Some(dir) = &args.from_reports else {
        if args.ops.is_empty() {
            bail!("nothing to map: give op files (lotus map --backend {} ops/*.py) or --from-reports DIR", args.backend);
        }
        bail!(
            "live mapping with --backend {} is not available in this build yet; use --from-reports DIR with vtune or uprof reports",
            args.backend
        );
    };
    if !args.ops.is_empty() {
        bail!("give either op files or --from-reports DIR, not both");
    }
    if args.backend == "perf" {
        bail!("--from-reports reads VTune or uProf reports: use --backend vtune or --backend uprof (perf maps live: lotus map --backend perf ops/*.py)");
    }
    let outcome = from_reports::build(backend.as_ref(), dir, args.rule)?;
    if outcome.failures.is_empty() {
        emit(&outcome.mapping, args.out.as_deref(), args.format, args.top)?;
        return Ok(ExitCode::SUCCESS);
    }
    for f in &outcome.failures {
        eprintln!("lotus: error: {f}");
    }
    if !outcome.mapping.ops.is_empty() {
        // Keep what was read, beside (never over) the requested output.
        let partial = match &args.out {
            Some(p) => {
                let mut name = p.as_os_str().to_owned();
                name.push(".partial");
                PathBuf::from(name)
            }
            None => PathBuf::from("lotus-mapping.partial.json"),
        };
        let format = args
            .format
            .or(args.out.as_deref().map(Format::from_path))
            .unwrap_or(Format::Json);
        write_atomic(&partial, &render(&outcome.mapping, format, args.top)?)?;
        eprintln!(
            "lotus: the {} op(s) that read cleanly are in {}",
            outcome.mapping.ops.len(),
            partial.display()
        );
    }
    bail!(
        "{} of {} op(s) could not be mapped",
        outcome.failures.len(),
        outcome.failures.len() + outcome.mapping.ops.len()
    );
}

fn cmd_show(args: ShowArgs) -> Result<ExitCode> {
    let text = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let name = args.file.display().to_string();
    let text = String::from_utf8(text).map_err(|e| {
        anyhow::anyhow!(
            "{name}: not UTF-8 text (bad byte at offset {}); is this a mapping JSON file?",
            e.utf8_error().valid_up_to()
        )
    })?;
    let mut mapping = Mapping::from_json(&text, &name)?;
    if let Some(rule) = args.rule {
        if mapping.imported_from.is_some() {
            bail!("{name}: has no run counts (the original tool's schema), so --rule cannot be applied");
        }
        mapping.apply_rule(rule);
    }
    print!("{}", render(&mapping, args.format, args.top)?);
    Ok(ExitCode::SUCCESS)
}
