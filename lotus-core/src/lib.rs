//! The lotus model, shared by every backend and by the `lotus` binary.
//!
//! - [`profiler`]: the [`Profiler`] trait every backend implements (probe,
//!   collect, pause / resume, report) and the [`Collection`] it returns.
//! - [`registry`]: backends register themselves with `inventory`; the
//!   binary lists and finds them here.
//! - [`row`]: normalized report rows (function, module, samples or time,
//!   counters) with demangled names.
//! - [`mapping`]: the `lotus.mapping/1` schema, the merge rules and the
//!   original tool's schema.
//! - [`attribute`]: a whole-pipeline profile folded back onto the ops
//!   through a mapping.
//! - [`profile`]: the `lotus.profile/1` schema of whole-program profiles.
//! - [`report_error`]: the error every report reader returns, naming the
//!   file and line.
//! - [`spill`]: sorting and keeping more records than memory should hold
//!   (temporary files past a budget), so long traces read in flat memory.
//! - [`trace`]: pipeline trace logs (per-process op, sample and batch
//!   timings), their statistics and their Chrome trace view.
//! - [`text`]: names from data made safe to print (control characters
//!   escaped), CSV cells a spreadsheet will not run, bounded figures.
//! - [`verdict`]: whether training waited for data and what would help,
//!   in plain sentences ([`Verdict`]).
//!
//! Nothing here does FFI or talks to a vendor tool.
#![deny(missing_docs)]

pub mod attribute;
pub mod compare;
pub mod control;
pub mod demangle;
pub mod host;
pub mod input;
pub mod mapping;
pub mod process;
pub mod profile;
pub mod profiler;
pub mod registry;
pub mod report_error;
pub mod row;
pub mod spill;
pub mod text;
pub mod trace;
pub mod verdict;

pub use mapping::{Mapping, MergeRule};
pub use profiler::{
    CollectOptions, CollectPlan, Collection, Probe, Profiler, ProfilerError, Target, WindowStats,
    WindowTotals,
};
pub use registry::{backend, backends, BackendRegistration};
pub use report_error::ReportError;
pub use row::{Report, Row, Unit};
pub use verdict::Verdict;

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals that are not API: each block must fail to compile (E0603:
/// private). Sorting records' byte layout:
///
/// ```compile_fail,E0603
/// use lotus_core::spill::bytes::Put;
/// ```
///
/// The trace index's spilled records:
///
/// ```compile_fail,E0603
/// use lotus_core::trace::index::BatchRec;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_core::trace::index::MainRec;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_core::trace::index::DurCount;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_core::trace::index::BatchRow;
/// ```
///
/// The old trace format's name rules:
///
/// ```compile_fail,E0603
/// use lotus_core::trace::parse::infer_kind;
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;

/// Data structs that will grow and public enums are `#[non_exhaustive]`:
/// other crates build them through constructors and match them with a
/// wildcard arm, so adding a field or variant is not a breaking change.
/// Each block must fail to compile.
///
/// ```compile_fail,E0639
/// let _ = lotus_core::Target { program: "python3".into(), ..Default::default() };
/// ```
///
/// ```compile_fail,E0004
/// fn name(k: lotus_core::trace::Kind) -> &'static str {
///     use lotus_core::trace::Kind::*;
///     match k {
///         Op => "op", Sample => "sample", Fetch => "fetch", Batch => "batch",
///         Wait => "wait", Consume => "consume", Queue => "queue",
///     }
/// }
/// ```
///
/// ```compile_fail,E0004
/// fn name(r: lotus_core::control::Request) -> &'static str {
///     use lotus_core::control::Request::*;
///     match r {
///         Resume { .. } => "resume", Pause => "pause", Detach => "detach",
///         OpenedAt { .. } => "opened", ClosedAt { .. } => "closed",
///         Sampling { .. } => "sampling",
///     }
/// }
/// ```
#[cfg(doctest)]
pub struct NonExhaustive;
