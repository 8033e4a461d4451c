//! The profiler trait every backend implements.
//!
//! A backend is used in two ways: live, where [`Profiler::collect`] starts a
//! target process under the profiler with measurement paused and the
//! returned [`Collection`] opens and closes windows ([`Collection::resume`],
//! [`Collection::pause`]) until it is turned into a [`Report`]; and offline,
//! where [`Profiler::read_report`] reads a report the vendor tool wrote
//! earlier. [`Profiler::probe`] says whether the live path can work here.
//!
//! The trait is object-safe: the registry hands out `Box<dyn Profiler>`.

use crate::Error;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;

use serde::Serialize;

use crate::capabilities::{
    ReportFormat, SamplingCalibration, SamplingControl, StampedWindows, Streaming,
};
use crate::row::{Report, Unit};

/// The longest a `tool --version` may take ([`Probe::from_version_command`]).
pub const VERSION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether a backend can profile on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Probe {
    /// The backend's name.
    pub backend: String,
    /// True when live collection can run here.
    pub available: bool,
    /// The profiler's version (tool or kernel interface), where known.
    pub version: Option<String>,
    /// Why it is not available, and what to do; `None` when available.
    pub reason: Option<String>,
    /// Further facts worth showing (e.g. "hardware counters: not supported
    /// here").
    pub notes: Vec<String>,
}

impl Probe {
    /// A usable backend.
    pub fn available(backend: &str, version: Option<String>) -> Self {
        Probe {
            backend: backend.to_string(),
            available: true,
            version,
            reason: None,
            notes: Vec::new(),
        }
    }

    /// Runs `tool --version`: available with the first line it prints as
    /// the version, or unavailable saying why the command failed or that it
    /// did not answer within [`VERSION_WAIT`].
    pub fn from_version_command(backend: &str, tool: &std::path::Path) -> Self {
        Self::from_version_command_within(backend, tool, VERSION_WAIT)
    }

    fn from_version_command_within(
        backend: &str,
        tool: &std::path::Path,
        limit: std::time::Duration,
    ) -> Self {
        let mut cmd = std::process::Command::new(tool);
        cmd.arg("--version");
        match lotus_sys::process::output_within(&mut cmd, limit) {
            Ok(None) => Probe::unavailable(
                backend,
                format!(
                    "{} --version did not answer within {:.1} s (stopped it); check that the \
                     tool runs (license server, network file system)",
                    tool.display(),
                    limit.as_secs_f64()
                ),
            ),
            Ok(Some(out)) if out.status.success() => {
                let text = String::from_utf8_lossy(&out.stdout);
                let version = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| l.trim().to_string());
                Probe::available(backend, version)
            }
            Ok(Some(out)) => Probe::unavailable(
                backend,
                format!(
                    "{} --version failed ({}): {}",
                    tool.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ),
            Err(e) => Probe::unavailable(backend, format!("cannot run {}: {e}", tool.display())),
        }
    }

    /// A backend that cannot run here, and why.
    pub fn unavailable(backend: &str, reason: impl Into<String>) -> Self {
        Probe {
            backend: backend.to_string(),
            available: false,
            version: None,
            reason: Some(reason.into()),
            notes: Vec::new(),
        }
    }
}

/// The process to profile.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Target {
    /// The program to run.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables added to the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory; the caller's when `None`.
    pub cwd: Option<PathBuf>,
    /// Descriptors the target must inherit (the control channel's pipe
    /// ends): the backend clears their close-on-exec flag in the child
    /// only, so no other process gets them.
    pub keep_fds: Vec<i32>,
    /// Send the target's standard output to this process's standard error
    /// (where this process's own stdout carries data, such as a mapping or
    /// a profile, that the target's prints must not mix into). Otherwise
    /// the target inherits this process's stdout (vendor backends log both
    /// to a file either way).
    pub stdout_to_stderr: bool,
    /// Where both the target's stdout and stderr go instead (a descriptor
    /// the caller keeps open until `collect` returns, e.g. a pipe it echoes
    /// and watches); overrides `stdout_to_stderr`. Vendor backends log the
    /// output to a file and ignore it.
    pub output_fd: Option<i32>,
}

