//! `lotus export`: sampled trace folders as one gzipped pprof profile
//! ([`lotus_attribute::write_pprof`]), each sample labelled with its op.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// `lotus export`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Sampled trace folders (`trace run --sample`, `trace attach`): one
    /// profile, each sample labelled with its folder.
    #[arg(value_name = "DIR", required = true)]
    dirs: Vec<PathBuf>,
    /// Output format: pprof (google/pprof's profile.proto, gzipped: `go tool
    /// pprof`, Pyroscope, Parca), each sample labelled with its op (as
    /// `attribute DIR` names its rows), process role, pid, tid, host, rank.
    #[arg(long, value_enum, default_value = "pprof")]
    format: ExportFormat,
    /// Where to write the profile (`-`: standard output).
    #[arg(long, short, value_name = "FILE")]
    out: PathBuf,
    /// The samples' prefix in each DIR (as `trace run --prefix`).
    #[arg(long, default_value = "lotus")]
    prefix: String,
}

/// `lotus export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ExportFormat {
    /// A gzipped pprof profile.
    Pprof,
}

/// `lotus export`: the profile written whole or not at all.
pub fn run(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let ExportFormat::Pprof = args.format;
    let budget = lotus_sort::Budget::from_env()?;
    let (file, mut w) = crate::usage::sink(&args.out, "profile")?;
    let written = lotus_attribute::write_pprof(&args.dirs, &args.prefix, budget, &mut w)?;
    w.flush()?;
    drop(w);
    file.map(|f| f.commit()).transpose()?;
    for note in &written.notes {
        crate::usage::note!("lotus: note: {note}");
    }
    let (n, ms) = (written.samples, written.cpu_ns as f64 / 1e6);
    crate::usage::note!(
        "lotus: wrote {} ({n} sample(s), {ms:.1} ms of CPU)",
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
