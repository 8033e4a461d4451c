//! `lotus profile`: a profile of a whole program (all its processes and
//! threads), or of the windows it opens itself with `--windows`, written as
//! the normalized `lotus.profile/1` JSON that `lotus attribute` reads.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use lotus_core::{Partial, Profile, Profiler};
use lotus_map::{PreparedProgram, ProgramOptions, ProgramRun};
use lotus_sys::{check_writable, write_file};

/// `lotus profile` arguments.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// Profiler backend (see `lotus backends`); by default the one that
    /// can run here (where several can, say which).
    #[arg(long)]
    backend: Option<String>,
    /// Write the profile here (default, or `-`: standard output).
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Output format: lotus.profile/1 JSON (the one `lotus attribute` reads; its tables show the profile by op), or its functions as a table, CSV or Markdown. By default a table on a terminal, JSON when writing --out or into a pipe.
    #[arg(long, value_enum)]
    format: Option<ProfileFormat>,
    /// Functions listed in a table or Markdown, the busiest first (0: all).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Tables show function names in full.
    #[arg(long)]
    wide: bool,
    /// Measure only inside the windows the program opens itself (lotus_resume /
    /// lotus_pause, `import lotus`, or ITT), not the whole run.
    #[arg(long)]
    windows: bool,
    /// Sampling frequency in Hz (perf; VTune and uProf take it as their interval, as in `lotus map`). 1000, not map's 4000: a whole pipeline runs many processes for minutes, and a quarter of the samples is plenty (samply's default rate too).
    #[arg(long, short = 'F', default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    frequency: u64,
    /// The vendor analysis (VTune -collect TYPE, uProf --config TYPE).
    #[arg(long, value_name = "TYPE")]
    collect_type: Option<String>,
    /// Keep the vendor's raw results in DIR.
    #[arg(long, value_name = "DIR")]
    keep_raw: Option<PathBuf>,
    /// Seconds the program may run before it is stopped (default: no limit).
    #[arg(long)]
    timeout: Option<u64>,
    /// Perf: call stacks with every sample (`dwarf`: unwound through the libraries' unwind tables; `fp`: the kernel's frame-pointer chain; see `lotus trace run --stacks`), for --folded and --flamegraph; `none` (the default) keeps the sampled function alone.
    #[arg(long, value_enum, default_value = "none")]
    stacks: crate::sampling::StackMode,
    /// With --stacks: write the samples' call stacks, collapsed (`outer;inner count` lines, as inferno, flamegraph.pl and speedscope read them), to FILE.
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// With --stacks: draw the samples' call stacks as an interactive flame graph (SVG) into FILE.
    #[arg(long, value_name = "FILE.svg")]
    flamegraph: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `lotus profile --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProfileFormat {
    /// The busiest functions, with their modules and shares.
    Table,
    /// `lotus.profile/1` JSON.
    Json,
    /// One row per function (every counter a column).
    Csv,
    /// A Markdown table of the busiest functions.
    Md,
}

impl ProfileFormat {
    /// The format where `--format` is not given: JSON into a file (or the
    /// format its extension names) or a pipe, a table on a terminal.
    fn default_for(out: Option<&std::path::Path>, terminal: bool) -> ProfileFormat {
        match out.and_then(|p| p.extension()).and_then(|e| e.to_str()) {
            Some("csv") => ProfileFormat::Csv,
            Some("md") => ProfileFormat::Md,
            Some("txt") => ProfileFormat::Table,
            _ if out.is_none() && terminal => ProfileFormat::Table,
            _ => ProfileFormat::Json,
        }
    }
}

/// The profile's functions, the busiest first: `top` of them (0: all) in
/// a table fitted to `width` (`None`: names whole) or Markdown, or all of
/// them in CSV.
fn render_rows(
    profile: &Profile,
    format: ProfileFormat,
    top: usize,
    width: Option<usize>,
) -> Result<String> {
    use crate::render::table::{self, Column, Grid};
    use lotus_map::output::one_line;
    use lotus_sys::text::printable;
    let total: f64 = profile.rows.iter().map(|r| r.value).sum();
    let mut order: Vec<&lotus_core::Row> = profile.rows.iter().collect();
    order.sort_by(|a, b| b.value.total_cmp(&a.value));
    let unit = profile.unit.label();
    let share = |v: f64| if total > 0.0 { v / total } else { 0.0 };
    if format == ProfileFormat::Csv {
        return Ok(lotus_core::rows_csv(&order, unit, total)?);
    }
    let shown = if top == 0 {
        order.len()
    } else {
        top.min(order.len())
    };
    let rows = &order[..shown];
    let figure = |v: f64| {
        lotus_sys::text::figure(
            v,
            if profile.unit == lotus_core::Unit::Seconds {
                3
            } else {
                0
            },
        )
    };
    let mut out = format!(
        "lotus profile: {} backend, {} function(s), {} {unit} in all\n",
        one_line(&profile.backend),
        profile.rows.len(),
        figure(total)
    );
    if format == ProfileFormat::Md {
        out += &format!("\n| function | module | {unit} | share |\n|---|---|---:|---:|\n");
        for r in rows {
            out += &format!(
                "| `{}` | {} | {} | {:.1}% |\n",
                one_line(&r.function).replace('|', "\\|").replace('`', "'"),
                one_line(&table::module_name(&r.module)).replace('|', "\\|"),
                figure(r.value),
                100.0 * share(r.value)
            );
        }
    } else {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let module = one_line(&table::module_name(&r.module));
                vec![
                    String::new(),
                    if width.is_some() {
                        table::cut_right(&module, 24)
                    } else {
                        module
                    },
                    figure(r.value),
                    format!("{:.1}%", 100.0 * share(r.value)),
                ]
            })
            .collect();
        let full: Vec<String> = rows.iter().map(|r| one_line(&r.function)).collect();
        let grid = Grid::new(
            vec![
                Column::left("function"),
                Column::left("module"),
                Column::right(unit),
                Column::right("share"),
            ],
            cells,
        )
        .names(0, 0, table::NAME_MIN, |room| {
            let refs: Vec<&str> = full.iter().map(String::as_str).collect();
            table::short_names(&refs, room)
        });
        out += &grid.render(width);
    }
    if shown < order.len() {
        out += &format!("… {} more (--top 0 shows all)\n", order.len() - shown);
    }
    Ok(printable(&out).into_owned())
}