impl Target {
    /// Hands the target a channel's ends: the variable that names them
    /// (`env`, set in its environment) and the descriptors it inherits
    /// (`fds`, kept open across exec): a control channel's
    /// (`lotus_control::ControlHost::child_env` and `child_fds`).
    pub fn inherit_channel(&mut self, env: (OsString, OsString), fds: Vec<i32>) {
        self.env.push(env);
        self.keep_fds = fds;
    }

    /// `program` with no arguments, the inherited environment, folder and
    /// output (set the public fields for the rest).
    pub fn new(program: impl Into<PathBuf>) -> Self {
        Target {
            program: program.into(),
            ..Target::default()
        }
    }

    /// The target with `args` as its arguments.
    pub fn with_args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// The added environment as text (for plans and messages).
    pub fn env_lossy(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect()
    }

    /// The command as a shell would show it (arguments with spaces or
    /// quotes are single-quoted).
    pub fn command_line(&self) -> String {
        std::iter::once(self.program.as_os_str())
            .chain(self.args.iter().map(|a| a.as_os_str()))
            .map(|a| shell_quote(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `s` quoted for a POSIX shell where it needs quoting.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// What a collection would run (see [`Profiler::plan`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CollectPlan {
    /// Commands in the order they run, each as one shell line.
    pub commands: Vec<String>,
    /// Variables set for the profiled process.
    pub env: Vec<(String, String)>,
    /// Anything else worth saying (e.g. "vtune was not found on PATH").
    pub notes: Vec<String>,
}

/// How to collect.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CollectOptions {
    /// Sampling frequency in Hz; the backend's default when `None`.
    pub frequency_hz: Option<u64>,
    /// The vendor analysis type (VTune `hotspots`, `uarch-exploration`).
    pub collect_type: Option<String>,
    /// Keep the vendor's raw result folder here instead of deleting it.
    pub keep_raw: Option<PathBuf>,
    /// Measure the whole program from its start instead of starting paused
    /// (`lotus profile` without `--windows`). Backends whose windows the
    /// lotus process switches get a window opened at once instead.
    pub whole_program: bool,
    /// The profiled process stamps its own window edges and sends them
    /// without waiting ([`lotus_protocol::ENV_WINDOW_STAMPS`]): the
    /// collection gets them through its [`Collection::stamped_windows`].
    /// Only where [`Profiler::takes_window_stamps`].
    pub window_stamps: bool,
    /// The caller will ask for each window on its own
    /// ([`Collection::windows`], [`Collection::finish`] per window).
    /// Without it a backend may keep the closed windows summed only
    /// ([`Collection::window_totals`]), in the same memory for one window
    /// or a million.
    pub each_window: bool,
    /// Call stacks with the samples, folded into each report
    /// ([`Report::stacks`](crate::Report::stacks)), where the backend
    /// takes them (perf); others ignore it.
    pub stacks: crate::CallStacks,
    /// With [`CollectOptions::stacks`]: a layer between the sampler and
    /// the folded stacks that may rewrite each sample's stack (the Python
    /// frames `lotus-pyframes` reads from the interpreter); the folds
    /// count the stacks as it passes them on.
    pub stack_layer: Option<StackLayer>,
}

/// A layer that wraps the sink a backend's samples go to (see
/// [`CollectOptions::stack_layer`]); called once per collection.
#[derive(Clone)]
pub struct StackLayer(Arc<StackLayerFn>);

/// What a [`StackLayer`] calls: the sink it is given, wrapped.
type StackLayerFn =
    dyn Fn(Box<dyn lotus_samples::SampleSink>) -> Box<dyn lotus_samples::SampleSink> + Send + Sync;

impl StackLayer {
    /// The layer that wraps a sink with `wrap`.
    pub fn new(
        wrap: impl Fn(Box<dyn lotus_samples::SampleSink>) -> Box<dyn lotus_samples::SampleSink>
            + Send
            + Sync
            + 'static,
    ) -> StackLayer {
        StackLayer(Arc::new(wrap))
    }

    /// `inner`, wrapped.
    pub fn wrap(
        &self,
        inner: Box<dyn lotus_samples::SampleSink>,
    ) -> Box<dyn lotus_samples::SampleSink> {
        (self.0)(inner)
    }
}

impl std::fmt::Debug for StackLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StackLayer")
    }
}

