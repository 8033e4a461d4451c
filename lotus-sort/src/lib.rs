//! Sorting and keeping more fixed-size records than memory should hold.
//!
//! A trace of ten million events has ten million durations; exact
//! percentiles need them sorted, and matching batches with their
//! consumptions needs every batch, wait and consumption. [`Sorter`] keeps
//! at most a [`Budget`] of records in memory: when its buffer fills, the
//! buffer is sorted and appended to the sorter's one unnamed temporary
//! file (a *run*; one file however many runs), and [`Sorter::finish`]
//! merges the runs (and what is still in memory) into one ascending
//! stream. [`Spool`] keeps records in the order they
//! came, in memory up to the budget and in a temporary file past it, and
//! can be read any number of times.
//!
//! Temporary files are created in the system's temporary folder (`TMPDIR`)
//! and unlinked at once, so nothing is left behind even when the process is
//! killed. A small input never touches the disk.
//!
//! The crates that sort externally (such as `extsort`) take one iterator
//! and sort it; the trace index feeds several streams at once from one
//! pass over the logs, hence this push-style sorter.
#![deny(missing_docs)]

mod sorter;

pub use sorter::{Budget, Record, Sorted, Sorter, SpillError, Spool, SpoolIter};

/// The fixed-size byte layout records are written in; the sorter's own
/// helpers, public so the crates that define records (traces, attribution)
/// can write and read their fields.
pub mod bytes {
    pub use crate::sorter::bytes::{Get, Put};
}
