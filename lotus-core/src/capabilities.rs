//! What a backend may offer beyond collect / pause / resume / report.
//!
//! Every backend collects, opens and closes windows and reports
//! ([`Profiler`], [`Collection`]). Some can do more, and a caller asks for
//! each such capability through the trait, never through the backend's
//! crate, so that a tool linking any backend (the map engine, the `lotus`
//! binary, another program) works with whichever backend offers it, and
//! says which backend lacks it otherwise:
//!
//! | Capability | Asked with | What it offers |
//! |---|---|---|
//! | [`SamplingCalibration`] | [`Profiler::calibration`] | the frequency in force, the default frequency, what a sample costs here and the slowdown the default keeps under |
//! | [`Streaming`] | [`Profiler::streaming`] | every sample sent to a [`SampleSink`] as it comes, with per-sample counters ([`SampleCounter`]) and call stacks ([`CallStacks`]) where the backend reads them |
//! | [`ReportFormat`] | [`Profiler::report_format`] | the vendor's report files recognized and read one row at a time |
//! | [`SamplingControl`] | [`Collection::sampling_control`] | sampling stopped and restarted outside windows |
//! | [`StampedWindows`] | [`Collection::stamped_windows`] | window edges the profiled process stamped itself, applied after the fact |
//!
//! Each method's default is `None`: a backend offers a capability by
//! overriding it. All the traits are object-safe.
//!
//! ```
//! use lotus_core::{Profiler, SamplingCalibration};
//!
//! /// The sampling frequency a caller would use under `backend`: the
//! /// backend's default where it calibrates, else its own choice.
//! fn frequency(backend: &dyn Profiler, otherwise: u64) -> u64 {
//!     match backend.calibration() {
//!         Some(c) => c.frequency_in_force(c.default_frequency_hz()),
//!         None => otherwise,
//!     }
//! }
//! # let _ = frequency;
//! ```
//!
//! [`Profiler`]: crate::Profiler
//! [`Collection`]: crate::Collection
//! [`Profiler::calibration`]: crate::Profiler::calibration
//! [`Profiler::streaming`]: crate::Profiler::streaming
//! [`Profiler::report_format`]: crate::Profiler::report_format
//! [`Collection::sampling_control`]: crate::Collection::sampling_control
//! [`Collection::stamped_windows`]: crate::Collection::stamped_windows

use crate::Error;
use std::io::BufRead;
use std::time::Duration;

use lotus_samples::SampleSink;

use crate::profiler::{CollectOptions, Collection, Target};
use crate::row::{Row, Unit};

/// What one sample costs the sampled code on this machine
/// ([`SamplingCalibration::sampling_cost`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SampleCost {
    /// CPU time one sample adds to the sampled thread.
    pub per_sample: Duration,
}

impl SampleCost {
    /// A cost of `per_sample` CPU time a sample.
    ///
    /// ```
    /// use lotus_core::SampleCost;
    /// use std::time::Duration;
    /// let c = SampleCost::new(Duration::from_micros(10));
    /// assert!((c.slowdown_at(5000) - 0.05).abs() < 1e-9);
    /// ```
    pub fn new(per_sample: Duration) -> SampleCost {
        SampleCost { per_sample }
    }

    /// How much slower the sampled code runs at `hz`, as a fraction.
    pub fn slowdown_at(&self, hz: u64) -> f64 {
        self.per_sample.as_secs_f64() * hz as f64
    }
}

/// A backend that knows its sampling frequencies and can measure what a
/// sample costs here ([`Profiler::calibration`](crate::Profiler::calibration)).
pub trait SamplingCalibration: Send + Sync {
    /// The frequency it samples at when none is asked for, in Hz (before
    /// [`SamplingCalibration::default_frequency_for`] lowers it for a
    /// costly machine).
    fn default_frequency_hz(&self) -> u64;
    /// The frequency the backend samples at when `requested` Hz is asked
    /// for (the system may cap it).
    fn frequency_in_force(&self, requested: u64) -> u64;
    /// What one sample costs the sampled code here (measured at most once
    /// per process); `Err` says why it could not be measured.
    fn sampling_cost(&self) -> Result<SampleCost, String>;
    /// The default frequency for a machine where a sample costs `cost`
    /// (`None`: unknown): the highest that keeps the slowdown under
    /// [`SamplingCalibration::max_slowdown`].
    fn default_frequency_for(&self, cost: Option<SampleCost>) -> u64;
    /// The slowdown of the sampled code (a fraction) that the default
    /// frequency keeps under.
    fn max_slowdown(&self) -> f64;
}

