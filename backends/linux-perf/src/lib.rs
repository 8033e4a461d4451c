//! The Linux perf backend: sampling through `perf_event_open`, no `perf`
//! binary needed.
//!
//! [`LinuxPerf::start`] (or the trait's `collect`) forks the target held at
//! a gate, attaches before it runs anything, then lets it exec:
//!
//! - per online CPU, a `cpu-clock` sampler at the requested frequency, with
//!   `inherit` so every worker process and thread the target starts is
//!   sampled; and an always-on side-band event that records the mappings,
//!   forks and execs needed to symbolize samples of processes that have
//!   exited since. The samplers cover kernel mode too where the kernel
//!   allows it (root, `CAP_PERFMON`, or `perf_event_paranoid` <= 1): time
//!   the kernel spends on the target's behalf (page faults, `munmap`,
//!   `read`) shows as `[kernel]` rows named from `/proc/kallsyms`.
//!   Elsewhere they fall back to user space only (`perf_event_paranoid` 2
//!   is enough) and the report says so in a note; see [`KernelSampling`];
//! - counting events (task-clock, context switches, page faults, cycles and
//!   instructions where there is a PMU) for per-window figures.
//!
//! [`LinuxPerf::attach_streaming`] samples a process that is already
//! running instead (every thread of it and of its descendants, and those
//! they start later), and streams the samples as
//! [`LinuxPerf::start_streaming`] does; it never signals that process.
//!
//! [`Collection::resume`] / [`Collection::pause`] open and close windows:
//! by default a window is a time range over samplers that run all along
//! (a microsecond to switch), or, with [`WindowSwitch::Ioctl`], the
//! samplers and counters are switched by ioctl. A drain thread empties the
//! ring buffers as they fill. [`PerfCollection::finish`] (or `report`)
//! symbolizes the samples into one row per (function, module).
//!
//! ```no_run
//! use lotus_backend_perf::LinuxPerf;
//! use lotus_core::{Collection, CollectOptions, Target};
//!
//! let target = Target::new("python3").with_args(["job.py"]);
//! let mut c = LinuxPerf::default().start(&target, &CollectOptions::default())?;
//! c.resume()?;            // open a window
//! std::thread::sleep(std::time::Duration::from_secs(1));
//! c.pause()?;             // close it
//! let windows = c.window_figures()?;
//! println!("{} samples, {} ns task-clock", windows[0].samples, windows[0].task_clock_ns);
//! let report = c.finish()?;
//! for row in report.report.rows.iter().take(5) {
//!     println!("{:>8} {} ({})", row.value, row.function, row.module);
//! }
//! # Ok::<(), lotus_core::Error>(())
//! ```
//!
//! Process handling: the target is put in its own process group (so
//! [`Collection::kill`] stops its workers too), inherits stdin, stdout and
//! stderr (or sends its output where [`Target::output_fd`] or
//! [`Target::stdout_to_stderr`] say). Neither side of the start gate waits
//! forever: the child sees lotus give up or die, and lotus bounds its waits
//! on the child.
//!
//! # Side effects on the calling process
//!
//! Starting a collection changes the calling process for the rest of its
//! life (both are process-wide and not undone when the collection ends):
//!
//! - **Open-file limit**: it needs about three descriptors per online CPU
//!   (one more per CPU for each counter read with samples) plus 256 for
//!   the caller; a soft `RLIMIT_NOFILE` below that is raised with
//!   `setrlimit` (never above the hard limit, never lowered). Children
//!   started later inherit the raised soft limit.
//! - **Child subreaper**: this process becomes a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`), so workers the target leaves orphaned are
//!   reparented here and [`Collection::kill`] and
//!   [`PerfCollection::finish`] can end and reap the target's whole
//!   process group. Orphans of other children the caller starts come here
//!   too: reap them (`lotus_sys::process::Reaper` does), or they
//!   stay zombies until this process exits.
#![deny(missing_docs)]