impl CollectOptions {
    /// Options with call stacks as `stacks` says.
    pub fn with_stacks(mut self, stacks: crate::CallStacks) -> Self {
        self.stacks = stacks;
        self
    }

    /// The stacks pass through `layer` before they are folded (see the
    /// field).
    pub fn with_stack_layer(mut self, layer: StackLayer) -> Self {
        self.stack_layer = Some(layer);
        self
    }

    /// Samples at `hz` (capped by the backend where the system caps it).
    ///
    /// ```
    /// use lotus_core::CollectOptions;
    /// let o = CollectOptions::default().with_frequency_hz(4000).with_whole_program(true);
    /// assert_eq!((o.frequency_hz, o.whole_program), (Some(4000), true));
    /// ```
    pub fn with_frequency_hz(mut self, hz: u64) -> Self {
        self.frequency_hz = Some(hz);
        self
    }

    /// Runs the vendor analysis `kind` (VTune `-collect`, uProf `--config`).
    pub fn with_collect_type(mut self, kind: impl Into<String>) -> Self {
        self.collect_type = Some(kind.into());
        self
    }

    /// Keeps the vendor's raw result folder at `dir`.
    pub fn with_keep_raw(mut self, dir: impl Into<PathBuf>) -> Self {
        self.keep_raw = Some(dir.into());
        self
    }

    /// Measures the whole program from its start, not only its windows.
    pub fn with_whole_program(mut self, whole: bool) -> Self {
        self.whole_program = whole;
        self
    }

    /// The caller will ask for each window on its own (see the field).
    pub fn with_each_window(mut self, each: bool) -> Self {
        self.each_window = each;
        self
    }

    /// The profiled process stamps its own window edges (see the field).
    pub fn with_window_stamps(mut self, stamps: bool) -> Self {
        self.window_stamps = stamps;
        self
    }
}

/// A target running under a profiler.
pub trait Collection: Send {
    /// The target's process id.
    fn pid(&self) -> u32;
    /// Opens a measurement window.
    fn resume(&mut self) -> Result<(), Error>;
    /// Closes the measurement window.
    fn pause(&mut self) -> Result<(), Error>;
    /// The target's exit status, if it has exited.
    fn try_wait(&mut self) -> Result<Option<ExitStatus>, Error>;
    /// Waits for the target to exit, at most `limit`: its exit status, or
    /// `None` when it is still running then. (Polls [`Collection::try_wait`]
    /// every few milliseconds: the backends' children are reaped by their
    /// own code, which a blocking `waitpid` here would race.)
    fn wait_timeout(&mut self, limit: std::time::Duration) -> Result<Option<ExitStatus>, Error> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep((deadline - now).min(std::time::Duration::from_millis(5)));
        }
    }
    /// Stops the target and everything it started.
    fn kill(&mut self) -> Result<(), Error>;
    /// Ends the collection and reads what was measured: the one way a
    /// collection ends. `how` says whether all windows make one report
    /// ([`Finish::Together`]) or each window one of its own, in opening
    /// order ([`Finish::PerWindow`]: for a process whose windows are runs
    /// of their own, lotus's fork server; a backend that cannot tell
    /// windows apart refuses). The notes say what the reports are known
    /// to miss, each with its figure (e.g. "samples cover 0.72 s of the
    /// 0.97 s CPU process 1234 ran (74%)", lost or throttled samples,
    /// modules that could not be named). `dyn Collection`'s `report`,
    /// `report_noted` and `reports_per_window_noted` are this, shaped.
    fn finish(self: Box<Self>, how: Finish) -> Result<Finished, Error>;
    /// Opens a window like [`Collection::resume`], calling `tell` (which
    /// lets the profiled process go on) as soon as the window is open; a
    /// backend may do slow bookkeeping (reading counters) after `tell`,
    /// while the op already runs. `tell` is called at most once: not when
    /// the window could not be opened (the error says why).
    fn resume_then(&mut self, tell: &mut dyn FnMut()) -> Result<(), Error> {
        self.resume()?;
        tell();
        Ok(())
    }
    /// Closes the window like [`Collection::pause`], calling `tell` as soon
    /// as it is closed; see [`Collection::resume_then`].
    fn pause_then(&mut self, tell: &mut dyn FnMut()) -> Result<(), Error> {
        self.pause()?;
        tell();
        Ok(())
    }
    /// The collection's [`SamplingControl`]: sampling stopped and
    /// restarted outside windows; `None` (the default) where the backend
    /// cannot.
    fn sampling_control(&mut self) -> Option<&mut dyn SamplingControl> {
        None
    }
    /// The collection's [`StampedWindows`]: window edges the profiled
    /// process stamps itself ([`CollectOptions::window_stamps`]); `None`
    /// (the default) where the backend cannot place a window after the
    /// fact.
    fn stamped_windows(&mut self) -> Option<&mut dyn StampedWindows> {
        None
    }
    /// What each closed window measured, in order. Backends that count
    /// nothing per window return an empty list, and so may a backend whose
    /// collection was started without [`CollectOptions::each_window`] (it
    /// then keeps only [`Collection::window_totals`]).
    fn windows(&self) -> Vec<WindowStats> {
        Vec::new()
    }
    /// Every closed window so far, summed ([`WindowTotals`]): what a
    /// caller that needs no window on its own keeps, in the same memory
    /// whether the process opened one window or a million. The default
    /// sums [`Collection::windows`]; a backend that keeps many windows
    /// should sum its own records without building that list.
    fn window_totals(&self) -> WindowTotals {
        let mut totals = WindowTotals::default();
        for w in self.windows() {
            totals.add(&w);
        }
        totals
    }
}

