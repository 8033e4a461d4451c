//! The fork server's side in lotus: under perf an op's runs are made by
//! one Python process that imports the op once and forks a child per run
//! (see `lotus-tracer/python/lotus_harness.py`, `--runs`). One collection covers them;
//! each run is one window, and its report holds that window's samples.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

use lotus_core::Profiler;
use lotus_sys::process::Reaper;

use super::run::describe_failure;
use super::serve::{serve_until, RunError, ECHO_SETTLE, REAP_LIMIT};
use super::{collect_options, harness_target, runs_of, LiveOptions, OpSpec, RunContext, RunOutput};
use crate::echo::Echo;
use crate::error::Context;
use crate::op_harness::{self as harness, HarnessResult, HarnessStage};
use lotus_control::host::ControlHost;

/// How many runs the fork server makes for `spec`: all of `--runs`
/// where the backend tells runs apart by process and time (perf: each run
/// is a child of the server, with one window on the samples' clock), for
/// an op (not the floor, which runs once, nor one window name of a
/// script); `None`: one process per run.
pub(super) fn fork_server_runs(
    backend: &dyn Profiler,
    spec: &OpSpec,
    only: Option<&str>,
    opts: &LiveOptions,
) -> Option<u32> {
    let fits = backend.switches_windows()
        && backend.takes_window_stamps()
        && !opts.no_fork_server
        && !spec.empty
        && only.is_none();
    fits.then_some(runs_of(spec, opts))
}

/// Runs `spec` under the fork server for `runs` runs: one collection over
/// one Python process that imports the op once and forks a child per run.
/// Returns each run's output in order, up to the first that failed (its
/// error last); `None` when the file is a script or program, which the
/// server leaves to one process per run.
pub(super) fn run_server(
    ctx: &RunContext,
    spec: &OpSpec,
    runs: u32,
) -> Result<Option<Vec<Result<RunOutput, RunError>>>, RunError> {
    let (backend, opts) = (ctx.backend, ctx.opts);
    let _reaper = Reaper::new(REAP_LIMIT);
    // Dropped before the reaper: with the floor beside this op, its run
    // must be over before the reaper ends every descendant of lotus (an
    // op that fails at import gets here long before the floor is done).
    // It also holds back a script, which declines the server: its runs,
    // one process each with a reaper of their own, start only after this
    // returns.
    let _floor_done = ctx
        .start_gate
        .map(|gate| FloorDone(gate, opts.timeout, ctx.interrupted));
    let result_path = ctx
        .files
        .dir
        .path()
        .join(format!("result-{}-server.json", std::process::id()));
    let run_path = |k: u32| PathBuf::from(format!("{}.{k}", result_path.display()));
    let _ = std::fs::remove_file(&result_path);
    for k in 1..=runs {
        let _ = std::fs::remove_file(run_path(k));
    }
    let mut target = harness_target(
        backend,
        ctx.files,
        ctx.control_lib,
        spec,
        &result_path,
        opts,
        Some(runs),
    );
    if let Some(gate) = ctx.start_gate {
        // The floor runs beside this import: the runs wait for it.
        target.args.push("--start-gate".into());
        target.args.push(gate.as_os_str().to_owned());
    }
    let mut host = ControlHost::new()
        .inspect(|h| target.inherit_channel(h.child_env(), h.child_fds()))
        .context("cannot create the control channel's pipes")?;
    let mut echo = Echo::start().context("cannot create the pipe for the op's output")?;
    target.output_fd = echo.child_fd();
    // Each run is a window: its figures are asked for one by one.
    let mut copts = collect_options(backend, opts, spec, 1)?.with_each_window(true);
    let pyframes = super::process::python_frames(&mut copts);
    let mut collection = backend
        .collect(&target, &copts)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    if let Some(p) = &pyframes {
        p.watch(collection.pid());
    }
    host.close_child_ends();
    echo.close_write_end();
    // Each run has --timeout (the server stops a run past it); this bounds
    // the server itself, imports included.
    let limit = opts.timeout.saturating_mul(runs.saturating_add(1));
    let served = serve_until(
        collection.as_mut(),
        Some(&mut host),
        Some(limit),
        ctx.interrupted,
        &|| result_path.exists(),
        copts.window_stamps,
    )?;
    echo.settle(ECHO_SETTLE);
    let printed = Some(echo.printed());
    let server = HarnessResult::read(&result_path).ok();
    let Some(server) = server else {
        let _ = collection.kill();
        return Err(RunError::Failed(describe_failure(
            served.status,
            None,
            printed,
        )));
    };
    if server.server == Some(false) {
        return Ok(None);
    }
    if server.error.is_some() {
        // The op failed before any run (its import): run 1's failure.
        let _ = collection.kill();
        return Err(RunError::Failed(describe_failure(
            served.status,
            Some(&server),
            printed,
        )));
    }
    let windows = collection.windows();
    let (reports, mut notes) = collection
        .reports_per_window_noted()
        .map_err(|e| RunError::Failed(e.to_string()))?;
    // After the reports: the stacks' last samples got their frames then.
    notes.extend(pyframes.map(|p| p.finish().notes()).unwrap_or_default());
    let mut outs = Vec::new();
    let runs_made = server.runs_made.unwrap_or(0).min(runs);
    for k in 1..=runs_made {
        let result = match HarnessResult::read(&run_path(k)) {
            Ok(r) => r,
            Err(e) => {
                outs.push(Err(RunError::Failed(e.to_string())));
                break;
            }
        };
        if let Some(failure) = child_failure(&result, printed, opts.timeout) {
            outs.push(Err(failure));
            break;
        }
        // Each run opened one window, in order.
        let i = outs.len();
        let (Some(window), Some(report)) = (windows.get(i), reports.get(i)) else {
            outs.push(Err(RunError::Failed(format!(
                "run {k} opened no window ({} windows for {k} runs)",
                windows.len()
            ))));
            break;
        };
        outs.push(Ok(RunOutput {
            report: report.clone(),
            result,
            windows: lotus_core::WindowTotals::of(window),
            // The server's notes cover all its runs: told with the first.
            notes: if i == 0 { notes.clone() } else { Vec::new() },
            notes_of: format!("runs 1-{runs_made} (one fork server)"),
        }));
    }
    Ok(Some(outs))
}

