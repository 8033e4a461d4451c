//! `lotus trace view`: Chrome trace event JSON of a trace (see the
//! [module above](super) for what it holds), or with `--format firefox` a
//! Firefox Profiler profile ([`lotus_attribute::write_firefox_profile`]).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use lotus_attribute::{ChromeView, ChromeViewOptions, ViewMessage};

use crate::traces::{load, load_folder};
use crate::usage::sink;

/// `lotus trace view`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ViewArgs {
    /// The trace: a folder of logs (searched recursively: several processes,
    /// ranks or machines make one timeline), one log file, or an attach
    /// folder; or the folders of one distributed job's hosts, merged into
    /// one timeline (their samples are left out: each host's own view has
    /// them).
    #[arg(value_name = "DIR", required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
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
    let job = crate::traces::one_job(&args.dirs, args.dirs.len() > 1)?;
    if args.format == ViewFormat::Firefox {
        if job.is_some() {
            return Err(crate::usage::usage("--format firefox takes one folder: the view of one job's hosts merged is --format json"));
        }
        return firefox(&args);
    }
    let to_stdout = args.out.as_os_str() == "-";
    let options = ChromeViewOptions {
        dir: args.dirs[0].clone(),
        prefix: args.prefix.clone(),
        samples: job.is_none(),
        coarse: args.coarse,
        torch: !args.no_torch,
        out_path: (!to_stdout).then(|| args.out.canonicalize().ok()).flatten(),
        out_shown: args.out.display().to_string(),
    };
    // A folder of samples alone (`trace attach`): spans from their frames.
    let mut loaded = None;
    let view = match job {
        Some((folder, job)) => {
            crate::usage::note!(
                "lotus: {}; the samples of each host are in its own folder's view",
                job.summary()
            );
            let (folder, index) = loaded.insert(load_folder(folder, false)?);
            ChromeView::prepare(&options, folder, index, &mut say)?
        }
        None => match ChromeView::of_samples_alone(&options, &mut say)? {
            Some(view) => view,
            None => {
                let (folder, index) = loaded.insert(load(&args.dirs[0], false)?);
                ChromeView::prepare(&options, folder, index, &mut say)?
            }
        },
    };
    let (sink, writer) = sink(&args.out, "view")?;
    let written = view.write(writer, &mut say)?;
    if let Some(p) = sink {
        p.commit()?;
    }
    let out = match to_stdout {
        true => "the view".to_string(),
        false => args.out.display().to_string(),
    };
    crate::usage::note!("lotus: {}", written.summary(&out));
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
    let w = lotus_attribute::write_firefox_profile(&args.dirs[0], &args.prefix, &mut writer)?;
    drop(writer);
    if let Some(p) = sink {
        p.commit()?;
    }
    let out = match to_stdout {
        true => "the profile".to_string(),
        false => args.out.display().to_string(),
    };
    // What the profile lacks is said even with --quiet; notes are not.
    for (always, text) in w.messages(&args.dirs[0], &args.prefix, &out) {
        match always {
            true => crate::usage::say!("lotus: {text}"),
            false => crate::usage::note!("lotus: {text}"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
