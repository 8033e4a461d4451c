//! A target running under perf: windows, counters, the end report.

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use lotus_core::{
    Collection, Error as CoreError, Finish, Finished, Report, SamplingControl, StampedWindows,
    Unit, WindowStats, WindowTotals,
};
use lotus_protocol::Edge;

use crate::counting::{CounterKind, CounterStatus, Counters, Deltas};
use crate::drain::Drain;
use crate::events::Switch;
use crate::model::{Location, WindowCounts};
use crate::symbolize;
use crate::{WindowSwitch, BACKEND};
use lotus_symbols::SymbolizeStats;

/// How long [`PerfCollection::kill`] waits for the process group to vanish.
const KILL_GRACE: Duration = Duration::from_secs(3);

/// What one measurement window measured.
///
/// Counter figures cover the target and all its descendants (inherited
/// counters), including processes that exited during the window. `None`
/// means the counter is not supported here (see
/// [`PerfCollection::counter_status`]), never "zero".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PerfWindow {
    /// The window's number, from 0, in opening order.
    pub index: usize,
    /// Wall time from resume to pause.
    pub duration: Duration,
    /// Samples taken in the window.
    pub samples: u64,
    /// Samples the kernel dropped because a ring buffer was full.
    pub lost: u64,
    /// Times the kernel throttled the sampler (it samples less often then).
    pub throttled: u64,
    /// CPU time of the target's tasks in the window, in nanoseconds.
    pub task_clock_ns: u64,
    /// Context switches (needs kernel-side counting permission).
    pub context_switches: Option<u64>,
    /// Page faults.
    pub page_faults: Option<u64>,
    /// CPU cycles, where the CPU has a PMU.
    pub cycles: Option<u64>,
    /// Instructions retired, where the CPU has a PMU.
    pub instructions: Option<u64>,
}

impl PerfWindow {
    /// The window in lotus-core's form: counters by perf event name
    /// (`task-clock-ns`, `context-switches`, `page-faults`, `cycles`,
    /// `instructions`), and the unsupported ones with the reason from
    /// `status` (what [`PerfCollection::counter_status`] says).
    pub fn to_core(&self, status: &[CounterStatus]) -> WindowStats {
        let mut counters = BTreeMap::new();
        let mut unsupported = BTreeMap::new();
        counters.insert("task-clock-ns".to_string(), self.task_clock_ns as f64);
        for (kind, value) in [
            (CounterKind::ContextSwitches, self.context_switches),
            (CounterKind::PageFaults, self.page_faults),
            (CounterKind::Cycles, self.cycles),
            (CounterKind::Instructions, self.instructions),
        ] {
            match value {
                Some(v) => {
                    counters.insert(kind.name().to_string(), v as f64);
                }
                None => {
                    let reason = status
                        .iter()
                        .find(|s| s.kind == kind)
                        .and_then(|s| s.reason.clone())
                        .unwrap_or_else(|| "not measured".to_string());
                    unsupported.insert(kind.name().to_string(), reason);
                }
            }
        }
        WindowStats {
            duration_ns: u64::try_from(self.duration.as_nanos()).unwrap_or(u64::MAX),
            samples: self.samples,
            lost_samples: self.lost,
            counters,
            unsupported,
        }
    }
}

/// Everything a perf collection measured: the rows of
/// [`Collection::finish`] and what the trait's [`Report`] has no place for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PerfReport {
    /// One row per (function, module), samples summed over all windows;
    /// no rows when the samples were streamed (they and their names are
    /// in the sink, see [`crate::LinuxPerf::start_streaming`]).
    pub report: Report,
    /// Per-window figures, in opening order: from [`crate::LinuxPerf::start`]
    /// and its kin, or a collection started through the trait with
    /// [`lotus_core::CollectOptions::each_window`]; empty otherwise (the
    /// windows were kept summed only, in `total`).
    pub windows: Vec<PerfWindow>,
    /// The windows summed (`index` is the number of windows; a counter is
    /// `None` if it is unsupported).
    pub total: PerfWindow,
    /// What could be counted here, and why not.
    pub counters: Vec<CounterStatus>,
    /// Sampling frequency used (after clamping to the kernel's maximum).
    pub frequency_hz: u64,
    /// Whether kernel mode was sampled (see [`crate::KernelSampling`]);
    /// when not, `notes` says why.
    pub kernel_samples: bool,
    /// Symbolization figures.
    pub symbolize: SymbolizeStats,
    /// The target's exit status (`None` if lotus killed it, or stopped
    /// sampling a process it attached to before that ended).
    pub exit_status: Option<ExitStatus>,
    /// Samples taken outside every window and dropped (with
    /// [`WindowSwitch::Timestamps`] the samplers run all along).
    pub samples_outside_windows: u64,
    /// Things worth telling the user (lost samples, throttling, clamping).
    pub notes: Vec<String>,
    /// What was written of the samples streamed as they came
    /// ([`crate::LinuxPerf::start_streaming`]); `None` otherwise.
    pub stream: Option<crate::StreamSummary>,
    /// One report per window, in opening order, from
    /// [`PerfCollection::finish_per_window`]; empty otherwise.
    pub window_reports: Vec<Report>,
    /// What the samples cover of the CPU time each process ran, over the
    /// whole run (in windows or not), and the samples added for threads'
    /// unsampled last periods; `notes` says where samples are missing.
    pub coverage: crate::SampleCoverage,
}