/// Runs `lotus profile`.
pub fn run(args: ProfileArgs) -> Result<ExitCode> {
    let format = args.format.unwrap_or_else(|| {
        ProfileFormat::default_for(
            args.out.as_deref().filter(|p| !crate::usage::is_stdout(p)),
            std::io::IsTerminal::is_terminal(&std::io::stdout()),
        )
    });
    let (_, backend) = crate::usage::backend_or_usable(args.backend.as_deref())?;
    crate::sampling::check_stack_args(
        args.stacks,
        args.folded.is_some() || args.flamegraph.is_some(),
        backend.as_ref(),
    )?;
    // `--out -` is standard output, as no --out is.
    let out = args.out.clone().filter(|p| !crate::usage::is_stdout(p));
    let probe = backend.probe();
    if !probe.available {
        bail!(
            "the {} backend cannot run here: {}",
            backend.name(),
            probe.reason.unwrap_or_default()
        );
    }
    let options = program_options(&args, out.is_none());
    let program = find(&args)?;
    let prepared = PreparedProgram::prepare(backend.as_ref(), program, &options, &mut |dir| {
        crate::control_lib::path_for_run(dir)
            .inspect_err(|e| {
                crate::usage::say!("lotus: warning: {e}: the program cannot open windows")
            })
            .ok()
    })?;

    if let Some(out) = &out {
        // Find out now, not after the whole program ran.
        check_writable(out)?;
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = interrupted.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));

    let run = prepared.run(backend.as_ref(), &options, &interrupted)?;
    let lines = crate::render::flame::folded_lines(None, &run.stacks);
    let text = text_of(&run.profile, format, &args)?;
    match &out {
        Some(path) => {
            write_file(path, text.as_bytes())?;
            crate::usage::note!(
                "lotus: wrote {} ({} functions{})",
                path.display(),
                run.profile.rows.len(),
                if run.windows == 0 {
                    String::new()
                } else {
                    format!(", {} samples in {} window(s)", run.samples, run.windows)
                }
            );
        }
        None => print!("{text}"),
    }
    crate::render::flame::write_stacks(
        &lines,
        args.folded.as_deref(),
        args.flamegraph.as_deref(),
        "lotus profile: CPU samples",
    )?;
    Ok(closing(&args, backend.as_ref(), &run))
}

