//! What each run's process gets: the harness command, its environment
//! (the backend, the control library, the thread counts), the backend's
//! options, and what the mapping records about the environment it ran in.

use std::path::Path;
use std::time::Duration;

use lotus_core::{CollectOptions, Profiler, Target};
use lotus_protocol::ENV_BACKEND;

use super::{LiveOptions, OpSpec};
use crate::error::{Context, Result};
use crate::op_harness::{self as harness, HarnessArgs, HarnessFiles};

/// What the mapping records about where it ran: lotus, the host, the
/// backend and Python versions, the frequency in force, the windows and
/// thread settings.
pub(super) fn environment(
    backend: &dyn Profiler,
    backend_version: Option<String>,
    opts: &LiveOptions,
) -> std::collections::BTreeMap<String, String> {
    let mut env = std::collections::BTreeMap::new();
    env.insert("lotus".into(), env!("CARGO_PKG_VERSION").into());
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        env.insert("host".into(), h.trim().into());
    }
    // CPU model, CPUs, cores, kernel: for comparing hosts (`lotus compare`).
    env.extend(lotus_core::facts());
    if let Some(v) = backend_version {
        env.insert("backend_version".into(), v);
    }
    env.insert("python".into(), opts.python.display().to_string());
    // Bounded: an interpreter wrapper that hangs must not hang the mapping.
    let mut version = std::process::Command::new(&opts.python);
    version.arg("--version");
    if let Ok(Some(out)) = lotus_sys::process::output_within(&mut version, lotus_core::VERSION_WAIT)
    {
        let v = String::from_utf8_lossy(if out.stdout.is_empty() {
            &out.stderr
        } else {
            &out.stdout
        })
        .trim()
        .to_string();
        env.insert("python_version".into(), v);
    }
    // Where the backend knows it, the frequency the samplers ran at (the
    // kernel caps perf's).
    let calibration = backend.calibration();
    let in_force = calibration.map_or(opts.frequency, |c| c.frequency_in_force(opts.frequency));
    env.insert("frequency_hz".into(), in_force.to_string());
    if in_force != opts.frequency {
        env.insert("frequency_requested_hz".into(), opts.frequency.to_string());
    }
    env.insert(
        "frequency_source".into(),
        if opts.frequency_given {
            "given (-F)"
        } else {
            "default"
        }
        .into(),
    );
    // What a sample costs the op here, and so how much it slowed it.
    if let Some(calibration) = calibration {
        if let Ok(cost) = calibration.sampling_cost() {
            env.insert(
                "sampling_cost_us".into(),
                format!("{:.2}", cost.per_sample.as_secs_f64() * 1e6),
            );
            env.insert(
                "sampling_slowdown_pct".into(),
                format!("{:.1}", cost.slowdown_at(in_force) * 100.0),
            );
        }
    }
    env.insert(
        "sample_interval_ms".into(),
        format!("{}", opts.sample_interval(backend).as_nanos() as f64 / 1e6),
    );
    opts.threads.record(&mut env);
    if backend.switches_windows() {
        let (edges, counters) = if opts.window_stamps(backend) {
            (
                "stamped by the op process on CLOCK_MONOTONIC, sent without waiting",
                "read by the op process itself: task-clock (CLOCK_PROCESS_CPUTIME_ID), page-faults and context-switches (getrusage) of its own threads; no cycles or instructions",
            )
        } else {
            (
                "marked by lotus on request (round trip)",
                "perf counters read by lotus at each edge (the process and everything it starts)",
            )
        };
        env.insert("window_edges".into(), edges.into());
        env.insert("window_counters".into(), counters.into());
    }
    env.insert(
        "window_ms".into(),
        opts.window(backend).as_millis().to_string(),
    );
    env
}

/// The backend options of one run; `--keep-raw` gets a folder per op and
/// run.
pub(super) fn collect_options(
    backend: &dyn Profiler,
    opts: &LiveOptions,
    spec: &OpSpec,
    run: u32,
) -> Result<CollectOptions> {
    let mut copts = CollectOptions::default();
    copts.frequency_hz = Some(opts.frequency);
    copts.collect_type.clone_from(&opts.collect_type);
    copts.window_stamps = opts.window_stamps(backend);
    copts.stacks = opts.stacks;
    if let Some(root) = &opts.keep_raw {
        let label: String = spec
            .label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = root.join(format!("{label}-run{run}"));
        lotus_sys::create_dir_all(&dir, 0o755).context("--keep-raw")?;
        copts.keep_raw = Some(dir);
    }
    Ok(copts)
}