/// How the samplers were opened.
pub(crate) struct Sampling {
    /// Frequency in Hz, after clamping.
    pub frequency_hz: u64,
    /// Whether kernel mode is sampled too.
    pub kernel: bool,
    /// The call stacks each streamed sample carries.
    pub stacks: crate::CallStacks,
    /// The members of the samplers' counter groups: open as long as the
    /// samplers are.
    pub members: Vec<perf_event::Counter>,
    /// The counters read with each sample.
    pub counters: crate::SampleCounters,
    /// The samples' stacks, folded per window, for the reports.
    pub(crate) folds: Option<lotus_samples::SharedFolds>,
    /// Where the reports' symbol tables are read through.
    pub(crate) symbols: std::sync::Arc<lotus_symbols::SymbolCache>,
    /// The profiled process stamps its own window edges
    /// ([`lotus_core::CollectOptions::window_stamps`]).
    pub stamped: bool,
    /// Each thread's sampler copy keeps its own timer (see
    /// `crate::coverage`).
    pub separate_threads: bool,
    /// Keep a record of each closed window (see [`Closed`]); otherwise
    /// they are kept summed only.
    pub each_window: bool,
}

struct ClosedWindow {
    duration: Duration,
    deltas: Deltas,
}

/// The closed windows: each one's duration and counter deltas where a
/// caller asked for each window ([`lotus_core::CollectOptions::each_window`],
/// or [`crate::LinuxPerf::start`]'s typed API), and always their sum, so a
/// caller that needs the totals only keeps the same few bytes for one
/// window or a million.
#[derive(Default)]
struct Closed {
    /// One record per window, in order; empty unless `keep_each`.
    each: Vec<ClosedWindow>,
    /// Whether `each` is kept.
    keep_each: bool,
    /// Windows closed.
    count: usize,
    /// Their durations, summed.
    duration: Duration,
    /// Each counter's deltas summed over the windows that measured it.
    sums: [u64; 5],
    /// Some window measured the counter.
    measured: [bool; 5],
    /// Some window did not.
    missing: [bool; 5],
}

impl Closed {
    fn push(&mut self, w: ClosedWindow) {
        self.count += 1;
        self.duration = self.duration.saturating_add(w.duration);
        for (i, d) in w.deltas.iter().enumerate() {
            match d {
                Some(v) => {
                    self.sums[i] = self.sums[i].saturating_add(*v);
                    self.measured[i] = true;
                }
                None => self.missing[i] = true,
            }
        }
        if self.keep_each {
            self.each.push(w);
        }
    }

    /// The closed windows summed, samples from `counts` (the drain's,
    /// per window). A counter is `None` if some window did not measure it.
    fn total(&self, counts: &[WindowCounts]) -> PerfWindow {
        let c = self;
        let mut total = PerfWindow {
            index: c.count,
            duration: c.duration,
            task_clock_ns: c.sums[0],
            ..PerfWindow::default()
        };
        for w in counts.iter().take(c.count) {
            total.samples = total.samples.saturating_add(w.samples);
            total.lost = total.lost.saturating_add(w.lost);
            total.throttled = total.throttled.saturating_add(w.throttled);
        }
        let sum = |k: CounterKind| {
            let i = CounterKind::ALL.iter().position(|&x| x == k)?;
            (!c.missing[i]).then_some(c.sums[i])
        };
        total.context_switches = sum(CounterKind::ContextSwitches);
        total.page_faults = sum(CounterKind::PageFaults);
        total.cycles = sum(CounterKind::Cycles);
        total.instructions = sum(CounterKind::Instructions);
        total
    }

