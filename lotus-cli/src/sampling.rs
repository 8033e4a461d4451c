//! The sampling options `lotus trace run --sample`, `lotus map` and
//! `lotus profile` share: `--stacks`, `--counters` and the frequency's
//! default. The sampled run itself is `lotus_runner`'s.

use lotus_core::{CallStacks, SampleCounter};

/// `trace run --stacks`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StackMode {
    /// The sampled function alone.
    None,
    /// The kernel's frame-pointer call chain with every sample.
    Fp,
    /// The kernel's frames, and the user's unwound through the unwind
    /// tables from a copy of the user stack (as `perf record --call-graph
    /// dwarf`).
    Dwarf,
}

impl StackMode {
    /// What the backends take.
    pub fn call_stacks(self) -> CallStacks {
        match self {
            StackMode::None => CallStacks::None,
            StackMode::Fp => CallStacks::FramePointers,
            StackMode::Dwarf => CallStacks::Dwarf,
        }
    }
}

/// Refuses `--folded`/`--flamegraph` without `--stacks`, and `--stacks`
/// with a backend other than perf (VTune and uProf keep call stacks in
/// their own results: `--keep-raw`).
pub fn check_stack_args(
    stacks: StackMode,
    drawn: bool,
    backend: &dyn lotus_core::Profiler,
) -> anyhow::Result<()> {
    if stacks == StackMode::None {
        if drawn {
            return Err(crate::usage::usage(
                "--folded and --flamegraph draw call stacks: add --stacks dwarf (or fp)",
            ));
        }
        return Ok(());
    }
    // Stacks come with the samples of a backend that streams them.
    if backend.streaming().is_none() {
        let name = backend.name();
        return Err(crate::usage::usage(match lotus_core::streaming_backend() {
            Some(with) => format!(
                "--stacks takes call stacks with {w}'s samples; {name} keeps its own in its results (--keep-raw DIR): use --backend {w}",
                w = with.name()
            ),
            None => format!(
                "--stacks takes call stacks with the samples of a backend that streams them, and this lotus links none; {name} keeps its own in its results (--keep-raw DIR)"
            ),
        }));
    }
    Ok(())
}

/// The sampling frequency when `--frequency` is not given (Hz).
pub const DEFAULT_FREQUENCY_HZ: u64 = lotus_runner::DEFAULT_FREQUENCY_HZ;

/// The counters `--counters` names, in order (empty for `none`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterList(pub Vec<SampleCounter>);

/// Parses `--counters` ([`lotus_runner::sample_counters`]).
pub fn parse_counters(text: &str) -> std::result::Result<CounterList, String> {
    lotus_runner::sample_counters(text).map(CounterList)
}

/// The runner's sampling for `--frequency`, `--counters` (the defaults
/// where not given) and `--stacks`.
pub fn runner_sampling(
    frequency_hz: u64,
    counters: &Option<CounterList>,
    stacks: StackMode,
) -> anyhow::Result<lotus_runner::Sampling> {
    let asked = match counters {
        Some(asked) => asked.0.clone(),
        None => {
            parse_counters(lotus_runner::DEFAULT_COUNTERS)
                .map_err(crate::usage::usage)?
                .0
        }
    };
    Ok(lotus_runner::Sampling {
        frequency_hz,
        counters: asked,
        counters_asked: counters.is_some(),
        stacks: stacks.call_stacks(),
    })
}
