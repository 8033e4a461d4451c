//! `lotus tune -- CMD`: runs the job briefly under a few DataLoader
//! settings, each chosen by the model from the best run so far, and keeps
//! the best.
//!
//! Trial 1 is the job as written, traced (`lotus trace run`, this binary
//! run again, so the trace is the same as a user's). Then, at most
//! `--trials` times in all: the model ([`lotus_predict`]) predicts every
//! setting of the grid (`num_workers`, `prefetch_factor`,
//! `persistent_workers`) from the best trial so far (those with workers
//! from the best trial that ran workers, where the best ran none); where
//! no untried setting is predicted to beat that trial's loop by more than the run's
//! noise (3% at least), tuning stops; else the fastest
//! predicted is run, applied by the tracer to the DataLoader's arguments
//! (`LOTUS_LOADER`) and, for one thread per helper pool, the
//! environment (`OMP_NUM_THREADS=1`...), with no change to the job's
//! code, and its measured loop is set beside its prediction. Every trial
//! is sampled (no stacks, no counters), so that the model knows what the
//! helper pools did and can propose one thread per pool. `--batches N` stops each trial
//! after N batches (`LOTUS_STOP_AFTER`). The best setting is the trial of
//! the shortest measured loop: never one slower than the job as written,
//! which is trial 1.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lotus_predict::{grid, predict, Change, Observed, Setting};
use serde::Serialize;

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

/// A setting is tried where it is predicted to beat the best trial so far
/// by this share at least (or by the run's noise, where more).
const MIN_GAIN: f64 = 0.03;

/// The schema tag of `lotus tune --format json`.
pub const SCHEMA: &str = "lotus.tune/1";

/// One trial.
#[derive(Debug, Clone, Serialize)]
struct Trial {
    /// 1, 2, ...
    n: u32,
    /// `LOTUS_LOADER`'s value ("" for the job as written).
    loader: String,
    /// Whether its helper pools had one thread each (`OMP_NUM_THREADS=1`
    /// and the others of [`THREAD_VARS`] set).
    one_thread: bool,
    /// The setting, in words.
    setting: String,
    /// The prediction it was chosen by (none for trial 1).
    predicted_s: Option<f64>,
    low_s: Option<f64>,
    high_s: Option<f64>,
    /// Its loop as measured, s.
    measured_s: f64,
    /// Its trace folder (where kept).
    trace: Option<String>,
}

#[derive(Debug, Serialize)]
struct Out {
    schema: &'static str,
    trials: Vec<Trial>,
    best: usize,
    stopped: String,
}

fn words(s: &Setting) -> String {
    format!(
        "num_workers={}, prefetch_factor={}, persistent_workers={}{}",
        s.workers,
        s.prefetch,
        if s.persistent { "True" } else { "False" },
        if s.one_thread {
            ", one thread per pool"
        } else {
            ""
        }
    )
}

/// The variables that limit the helper pools a trial with one thread per
/// pool sets (each pool reads its own as it starts).
const THREAD_VARS: [&str; 6] = [
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "RAYON_NUM_THREADS",
];

/// What a trial sets: `LOTUS_LOADER` ("" for the job as written) and
/// whether its pools get one thread each; as one key, to tell settings
/// tried.
fn key(loader: &str, one_thread: bool) -> String {
    format!("{loader};threads={}", u8::from(one_thread))
}

/// `LOTUS_LOADER` for `s`.
fn loader_env(s: &Setting) -> String {
    if s.workers == 0 {
        "workers=0".into()
    } else {
        format!(
            "workers={},prefetch={},persistent={}",
            s.workers,
            s.prefetch,
            u8::from(s.persistent)
        )
    }
}

/// The setting `c` makes of `from`'s.
fn applied(from: &Setting, c: &Change) -> Setting {
    let mut s = from.clone();
    if let Some(n) = c.workers {
        s.workers = n;
    }
    if let Some(k) = c.prefetch {
        s.prefetch = k;
    }
    s.persistent |= c.persistent;
    s.one_thread |= c.threads == Some(1);
    s
}

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
    let mut obs = crate::traces::observe(dir, cpus, sampled.as_ref())
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
    let cpus = crate::render::verdict::cpus_here().unwrap_or(1) as f64;
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
        let best = best_of(&trials);
        let best_s = trials[best].measured_s;
        // Trial 1's setting is the job's own (no LOTUS_LOADER).
        let tried: Vec<String> = trials
            .iter()
            .map(|t| {
                let loader = if t.loader.is_empty() {
                    loader_env(&s0)
                } else {
                    t.loader.clone()
                };
                key(&loader, t.one_thread)
            })
            .collect();
        // The settings are predicted from the best trial; where it ran no
        // workers (its trace knows no worker's start-up or handover),
        // those with workers are predicted from the best trial that ran
        // some, where one did.
        let with_workers = (0..trials.len())
            .filter(|&i| observed[i].inputs.traced.workers > 0)
            .min_by(|&a, &b| trials[a].measured_s.total_cmp(&trials[b].measured_s));
        let mut sources = vec![best];
        if observed[best].inputs.traced.workers == 0 {
            sources.extend(with_workers);
        }
        let mut pick: Option<(lotus_predict::Scenario, Setting)> = None;
        let mut noise = MIN_GAIN;
        for &src in &sources {
            let from = &observed[src];
            let own = from.inputs.traced.workers > 0;
            let g = grid(from);
            let p = predict(from, &g)?;
            let bar = p.model.noise.max(MIN_GAIN);
            noise = noise.max(bar);
            for (sc, c) in p.scenarios.into_iter().zip(g) {
                let set = applied(&from.inputs.traced, &c);
                // From a no-worker trial, only settings without workers
                // where another trial can speak for those with them.
                if src == best && !own && set.workers > 0 && sources.len() > 1 {
                    continue;
                }
                if src != best && set.workers == 0 {
                    continue;
                }
                // Worth a trial: predicted to beat the best so far by more
                // than the run's noise (at least MIN_GAIN); the trial then
                // measures it, so the model's own margin is not asked for.
                if sc.loop_s >= best_s * (1.0 - bar)
                    || tried.contains(&key(&loader_env(&set), set.one_thread))
                {
                    continue;
                }
                if pick.as_ref().is_none_or(|(b, _)| sc.loop_s < b.loop_s) {
                    pick = Some((sc, set));
                }
            }
        }
        let Some((s, set)) = pick else {
            stopped = format!(
                "no setting is predicted to beat trial {} by more than the noise ({:.0}%)",
                best + 1,
                noise * 100.0
            );
            break;
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
    let best = best_of(&trials);
    let b = &trials[best];
    match args.format {
        TuneFormat::Json => {
            let out = Out {
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

/// The trial of the shortest measured loop (the first of equals).
fn best_of(trials: &[Trial]) -> usize {
    let mut best = 0;
    for (i, t) in trials.iter().enumerate() {
        if t.measured_s < trials[best].measured_s {
            best = i;
        }
    }
    best
}