    /// [`Self::total`] in lotus-core's form: what [`WindowTotals::add`]
    /// over every window's [`PerfWindow::to_core`] would give, without a
    /// record per window.
    fn totals_core(&self, counts: &[WindowCounts], status: &[CounterStatus]) -> WindowTotals {
        let mut totals = WindowTotals::default();
        let c = self;
        if c.count == 0 {
            return totals;
        }
        let total = self.total(counts);
        totals.count = c.count as u64;
        totals.duration_ns = u64::try_from(c.duration.as_nanos()).unwrap_or(u64::MAX);
        totals.samples = total.samples;
        totals.lost_samples = total.lost;
        // `to_core` gives every window a task-clock figure (0 if unread).
        totals
            .counters
            .insert("task-clock-ns".to_string(), total.task_clock_ns as f64);
        for (i, kind) in CounterKind::ALL.iter().enumerate() {
            if *kind == CounterKind::TaskClock {
                continue;
            }
            if c.measured[i] {
                totals
                    .counters
                    .insert(kind.name().to_string(), c.sums[i] as f64);
            }
            if c.missing[i] {
                let reason = status
                    .iter()
                    .find(|s| s.kind == *kind)
                    .and_then(|s| s.reason.clone())
                    .unwrap_or_else(|| "not measured".to_string());
                totals.unsupported.insert(kind.name().to_string(), reason);
            }
        }
        totals
    }
}

/// A target running under the perf backend.
///
/// Returned (boxed) by [`crate::LinuxPerf`]'s `collect`, or unboxed by
/// [`crate::LinuxPerf::start`] for callers that want [`Self::windows`] and
/// [`Self::finish`]; or a process lotus attached to
/// ([`crate::LinuxPerf::attach_streaming`]), which it never signals.
pub struct PerfCollection {
    mode: WindowSwitch,
    job: Job,
    pid: u32,
    exit: Option<ExitStatus>,
    killed: bool,
    switch: Switch,
    counters: Counters,
    drain: Option<Drain>,
    open_since: Option<Instant>,
    closed: Closed,
    frequency_hz: u64,
    /// Where the reports' symbol tables are read through (the profiler's).
    symbols: std::sync::Arc<lotus_symbols::SymbolCache>,
    kernel_samples: bool,
    call_stacks: crate::CallStacks,
    sample_counters: crate::SampleCounters,
    /// See [`Sampling::folds`].
    folds: Option<lotus_samples::SharedFolds>,
    /// Kept open for the samplers' groups; never read directly.
    _group_members: Vec<perf_event::Counter>,
    notes: Vec<String>,
    /// Windows come as edges the profiled process stamped (see
    /// [`StampedWindows::resume_at`]); the open one's opening edge.
    stamped: bool,
    open_edge: Option<Edge>,
    /// Sampling stopped outside windows at the process's request
    /// ([`SamplingControl::set_sampling`]).
    sampling_off: bool,
    /// See [`Sampling::separate_threads`].
    separate_threads: bool,
}

/// Why cycles and instructions have no per-window figure in windows the
/// profiled process stamps itself.
const NOT_READ_BY_THE_OP: &str = "not read in windows the op process stamps itself (a process \
     cannot read them without waiting for lotus); `lotus map --round-trip` reads them";

/// The process a collection profiles.
pub(crate) enum Job {
    /// Started by lotus: its child, the leader of its own process group.
    Started(Child),
    /// Already running when lotus attached (see `crate::attach`): not
    /// this process's child, never signalled.
    Attached(crate::attach::Watched),
}

impl PerfCollection {
    pub(crate) fn new(
        mode: WindowSwitch,
        job: Job,
        switch: Switch,
        counters: Counters,
        drain: Drain,
        sampling: Sampling,
        notes: Vec<String>,
    ) -> Self {
        PerfCollection {
            mode,
            pid: match &job {
                Job::Started(child) => child.id(),
                Job::Attached(watched) => watched.pid(),
            },
            job,
            exit: None,
            killed: false,
            switch,
            counters,
            drain: Some(drain),
            open_since: None,
            closed: Closed {
                keep_each: sampling.each_window,
                ..Closed::default()
            },
            frequency_hz: sampling.frequency_hz,
            symbols: sampling.symbols,
            kernel_samples: sampling.kernel,
            call_stacks: sampling.stacks,
            sample_counters: sampling.counters,
            folds: sampling.folds,
            _group_members: sampling.members,
            notes,
            stamped: sampling.stamped,
            open_edge: None,
            sampling_off: false,
            separate_threads: sampling.separate_threads,
        }
    }