mod attach;
mod calibrate;
mod capabilities;
mod collection;
mod counting;
mod coverage;
mod drain;
mod error;
mod events;
mod model;
mod probe;
mod records;
mod sample_read;
mod stream;
mod symbolize;

use std::sync::Arc;

use lotus_core::{
    BackendRegistration, CollectOptions, CollectPlan, Collection, Error as CoreError, Probe,
    Profiler, Target, Unit,
};

pub use calibrate::{default_frequency_for, sampling_cost, MAX_SLOWDOWN, MIN_DEFAULT_HZ};
pub use collection::{PerfCollection, PerfReport, PerfWindow};
pub use counting::{CounterKind, CounterStatus};
pub use coverage::{ProcessCoverage, SampleCoverage};

pub use lotus_symbols::{
    SymbolCache, SymbolizeStats, KERNEL_FUNCTION, KERNEL_MODULE, UNKNOWN_FUNCTION,
};
pub use sample_read::{SampleCounters, UnsupportedCounters, DEFAULT_SAMPLE_COUNTERS};
pub use stream::StreamSummary;

/// Where the kernel says how much unprivileged users may measure.
pub const PARANOID_PATH: &str = "/proc/sys/kernel/perf_event_paranoid";
/// The per-user allowance for locked ring-buffer memory, in KiB per CPU.
pub const MLOCK_PATH: &str = "/proc/sys/kernel/perf_event_mlock_kb";
/// The sampling frequency when [`CollectOptions::frequency_hz`] is `None`:
/// 10 kHz. A map window then holds its 3000 samples in 0.3 s instead of
/// 0.75 s at perf record's 4 kHz, and the functions' shares stay within
/// run-to-run noise where a sample costs little (issue 14 measured 20 kHz
/// and above biasing them). Where each sample costs the sampled code more
/// (some virtual machines), [`default_frequency_for`] gives a lower one.
pub const DEFAULT_FREQUENCY_HZ: u64 = 10_000;

/// The frequency the samplers run at when `requested` Hz is asked for:
/// the kernel refuses frequencies above
/// `kernel.perf_event_max_sample_rate`, so it is capped there.
pub fn frequency_in_force(requested: u64) -> u64 {
    capped_frequency(requested, events::max_sample_rate())
}

/// `requested` Hz (at least 1) capped at the kernel's maximum `cap`.
fn capped_frequency(requested: u64, cap: Option<u64>) -> u64 {
    let requested = requested.max(1);
    cap.map_or(requested, |c| requested.min(c).max(1))
}

pub(crate) const BACKEND: &str = "perf";

/// How a window turns sampling on and off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WindowSwitch {
    /// The samplers and counters run from the start; a window is a time
    /// range. Samples are kept by their kernel timestamp (CLOCK_MONOTONIC),
    /// counters are read at both ends. `resume` / `pause` cost a clock read
    /// and one read per counter, about a microsecond when the target waits
    /// on the control channel, whatever the number of CPUs and threads.
    /// The target pays the sampling interrupts outside windows too (about
    /// 2.5% at 10 kHz); what falls outside is counted and dropped.
    #[default]
    Timestamps,
    /// The samplers and counters are created disabled and switched by
    /// `PERF_EVENT_IOC_ENABLE` / `DISABLE`. Nothing is sampled outside
    /// windows, but each ioctl on an event bound to a task interrupts the
    /// CPU that task last ran on (one IPI per event, per CPU sampler and per
    /// inherited copy in each thread and worker): about 0.5 µs when local,
    /// tens of µs per event in a virtual machine.
    Ioctl,
}

/// Whether the samplers sample kernel mode too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KernelSampling {
    /// Kernel and user mode when the kernel allows it (root, `CAP_PERFMON`
    /// or `CAP_SYS_ADMIN`, or `perf_event_paranoid` <= 1); otherwise user
    /// mode only, with a note in the report saying why kernel time is
    /// missing. Without kernel samples, time the kernel spends for the
    /// target (page faults on fresh memory, `munmap`, `read`) is not
    /// sampled at all, and a window holds fewer samples than its CPU time
    /// times the frequency.
    #[default]
    Auto,
    /// User mode only.
    Off,
}

