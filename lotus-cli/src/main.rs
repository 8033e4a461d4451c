//! `lotus`: where the CPU time of ML data preprocessing goes, from the
//! Python op down to the native function.
//!
//! Subcommands: `backends` (what can profile here), `map` (which native
//! functions each op runs), `show` (a mapping as a table), `attribute`
//! (whole-pipeline profiles folded back onto the ops), `trace` (timelines
//! and statistics of a pipeline trace).

// The argument structs' doc comments are clap's help text, printed as
// written: placeholders such as `<pid>` must stay bare there, which rustdoc
// would read as HTML tags.
#![allow(rustdoc::invalid_html_tags)]

mod attribution_inputs;
mod cmd;
mod control_lib;
mod job;
mod oom;
mod program;
mod render;
mod run_record;
mod sampled_trace;
mod traces;
mod usage;

#[cfg(test)]
mod layout_tests;

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
/// [`oom`]).
#[global_allocator]
static ALLOCATOR: oom::ExitOnOom = oom::ExitOnOom;

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
    /// Fold whole-pipeline profiles back onto the Python ops through a mapping.
    #[command(after_help = env_help::attribute())]
    Attribute(cmd::attribute::AttributeArgs),
    /// One self-contained HTML page of a run: traces (configurations side
    /// by side), attributions, plots.
    #[command(after_help = env_help::attribute())]
    Report(cmd::report::ReportArgs),
    /// Pipeline traces: when each op, sample and batch ran in every process.
    Trace {
        #[command(subcommand)]
        command: cmd::trace::TraceCommand,
    },
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
        Command::Report(args) => cmd::report::run(args),
        Command::Trace { command } => cmd::trace::run(command),
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