    /// What can be counted per window here: in stamped windows, what the
    /// op process reads of itself (task-clock, context switches and page
    /// faults of its own threads); cycles and instructions are not read.
    fn window_counter_status(&self) -> Vec<CounterStatus> {
        let mut status = self.counters.status();
        if self.stamped {
            for s in &mut status {
                if !s.kind.is_hardware() {
                    // getrusage and the process's CPU clock need no
                    // permission.
                    s.available = true;
                    s.user_only = false;
                    s.reason = None;
                } else if s.available {
                    s.available = false;
                    s.reason = Some(NOT_READ_BY_THE_OP.into());
                }
            }
        }
        status
    }

    /// How windows switch sampling.
    pub fn window_switch(&self) -> WindowSwitch {
        self.mode
    }

    /// The sampling frequency in use, in Hz.
    pub fn frequency_hz(&self) -> u64 {
        self.frequency_hz
    }

    /// Whether the samplers cover kernel mode too (see
    /// [`crate::KernelSampling`]).
    pub fn kernel_samples(&self) -> bool {
        self.kernel_samples
    }

    /// The call stacks each streamed sample carries
    /// ([`crate::PerfOptions::stacks`]: as asked for, or what was left
    /// where the kernel refused them, its reason among the report's
    /// notes).
    pub fn call_stacks(&self) -> crate::CallStacks {
        self.call_stacks
    }

    /// The counters every streamed sample carries, or why the kernel
    /// refused them ([`crate::PerfOptions::sample_counters`]).
    pub fn sample_counters(&self) -> &crate::SampleCounters {
        &self.sample_counters
    }

    /// What can be counted per window here, and why not.
    pub fn counter_status(&self) -> Vec<CounterStatus> {
        self.counters.status()
    }

    /// True while a window is open.
    pub fn is_open(&self) -> bool {
        self.open_since.is_some()
    }

    /// Figures for every closed window so far. Waits (briefly) for the drain
    /// thread to count every sample taken up to now. ([`Collection::windows`]
    /// gives the same in lotus-core's untyped form.)
    pub fn window_figures(&self) -> Result<Vec<PerfWindow>, CoreError> {
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        let counts = drain.flush()?;
        Ok(self.window_stats(&counts))
    }

    fn window_stats(&self, counts: &[WindowCounts]) -> Vec<PerfWindow> {
        self.window_iter(counts).collect()
    }

    fn total(&self, counts: &[WindowCounts]) -> PerfWindow {
        self.closed.total(counts)
    }

    fn totals_core(&self, counts: &[WindowCounts]) -> WindowTotals {
        self.closed
            .totals_core(counts, &self.window_counter_status())
    }