/// Whether each thread of the target keeps its own sampling timer.
///
/// The samplers' `cpu-clock` timer runs while a thread runs, one copy per
/// thread and CPU. At a switch between two threads of the target the
/// kernel swaps their copies rather than stopping one and starting the
/// other, unless the samplers read with each sample: then the timer's
/// progress passes to the next thread and is lost when that thread exits,
/// so a thread that starts short threads and waits for each loses its
/// samples (lotus adds most of them back at the threads' exits: see
/// [`SampleCoverage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadTimers {
    /// Each thread keeps its own timer: the samplers read with each sample
    /// (Linux 6.12 or later; older kernels fall back to [`Self::Shared`]),
    /// which stops the kernel swapping. It costs at every switch between
    /// two threads of the target: measured in a virtual machine, two
    /// threads passing a byte back and forth on one CPU used 2.7 s of CPU
    /// instead of 0.75 s (with [`Self::Shared`]; 0.52 s unsampled). Jobs
    /// that switch a few thousand times a second pay a few percent.
    #[default]
    Separate,
    /// The kernel swaps the threads' timers (cheaper switches); the samples
    /// of a job of many short threads cover 5-10% less of its CPU time.
    Shared,
}

/// Backend-specific settings ([`CollectOptions`] holds the common ones).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PerfOptions {
    /// How windows switch sampling.
    pub window_switch: WindowSwitch,
    /// Whether kernel mode is sampled too.
    pub kernel: KernelSampling,
    /// Counters read with each sample, as deltas per thread
    /// ([`LinuxPerf::start_streaming`] only; see
    /// [`PerfCollection::sample_counters`]). None by default.
    pub sample_counters: Vec<CounterKind>,
    /// Whether each thread keeps its own sampling timer (the default;
    /// reading counters with each sample keeps them separate anyway).
    pub thread_timers: ThreadTimers,
    /// Whether each streamed sample carries its call stack
    /// ([`LinuxPerf::start_streaming`] only). None by default.
    pub stacks: CallStacks,
}

/// Whether each streamed sample carries its call stack (with
/// [`CallStacks::FramePointers`]: `PERF_SAMPLE_CALLCHAIN`, at most 127
/// entries, `sample_max_stack`; each frame named as the sampled function
/// is).
pub use lotus_core::CallStacks;

impl PerfOptions {
    /// Settings with `window_switch` chosen.
    pub fn with_window_switch(mut self, window_switch: WindowSwitch) -> Self {
        self.window_switch = window_switch;
        self
    }

    /// Settings with `counters` read with each streamed sample.
    pub fn with_sample_counters(mut self, counters: Vec<CounterKind>) -> Self {
        self.sample_counters = counters;
        self
    }

    /// Settings with kernel sampling as `kernel` says.
    pub fn with_kernel(mut self, kernel: KernelSampling) -> Self {
        self.kernel = kernel;
        self
    }

    /// Settings with call stacks as `stacks` says.
    pub fn with_stacks(mut self, stacks: CallStacks) -> Self {
        self.stacks = stacks;
        self
    }

    /// Settings with threads' sampling timers as `timers` says.
    pub fn with_thread_timers(mut self, timers: ThreadTimers) -> Self {
        self.thread_timers = timers;
        self
    }
}

/// Linux perf events.
///
/// Each profiler owns the symbol tables its collections read (a
/// [`SymbolCache`], shared by its collections and their writer threads:
/// `lotus map`'s runs of many ops read libtorch once); a caller that wants
/// another budget, or one cache for several profilers, gives its own
/// ([`Self::with_symbol_cache`]).
#[derive(Debug, Default)]
pub struct LinuxPerf {
    symbols: Arc<SymbolCache>,
}

