//! What the model takes from a trace folder: the traced run as
//! [`Inputs`] (see the crate documentation for what is read from where).

use lotus_trace::LoaderConfig;

use crate::model::Inputs;
use crate::PredictError;

/// The traced run: the model's inputs, the loop as measured, and what the
/// reading had to assume.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The model's inputs.
    pub inputs: Inputs,
    /// The training loop's time as measured (the verdict's window), ns.
    pub loop_ns: f64,
    /// The main process's waits in it, ns.
    pub wait_ns: f64,
    /// The main process modelled.
    pub main_pid: u32,
    /// The DataLoader's settings as the tracer read them, where it did.
    pub config: Option<LoaderConfig>,
    /// Batches the main process took.
    pub batches: usize,
    /// What was assumed or left out, one sentence each.
    pub notes: Vec<String>,
    /// Whether each worker batch said its thread's run-queue delay.
    pub has_delay: bool,
    /// Whether each worker batch said its process's CPU.
    pub has_cpu: bool,
}

/// Reads the traced run in `dir` for the model; `cpus`: the CPUs the job
/// had.
pub fn observe<'a>(
    dir: impl Into<lotus_trace::Dir<'a>>,
    cpus: f64,
) -> Result<Observed, PredictError> {
    crate::read::read(dir.into(), cpus)
}
