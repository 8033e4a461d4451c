//! `lotus`: where the CPU time of ML data preprocessing goes, from the
//! Python op down to the native function.
//!
//! Each subcommand of `lotus --help` is a module under `cmd/`, named as the
//! command is; no command module names another
//! (`tests/architecture/cli_layout.rs` keeps it):
//!
//! - `backends` (what can profile here): `cmd/backends.rs`
//! - `map` (which native functions each op runs; `--from-trace` in
//!   `cmd/map/from_trace.rs`): `cmd/map/`
//! - `show` (a mapping as a table; `--against` in `cmd/show/against.rs`):
//!   `cmd/show/`
//! - `compare` (live mappings of several hosts side by side):
//!   `cmd/compare.rs`
//! - `profile` (a whole program, or the windows it opens): `cmd/profile.rs`
//! - `attribute` (profiles folded back onto the ops through a mapping, or a
//!   sampled trace folder's samples credited to its op spans:
//!   `cmd/attribute/in_pipeline.rs`): `cmd/attribute/`
//! - `predict` (what a DataLoader change would give, from one traced
//!   run): `cmd/predict.rs`
//! - `report` (one HTML page of a run): `cmd/report/`
//! - `export` (sampled folders as a pprof profile): `cmd/export.rs`
//! - `trace` (`run`: `cmd/trace/run/`, `view`: `cmd/trace/view.rs`,
//!   `stats`: `cmd/trace/stats.rs`): `cmd/trace/`
//! - `tune` (a few DataLoader settings run briefly, chosen by the model,
//!   the best kept): `cmd/tune.rs`
//! - `completions` (shell completion scripts): `cmd/completions.rs`
//! - `man` (man pages): `cmd/man.rs`
//!
//! What two commands share lives outside `cmd/`: `attribution_inputs`
//! (mapping, profiles, op times: attribute and report), `traces` (trace
//! folders, configurations and their statistics: trace stats and report),
//! `sampling` (`--stacks`, `--counters`: trace run, map and profile),
//! `program` (finding the program or Python to run), `control_lib`
//! (the control library the binary carries), `usage` (usage errors, `--quiet`, the environment each
//! command's help lists). Renderers live under `render/`: `table`
//! (terminal tables fitted to the width, names as tables show them),
//! `html` (the report page and its timeline, from `templates/` through
//! minijinja, which escapes every text), `svg` (plots), `mapping` (a
//! mapping in every format), `in_pipeline` (an in-pipeline attribution's
//! plot and counter columns), `verdict` (the verdict as text).

// The argument structs' doc comments are clap's help text, printed as
// written: placeholders such as `<pid>` must stay bare there, which rustdoc
// would read as HTML tags.
#![allow(rustdoc::invalid_html_tags)]

mod attribution_inputs;
mod cmd;
mod control_lib;
mod program;
mod render;
mod sampling;
mod traces;
mod usage;

// Each backend crate registers itself through `inventory`; naming the crates
// here keeps the linker from dropping them (and their registrations).
use lotus_backend_perf as _;
use lotus_backend_uprof as _;
use lotus_backend_vtune as _;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cmd::map::MapArgs;
use usage::env_help;

/// Out of memory is a clear error and exit status 1, not an abort (see
/// [`lotus_runner::ExitOnOom`]).
#[global_allocator]
static ALLOCATOR: lotus_runner::ExitOnOom = lotus_runner::ExitOnOom;

#[derive(Debug, Parser)]
#[command(
    name = "lotus",
    version = VERSION,
    about = "Where the CPU time of ML data preprocessing goes: Python op -> native function -> hardware counters",
    after_help = "Exit status: 0 done; 1 an error (bad input, a failed op or program, a missing tool); 2 a usage error; 130 interrupted. `lotus <command> --help` lists the environment variables each command reads."
)]
struct Cli {
    /// No progress and no notes on stderr (warnings and errors are still printed).
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// `lotus --version`: the version and the commit it was built from
/// (`-dirty` with uncommitted changes; `unknown` outside a git checkout),
/// which build.rs finds.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("LOTUS_GIT_COMMIT"),
    ")"
);

#[derive(Debug, Subcommand)]
enum Command {
    /// List the profiler backends and whether each can run here.
    #[command(after_help = env_help::backends())]
    Backends {
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: cmd::backends::DataFormat,
        /// The same as --format json (kept for scripts).
        #[arg(long, conflicts_with = "format")]
        json: bool,
    },
    /// Map Python ops to the native functions they run.
    #[command(after_help = env_help::map())]
    Map(MapArgs),
    /// Show a mapping (lotus.mapping/1 or the original tool's schema) as a table.
    #[command(after_help = env_help::show())]
    Show(cmd::show::ShowArgs),
    /// Ops of live mappings from different hosts side by side: latency and
    /// CPU per call, with ratios to the first.
    #[command(after_help = env_help::compare())]
    Compare(cmd::compare::CompareArgs),
    /// Profile a whole program (all its processes and threads), or the windows it opens.
    #[command(after_help = env_help::profile())]
    Profile(cmd::profile::ProfileArgs),
    /// Where each op's CPU went: a sampled trace folder's samples credited to its ops (DIR), or whole-pipeline profiles folded onto the ops through a mapping.
    #[command(after_help = env_help::attribute())]
    Attribute(cmd::attribute::AttributeArgs),
    /// What a DataLoader change (workers, prefetch, persistent workers, an
    /// op removed, more CPUs, gc.freeze()) would give the training loop,
    /// from one traced run, with a 90% interval.
    Predict(cmd::predict::PredictArgs),
    /// One self-contained HTML page of a run: traces (configurations side
    /// by side), attributions, plots.
    #[command(after_help = env_help::attribute())]
    Report(cmd::report::ReportArgs),
    /// Pipeline traces: when each op, sample and batch ran in every process.
    Trace {
        #[command(subcommand)]
        command: cmd::trace::TraceCommand,
    },
    /// Sampled trace folders as one gzipped pprof profile, each sample labelled with its op.
    #[command(after_help = env_help::trace_read())]
    Export(cmd::export::ExportArgs),
    /// The job's ops live, summed over every worker, refreshed in place:
    /// `lotus top -- python train.py ...` or `lotus top --pid PID`.
    Top(cmd::trace::top::TopArgs),
    /// Run the job briefly under a few DataLoader settings chosen by the
    /// model (workers, prefetch, persistent workers), with no change to its
    /// code, and keep the best.
    Tune(cmd::tune::TuneArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::CompletionsArgs),
    /// Print the man page lotus(1), or write one page per command into a folder.
    Man(cmd::man::ManArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    usage::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Backends { format, json } => cmd::backends::run(if json {
            cmd::backends::DataFormat::Json
        } else {
            format
        }),
        Command::Map(args) => cmd::map::run(args),
        Command::Show(args) => cmd::show::run(args),
        Command::Compare(args) => cmd::compare::run(args),
        Command::Attribute(args) => cmd::attribute::run(args),
        Command::Profile(args) => cmd::profile::run(args),
        Command::Predict(args) => cmd::predict::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Trace { command } => cmd::trace::run(command),
        Command::Export(args) => cmd::export::run(args),
        Command::Top(args) => cmd::trace::top::top(args),
        Command::Tune(args) => cmd::tune::run(args),
        Command::Completions(args) => cmd::completions::run::<Cli>(args),
        Command::Man(args) => cmd::man::run::<Cli>(args, VERSION),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            usage::say!("lotus: error: {e:#}");
            ExitCode::from(usage::exit_status(&e))
        }
    }
}