    /// The closed windows' figures one at a time (a caller that sums them
    /// holds no list).
    fn window_iter<'a>(
        &'a self,
        counts: &'a [WindowCounts],
    ) -> impl Iterator<Item = PerfWindow> + 'a {
        self.closed.each.iter().enumerate().map(move |(index, w)| {
            let c = counts.get(index).copied().unwrap_or_default();
            let d = |k: CounterKind| {
                CounterKind::ALL
                    .iter()
                    .position(|&x| x == k)
                    .and_then(|i| w.deltas[i])
            };
            PerfWindow {
                index,
                duration: w.duration,
                samples: c.samples,
                lost: c.lost,
                throttled: c.throttled,
                task_clock_ns: d(CounterKind::TaskClock).unwrap_or(0),
                context_switches: d(CounterKind::ContextSwitches),
                page_faults: d(CounterKind::PageFaults),
                cycles: d(CounterKind::Cycles),
                instructions: d(CounterKind::Instructions),
            }
        })
    }

    /// Ends the collection: closes an open window, kills the target if it
    /// is still running (wait for it with [`Collection::try_wait`] first to
    /// let it finish), drains the last records and symbolizes.
    pub fn finish(self) -> Result<PerfReport, CoreError> {
        self.finish_inner(false)
    }

    /// [`Self::finish`], with one report per window besides
    /// ([`PerfReport::window_reports`]): where each window is a run of its
    /// own (lotus's fork server runs each in a child of one process).
    pub fn finish_per_window(self) -> Result<PerfReport, CoreError> {
        self.finish_inner(true)
    }

    fn finish_inner(mut self, per_window: bool) -> Result<PerfReport, CoreError> {
        if per_window && !self.closed.keep_each {
            return Err(CoreError::Other {
                backend: BACKEND.into(),
                message: "one report per window was asked of a collection that keeps its \
                          windows summed (start it with CollectOptions::each_window)"
                    .into(),
            });
        }
        if self.is_open() {
            self.pause()?;
        }
        if let Some(open) = self.open_edge {
            // The process never closed its window (it died in it): closed
            // now, with no counts of its own after the opening.
            self.pause_at(&Edge {
                at_ns: crate::events::monotonic_ns(),
                own: open.own,
            })?;
        }
        if self.try_wait()?.is_none() || group_alive(self.pid) {
            self.kill()?;
        }
        let drain = self.drain.take().ok_or_else(finished)?;
        let drained = drain.finish()?;
        let model = drained.model;
        // Empty unless each window was kept (then 300,000 windows would
        // cost a record each here too).
        let windows = self.window_stats(&model.windows);
        let mut total = self.total(&model.windows);

        // Streamed samples were named as they came, into the sink: naming
        // them again here (reading every symbol table and the kernel's
        // again, on this thread) added 60 ms to a sampled trace after its
        // job had ended.
        // Stacks folded for the reports: the writer has finished with them.
        let folds = self
            .folds
            .take()
            .map(|f| std::mem::take(&mut *f.lock().unwrap_or_else(|p| p.into_inner())));
        let (rows, symbolize, symbol_notes) = if drained.stream.is_some() && folds.is_none() {
            (Vec::new(), SymbolizeStats::default(), Vec::new())
        } else {
            let mut by_location: HashMap<Location, u64> = HashMap::new();
            for (&(_, loc), &n) in &model.counts {
                *by_location.entry(loc).or_insert(0) += n;
            }
            symbolize::rows(&self.symbols, &model, &by_location)
        };
        self.notes.extend(symbol_notes);
        let mut window_reports = Vec::new();
        if per_window {
            let mut by_window: Vec<HashMap<Location, u64>> =
                vec![HashMap::new(); self.closed.count];
            for (&(w, loc), &n) in &model.counts {
                if let Some(counts) = by_window.get_mut(w) {
                    *counts.entry(loc).or_insert(0) += n;
                }
            }
            // Symbol tables are read once per process: these reuse them.
            for (w, counts) in by_window.iter().enumerate() {
                window_reports.push(Report {
                    stacks: folds
                        .as_ref()
                        .map_or_else(Vec::new, |f| stack_counts(f.stacks(Some(w)))),
                    unit: Unit::Samples,
                    rows: symbolize::rows(&self.symbols, &model, counts).0,
                });
            }
        }

        let counters = self.window_counter_status();
        for c in &counters {
            if let Some(note) = c.note() {
                let slot = match c.kind {
                    CounterKind::ContextSwitches => &mut total.context_switches,
                    CounterKind::PageFaults => &mut total.page_faults,
                    CounterKind::Cycles => &mut total.cycles,
                    CounterKind::Instructions => &mut total.instructions,
                    _ => continue,
                };
                *slot = None;
                self.notes.push(note);
            }
        }
        if total.lost > 0 {
            self.notes.push(format!(
                "{} samples were lost (ring buffer full); the counts are a lower bound",
                total.lost
            ));
        }
        if total.throttled > 0 {
            self.notes.push(format!(
                "the kernel throttled sampling {} times (kernel.perf_cpu_time_max_percent)",
                total.throttled
            ));
        }
        if model.outside.lost > 0 {
            self.notes.push(format!(
                "{} samples were lost outside the windows (not counted in any)",
                model.outside.lost
            ));
        }
        if drained.sideband_lost > 0 {
            self.notes.push(format!(
                "{} mmap/fork/exec records were lost (side-band buffer full): some samples \
                 may be unsymbolized ([unknown])",
                drained.sideband_lost
            ));
        }
        if model.forgotten > 0 {
            self.notes.push(format!(
                "{} executable mappings were forgotten: a process mapped more than the kernel \
                 lets one hold at once (vm.max_map_count) and perf does not record unmapping, \
                 so lotus keeps the newest only; samples in the oldest, if still mapped, may \
                 be unsymbolized ([unknown])",
                model.forgotten
            ));
        }
        // Every process has exited: the samplers' counts are final.
        let coverage = drained.tally.finish_with(
            self.pid,
            self.switch.counts(),
            self.switch.counts_by_process(),
            self.kernel_samples,
            self.separate_threads,
        );
        self.notes.extend(coverage.notes());
        if drained.malformed > 0 {
            self.notes.push(format!(
                "{} unreadable perf records skipped",
                drained.malformed
            ));
        }
        Ok(PerfReport {
            report: Report {
                stacks: folds
                    .as_ref()
                    .map_or_else(Vec::new, |f| stack_counts(f.stacks(None))),
                unit: Unit::Samples,
                rows,
            },
            windows,
            total,
            counters,
            frequency_hz: self.frequency_hz,
            kernel_samples: self.kernel_samples,
            symbolize,
            exit_status: if self.killed { None } else { self.exit },
            samples_outside_windows: model.outside.samples,
            notes: std::mem::take(&mut self.notes),
            stream: drained.stream,
            window_reports,
            coverage,
        })
    }

    /// Reaps every exited member of the target's process group (orphaned
    /// workers are reparented to this process, a child subreaper).
    fn reap_group(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on a process group id with a valid status ptr.
            let r =
                unsafe { libc::waitpid(-(self.pid as libc::pid_t), &mut status, libc::WNOHANG) };
            if r <= 0 {
                return;
            }
        }
    }
}

