//! The lotus trace runner: a program (a Python job, its DataLoader
//! workers, launched ranks) run with the `lotus_trace` tracer on and no
//! change to its code, one log per process written into a trace folder,
//! and, where asked, every process and thread of it sampled through the
//! registry's streaming backend ([`lotus_core::streaming_backend`]) into
//! the same folder, for `lotus attribute DIR`.
//!
//! - [`run_traced`] runs the job of a [`TraceOptions`] to its end and
//!   returns what it left ([`TraceRun`]: the exit status, this run's logs,
//!   the processes that could not write theirs); the folder is checked
//!   first (no other user may write it), the processes the job leaves are
//!   ended, the logs of processes killed outright are cut to their whole
//!   lines, and the run's record ([`RunRecord`], `lotus.run/1`) is
//!   written beside the logs.
//! - [`RunRecord::read`] reads that record back (what `lotus report`
//!   shows at the top of its page), [`mark_failed`] marks a sampled run
//!   failed after the fact.
//!
//! **The caller links the backends.** Samples come from the registry's
//! backend that streams them; this crate depends on no backend crate. A
//! binary that samples must name the backend crate it wants registered
//! (`use lotus_backend_perf as _;`), or the linker drops it; without one, a
//! sampled run is traced without samples and says why.
//!
//! The runner prints nothing: what it has to say (warnings, notes, the
//! samples' figures) goes to a [`Progress`] the caller implements, as it
//! happens. It is process-wide while a job runs: the process is the job's
//! subreaper, and SIGTERM, SIGHUP and SIGINT are passed on to the job.
//! The out-of-memory handling of the `lotus` binary ([`ExitOnOom`], its
//! global allocator) is here too, so that a traced run's folder and status
//! are left right when memory runs out.
//!
//! ```no_run
//! use lotus_backend_perf as _; // registers the perf backend, for samples
//! use lotus_runner::{run_traced, NoProgress, Sampling, TraceOptions};
//!
//! let command = vec!["python3".to_string(), "train.py".to_string()];
//! let options = TraceOptions::new("trace", command).with_sampling(Sampling::default());
//! let run = run_traced(&options, &mut NoProgress)?;
//! assert!(run.failures.is_empty(), "an incomplete trace: {:?}", run.failures);
//! println!("{} logs in {}, exit {}", run.logs.len(), run.out.display(), run.status);
//! # Ok::<(), lotus_runner::RunnerError>(())
//! ```
#![deny(missing_docs)]

mod attach;
mod error;
mod job;
mod limits;
mod logs;
mod oom;
mod perf_maps;
mod program;
mod progress;
mod reports;
mod run;
mod run_record;
mod sampled;
mod status;
mod tracer;
mod watch;

pub use attach::{attach, AttachOptions, AttachRun};
pub use error::RunnerError;
pub use limits::{check_descriptor_limit, MIN_DESCRIPTORS};
pub use oom::{remove_on_oom, ExitOnOom};
pub use program::find_program;
pub use progress::{MessageKind, NoProgress, Progress};
pub use run::{
    check_options, check_prefix, run_traced, ControlLibrary, LogFormat, TraceOptions, TraceRun,
};
pub use run_record::{date_of_unix_s, run_file, RunRecord, RunShown, RUN_SCHEMA};
pub use sampled::{sample_counters, Sampling, DEFAULT_COUNTERS, DEFAULT_FREQUENCY_HZ};
pub use status::mark_failed;
pub use watch::{watch, Watched, WatchedRun, PAUSE_FACTOR};

#[cfg(test)]
mod tests;
