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
//! pass over the logs, hence this push-style sorter.//!
//! ```
//! use lotus_sort::bytes::{Get, Put};
//! use lotus_sort::{Budget, Record, Sorter};
//!
//! #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
//! struct Duration(u64);
//! impl Record for Duration {
//!     const SIZE: usize = 8;
//!     fn encode(&self, out: &mut [u8]) { Put::new(out).u64(self.0); }
//!     fn decode(bytes: &[u8]) -> Self { Duration(Get::new(bytes).u64()) }
//! }
//!
//! // A budget of 64 bytes: 8 records in memory, the rest in sorted runs
//! // on disk, merged back on `finish`.
//! let mut sorter = Sorter::new(Budget::new(64));
//! for d in (0..100u64).rev() {
//!     sorter.push(Duration(d * 7 % 100)).unwrap();
//! }
//! assert!(sorter.spilled());
//! let sorted: Vec<u64> = sorter.finish().unwrap().map(|r| r.unwrap().0).collect();
//! assert_eq!(sorted, (0..100).collect::<Vec<_>>());
//! ```
#![deny(missing_docs)]

mod sorter;

pub use sorter::{Budget, Record, Sorted, Sorter, SpillError, Spool, SpoolIter};

/// The fixed-size byte layout records are written in; the sorter's own
/// helpers, public so the crates that define records (traces, attribution)
/// can write and read their fields.
pub mod bytes {
    pub use crate::sorter::bytes::{Get, Put};
}

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