impl LinuxPerf {
    /// A profiler whose collections read symbol tables through `cache`.
    pub fn with_symbol_cache(cache: Arc<SymbolCache>) -> LinuxPerf {
        LinuxPerf { symbols: cache }
    }

    /// The symbol tables this profiler's collections read through.
    pub fn symbol_cache(&self) -> &Arc<SymbolCache> {
        &self.symbols
    }

    /// Starts `target` with sampling attached and no window open; the
    /// concrete type, for callers that want per-window figures
    /// ([`PerfCollection::window_figures`]) and the full [`PerfReport`].
    ///
    /// Side effects on this process (see the [crate docs](crate#side-effects-on-the-calling-process)):
    /// may raise the soft `RLIMIT_NOFILE`, and makes it a child subreaper.
    /// The same holds for [`Self::start_with`], [`Self::start_streaming`]
    /// and the trait's [`Profiler::collect`].
    pub fn start(
        &self,
        target: &Target,
        options: &CollectOptions,
    ) -> Result<PerfCollection, CoreError> {
        self.start_with(target, options, &PerfOptions::default())
    }

    /// [`Self::start`] with backend-specific settings.
    pub fn start_with(
        &self,
        target: &Target,
        options: &CollectOptions,
        perf: &PerfOptions,
    ) -> Result<PerfCollection, CoreError> {
        self.start_inner(target, options, perf, None, true)
    }

    /// [`Self::start_with`], and every sample taken inside a window goes
    /// to `sink` as it comes (time, pid, tid, symbol), in blocks, each
    /// symbol before the first sample that uses it; [`PerfReport::stream`]
    /// says what was written.
    pub fn start_streaming(
        &self,
        target: &Target,
        options: &CollectOptions,
        perf: &PerfOptions,
        sink: Box<dyn lotus_samples::SampleSink>,
    ) -> Result<PerfCollection, CoreError> {
        self.start_inner(target, options, perf, Some(sink), true)
    }

    fn start_inner(
        &self,
        target: &Target,
        options: &CollectOptions,
        perf: &PerfOptions,
        sink: Option<Box<dyn lotus_samples::SampleSink>>,
        each_window: bool,
    ) -> Result<PerfCollection, CoreError> {
        let running = perf.window_switch == WindowSwitch::Timestamps;
        let mut notes = Vec::new();
        // Stacks folded into the reports (a collection through the trait
        // that asked for them), not streamed to a caller's sink.
        let folds = (sink.is_some() && options.stacks != CallStacks::None)
            .then(lotus_samples::SharedFolds::default);
        let frequency_hz = frequency_for(options, &mut notes);
        let cpus = events::online_cpus();
        // Two buffers per CPU (and a duplicate per sampler when switched by
        // ioctl), counters, and room for the caller's own files.
        let sample_counters: &[CounterKind] = if sink.is_some() {
            &perf.sample_counters
        } else {
            &[]
        };
        events::ensure_open_files((3 + sample_counters.len() as u64) * cpus.len() as u64 + 256);

        // Orphaned workers of the target come to us, to be reaped.
        // SAFETY: prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };

        let gated = spawn_gated(target)?;
        let pid = gated.pid();
        let want_kernel = perf.kernel == KernelSampling::Auto;
        let attached = events::open(
            pid,
            &cpus,
            frequency_hz,
            running,
            want_kernel,
            sample_counters,
            events::Extra {
                separate: perf.thread_timers == ThreadTimers::Separate,
                chains: sink.is_some() && perf.stacks != CallStacks::None,
                user_stacks: sink.is_some() && perf.stacks == CallStacks::Dwarf,
            },
        )
        .and_then(|streams| {
            let counters = counting::Counters::open(pid, running)?;
            Ok((streams, counters))
        });
        let (streams, counters) = match attached {
            Ok(x) => x,
            Err(e) => {
                gated.abort();
                return Err(e);
            }
        };
        sampler_notes(&streams, want_kernel, &mut notes);
        let (drain, switch, sampling) = match self.drain_over(
            streams,
            sink,
            frequency_hz,
            options.window_stamps,
            each_window,
            folds,
            options.stack_layer.clone(),
            None,
        ) {
            Ok(x) => x,
            Err(e) => {
                gated.abort();
                return Err(e);
            }
        };
        if !each_window {
            drain.sum_windows();
        }
        let child = gated.release().map_err(|source| CoreError::Spawn {
            program: target.program.display().to_string(),
            source: lotus_sys::process::with_fd_hint(source),
        })?;
        Ok(PerfCollection::new(
            perf.window_switch,
            collection::Job::Started(child),
            switch,
            counters,
            drain,
            sampling,
            notes,
        ))
    }
}