/// Whether each streamed sample carries its call stack
/// ([`StreamOptions::stacks`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallStacks {
    /// No stacks: each sample names the function it landed in.
    #[default]
    None,
    /// The kernel's call chain, kernel and user frames, walked by frame
    /// pointers: complete where the code keeps frame pointers; where it
    /// does not, the chain stops or skips at its first function without
    /// one. The stacks go to the sink deduplicated
    /// ([`lotus_samples::StackNode`]).
    FramePointers,
    /// The kernel's frames from its call chain, the user's unwound through
    /// the unwind tables (`.eh_frame`) from a copy of the user stack taken
    /// with each sample, as `perf record --call-graph dwarf` does: complete
    /// through code built without frame pointers (most distributions'
    /// CPython, libjpeg, libtorch), up to the stack copy's size.
    Dwarf,
}

/// A counter a streaming backend can read with each sample
/// ([`Streaming::sample_counters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampleCounter {
    /// The name users give (`cycles`, `instructions`, `task-clock`).
    pub name: &'static str,
    /// A hardware event (needs a PMU, which most virtual machines lack).
    pub hardware: bool,
}

impl SampleCounter {
    /// The counter `name`, a hardware event where `hardware`.
    pub fn new(name: &'static str, hardware: bool) -> SampleCounter {
        SampleCounter { name, hardware }
    }
}

/// What a streamed collection reads besides the samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamOptions {
    /// Counters read with each sample, as deltas per thread, by name
    /// (among [`Streaming::sample_counters`]), in record order.
    pub counters: Vec<String>,
    /// Whether each sample carries its call stack.
    pub stacks: CallStacks,
}

impl StreamOptions {
    /// Options with `counters` read with each sample.
    pub fn with_counters(mut self, counters: Vec<String>) -> Self {
        self.counters = counters;
        self
    }

    /// Options with call stacks as `stacks` says.
    pub fn with_stacks(mut self, stacks: CallStacks) -> Self {
        self.stacks = stacks;
        self
    }
}

/// The counters a streamed collection reads with each sample
/// ([`SampleStream::counters_read`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountersRead {
    /// Counters every sample carries, in record order.
    pub read: Vec<SampleCounter>,
    /// Counters asked for that the system refused: the samples carry none
    /// of them.
    pub refused: Option<CountersRefused>,
}

/// Counters the system refused ([`CountersRead::refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CountersRefused {
    /// The counters asked for.
    pub asked: Vec<SampleCounter>,
    /// Why they were refused (the system's words).
    pub reason: String,
    /// One sentence for the user saying which and why.
    pub note: String,
}

impl CountersRefused {
    /// `asked` refused for `reason`, told to the user as `note`.
    pub fn new(asked: Vec<SampleCounter>, reason: String, note: String) -> Self {
        CountersRefused {
            asked,
            reason,
            note,
        }
    }
}

/// What a streamed collection sent and what it is known to miss
/// ([`SampleStream::finish_stream`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamReport {
    /// The frequency the samplers ran at, in Hz.
    pub frequency_hz: u64,
    /// Samples written.
    pub samples: u64,
    /// Distinct (function, module) symbols written.
    pub symbols: u64,
    /// Distinct call stacks written (0 without stacks).
    pub stacks: u64,
    /// Samples written with a stack of two frames or more.
    pub deep_samples: u64,
    /// The first write error, after which nothing more was written.
    pub write_error: Option<String>,
    /// Samples the system dropped.
    pub lost: u64,
    /// The CPU time the sampled processes ran while sampled, where known.
    pub cpu_ns: Option<u64>,
    /// Samples (among `samples`) that stand for a period the samplers did
    /// not see (e.g. the last one of a thread that exited).
    pub samples_added: u64,
    /// What the samples cover of the CPU time, where samples are missing,
    /// with the figures.
    pub coverage_notes: Vec<String>,
    /// What the samples are known to miss (kernel functions unnamed,
    /// modules that could not be read, refused stacks), each with its
    /// figure.
    pub notes: Vec<String>,
}

