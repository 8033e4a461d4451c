//! A whole program profiled under a backend (`lotus profile`): all its
//! processes and threads from start to end, or only the windows it opens
//! itself, its profile the normalized `lotus.profile/1`.
//!
//! [`PreparedProgram::prepare`] makes the target: the program can `import
//! lotus` from a harness folder written for it, and reach lotus through
//! the control library the caller names (a profile without windows needs
//! none); [`PreparedProgram::run`] runs it to its end (or a time limit, or
//! an interrupt: the profile then holds what was sampled until then,
//! marked partial).

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lotus_core::{CallStacks, CollectOptions, Partial, Profile, Profiler, StackCount, Target};
use lotus_sys::process::Reaper;

use crate::harness::{write_harness, HarnessFiles};
use crate::live::{control_env, serve, RunError, REAP_LIMIT};
use crate::{ControlHost, MapError, Result};

/// How a whole program is profiled ([`PreparedProgram`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ProgramOptions {
    /// The program's arguments (after the program itself).
    pub args: Vec<String>,
    /// The command as the profile records it (the program as given, and
    /// its arguments).
    pub command: Vec<String>,
    /// Only the windows the program opens itself, not the whole run.
    pub windows: bool,
    /// Sampling frequency in Hz.
    pub frequency_hz: u64,
    /// The vendor analysis (VTune -collect TYPE, uProf --config TYPE).
    pub collect_type: Option<String>,
    /// Where to keep the vendor's raw results.
    pub keep_raw: Option<PathBuf>,
    /// Call stacks with every sample (a backend that streams them).
    pub stacks: CallStacks,
    /// How long the program may run before it is stopped.
    pub timeout: Option<Duration>,
    /// The program's standard output goes to standard error (the
    /// profile is written to standard output).
    pub stdout_to_stderr: bool,
}

impl ProgramOptions {
    /// The program's `command` (as given, for the profile; its arguments
    /// after the first word) sampled at `frequency_hz`, the whole run.
    pub fn new(command: Vec<String>, frequency_hz: u64) -> ProgramOptions {
        ProgramOptions {
            args: command.iter().skip(1).cloned().collect(),
            command,
            frequency_hz,
            ..ProgramOptions::default()
        }
    }

    /// What the collection is asked for.
    fn collect_options(&self) -> CollectOptions {
        let mut copts = CollectOptions::default();
        copts.frequency_hz = Some(self.frequency_hz);
        copts.collect_type.clone_from(&self.collect_type);
        copts.keep_raw.clone_from(&self.keep_raw);
        copts.whole_program = !self.windows;
        copts.stacks = self.stacks;
        copts
    }
}

/// A program ready to profile: its target and, for windows, the control
/// channel's lotus end.
pub struct PreparedProgram {
    target: Target,
    /// The harness folder the program imports `lotus` from (it lives as
    /// long as the run).
    _files: HarnessFiles,
    host: Option<ControlHost>,
}

/// What profiling a program gave ([`PreparedProgram::run`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct ProgramRun {
    /// The profile (`lotus.profile/1`).
    pub profile: Profile,
    /// The call stacks sampled (with [`ProgramOptions::stacks`]).
    pub stacks: Vec<StackCount>,
    /// Windows the program opened.
    pub windows: u64,
    /// Samples its windows took.
    pub samples: u64,
    /// What the backend noted (samples known to be missing...).
    pub notes: Vec<String>,
    /// Why the run was stopped early, if it was.
    pub partial: Option<Partial>,
    /// The program's exit status (none where it was stopped).
    pub status: Option<ExitStatus>,
    /// The program run.
    pub program: PathBuf,
}

impl PreparedProgram {
    /// Makes the target of `program` (found by the caller) for `backend`:
    /// the harness folder first on `PYTHONPATH`, the control library
    /// `control_library` gives for that folder (where it gives none, the
    /// program cannot open windows: the caller says why), and, where the
    /// program opens windows itself and the backend switches them, the
    /// control channel.
    pub fn prepare(
        backend: &dyn Profiler,
        program: PathBuf,
        options: &ProgramOptions,
        control_library: &mut dyn FnMut(&Path) -> Option<PathBuf>,
    ) -> Result<PreparedProgram> {
        let mut target = Target::new(program);
        target.args = options.args.iter().map(Into::into).collect();
        target.stdout_to_stderr = options.stdout_to_stderr;
        // The program can `import lotus` from the harness folder, and reach
        // lotus through the control library written beside it. A profile
        // without windows needs no library.
        let files = write_harness()
            .map_err(|e| MapError::context("cannot write the lotus Python module", e))?;
        let control_lib = control_library(files.dir.path());
        target
            .env
            .extend(control_env(backend, control_lib.as_deref()));
        let pythonpath = match std::env::var_os("PYTHONPATH") {
            Some(p) if !p.is_empty() => {
                let mut v = files.dir.path().as_os_str().to_owned();
                v.push(":");
                v.push(p);
                v
            }
            _ => files.dir.path().as_os_str().to_owned(),
        };
        target.env.push(("PYTHONPATH".into(), pythonpath));
        let host = if options.windows && backend.switches_windows() {
            Some(
                ControlHost::new()
                    .inspect(|h| target.inherit_channel(h.child_env(), h.child_fds()))
                    .map_err(|e| {
                        MapError::context("cannot create the control channel's pipes", e)
                    })?,
            )
        } else {
            None
        };
        Ok(PreparedProgram {
            target,
            _files: files,
            host,
        })
    }

