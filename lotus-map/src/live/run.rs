//! One run of an op in a process of its own under the backend, and the
//! words for a run that failed.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use lotus_core::Profiler;
use lotus_sys::process::Reaper;

use super::serve::{serve_until, RunError, ECHO_SETTLE, REAP_LIMIT};
use super::{collect_options, harness_target, LiveOptions, OpSpec, RunOutput};
use crate::echo::Echo;
use crate::error::Context;
use crate::op_harness::{self as harness, HarnessFiles, HarnessResult, HarnessStage};
use lotus_control::host::ControlHost;

/// Runs one op once under the backend.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_once(
    backend: &dyn Profiler,
    files: &HarnessFiles,
    control_lib: &Path,
    spec: &OpSpec,
    only: Option<&str>,
    run: u32,
    opts: &LiveOptions,
    interrupted: &AtomicBool,
    reap: bool,
) -> Result<RunOutput, RunError> {
    // Dropped last, on every way out: ends whatever the run left, also
    // daemons that left its process group (they would hold lotus's stdout
    // and stderr open). Not for the floor run beside an op (`reap`
    // false): a reaper ends every descendant of lotus, the op's too, and
    // the floor runs only the harness's empty op, which leaves nothing.
    let _reaper = reap.then(|| Reaper::new(REAP_LIMIT));
    let which = if spec.empty { "floor" } else { "run" };
    let result_path = files
        .dir
        .path()
        .join(format!("result-{}-{which}{run}.json", std::process::id()));
    let _ = std::fs::remove_file(&result_path);
    let mut target = harness_target(backend, files, control_lib, spec, &result_path, opts, None);
    if let Some(name) = only {
        target.env.push((harness::ENV_ONLY_OP.into(), name.into()));
    }
    // The control channel, where the lotus process switches the windows:
    // the harness writes requests into one pipe and reads replies from the
    // other. Vendor backends switch their own windows in the profiled
    // process, and get no channel.
    let mut host = if backend.switches_windows() {
        Some(
            ControlHost::new()
                .inspect(|h| target.inherit_channel(h.child_env(), h.child_fds()))
                .context("cannot create the control channel's pipes")?,
        )
    } else {
        None
    };
    // Its output goes through a pipe that lotus echoes, so that a failure
    // can say whether it printed anything (vendor tools log it instead).
    let mut echo = if backend.switches_windows() {
        Some(Echo::start().context("cannot create the pipe for the op's output")?)
    } else {
        None
    };
    target.output_fd = echo.as_ref().and_then(Echo::child_fd);
    let mut copts = collect_options(backend, opts, spec, run)?;
    let pyframes = super::process::python_frames(&mut copts);

    let mut collection = backend
        .collect(&target, &copts)
        .map_err(|e| RunError::Failed(e.to_string()))?;
    if let Some(p) = &pyframes {
        p.watch(collection.pid());
    }
    // Only the child keeps its ends: then the request pipe closes when the
    // child (and anything it started) is gone.
    if let Some(host) = host.as_mut() {
        host.close_child_ends();
    }
    if let Some(echo) = echo.as_mut() {
        echo.close_write_end();
    }

    // The harness leaves as soon as its result is written; should its
    // process linger all the same, the written result is the run's end.
    let served = serve_until(
        collection.as_mut(),
        host.as_mut(),
        Some(opts.timeout),
        interrupted,
        &|| result_path.exists(),
        copts.window_stamps,
    )?;
    let status = served.status;
    // Its last lines come before lotus's words about them.
    let printed = echo.as_ref().map(|echo| {
        echo.settle(ECHO_SETTLE);
        echo.printed()
    });

    let result = HarnessResult::read(&result_path).ok();
    // A written result ends the run, however the process went after it
    // (stopped because it lingered, an exit hook that failed): the result
    // says how the run went.
    let finished = status.success()
        || (served.stopped_after_done && result.is_some())
        || result.as_ref().is_some_and(|r| r.error.is_none());
    if !finished {
        let _ = collection.kill();
        return Err(RunError::Failed(describe_failure(
            status,
            result.as_ref(),
            printed,
        )));
    }
    let windows = collection.window_totals();
    let (report, mut notes) = collection
        .report_noted()
        .map_err(|e| RunError::Failed(e.to_string()))?;
    // After the report: the stacks' last samples got their frames then.
    notes.extend(pyframes.map(|p| p.finish().notes()).unwrap_or_default());
    let result = result.ok_or_else(|| RunError::Failed(no_result(0, printed)))?;
    if let Some(err) = &result.error {
        return Err(RunError::Failed(err.clone()));
    }
    Ok(RunOutput {
        report,
        result,
        windows,
        notes,
        notes_of: format!("run {run}"),
    })
}

/// A harness that exited with `code` without writing its result: the op
/// ended the process itself. `printed`: whether it printed anything (when
/// lotus saw its output).
fn no_result(code: i32, printed: Option<bool>) -> String {
    let output = match printed {
        Some(true) => "; see its output above",
        Some(false) => "; it printed nothing",
        None => "",
    };
    format!(
        "the Python process exited with status {code} without writing its result: the op (or \
         code it ran) ended the process itself, e.g. with os._exit({code}) or a C library's \
         exit(){output}; an op must return instead"
    )
}

pub(super) fn describe_failure(
    status: std::process::ExitStatus,
    result: Option<&HarnessResult>,
    printed: Option<bool>,
) -> String {
    if let Some(sig) = status.signal() {
        return format!(
            "the Python process was killed by signal {sig} ({}){}",
            signal_name(sig),
            if sig == libc::SIGSEGV || sig == libc::SIGABRT || sig == libc::SIGBUS {
                ": the op crashed in native code"
            } else {
                ""
            }
        );
    }
    let code = status.code().unwrap_or(-1);
    match result {
        Some(r) => {
            let stage = match r.stage {
                Some(HarnessStage::Parse) => "the op file does not parse",
                Some(HarnessStage::Read) => "the op file cannot be read",
                Some(HarnessStage::Import) => "importing the op file raised",
                Some(HarnessStage::Setup) => "setup() raised",
                Some(HarnessStage::Warmup) => "the op raised during warm-up",
                Some(HarnessStage::Window) => "the op raised inside the window",
                Some(HarnessStage::Script) => "the script raised",
                Some(HarnessStage::Control) => "the control library failed",
                Some(HarnessStage::Interrupted) => "interrupted",
                _ => "the harness failed",
            };
            match &r.error {
                Some(e) => format!("{stage} (exit {code}):\n{}", indent(e.trim_end())),
                None => format!("{stage} (exit {code})"),
            }
        }
        None => no_result(code, printed),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        _ => "signal",
    }
}