/// The profile in `format`: `lotus.profile/1` JSON, or its rows.
fn text_of(profile: &Profile, format: ProfileFormat, args: &ProfileArgs) -> Result<String> {
    if format == ProfileFormat::Json {
        let mut text = Vec::new();
        profile.write_json(&mut text)?;
        return Ok(String::from_utf8(text)?);
    }
    let width = (!args.wide).then(crate::render::table::width);
    render_rows(profile, format, args.top, width)
}

/// The program to profile (after `--`), found on PATH or as a path.
fn find(args: &ProfileArgs) -> Result<PathBuf> {
    let program = args
        .command
        .first()
        .ok_or_else(|| anyhow!("give the program to profile after --"))?;
    crate::program::find_program(std::path::Path::new(program))
        .map_err(|why| anyhow!("{program}: cannot run it: {why}"))
}

/// What `args` asks of the run (`to_stdout`: the profile goes to standard
/// output, the program's own output must not mix into it).
fn program_options(args: &ProfileArgs, to_stdout: bool) -> ProgramOptions {
    let mut options = ProgramOptions::new(args.command.clone(), args.frequency);
    options.windows = args.windows;
    options.collect_type.clone_from(&args.collect_type);
    options.keep_raw.clone_from(&args.keep_raw);
    options.stacks = args.stacks.call_stacks();
    options.timeout = args.timeout.map(Duration::from_secs);
    options.stdout_to_stderr = to_stdout;
    options
}

/// The run's closing words (notes, a window never opened, a partial
/// profile, the program's failure) and lotus's exit code.
fn closing(args: &ProfileArgs, backend: &dyn Profiler, run: &ProgramRun) -> ExitCode {
    let (notes, window_count, partial, status) =
        (&run.notes, run.windows, &run.partial, run.status);
    // Where samples are known to be missing, the figure is said (the
    // profile file has no place for notes).
    for note in notes {
        crate::usage::say!("lotus: note: {note}");
    }
    if args.windows && window_count == 0 && backend.switches_windows() {
        crate::usage::say!("lotus: warning: --windows, but the program opened no window (lotus.resume / lotus_resume / ittapi.resume)");
    }
    if let Some(partial) = partial {
        let whole = "; the profile holds what was sampled until then (marked \"partial\")";
        if partial.reason == Partial::TIMEOUT {
            crate::usage::say!(
                "lotus: error: {}: {}{whole}; give a longer --timeout (or none) to profile the whole run",
                run.program.display(),
                partial.message
            );
            return ExitCode::FAILURE;
        }
        crate::usage::say!("lotus: {}{whole}", partial.message);
        return ExitCode::from(130);
    }
    if let Some(status) = status.filter(|s| !s.success()) {
        crate::usage::say!("lotus: the program exited with {status}; its profile was written");
        return ExitCode::from(status.code().map_or(1, |c| c.clamp(1, 255) as u8));
    }
    ExitCode::SUCCESS
}