impl LinuxPerf {
    /// The drain over `streams`, their samples to `sink` (`prelude`
    /// replayed first: an attached tree's mappings), and the collection's
    /// description of its sampling: what starting a job and attaching to
    /// one share once the events are open.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn drain_over(
        &self,
        streams: events::Streams,
        sink: Option<Box<dyn lotus_samples::SampleSink>>,
        frequency_hz: u64,
        stamped: bool,
        each_window: bool,
        folds: Option<lotus_samples::SharedFolds>,
        layer: Option<lotus_core::StackLayer>,
        prelude: Option<drain::Prelude>,
    ) -> Result<(drain::Drain, events::Switch, collection::Sampling), CoreError> {
        let events::Streams {
            samplers,
            sideband,
            switch,
            kernel,
            separate_threads,
            members,
            counters: sample_counters,
            chain,
            user_stacks,
            ..
        } = streams;
        let drain = drain::Drain::start(
            samplers,
            sideband,
            sink,
            sample_counters.read.len(),
            stamped,
            1_000_000_000 / frequency_hz.max(1),
            kernel,
            chain,
            user_stacks,
            folds.clone(),
            layer,
            Arc::clone(&self.symbols),
            prelude,
        )?;
        let sampling = collection::Sampling {
            frequency_hz,
            kernel,
            stacks: match (chain.is_some(), user_stacks) {
                (false, _) => CallStacks::None,
                (true, false) => CallStacks::FramePointers,
                (true, true) => CallStacks::Dwarf,
            },
            members,
            counters: sample_counters,
            folds,
            symbols: Arc::clone(&self.symbols),
            stamped,
            separate_threads,
            each_window,
        };
        Ok((drain, switch, sampling))
    }
}