/// The folded stacks as reports hold them.
fn stack_counts(stacks: Vec<(Vec<String>, u64)>) -> Vec<lotus_core::StackCount> {
    stacks
        .into_iter()
        .map(|(frames, samples)| lotus_core::StackCount { frames, samples })
        .collect()
}

fn finished() -> CoreError {
    CoreError::Other {
        backend: BACKEND.into(),
        message: "the collection has already ended".into(),
    }
}

/// The report's notes less those on counters that cannot be counted here
/// (the trait's windows carry them, in [`WindowStats::unsupported`]): what
/// is known to be missing from the samples, with the figures.
fn sample_notes(r: &PerfReport) -> Vec<String> {
    let counter_notes: Vec<String> = r.counters.iter().filter_map(|c| c.note()).collect();
    // The samples added for exited threads' tails are said only where they
    // are 1% of the samples or more: a few in thousands are routine (every
    // op's run ends threads), and a warning per op for them would bury the
    // notes on samples that are missing.
    let taken: u64 = r.coverage.processes.iter().map(|p| p.samples).sum();
    let added = r.coverage.added();
    let routine = added.saturating_mul(100) < taken;
    let added_note = format!("{added} samples (");
    r.notes
        .iter()
        .filter(|n| !counter_notes.contains(n))
        .filter(|n| {
            !(routine && n.starts_with(&added_note) && n.contains(" were added for the CPU time "))
        })
        .cloned()
        .collect()
}

/// True while any process is left in the group `pgid`.
fn group_alive(pgid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-(pgid as libc::pid_t), 0) == 0 }
}

impl Collection for PerfCollection {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn resume(&mut self) -> Result<(), CoreError> {
        if self.is_open() {
            return Ok(());
        }
        // A window always samples: sampling stopped for the process's
        // unsampled calls restarts first.
        self.set_sampling(true)?;
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        match self.mode {
            WindowSwitch::Timestamps => {
                // Everything runs already: the window is the time range.
                self.counters.mark()?;
                drain.open_window();
            }
            WindowSwitch::Ioctl => {
                drain.open_window();
                let enabled = self.counters.enable().and_then(|()| self.switch.enable());
                if let Err(e) = enabled {
                    let _ = self.switch.disable();
                    let _ = self.counters.disable();
                    // The window was announced; record it closed and empty.
                    drain.close_window();
                    self.closed.push(ClosedWindow {
                        duration: Duration::ZERO,
                        deltas: self.counters.read_deltas().unwrap_or([None; 5]),
                    });
                    return Err(e);
                }
            }
        }
        self.open_since = Some(Instant::now());
        Ok(())
    }

    fn pause(&mut self) -> Result<(), CoreError> {
        let Some(since) = self.open_since.take() else {
            return Ok(());
        };
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        let (sampler, counters) = match self.mode {
            WindowSwitch::Timestamps => (Ok(()), Ok(())),
            WindowSwitch::Ioctl => (self.switch.disable(), self.counters.disable()),
        };
        drain.close_window();
        let duration = since.elapsed();
        let deltas = self.counters.read_deltas();
        self.closed.push(ClosedWindow {
            duration,
            deltas: deltas.as_ref().map_or([None; 5], |d| *d),
        });
        sampler?;
        counters?;
        deltas.map(drop)
    }

    fn resume_then(&mut self, tell: &mut dyn FnMut()) -> Result<(), CoreError> {
        if self.mode != WindowSwitch::Timestamps || self.is_open() || self.sampling_off {
            self.resume()?;
            tell();
            return Ok(());
        }
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        // The window is the time range from here: the target may go on at
        // once. Reading its counters while it runs on another CPU costs an
        // interrupt (~25 us), so their starting values are read after
        // `tell`; they miss the microseconds in between.
        drain.open_window();
        self.open_since = Some(Instant::now());
        tell();
        self.counters.mark()
    }