/// How a collection ends ([`Collection::finish`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// All windows in one report.
    Together,
    /// One report per window, in opening order.
    PerWindow,
}

/// What a collection measured ([`Collection::finish`]): its reports (one,
/// or one per window) and the notes on what they are known to miss.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Finished {
    /// One report, or one per window.
    pub reports: Vec<Report>,
    /// What the reports are known to miss, each with its figure.
    pub notes: Vec<String>,
}

impl Finished {
    /// `reports` with `notes`.
    pub fn new(reports: Vec<Report>, notes: Vec<String>) -> Finished {
        Finished { reports, notes }
    }
}

impl dyn Collection {
    /// [`Collection::finish`] of all windows together: the report.
    pub fn report(self: Box<Self>) -> Result<Report, Error> {
        Ok(self.report_noted()?.0)
    }

    /// [`Collection::finish`] of all windows together: the report and
    /// its notes.
    pub fn report_noted(self: Box<Self>) -> Result<(Report, Vec<String>), Error> {
        let mut f = self.finish(Finish::Together)?;
        let report = f.reports.pop().ok_or_else(|| Error::Other {
            backend: "lotus".into(),
            message: "the collection ended with no report".into(),
        })?;
        Ok((report, f.notes))
    }

    /// [`Collection::finish`] window by window: the reports and the notes.
    pub fn reports_per_window_noted(self: Box<Self>) -> Result<(Vec<Report>, Vec<String>), Error> {
        let f = self.finish(Finish::PerWindow)?;
        Ok((f.reports, f.notes))
    }
}

/// Windows summed: how many, how long, their samples and counters
/// ([`Collection::window_totals`]). Its size does not grow with the
/// windows.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[non_exhaustive]
pub struct WindowTotals {
    /// Windows closed.
    pub count: u64,
    /// How long they were open, summed, in nanoseconds (saturating).
    pub duration_ns: u64,
    /// Samples taken in them.
    pub samples: u64,
    /// Samples the kernel dropped in them.
    pub lost_samples: u64,
    /// Counted events summed over the windows that measured them.
    pub counters: BTreeMap<String, f64>,
    /// Counters some window could not measure, with the (last) reason.
    pub unsupported: BTreeMap<String, String>,
}

impl WindowTotals {
    /// One window, as a total of one.
    pub fn of(w: &WindowStats) -> WindowTotals {
        let mut t = WindowTotals::default();
        t.add(w);
        t
    }

    /// Adds window `w`.
    pub fn add(&mut self, w: &WindowStats) {
        self.count += 1;
        self.duration_ns = self.duration_ns.saturating_add(w.duration_ns);
        self.samples = self.samples.saturating_add(w.samples);
        self.lost_samples = self.lost_samples.saturating_add(w.lost_samples);
        for (k, v) in &w.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        for (k, why) in &w.unsupported {
            if self.unsupported.get(k) != Some(why) {
                self.unsupported.insert(k.clone(), why.clone());
            }
        }
    }
}