impl Profiler for LinuxPerf {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn description(&self) -> &'static str {
        "Linux perf events (perf_event_open sampling and counting; no perf binary needed)"
    }

    fn probe(&self) -> Probe {
        probe::probe()
    }

    fn unit(&self) -> Unit {
        Unit::Samples
    }

    /// The frequency in force, the default and what a sample costs here.
    fn calibration(&self) -> Option<&dyn lotus_core::SamplingCalibration> {
        Some(self)
    }

    /// [`LinuxPerf::start_streaming`], with per-sample counters
    /// ([`CounterKind`]) and frame-pointer call stacks.
    fn streaming(&self) -> Option<&dyn lotus_core::Streaming> {
        Some(self)
    }

    /// Windows are time ranges on the samples' clock (CLOCK_MONOTONIC),
    /// which the profiled process can read as well as lotus.
    fn takes_window_stamps(&self) -> bool {
        true
    }

    /// [`LinuxPerf::start`], boxed: the same side effects on this process
    /// (the open-file limit raised as needed, a child subreaper).
    fn collect(
        &self,
        target: &Target,
        options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, CoreError> {
        // Each window is kept only where the caller asks for each (the
        // fork server): the map engine and `lotus profile` sum them.
        // Stacks asked for: the samples go through the stream's writer
        // (which unwinds and names them), folded per window, not written.
        let (perf, sink): (PerfOptions, Option<Box<dyn lotus_samples::SampleSink>>) =
            if options.stacks == CallStacks::None {
                (PerfOptions::default(), None)
            } else {
                (
                    PerfOptions::default().with_stacks(options.stacks),
                    Some(Box::new(lotus_samples::NoSink)),
                )
            };
        Ok(Box::new(self.start_inner(
            target,
            options,
            &perf,
            sink,
            options.each_window,
        )?))
    }

    /// One period of the frequency in force: the kernel caps it at
    /// `kernel.perf_event_max_sample_rate`.
    fn sample_interval(&self, options: &CollectOptions) -> Option<std::time::Duration> {
        let hz = frequency_in_force(options.frequency_hz.unwrap_or(DEFAULT_FREQUENCY_HZ));
        Some(std::time::Duration::from_secs_f64(1.0 / hz as f64))
    }

    fn plan(&self, target: &Target, options: &CollectOptions) -> CollectPlan {
        let requested = options.frequency_hz.unwrap_or(DEFAULT_FREQUENCY_HZ).max(1);
        let hz = frequency_in_force(requested);
        let mut notes = vec![format!(
            "no perf binary: lotus holds the target before exec, opens one cpu-clock sampler per \
             online CPU on its pid at {hz} Hz with inherit (workers and threads too), plus \
             task-clock, context-switch and page-fault counters, then releases it; windows \
             are the time ranges between the control channel's resume and pause"
        )];
        if hz < requested {
            notes.push(format!(
                "{requested} Hz is above kernel.perf_event_max_sample_rate ({hz}): {hz} Hz is used"
            ));
        }
        CollectPlan {
            commands: vec![target.command_line()],
            env: target.env_lossy(),
            notes,
        }
    }
}

/// The frequency the samplers run at for `options`, with a note where the
/// kernel's maximum is below the one asked for.
fn frequency_for(options: &CollectOptions, notes: &mut Vec<String>) -> u64 {
    let requested = options.frequency_hz.unwrap_or(DEFAULT_FREQUENCY_HZ).max(1);
    let frequency_hz = frequency_in_force(requested);
    if frequency_hz < requested {
        notes.push(format!(
            "sampling at {frequency_hz} Hz, the kernel's maximum \
             (kernel.perf_event_max_sample_rate), instead of {requested} Hz"
        ));
    }
    frequency_hz
}

/// The notes on how `streams` opened: call stacks refused or cut short,
/// kernel mode refused (where `want_kernel`) or not asked for.
fn sampler_notes(streams: &events::Streams, want_kernel: bool, notes: &mut Vec<String>) {
    if let Some(reason) = &streams.user_refused {
        notes.push(format!(
            "call stacks: frame pointers instead of unwinding (the kernel refused the user registers and stack copy: {reason})"
        ));
    }
    let copied = events::user_stack_bytes(events::buffer_for(true));
    if streams.user_stacks && copied < records::USER_STACK_BYTES {
        let (copied, most) = (copied >> 10, (records::USER_STACK_BYTES + 8) >> 10);
        notes.push(format!(
            "call stacks: {copied} KiB of user stack copied with each sample, not {most} KiB (as another user than root the ring buffer, 256 KiB a CPU, holds 8 samples of that): a deeper stack stops short of its root; run lotus as root for the full copy"
        ));
    }
    if let Some(reason) = &streams.chain_refused {
        notes.push(format!(
            "call stacks: not collected (the kernel refused PERF_SAMPLE_CALLCHAIN: {reason}); each sample names the function it landed in"
        ));
    }
    if want_kernel && !streams.kernel {
        notes.push(error::kernel_refused_note());
    } else if !want_kernel {
        notes.push("kernel samples: not collected (user space only, as asked)".into());
    }
}

inventory::submit! {
    BackendRegistration { name: "perf", make: || Box::new(LinuxPerf::default()) }
}