    fn pause_then(&mut self, tell: &mut dyn FnMut()) -> Result<(), CoreError> {
        if self.mode != WindowSwitch::Timestamps || !self.is_open() {
            self.pause()?;
            tell();
            return Ok(());
        }
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        let Some(since) = self.open_since.take() else {
            tell();
            return Ok(());
        };
        drain.close_window();
        let duration = since.elapsed();
        tell();
        // As in `resume_then`: the counters add the microseconds between
        // `tell` and this read.
        let deltas = self.counters.read_deltas();
        self.closed.push(ClosedWindow {
            duration,
            deltas: deltas.as_ref().map_or([None; 5], |d| *d),
        });
        deltas.map(drop)
    }

    /// Always: edges stamped in a collection not started for them are
    /// refused with why.
    fn stamped_windows(&mut self) -> Option<&mut dyn StampedWindows> {
        Some(self)
    }

    fn sampling_control(&mut self) -> Option<&mut dyn SamplingControl> {
        Some(self)
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>, CoreError> {
        if self.exit.is_some() {
            return Ok(self.exit);
        }
        let status = match &mut self.job {
            Job::Started(child) => child.try_wait().map_err(|source| CoreError::Io {
                context: format!("checking on pid {}", self.pid),
                source,
            })?,
            Job::Attached(watched) => watched.try_wait(),
        };
        self.exit = status;
        Ok(status)
    }

    fn kill(&mut self) -> Result<(), CoreError> {
        let child = match &mut self.job {
            Job::Started(child) => child,
            // Not lotus's to end: sampling stops (once), the job runs on.
            Job::Attached(watched) => {
                if !watched.stop() {
                    return Ok(());
                }
                self.killed = self.exit.is_none();
                return self.switch.disable();
            }
        };
        // SAFETY: sends SIGKILL to the target's process group.
        let r = unsafe { libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) {
                return Err(CoreError::Io {
                    context: format!("killing process group {}", self.pid),
                    source: e,
                });
            }
        }
        if self.exit.is_none() {
            self.killed = true;
            let status = child.wait().map_err(|source| CoreError::Io {
                context: format!("waiting for pid {}", self.pid),
                source,
            })?;
            self.exit = Some(status);
        }
        let deadline = Instant::now() + KILL_GRACE;
        loop {
            self.reap_group();
            if !group_alive(self.pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(CoreError::Other {
                    backend: BACKEND.into(),
                    message: format!(
                        "processes of group {} are still there {} s after SIGKILL",
                        self.pid,
                        KILL_GRACE.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn finish(self: Box<Self>, how: Finish) -> Result<Finished, CoreError> {
        match how {
            Finish::Together => {
                let r = PerfCollection::finish(*self)?;
                let notes = sample_notes(&r);
                Ok(Finished::new(vec![r.report], notes))
            }
            Finish::PerWindow => {
                let r = self.finish_per_window()?;
                let notes = sample_notes(&r);
                Ok(Finished::new(r.window_reports, notes))
            }
        }
    }

    fn windows(&self) -> Vec<WindowStats> {
        // If the drain thread cannot answer, the counts published so far
        // are still the best figures there are.
        let figures = match self.window_figures() {
            Ok(f) => f,
            Err(_) => self.window_stats(
                &self
                    .drain
                    .as_ref()
                    .map(|d| d.published())
                    .unwrap_or_default(),
            ),
        };
        let status = self.window_counter_status();
        figures.iter().map(|w| w.to_core(&status)).collect()
    }

    fn window_totals(&self) -> WindowTotals {
        // Summed as they are made: a script's 300,000 windows are never
        // held in lotus-core's form (a kilobyte and more each).
        let counts = match self.drain.as_ref() {
            Some(d) => d.flush().unwrap_or_else(|_| d.published()),
            None => Vec::new(),
        };
        self.totals_core(&counts)
    }
}

impl Drop for PerfCollection {
    fn drop(&mut self) {
        // Never leave a target running with our events attached, or its
        // processes unreaped.
        if self.exit.is_none() || group_alive(self.pid) {
            let _ = self.kill();
        }
    }
}

impl StampedWindows for PerfCollection {
    fn resume_at(&mut self, edge: &Edge) -> Result<(), CoreError> {
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        if !self.stamped {
            return Err(CoreError::Other {
                backend: BACKEND.into(),
                message: "a window edge stamped by the process came, but the collection \
                          was not started for stamped windows"
                    .into(),
            });
        }
        if self.sampling_off {
            // The window opened before lotus could restart sampling: its
            // first samples are missing, so it cannot count.
            return Err(CoreError::Other {
                backend: BACKEND.into(),
                message: "the process opened a window while it had sampling stopped \
                          (lotus_sampling(1) must come before lotus_resume)"
                    .into(),
            });
        }
        if self.open_edge.is_none() {
            drain.open_window_at(edge.at_ns);
            self.open_edge = Some(*edge);
        }
        Ok(())
    }

    fn pause_at(&mut self, edge: &Edge) -> Result<(), CoreError> {
        let drain = self.drain.as_ref().ok_or_else(finished)?;
        let Some(open) = self.open_edge.take() else {
            return Ok(());
        };
        let start = drain.close_window_at(edge.at_ns).unwrap_or(open.at_ns);
        let (a, b) = (open.own, edge.own);
        let mut deltas: Deltas = [None; 5];
        for (i, kind) in CounterKind::ALL.iter().enumerate() {
            deltas[i] = match kind {
                CounterKind::TaskClock => Some(b.cpu_ns.saturating_sub(a.cpu_ns)),
                CounterKind::ContextSwitches => {
                    Some(b.context_switches.saturating_sub(a.context_switches))
                }
                CounterKind::PageFaults => Some(b.page_faults.saturating_sub(a.page_faults)),
                _ => None,
            };
        }
        self.closed.push(ClosedWindow {
            duration: Duration::from_nanos(edge.at_ns.saturating_sub(start)),
            deltas,
        });
        Ok(())
    }

    fn stamps_done(&mut self) {
        if let Some(drain) = self.drain.as_ref() {
            drain.lift_horizon();
        }
    }
}

impl SamplingControl for PerfCollection {
    fn set_sampling(&mut self, on: bool) -> Result<(), CoreError> {
        if on != self.sampling_off {
            return Ok(());
        }
        if self.is_open() || self.open_edge.is_some() {
            return Err(CoreError::Other {
                backend: BACKEND.into(),
                message: "sampling cannot stop while a window is open (pause first)".into(),
            });
        }
        // Switched by ioctl, the samplers are off outside windows already.
        if self.mode == WindowSwitch::Timestamps {
            if on {
                self.switch.enable()?;
            } else {
                self.switch.disable()?;
            }
        }
        self.sampling_off = !on;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Summed as they close, the windows give what summing each window's
    /// `to_core` gives: counts, durations, samples, counters summed over
    /// the windows that measured them, the reason for those some window
    /// did not.
    #[test]
    fn windows_summed_as_they_close_equal_the_sum_of_each() {
        let status = vec![CounterStatus {
            kind: CounterKind::Cycles,
            available: false,
            user_only: false,
            reason: Some("no PMU".into()),
        }];
        let mut closed = Closed {
            keep_each: true,
            ..Closed::default()
        };
        let windows: [Deltas; 3] = [
            [Some(10), Some(1), None, None, None],
            [Some(20), None, Some(3), None, None],
            [None, Some(2), Some(4), Some(7), None],
        ];
        for (i, deltas) in windows.into_iter().enumerate() {
            closed.push(ClosedWindow {
                duration: Duration::from_millis(i as u64 + 1),
                deltas,
            });
        }
        let counts = [
            WindowCounts {
                samples: 5,
                lost: 1,
                throttled: 0,
            },
            WindowCounts {
                samples: 7,
                lost: 0,
                throttled: 2,
            },
            WindowCounts::default(),
        ];
        let mut each = WindowTotals::default();
        for (index, w) in closed.each.iter().enumerate() {
            let d = |k: CounterKind| {
                let i = CounterKind::ALL.iter().position(|&x| x == k).expect("kind");
                w.deltas[i]
            };
            let pw = PerfWindow {
                index,
                duration: w.duration,
                samples: counts[index].samples,
                lost: counts[index].lost,
                throttled: counts[index].throttled,
                task_clock_ns: d(CounterKind::TaskClock).unwrap_or(0),
                context_switches: d(CounterKind::ContextSwitches),
                page_faults: d(CounterKind::PageFaults),
                cycles: d(CounterKind::Cycles),
                instructions: d(CounterKind::Instructions),
            };
            each.add(&pw.to_core(&status));
        }
        assert_eq!(closed.totals_core(&counts, &status), each);
        let total = closed.total(&counts);
        assert_eq!((total.samples, total.lost, total.throttled), (12, 1, 2));
        assert_eq!(total.task_clock_ns, 30);
        assert_eq!(total.context_switches, None, "a window did not count it");
        assert_eq!(total.duration, Duration::from_millis(6));
        // Kept summed only, the windows cost no record each.
        let mut summed = Closed::default();
        for deltas in windows {
            summed.push(ClosedWindow {
                duration: Duration::ZERO,
                deltas,
            });
        }
        assert!(summed.each.is_empty());
        assert_eq!(summed.count, 3);
        assert_eq!(summed.sums, closed.sums);
    }
}