/// The reader of the Python frames of a collection's samples, where call
/// stacks are taken: each op process's frames read from its interpreter
/// (every Python: the harness turns no perf trampolines on), spliced into
/// the stacks before they are folded (`copts`'s stack layer), so that the
/// op's own functions are `py::` frames with their file and line. `None`
/// without stacks, or where the reading thread cannot start (the stacks
/// then show native frames only).
pub(crate) fn python_frames(copts: &mut CollectOptions) -> Option<lotus_pyframes::PyFrames> {
    if copts.stacks == lotus_core::CallStacks::None {
        return None;
    }
    let hz = copts.frequency_hz.unwrap_or(lotus_pyframes::MAX_POLL_HZ);
    let frames = lotus_pyframes::PyFrames::start(hz, true).ok()?;
    copts.stack_layer = Some(lotus_core::StackLayer::new(frames.layer()));
    Some(frames)
}

/// The harness command for one run of `spec`, with the environment every
/// backend gets (the channel's variables are added by the caller).
pub(super) fn harness_target(
    backend: &dyn Profiler,
    files: &HarnessFiles,
    control_lib: &Path,
    spec: &OpSpec,
    result: &Path,
    opts: &LiveOptions,
    server_runs: Option<u32>,
) -> Target {
    let args = HarnessArgs {
        op_file: spec
            .file
            .canonicalize()
            .unwrap_or_else(|_| spec.file.to_path_buf()),
        warmup: opts.warmup,
        window: opts.window(backend),
        min_iterations: opts.min_iterations,
        result: result.to_path_buf(),
        empty: spec.empty,
        name: None,
        threads: opts.threads.torch_threads,
        cwd: opts.cwd.clone(),
        runs: server_runs,
        run_timeout: server_runs.map(|_| opts.timeout),
        unsampled: unsampled_budget(backend, spec, opts),
    };
    let mut target = Target::new(opts.python.clone());
    target.args = std::iter::once(files.harness.clone().into_os_string())
        .chain(args.to_args())
        .collect();
    // What an op prints is not the mapping: lotus's stdout carries
    // only lotus's output.
    target.stdout_to_stderr = true;
    target.env.extend(control_env(backend, Some(control_lib)));
    if opts.window_stamps(backend) {
        target
            .env
            .push((lotus_protocol::ENV_WINDOW_STAMPS.into(), "1".into()));
    }
    target.env.extend(opts.threads.env());
    target
}

/// How long an op's calls are timed with sampling stopped after each
/// window (the reference for what sampling costs a call): a twentieth of
/// the window's CPU time, at most 25 ms (a few hundred calls of a 0.1 ms
/// op; at least one call however slow the op), where lotus can stop
/// sampling outside windows (perf). Not for the harness floor nor for
/// scripts (the harness times only op mode).
fn unsampled_budget(backend: &dyn Profiler, spec: &OpSpec, opts: &LiveOptions) -> Option<Duration> {
    const MOST: Duration = Duration::from_millis(25);
    (backend.switches_windows() && !spec.empty).then(|| (opts.window(backend) / 20).min(MOST))
}

/// The variables a profiled process needs to reach lotus: the backend's
/// name and the control library. Scripts that open their own windows with
/// ITT (`ittapi.resume()`, as the original Lotus op scripts do) reach
/// lotus's own ITT collector, the control library, wherever lotus switches
/// the windows, replacing any collector named in lotus's own environment
/// (`map_live` says so); under VTune and uProf the environment's is kept.
pub fn control_env(
    backend: &dyn Profiler,
    control_lib: Option<&Path>,
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    let mut env = vec![(ENV_BACKEND.into(), backend.name().into())];
    if let Some(lib) = control_lib {
        env.push((harness::ENV_CONTROL_LIB.into(), lib.into()));
        // Where lotus switches the windows, ITT windows must reach its
        // collector: one named in lotus's environment (oneAPI's setvars.sh
        // sets VTune's) would take them, and the op would measure nothing.
        if backend.switches_windows() {
            env.push((ENV_ITT_COLLECTOR.into(), lib.into()));
        }
    }
    env
}

/// The variable the ITT static part reads to find its collector library.
pub const ENV_ITT_COLLECTOR: &str = "INTEL_LIBITTNOTIFY64";