/// A backend that sends every sample to a sink as it comes
/// ([`Profiler::streaming`](crate::Profiler::streaming)).
pub trait Streaming: Send + Sync {
    /// The counters it can read with each sample ([`StreamOptions::counters`]);
    /// empty where it reads none.
    fn sample_counters(&self) -> Vec<SampleCounter> {
        Vec::new()
    }
    /// Starts `target` like [`Profiler::collect`](crate::Profiler::collect),
    /// and every sample taken inside a window goes to `sink` as it comes
    /// (time, pid, tid, symbol), each symbol before the first sample that
    /// uses it. A counter name it does not know is an error.
    fn start_streaming(
        &self,
        target: &Target,
        options: &CollectOptions,
        stream: &StreamOptions,
        sink: Box<dyn SampleSink>,
    ) -> Result<Box<dyn SampleStream>, Error>;
    /// Samples the process `pid` that is already running (not started by
    /// this backend), every thread of it and of its descendants, those
    /// running now and those started later, as [`Streaming::start_streaming`]
    /// does a job it starts: one window from now to the end, every sample
    /// to `sink`. The collection ends when `pid` exits or is finished;
    /// [`Collection::kill`](crate::Collection::kill) stops sampling and
    /// never signals the job, and [`Collection::try_wait`](crate::Collection::try_wait)
    /// reports `pid`'s end with a status of 0 (a process that is not this
    /// one's child leaves no status to read). A backend that cannot attach
    /// says so (the default).
    fn attach_streaming(
        &self,
        pid: u32,
        options: &CollectOptions,
        stream: &StreamOptions,
        sink: Box<dyn SampleSink>,
    ) -> Result<Box<dyn SampleStream>, Error> {
        let _ = (pid, options, stream, sink);
        Err(Error::Unsupported {
            backend: "streaming".into(),
            what: "attaching to a running process".into(),
        })
    }
}

/// A collection streaming its samples ([`Streaming::start_streaming`]).
pub trait SampleStream: Collection {
    /// The frequency the samplers run at, in Hz.
    fn frequency_hz(&self) -> u64;
    /// Whether kernel mode is sampled too.
    fn kernel_samples(&self) -> bool;
    /// The call stacks each sample carries: those asked for, or what the
    /// backend fell back to where the kernel refused them (the reason
    /// among its notes).
    fn call_stacks(&self) -> CallStacks;
    /// The counters each sample carries, or which were refused and why.
    fn counters_read(&self) -> CountersRead;
    /// Ends the collection: the sink is finished, and what was sent.
    fn finish_stream(self: Box<Self>) -> Result<StreamReport, Error>;
}

/// A collection that can stop sampling outside windows
/// ([`Collection::sampling_control`](crate::Collection::sampling_control)).
pub trait SamplingControl {
    /// Stops (`on: false`) or restarts (`on: true`) sampling while no
    /// window is open ([`lotus_protocol::Request::Sampling`]): the profiled
    /// process then times its op unsampled.
    fn set_sampling(&mut self, on: bool) -> Result<(), Error>;
}

/// A collection that takes window edges the profiled process stamps on the
/// samples' clock ([`Collection::stamped_windows`](crate::Collection::stamped_windows);
/// [`CollectOptions::window_stamps`]).
pub trait StampedWindows {
    /// Records a window the profiled process opened at `edge` without
    /// waiting for lotus.
    fn resume_at(&mut self, edge: &lotus_protocol::Edge) -> Result<(), Error>;
    /// Records the open window closing at `edge`.
    fn pause_at(&mut self, edge: &lotus_protocol::Edge) -> Result<(), Error>;
    /// Says no more stamped edges will come (the control channel closed,
    /// or the process is gone): what was held back waiting for them can
    /// be counted.
    fn stamps_done(&mut self);
}

/// Rows of a report file, read one at a time.
pub type RowIter<'a> = Box<dyn Iterator<Item = Result<Row, Error>> + 'a>;

/// A backend whose vendor tool writes report files lotus reads
/// ([`Profiler::report_format`](crate::Profiler::report_format)).
pub trait ReportFormat: Send + Sync {
    /// The format's name as lotus records it (`vtune-csv`, `uprof-csv`).
    fn format_name(&self) -> &'static str;
    /// Whether `head` (the start of a file, at least its first lines) is
    /// a report of this format. A format that cannot tell says false.
    fn recognizes(&self, head: &str) -> bool {
        let _ = head;
        false
    }
    /// What the rows count.
    fn unit(&self) -> Unit;
    /// The report in `input`, one row at a time (a large report is never
    /// held whole where the format allows); `file` names it in errors.
    fn rows<'a>(&self, input: &'a mut dyn BufRead, file: &str) -> Result<RowIter<'a>, Error>;
    /// The sampling interval the report states, in seconds, where it
    /// states one; `file` names it in errors.
    fn stated_interval_s(&self, input: &mut dyn BufRead, file: &str) -> Result<Option<f64>, Error> {
        let _ = (input, file);
        Ok(None)
    }
}