/// How a fork server's run failed, from its result: the op raised (the
/// harness's message), or its process ended without a result (the server
/// recorded how).
fn child_failure(
    result: &HarnessResult,
    printed: Option<bool>,
    timeout: Duration,
) -> Option<RunError> {
    if result.child_timeout {
        return Some(RunError::TimedOut(timeout));
    }
    let status = match (result.child_signal, result.child_exit) {
        (Some(sig), _) => Some(std::process::ExitStatus::from_raw(sig)),
        (None, Some(code)) => Some(std::process::ExitStatus::from_raw((code & 0xff) << 8)),
        _ => None,
    };
    if let Some(status) = status {
        return Some(RunError::Failed(describe_failure(status, None, printed)));
    }
    // No error and no child end: the run went well.
    result.error.as_ref()?;
    let code = match result.stage {
        Some(HarnessStage::Control) => harness::EXIT_CONTROL,
        Some(HarnessStage::Read | HarnessStage::Parse) => harness::EXIT_BAD_FILE,
        _ => harness::EXIT_OP_RAISED,
    };
    Some(RunError::Failed(describe_failure(
        std::process::ExitStatus::from_raw(code << 8),
        Some(result),
        printed,
    )))
}

/// Waits, when dropped, for the floor that runs beside the fork server
/// (see [`super::wait_for_gate`]).
struct FloorDone<'a>(
    &'a std::path::Path,
    Duration,
    &'a std::sync::atomic::AtomicBool,
);

impl Drop for FloorDone<'_> {
    fn drop(&mut self) {
        super::wait_for_gate(self.0, self.1, self.2);
    }
}
