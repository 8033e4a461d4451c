//! `lotus trace view`: Chrome trace event JSON of a trace (see the
//! [module above](super) for what it holds), or with `--format firefox` a
//! Firefox Profiler profile ([`lotus_attribute::write_firefox_profile`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use lotus_attribute::{ChromeView, ChromeViewOptions, ViewMessage};

use crate::traces::load;
use crate::usage::sink;

/// `lotus trace view`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ViewArgs {
    /// The trace: a folder of logs (searched recursively: several processes,
    /// ranks or machines make one timeline), one log file, or an attach folder.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Keep batches, waits and consumptions only (no ops, samples, fetches;
    /// a folder of samples alone: its top-level spans; `--format json` only).
    #[arg(long)]
    pub coarse: bool,
    /// Leave out PyTorch profiler traces found in DIR (`--format json`
    /// only: the Firefox profile never merges them).
    #[arg(long)]
    pub no_torch: bool,
    /// Where to write the JSON or profile (`-`: standard output).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// Output format: Chrome trace event JSON (Perfetto and chrome://tracing
    /// read it), or a Firefox Profiler profile (profiler.firefox.com, "Load
    /// a profile from file"): a track per process and thread, every sample
    /// with its call stack, the op spans as markers.
    #[arg(long, value_enum, default_value = "json")]
    pub format: ViewFormat,
    /// The samples' prefix in DIR (as `trace run --prefix`): where DIR
    /// holds samples (`trace run --sample`), each op span gets its
    /// samples, CPU ms and top functions as arguments (`--format firefox`:
    /// the samples of the profile).
    #[arg(long, default_value = "lotus")]
    pub prefix: String,
}

/// `lotus trace view --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewFormat {
    /// Chrome trace event JSON.
    Json,
    /// The Firefox Profiler's processed profile JSON.
    Firefox,
}

pub(super) fn view(args: ViewArgs) -> Result<ExitCode> {
    if args.format == ViewFormat::Firefox {
        return firefox(&args);
    }
    let to_stdout = args.out.as_os_str() == "-";
    let options = ChromeViewOptions {
        dir: args.dir.clone(),
        prefix: args.prefix.clone(),
        coarse: args.coarse,
        torch: !args.no_torch,
        out_path: (!to_stdout).then(|| args.out.canonicalize().ok()).flatten(),
        out_shown: args.out.display().to_string(),
    };
    // A folder of samples alone (`trace attach`): spans from their frames.
    let mut loaded = None;
    let view = match ChromeView::of_samples_alone(&options, &mut say)? {
        Some(view) => view,
        None => {
            let (folder, index) = loaded.insert(load(&args.dir, false)?);
            ChromeView::prepare(&options, folder, index, &mut say)?
        }
    };
    let (sink, writer) = sink(&args.out, "view")?;
    let written = view.write(writer, &mut say)?;
    if let Some(p) = sink {
        p.commit()?;
    }
    let torch_note = if written.torch_traces == 0 {
        String::new()
    } else {
        format!(
            "; {} PyTorch profiler trace(s) merged, {} event(s)",
            written.torch_traces, written.torch_events
        )
    };
    crate::usage::note!(
        "lotus: wrote {} ({} span(s), {} flow(s), {} process(es){}{torch_note})",
        if to_stdout {
            "the view".to_string()
        } else {
            args.out.display().to_string()
        },
        written.spans,
        written.flows,
        written.processes,
        written.samples_note
    );
    Ok(ExitCode::SUCCESS)
}

/// Prints what writing the view says: warnings always, notes unless
/// `--quiet`.
fn say(message: ViewMessage) {
    match message {
        ViewMessage::Note(text) => crate::usage::note!("lotus: {text}"),
        ViewMessage::Warning(text) => crate::usage::say!("lotus: {text}"),
    }
}

/// `--format firefox`: the folder as a Firefox Profiler profile, written
/// whole or not at all (an unnamed file until complete).
fn firefox(args: &ViewArgs) -> Result<ExitCode> {
    let to_stdout = args.out.as_os_str() == "-";
    let (sink, mut writer) = sink(&args.out, "profile")?;
    let w = lotus_attribute::write_firefox_profile(&args.dir, &args.prefix, &mut writer)?;
    drop(writer);
    if let Some(p) = sink {
        p.commit()?;
    }
    for note in &w.notes {
        crate::usage::note!("lotus: note: {note}");
    }
    if let Some(why) = &w.samples_left_out {
        crate::usage::say!(
            "lotus: warning: the samples in {} are left out of the profile: {why}; it has the spans as markers only",
            args.dir.display()
        );
    } else if !w.sampled {
        crate::usage::say!(
            "lotus: note: {} holds no samples of prefix `{}` (traced without `--sample`?): the profile has the spans as markers only",
            args.dir.display(),
            args.prefix
        );
    } else if !w.with_stacks && w.samples > 0 {
        crate::usage::say!(
            "lotus: note: the samples carry no call stacks (traced with `--stacks none`?): each sample's stack is its own function alone"
        );
    }
    crate::usage::note!(
        "lotus: wrote {} ({} process(es), {} thread(s), {} sample(s), {} marker(s)); open it at https://profiler.firefox.com (Load a profile from file)",
        if to_stdout {
            "the profile".to_string()
        } else {
            args.out.display().to_string()
        },
        w.processes,
        w.threads,
        w.samples,
        w.markers
    );
    Ok(ExitCode::SUCCESS)
}