/// Forks `target` held at lotus-sys's gate (stopped before exec until the
/// samplers are attached): its program, arguments, environment, folder and
/// output as the target says, its `keep_fds` inherited.
fn spawn_gated(target: &Target) -> Result<lotus_sys::process::GatedChild, CoreError> {
    use std::os::fd::{AsFd, BorrowedFd};
    let spawn_err = |source: std::io::Error| CoreError::Spawn {
        program: target.program.display().to_string(),
        source: lotus_sys::process::with_fd_hint(source),
    };
    let mut cmd = std::process::Command::new(&target.program);
    cmd.args(&target.args);
    for (k, v) in &target.env {
        cmd.env(k, v);
    }
    if let Some(cwd) = &target.cwd {
        cmd.current_dir(cwd);
    }
    if let Some(fd) = target.output_fd {
        // SAFETY: the caller keeps `fd` open until collect returns.
        let output = unsafe { BorrowedFd::borrow_raw(fd) };
        cmd.stdout(output.try_clone_to_owned().map_err(spawn_err)?);
        cmd.stderr(output.try_clone_to_owned().map_err(spawn_err)?);
    } else if target.stdout_to_stderr {
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .map_err(spawn_err)?;
        cmd.stdout(stderr);
    }
    lotus_sys::process::spawn_gated(cmd, target.keep_fds.clone()).map_err(spawn_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract lotus.h and lotus_protocol state: windows are
    /// time ranges unless a caller asks for ioctl switching.
    #[test]
    fn windows_are_time_ranges_by_default() {
        assert_eq!(
            PerfOptions::default().window_switch,
            WindowSwitch::Timestamps
        );
    }

    #[test]
    fn the_frequency_is_capped_at_the_kernels_maximum() {
        assert_eq!(capped_frequency(10_000, Some(100_000)), 10_000);
        assert_eq!(capped_frequency(10_000, Some(5_000)), 5_000);
        assert_eq!(capped_frequency(10_000, None), 10_000);
        assert_eq!(capped_frequency(0, Some(0)), 1);
    }

    /// What callers that name no backend crate ask for (the map engine,
    /// the CLI): the registry's perf offers calibration and streaming,
    /// with the same figures as this crate's functions.
    #[test]
    fn perf_offers_its_capabilities_through_the_trait() {
        let perf = lotus_core::backend("perf").expect("registered");
        let calibration = perf.calibration().expect("perf calibrates");
        assert_eq!(calibration.default_frequency_hz(), DEFAULT_FREQUENCY_HZ);
        assert_eq!(
            calibration.frequency_in_force(1_000_000),
            frequency_in_force(1_000_000)
        );
        assert_eq!(calibration.max_slowdown(), MAX_SLOWDOWN);
        assert_eq!(
            calibration.default_frequency_for(None),
            DEFAULT_FREQUENCY_HZ
        );
        let streaming = perf.streaming().expect("perf streams");
        let names: Vec<&str> = streaming.sample_counters().iter().map(|c| c.name).collect();
        assert!(
            names.contains(&"cycles") && names.contains(&"task-clock"),
            "{names:?}"
        );
        assert!(
            perf.report_format().is_none(),
            "perf reads no vendor reports"
        );
    }

    #[test]
    fn the_interval_in_force_is_capped_by_the_kernel() {
        let mut options = CollectOptions::default();
        options.frequency_hz = Some(1000);
        let interval = LinuxPerf::default()
            .sample_interval(&options)
            .expect("interval");
        let cap = events::max_sample_rate();
        if cap.is_some_and(|c| c < 1000) {
            return;
        }
        assert_eq!(interval, std::time::Duration::from_millis(1));
        if let Some(cap) = cap {
            options.frequency_hz = Some(cap.saturating_mul(10));
            let interval = LinuxPerf::default()
                .sample_interval(&options)
                .expect("interval");
            assert_eq!(
                interval,
                std::time::Duration::from_secs_f64(1.0 / cap as f64)
            );
        }
    }
}

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