/// What one measurement window held.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct WindowStats {
    /// How long the window was open, in nanoseconds.
    pub duration_ns: u64,
    /// Samples taken in the window.
    pub samples: u64,
    /// Samples the kernel dropped (ring buffer full): never hidden.
    pub lost_samples: u64,
    /// Counted events by name (`task-clock-ns`, `context-switches`,
    /// `page-faults`, `cycles`, `instructions`): only those measured.
    pub counters: BTreeMap<String, f64>,
    /// Counters that cannot be measured here, with the reason (e.g.
    /// `cycles`: "no hardware PMU"). Never reported as zero.
    pub unsupported: BTreeMap<String, String>,
}

/// A profiler backend.
pub trait Profiler: Send + Sync {
    /// The name users type (`perf`, `vtune`, `uprof`).
    fn name(&self) -> &'static str;
    /// One line on what the backend is.
    fn description(&self) -> &'static str;
    /// Whether live collection can run here, the version, and why not.
    fn probe(&self) -> Probe;
    /// What this backend's reports count.
    fn unit(&self) -> Unit;
    /// Starts `target` under the profiler with measurement paused.
    fn collect(
        &self,
        target: &Target,
        options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, Error>;
    /// True when the lotus process switches windows (through
    /// [`Collection::resume`] / [`Collection::pause`], on requests that
    /// arrive over the control channel); false when the profiled process
    /// calls the vendor's API itself (VTune's ITT, uProf's profile-control
    /// library), so no channel is opened.
    fn switches_windows(&self) -> bool {
        true
    }
    /// True when the profiled process may stamp its own window edges on
    /// the samples' clock and tell lotus without waiting
    /// ([`CollectOptions::window_stamps`]): the backend's windows are time
    /// ranges it can apply after the fact (perf).
    fn takes_window_stamps(&self) -> bool {
        false
    }
    /// The time between two samples of a busy thread in a collection with
    /// `options`: the interval the backend hands its tool (which may differ
    /// from [`CollectOptions::frequency_hz`] where the tool takes only some
    /// intervals), or `None` when the backend cannot say. Windows are sized
    /// by it. The default: one sample per period of `frequency_hz`.
    fn sample_interval(&self, options: &CollectOptions) -> Option<std::time::Duration> {
        options
            .frequency_hz
            .filter(|&hz| hz > 0)
            .map(|hz| std::time::Duration::from_secs_f64(1.0 / hz as f64))
    }
    /// What [`Profiler::collect`] would run for `target`: the exact
    /// commands and environment, without running anything (`--dry-run`).
    fn plan(&self, target: &Target, options: &CollectOptions) -> CollectPlan {
        let _ = options;
        CollectPlan {
            commands: vec![target.command_line()],
            env: target.env_lossy(),
            notes: Vec::new(),
        }
    }
    /// The backend's [`SamplingCalibration`] (frequencies, what a sample
    /// costs here); `None` (the default) where it has none.
    fn calibration(&self) -> Option<&dyn SamplingCalibration> {
        None
    }
    /// The backend's [`Streaming`]: every sample sent to a sink as it
    /// comes, with per-sample counters and call stacks where it reads
    /// them; `None` (the default) where it reports only at the end.
    fn streaming(&self) -> Option<&dyn Streaming> {
        None
    }
    /// The backend's [`ReportFormat`]: its vendor's report files
    /// recognized and read row by row; `None` (the default) where its tool
    /// writes none lotus reads.
    fn report_format(&self) -> Option<&dyn ReportFormat> {
        None
    }
    /// Reads a report the vendor tool wrote earlier. `file` names the input
    /// in error messages.
    fn read_report(&self, input: &mut dyn BufRead, file: &str) -> Result<Report, Error> {
        let _ = input;
        Err(Error::report(
            file,
            format!("the {} backend has no report reader", self.name()),
        )
        .with_hint("use --backend vtune or --backend uprof with --from-reports"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_totals_sum_windows_and_keep_why_a_counter_is_missing() {
        let w = |ns: u64, samples: u64, tc: f64| WindowStats {
            duration_ns: ns,
            samples,
            lost_samples: 1,
            counters: [("task-clock-ns".to_string(), tc)].into(),
            unsupported: [("cycles".to_string(), "no PMU".to_string())].into(),
        };
        let mut t = WindowTotals::of(&w(10, 2, 5.0));
        t.add(&w(u64::MAX, 3, 7.0));
        assert_eq!(t.count, 2);
        assert_eq!(t.duration_ns, u64::MAX, "saturates");
        assert_eq!((t.samples, t.lost_samples), (5, 2));
        assert_eq!(t.counters["task-clock-ns"], 12.0);
        assert_eq!(t.unsupported["cycles"], "no PMU");
    }

    #[test]
    fn a_tool_that_hangs_on_version_is_unavailable_in_time() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tmp");
        let tool = dir.path().join("hangs");
        std::fs::write(&tool, "#!/bin/sh\nexec sleep 30\n").expect("write");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let start = std::time::Instant::now();
        let probe = Probe::from_version_command_within(
            "vtune",
            &tool,
            std::time::Duration::from_millis(300),
        );
        assert!(!probe.available);
        let reason = probe.reason.expect("reason");
        assert!(reason.contains("did not answer"), "{reason}");
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
    }

    /// A collection whose target exits after `polls` calls of try_wait.
    struct ExitsAfter {
        polls: u32,
    }

    impl Collection for ExitsAfter {
        fn pid(&self) -> u32 {
            1
        }
        fn resume(&mut self) -> Result<(), Error> {
            Ok(())
        }
        fn pause(&mut self) -> Result<(), Error> {
            Ok(())
        }
        fn try_wait(&mut self) -> Result<Option<ExitStatus>, Error> {
            use std::os::unix::process::ExitStatusExt;
            if self.polls == 0 {
                return Ok(Some(ExitStatus::from_raw(0)));
            }
            self.polls -= 1;
            Ok(None)
        }
        fn kill(&mut self) -> Result<(), Error> {
            Ok(())
        }
        fn finish(self: Box<Self>, _: Finish) -> Result<Finished, Error> {
            Err(Error::Unsupported {
                backend: "test".into(),
                what: "reports".into(),
            })
        }
    }

    /// A backend that implements only what every backend must.
    struct Plain;

    impl Profiler for Plain {
        fn name(&self) -> &'static str {
            "plain"
        }
        fn description(&self) -> &'static str {
            "a test backend"
        }
        fn probe(&self) -> Probe {
            Probe::available("plain", None)
        }
        fn unit(&self) -> Unit {
            Unit::Samples
        }
        fn collect(
            &self,
            _target: &Target,
            _options: &CollectOptions,
        ) -> Result<Box<dyn Collection>, Error> {
            Ok(Box::new(ExitsAfter { polls: 0 }))
        }
    }

    /// What a backend may offer beyond collect and report is `None`
    /// unless it says otherwise: callers fall back or say which backend
    /// lacks it.
    #[test]
    fn a_backend_offers_no_capability_it_does_not_implement() {
        let backend: &dyn Profiler = &Plain;
        assert!(backend.calibration().is_none());
        assert!(backend.streaming().is_none());
        assert!(backend.report_format().is_none());
        let mut c = backend
            .collect(&Target::new("true"), &CollectOptions::default())
            .expect("collect");
        assert!(c.sampling_control().is_none());
        assert!(c.stamped_windows().is_none());
    }

    #[test]
    fn wait_timeout_returns_the_status_or_gives_up_at_its_limit() {
        use std::time::{Duration, Instant};
        let mut soon = ExitsAfter { polls: 3 };
        let status = soon.wait_timeout(Duration::from_secs(10)).expect("wait");
        assert!(status.is_some_and(|s| s.success()));
        let mut never = ExitsAfter { polls: u32::MAX };
        let t0 = Instant::now();
        assert_eq!(
            never.wait_timeout(Duration::from_millis(50)).expect("wait"),
            None
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let t = Target {
            program: "/usr/bin/python3".into(),
            args: vec![
                "harness.py".into(),
                "--name".into(),
                "my op's".into(),
                "".into(),
            ],
            ..Target::default()
        };
        assert_eq!(
            t.command_line(),
            "/usr/bin/python3 harness.py --name 'my op'\\''s' ''"
        );
    }
}
