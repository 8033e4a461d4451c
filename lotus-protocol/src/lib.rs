//! The two things both ends of a lotus run share: the control protocol a
//! profiled process speaks to the lotus process (measurement windows
//! opened and closed around each op), and the clock map that puts the
//! tracer's wall-clock spans on the samples' `CLOCK_MONOTONIC` time base.
//!
//! The control library (`lotus-control`, loaded into the profiled
//! process), the mapping engine (`lotus-map`) and the perf backend all
//! speak [`Request`] and [`Reply`]; the trace readers and the in-pipeline
//! join use [`ClockMap`].
//!
//! ```
//! use lotus_protocol::{Reply, Request};
//!
//! let line = Request::Pause.encode();
//! assert_eq!(Request::decode(&line).unwrap(), Request::Pause);
//! assert_eq!(Reply::decode(&Reply::Ok.encode()).unwrap(), Reply::Ok);
//! ```
#![deny(missing_docs)]

mod clock;
mod control;

pub use clock::{clock_pair_of_line, ClockMap, HEADER_TAG};
pub use control::{
    Edge, OwnCounters, Reply, Request, ENV_BACKEND, ENV_CONTROL_FDS, ENV_WINDOW_STAMPS,
};

/// Public enums are `#[non_exhaustive]`: other crates match them with a
/// wildcard arm, so adding a variant is not a breaking change.
///
/// ```compile_fail,E0004
/// fn name(r: lotus_protocol::Request) -> &'static str {
///     use lotus_protocol::Request::*;
///     match r {
///         Resume { .. } => "resume", Pause => "pause", Detach => "detach",
///         OpenedAt { .. } => "opened", ClosedAt { .. } => "closed",
///         Sampling { .. } => "sampling",
///     }
/// }
/// ```
#[cfg(doctest)]
pub struct NonExhaustive;

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