    /// Runs the program under `backend` to its end, `interrupted` (set by
    /// the caller's Ctrl-C or SIGTERM handler) or the time limit, and
    /// makes its profile. Whatever the program left is ended.
    pub fn run(
        mut self,
        backend: &dyn Profiler,
        options: &ProgramOptions,
        interrupted: &AtomicBool,
    ) -> Result<ProgramRun> {
        // Dropped last: ends whatever the program left, also daemons that
        // left its process group.
        let _reaper = Reaper::new(REAP_LIMIT);
        let mut copts = options.collect_options();
        let pyframes = crate::live::python_frames(&mut copts);
        let mut collection = backend.collect(&self.target, &copts)?;
        if let Some(p) = &pyframes {
            p.watch(collection.pid());
        }
        if let Some(h) = self.host.as_mut() {
            h.close_child_ends();
        }
        let whole = !options.windows && backend.switches_windows();
        if whole {
            // The whole run is one window, open from now on.
            collection.resume()?;
        }
        // Stopped early (Ctrl-C, SIGTERM, a time limit), the run still has
        // its samples up to then: they are kept, marked partial.
        let (status, partial) = stopped_early(
            serve(
                collection.as_mut(),
                self.host.as_mut(),
                options.timeout,
                interrupted,
            ),
            &self.target,
        )?;
        if whole {
            collection.pause()?;
        }
        // Summed: a program's windows cost no memory each.
        let windows = collection.window_totals();
        let (mut report, mut notes) = collection.report_noted()?;
        // After the report: the stacks' last samples got their frames then.
        notes.extend(pyframes.map(|p| p.finish().notes()).unwrap_or_default());
        let stacks = std::mem::take(&mut report.stacks);
        let mut profile = Profile::new(backend.name(), report);
        // A backend that streams its samples counts them itself, one per
        // period of the frequency asked; the others state theirs in their
        // reports.
        if backend.streaming().is_some() {
            profile.sample_interval_s = Some(1.0 / options.frequency_hz as f64);
        }
        profile.command = options.command.clone();
        profile.partial.clone_from(&partial);
        let task_clock: f64 = windows
            .counters
            .get("task-clock-ns")
            .copied()
            .unwrap_or(0.0);
        if windows.count > 0 {
            profile
                .environment
                .insert("windows".into(), windows.count.to_string());
            profile
                .environment
                .insert("samples".into(), windows.samples.to_string());
            profile
                .environment
                .insert("task_clock_s".into(), format!("{:.6}", task_clock / 1e9));
        }
        Ok(ProgramRun {
            profile,
            stacks,
            windows: windows.count,
            samples: windows.samples,
            notes,
            partial,
            status,
            program: self.target.program.clone(),
        })
    }
}

/// The program's exit status, or, stopped early (Ctrl-C, SIGTERM, the
/// time limit), why: the run still has its samples up to then, kept and
/// marked partial.
fn stopped_early(
    served: std::result::Result<ExitStatus, RunError>,
    target: &Target,
) -> Result<(Option<ExitStatus>, Option<Partial>)> {
    Ok(match served {
        Ok(status) => (Some(status), None),
        Err(RunError::Interrupted) => (
            None,
            Some(Partial {
                reason: Partial::INTERRUPTED.into(),
                message: "interrupted (Ctrl-C or SIGTERM): the program and everything it \
                          started were stopped"
                    .into(),
            }),
        ),
        Err(RunError::TimedOut(timeout)) => (
            None,
            Some(Partial {
                reason: Partial::TIMEOUT.into(),
                message: format!(
                    "still running after --timeout {} s: the program and everything it \
                     started were stopped",
                    timeout.as_secs()
                ),
            }),
        ),
        Err(e) => return Err(MapError::context(target.program.display().to_string(), e)),
    })
}
