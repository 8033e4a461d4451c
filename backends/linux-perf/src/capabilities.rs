//! What perf offers beyond collect / pause / resume / report, through
//! lotus-core's capability traits: calibration and the frequency in force
//! ([`SamplingCalibration`]), streamed samples with per-sample counters and
//! call stacks, of a job perf starts or of a process it attaches to
//! ([`Streaming`], [`SampleStream`]). A caller that asks
//! `lotus_core::backend("perf")` for them needs no name from this crate.

use lotus_core::{
    CollectOptions, CountersRead, CountersRefused, Error as CoreError, SampleCost, SampleCounter,
    SampleStream, SamplingCalibration, StreamOptions, StreamReport, Streaming, Target,
};
use lotus_samples::SampleSink;

use crate::counting::CounterKind;
use crate::{LinuxPerf, PerfCollection, PerfOptions, BACKEND, DEFAULT_FREQUENCY_HZ};

/// The core's description of `kind`.
fn counter(kind: CounterKind) -> SampleCounter {
    SampleCounter::new(kind.name(), kind.is_hardware())
}

impl SamplingCalibration for LinuxPerf {
    fn default_frequency_hz(&self) -> u64 {
        DEFAULT_FREQUENCY_HZ
    }

    fn frequency_in_force(&self, requested: u64) -> u64 {
        crate::frequency_in_force(requested)
    }

    fn sampling_cost(&self) -> Result<SampleCost, String> {
        crate::sampling_cost()
    }

    fn default_frequency_for(&self, cost: Option<SampleCost>) -> u64 {
        crate::default_frequency_for(cost)
    }

    fn max_slowdown(&self) -> f64 {
        crate::MAX_SLOWDOWN
    }
}

impl Streaming for LinuxPerf {
    fn sample_counters(&self) -> Vec<SampleCounter> {
        CounterKind::ALL.into_iter().map(counter).collect()
    }

    /// [`LinuxPerf::start_streaming`], with the counters named by the
    /// core's options.
    fn start_streaming(
        &self,
        target: &Target,
        options: &CollectOptions,
        stream: &StreamOptions,
        sink: Box<dyn SampleSink>,
    ) -> Result<Box<dyn SampleStream>, CoreError> {
        let perf = perf_options(stream)?;
        Ok(Box::new(LinuxPerf::start_streaming(
            self, target, options, &perf, sink,
        )?))
    }

    /// [`LinuxPerf::attach_streaming`], with the counters named by the
    /// core's options.
    fn attach_streaming(
        &self,
        pid: u32,
        options: &CollectOptions,
        stream: &StreamOptions,
        sink: Box<dyn SampleSink>,
    ) -> Result<Box<dyn SampleStream>, CoreError> {
        let perf = perf_options(stream)?;
        Ok(Box::new(LinuxPerf::attach_streaming(
            self, pid, options, &perf, sink,
        )?))
    }
}

/// The backend's settings for a stream the core's options describe: the
/// counters they name (an unknown name is an error) and the stacks.
fn perf_options(stream: &StreamOptions) -> Result<PerfOptions, CoreError> {
    let counters = stream
        .counters
        .iter()
        .map(|name| {
            CounterKind::from_name(name).ok_or_else(|| CoreError::Other {
                backend: BACKEND.into(),
                message: format!(
                    "unknown counter {name:?}: perf reads {} with each sample",
                    CounterKind::ALL.map(CounterKind::name).join(", ")
                ),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PerfOptions::default()
        .with_sample_counters(counters)
        .with_stacks(stream.stacks))
}

impl SampleStream for PerfCollection {
    fn frequency_hz(&self) -> u64 {
        PerfCollection::frequency_hz(self)
    }

    fn kernel_samples(&self) -> bool {
        PerfCollection::kernel_samples(self)
    }

    fn call_stacks(&self) -> crate::CallStacks {
        PerfCollection::call_stacks(self)
    }

    fn counters_read(&self) -> CountersRead {
        let counters = PerfCollection::sample_counters(self);
        let mut read = CountersRead::default();
        read.read = counters.read.iter().copied().map(counter).collect();
        read.refused = counters.unsupported.as_ref().map(|u| {
            CountersRefused::new(
                u.asked.iter().copied().map(counter).collect(),
                u.reason.clone(),
                counters.unsupported_note().unwrap_or_default(),
            )
        });
        read
    }

    /// [`PerfCollection::finish`], in the core's words. A stream is one
    /// window over the whole run: the notes on the per-window counters
    /// (which it does not report) are left out; the counters read with
    /// the samples are said by [`SampleStream::counters_read`].
    fn finish_stream(self: Box<Self>) -> Result<StreamReport, CoreError> {
        let window_counter_notes: Vec<String> = self
            .counter_status()
            .iter()
            .filter_map(|c| c.note())
            .collect();
        let report = (*self).finish()?;
        let stream = report.stream.clone().unwrap_or_default();
        let mut out = StreamReport::default();
        out.frequency_hz = report.frequency_hz;
        out.samples = stream.samples;
        out.symbols = stream.symbols;
        out.stacks = stream.stacks;
        out.deep_samples = stream.deep_samples;
        out.write_error = stream.error;
        out.lost = report.total.lost;
        out.cpu_ns = report.coverage.cpu_ns;
        out.samples_added = report.coverage.added();
        out.coverage_notes = report.coverage.notes();
        out.notes = report
            .notes
            .into_iter()
            .filter(|n| !window_counter_notes.contains(n))
            .chain(stream.notes)
            .collect();
        Ok(out)
    }
}
