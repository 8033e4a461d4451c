//! `lotus show`: a mapping (lotus.mapping/1 or the original tool's
//! schema) as a table, or against another mapping of the same ops
//! ([`against`]).

pub mod against;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_core::Mapping;
use lotus_core::MergeRule;

use crate::render::mapping::{render_mapping, MapFormat};
use crate::usage::parse_rule;

#[derive(Debug, clap::Args)]
/// `lotus show`'s arguments.
pub struct ShowArgs {
    /// The mapping file.
    pub file: PathBuf,
    /// Re-apply a stricter merge rule (needs a mapping with run counts).
    #[arg(long, value_parser = parse_rule)]
    pub rule: Option<MergeRule>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: MapFormat,
    /// Functions shown per op (0: all).
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Tables show full function names (by default long C++ names are shortened to fit the terminal).
    #[arg(long)]
    pub wide: bool,
    /// Compare with another mapping of the same ops (e.g. the in-pipeline one, `lotus map --from-trace`): per op, the share of its samples in OTHER that fall in functions FILE lists, the top functions FILE misses, and those it lists that OTHER's op never ran.
    #[arg(long, value_name = "OTHER")]
    pub against: Option<PathBuf>,
}

/// Runs `lotus show`.
pub fn run(args: ShowArgs) -> Result<ExitCode> {
    let name = args.file.display().to_string();
    let file = lotus_sys::input::open_regular(&args.file)
        .with_context(|| format!("cannot read {name}"))?;
    // Streamed: a mapping of a million functions is never held as text.
    let mut mapping = Mapping::from_reader(file, &name)?;
    if let Some(rule) = args.rule {
        if mapping.imported_from.is_some() {
            bail!("{name}: has no run counts (the original tool's schema), so --rule cannot be applied");
        }
        mapping.apply_rule(rule);
    }
    if let Some(other_path) = &args.against {
        let other_name = other_path.display().to_string();
        let file = lotus_sys::input::open_regular(other_path)
            .with_context(|| format!("cannot read {other_name}"))?;
        let other = Mapping::from_reader(file, &other_name)?;
        let width = (!args.wide).then(crate::render::table::width);
        return against::run(
            &mapping,
            &name,
            &other,
            &other_name,
            args.format,
            args.top,
            width,
        );
    }
    if args.format == MapFormat::Json {
        // Streamed: the JSON of a large mapping is never held whole.
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer_pretty(&mut out, &mapping)?;
        std::io::Write::write_all(&mut out, b"\n")?;
        std::io::Write::flush(&mut out)?;
        return Ok(ExitCode::SUCCESS);
    }
    print!(
        "{}",
        render_mapping(&mapping, args.format.into(), args.top, args.wide)?
    );
    Ok(ExitCode::SUCCESS)
}
