//! `lotus tune -- CMD`: runs the job briefly under a few DataLoader
//! settings, each chosen by the model from the best run so far, and keeps
//! the best.
//!
//! Trial 1 is the job as written, traced (`lotus trace run`, this binary
//! run again, so the trace is the same as a user's); then, at most
//! `--trials` times in all, the setting the model chooses
//! ([`lotus_predict::next_trial`]) is run, with no change to the job's
//! code, and its measured loop is set beside its prediction. Every trial
//! is sampled (no stacks, no counters), so that the model knows what the
//! helper pools did and can propose one thread per pool. `--batches N`
//! stops each trial after N batches (`LOTUS_STOP_AFTER`). The best
//! setting is the trial of the shortest measured loop: never one slower
//! than the job as written, which is trial 1.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lotus_predict::{best_trial, loader_env, next_trial, setting_words as words, NextTrial};
use lotus_predict::{Observed, Trial, TuneRecord, THREAD_VARS, TUNE_SCHEMA};

/// `lotus tune`'s arguments.
#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// Trials at most, the job as written included.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub trials: u32,
    /// Stop each trial after N batches taken (all epochs together).
    #[arg(long, value_name = "N")]
    pub batches: Option<u64>,
    /// Keep each trial's trace in DIR/trial-<n> (default: a private
    /// temporary folder, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Stop a trial that runs longer than S seconds.
    #[arg(long, value_name = "S", default_value_t = 3600)]
    pub timeout: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: TuneFormat,
    /// The job: a program and its arguments (`-- python train.py`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TuneFormat {
    /// Lines of text.
    Table,
    /// `lotus.tune/1`.
    Json,
}

/// The schema tag of `lotus tune --format json`.
pub const SCHEMA: &str = TUNE_SCHEMA;

/// Runs one traced trial into `dir`, its output into `dir`.log, its pools
/// limited to one thread each where `one_thread`. Each trial is sampled
/// (no stacks, no counters: the samples say what the helper pools did,
/// for `--threads 1`; where sampling cannot run, the trial runs without).
fn trial(
    args: &TuneArgs,
    dir: &Path,
    loader: &str,
    one_thread: bool,
    cpus: f64,
) -> Result<Observed> {
    let exe = std::env::current_exe().context("cannot find lotus's own binary to trace a trial")?;
    let log = dir.with_extension("log");
    let (out, err) = lotus_sys::process::log_pair(&log)
        .with_context(|| format!("cannot create {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(["--quiet", "trace", "run", "--sample", "--stacks", "none"])
        .args(["--counters", "none", "--out"])
        .arg(dir)
        .arg("--")
        .args(&args.command)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if loader.is_empty() {
        cmd.env_remove("LOTUS_LOADER");
    } else {
        cmd.env("LOTUS_LOADER", loader);
    }
    match args.batches {
        Some(n) => cmd.env("LOTUS_STOP_AFTER", n.to_string()),
        None => cmd.env_remove("LOTUS_STOP_AFTER"),
    };
    if one_thread {
        for v in THREAD_VARS {
            cmd.env(v, "1");
        }
    }
    let mut child = cmd.spawn().context("cannot start a trial")?;
    let status = match lotus_sys::process::wait_for(&mut child, Duration::from_secs(args.timeout))?
    {
        Some(s) => s,
        None => {
            // The trial's lotus stays in this process group (Ctrl-C
            // reaches it); past the limit it gets SIGINT, which it passes
            // to the job, then SIGKILL.
            let pid = libc::pid_t::try_from(child.id()).unwrap_or(0);
            if pid > 0 {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGINT) };
            }
            if lotus_sys::process::wait_for(&mut child, Duration::from_secs(10))?.is_none() {
                child.kill()?;
                child.wait()?;
            }
            bail!(
                "the trial with LOTUS_LOADER='{loader}' ran past --timeout {} s and was stopped (its output: {}); give --batches N to make trials brief",
                args.timeout,
                log.display()
            );
        }
    };
    if !status.success() {
        bail!(
            "the trial with LOTUS_LOADER='{loader}' failed ({status}); its output: {}\n{}",
            log.display(),
            lotus_sys::process::tail(&log, 10)
        );
    }
    let sampled = crate::traces::sampled_attribution(dir, "lotus");
    let mut obs = lotus_attribute::observe_run(dir, cpus, sampled.as_ref())
        .with_context(|| format!("cannot model the trial traced in {}", dir.display()))?;
    obs.inputs.traced.one_thread = one_thread;
    Ok(obs)
}

