//! What a DataLoader change would give: lotus's model of a traced run,
//! simulated under other settings (`lotus predict`, `lotus tune`: its
//! search, [`next_trial`]).
//!
//! From one trace folder (`lotus trace run --out DIR`), [`observe`] reads
//! what the model needs: each batch the training loop took (its time
//! alone, the CPU its worker used, the ops in it and their share, its
//! garbage collections), the training step after it, the workers'
//! start-up and the main process's starting and stopping them, the
//! handover of a batch, and the DataLoader's settings. [`simulate`] plays
//! the run again under a [`Setting`] on shared CPUs (the model is written
//! out in `docs/src/commands/predict.md` and in the `model` module), and
//! [`predict`] turns that into predicted loop times with an interval,
//! calibrated on the run as traced.
//!
//! ```
//! use lotus_predict::{simulate, Batch, Epoch, Inputs, Setting, Work};
//!
//! // Ten batches of 10 ms of CPU, steps of 2 ms, one CPU, no workers.
//! let batch = Batch { work: Work::new(10e6, 10e6), step: Work::new(2e6, 2e6), ..Batch::default() };
//! let epoch = Epoch { batches: vec![batch; 10], ..Epoch::default() };
//! let traced = Setting { workers: 0, cpus: 1.0, ..Setting::default() };
//! let inputs = Inputs { epochs: vec![epoch], traced: traced.clone(), ..Inputs::default() };
//! let alone = simulate(&inputs, &traced).loop_ns;
//! assert!((alone - 118e6).abs() < 1e3);
//! // Two workers on four CPUs: batches ready while the step runs.
//! let two = Setting { workers: 2, cpus: 4.0, ..traced };
//! assert!(simulate(&inputs, &two).loop_ns < alone);
//! ```

mod model;
mod observe;
mod predict;
mod read;
mod tune;

pub use model::{simulate, Batch, Epoch, Inputs, Outcome, Pools, Setting, Work};
pub use observe::{observe, Observed};
pub use predict::{
    advice, candidates, grid, predict, ranked, ranked_advice, Change, Fit, Measured, Prediction,
    Scenario, Taken, MAX_RESAMPLED_BATCHES, MODEL_MARGIN, RESAMPLES, SCHEMA,
};
pub use read::Observer;
pub use tune::{
    best_trial, loader_env, next_trial, setting_words, NextTrial, Trial, TuneRecord, MIN_GAIN,
    THREAD_VARS, TUNE_SCHEMA,
};

/// What goes wrong predicting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PredictError {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] lotus_trace::TraceError),
    /// The trace has no training loop to model.
    #[error("{path}: no training loop in the trace (no main process took a batch from a DataLoader): trace the job with `lotus trace run --out DIR -- CMD` and give DIR")]
    NoLoop {
        /// The trace folder.
        path: String,
    },
    /// `--without` names an op the run did not run in its batches.
    #[error("--without {op}: no op of that name ran in the traced batches (ops there, most CPU first: {known})")]
    UnknownOp {
        /// The op asked for.
        op: String,
        /// The ops the run had.
        known: String,
    },
    /// A change that is not a setting.
    #[error("{0}")]
    BadChange(String),
}