/// Runs `lotus tune`.
pub fn run(args: TuneArgs) -> Result<ExitCode> {
    if args.out.as_deref().is_some_and(crate::usage::is_stdout) {
        return Err(crate::usage::usage(
            "--out -: the trials are trace folders, which cannot be standard output: give a folder (or no --out)",
        ));
    }
    let cpus = lotus_attribute::cpus_here().unwrap_or(1) as f64;
    let private;
    let root: PathBuf = match &args.out {
        Some(d) => {
            lotus_sys::create_dir_all(d, 0o755)
                .with_context(|| format!("cannot create {}", d.display()))?;
            d.clone()
        }
        None => {
            private = lotus_sys::PrivateDir::new("lotus-tune-")?;
            private.path().to_path_buf()
        }
    };
    let say = |line: String| {
        if args.format == TuneFormat::Table {
            println!("{line}");
        }
    };
    let mut trials: Vec<Trial> = Vec::new();
    let mut observed: Vec<Observed> = Vec::new();
    let dir = root.join("trial-1");
    if dir.exists() {
        bail!("{} exists: give an empty --out folder", dir.display());
    }
    let first = trial(&args, &dir, "", false, cpus)?;
    let s0 = first.inputs.traced.clone();
    say(format!(
        "trial 1, the job as written ({}): loop {:.2} s",
        words(&s0),
        first.loop_ns / 1e9
    ));
    trials.push(Trial {
        n: 1,
        one_thread: false,
        loader: String::new(),
        setting: words(&s0),
        predicted_s: None,
        low_s: None,
        high_s: None,
        measured_s: first.loop_ns / 1e9,
        trace: args.out.as_ref().map(|_| dir.display().to_string()),
    });
    observed.push(first);
    let mut stopped = format!("{} trials run (--trials)", args.trials);
    while (trials.len() as u32) < args.trials {
        let (s, set) = match next_trial(&trials, &observed)? {
            NextTrial::Try { scenario, setting } => (scenario, setting),
            NextTrial::Stop { best, noise } => {
                stopped = format!(
                    "no setting is predicted to beat trial {} by more than the noise ({:.0}%)",
                    best + 1,
                    noise * 100.0
                );
                break;
            }
        };
        let n = trials.len() as u32 + 1;
        let env = loader_env(&set);
        let dir = root.join(format!("trial-{n}"));
        let obs = trial(&args, &dir, &env, set.one_thread, cpus)?;
        let measured = obs.loop_ns / 1e9;
        say(format!(
            "trial {n} ({}): predicted {:.2} s ({:.2}-{:.2} s), measured {:.2} s ({:+.0}% off the prediction)",
            words(&set),
            s.loop_s,
            s.low_s,
            s.high_s,
            measured,
            (s.loop_s / measured.max(1e-9) - 1.0) * 100.0
        ));
        trials.push(Trial {
            n,
            one_thread: set.one_thread,
            loader: env,
            setting: words(&set),
            predicted_s: Some(s.loop_s),
            low_s: Some(s.low_s),
            high_s: Some(s.high_s),
            measured_s: measured,
            trace: args.out.as_ref().map(|_| dir.display().to_string()),
        });
        observed.push(obs);
    }
    let best = best_trial(&trials);
    let b = &trials[best];
    match args.format {
        TuneFormat::Json => {
            let out = TuneRecord {
                schema: SCHEMA,
                trials: trials.clone(),
                best,
                stopped,
            };
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        TuneFormat::Table => {
            println!("stopped: {stopped}");
            if best == 0 {
                println!(
                    "best: the job as written ({}), loop {:.2} s",
                    b.setting, b.measured_s
                );
            } else {
                println!(
                    "best: trial {} ({}), loop {:.2} s against {:.2} s as written ({:+.0}%): set it in the DataLoader's arguments, or run the job with LOTUS_LOADER='{}' under lotus trace run{}",
                    b.n,
                    b.setting,
                    b.measured_s,
                    trials[0].measured_s,
                    (b.measured_s / trials[0].measured_s.max(1e-9) - 1.0) * 100.0,
                    b.loader,
                    if b.one_thread {
                        format!(", with {}=1 in its environment", THREAD_VARS.join("=1, "))
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
