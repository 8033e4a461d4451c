//! The lotus model, shared by every backend, by the mapping engine and by
//! the `lotus` binary.
//!
//! - **Backends**: the [`Profiler`] trait every backend implements (probe,
//!   collect, pause / resume, report) and the [`Collection`] it returns;
//!   backends register themselves with `inventory` ([`BackendRegistration`])
//!   and are found with [`backend`] and [`backends`].
//! - **Capabilities**: what a backend may offer beyond that, asked for
//!   through the trait so that no caller names a backend crate: sampling
//!   calibration ([`SamplingCalibration`]), streamed samples with
//!   per-sample counters and call stacks ([`Streaming`]), report files
//!   read row by row ([`ReportFormat`]), sampling stopped outside windows
//!   ([`SamplingControl`]) and windows the profiled process stamps
//!   ([`StampedWindows`]).
//! - **Rows**: a backend's report is normalized to [`Report`] / [`Row`]
//!   (function, module, samples or time, counters), names demangled
//!   ([`demangle`]). A bad report is a [`Error`] naming file and line.
//! - **Mappings**: the `lotus.mapping/1` schema ([`Mapping`]), the merge
//!   rules of an op's runs ([`MergeRule`], [`OpAccumulator`]), the original
//!   tool's schema, and ops compared across hosts ([`compare`]).
//! - **Profiles**: the `lotus.profile/1` schema of whole-program profiles
//!   ([`Profile`]).
//! - **Names in tables**: the one name shortener ([`short_names`]: a C
//!   name whole, a C++ name to its own name and its lambdas), modules by
//!   file name ([`module_name`]) and the width every table fits
//!   ([`table_width`]), for the binary's tables and `lotus-map`'s alike.
//!
//! Traces, attribution, the control protocol and the external sorter are
//! crates of their own (`lotus-trace`, `lotus-attribute`, `lotus-protocol`,
//! `lotus-sort`); `ARCHITECTURE.md` at the repository's root says which
//! may use which. Nothing here does FFI or talks to a vendor tool.
//!
//! ```
//! use lotus_core::{MergeRule, OpAccumulator, Report, Row, Unit};
//!
//! let mut flip = OpAccumulator::new("RandomHorizontalFlip");
//! for _ in 0..2 {
//!     flip.add_run(&Report::new(Unit::Samples, vec![
//!         Row::new("ImagingFlipLeftRight", "/usr/lib/python3/PIL/_imaging.so", 90.0),
//!     ]));
//! }
//! let op = flip.finish(MergeRule::Union);
//! assert_eq!((op.runs, op.functions[0].module.as_str()), (2, "_imaging.so"));
//! ```
#![deny(missing_docs)]

mod capabilities;
mod compare;
mod csv_out;
mod demangle;
mod error;
mod host;
mod mapping;
mod names;
mod profile;
mod profiler;
mod registry;
mod report_error;
mod row;

pub use capabilities::{
    CallStacks, CountersRead, CountersRefused, ReportFormat, RowIter, SampleCost, SampleCounter,
    SampleStream, SamplingCalibration, SamplingControl, StampedWindows, StreamOptions,
    StreamReport, Streaming,
};
pub use compare::{
    check_figures, compare, compare_document, host_of, CompareDocument, OpAcross, COMPARE_SCHEMA,
    CPU_SLACK_S, CPU_TOLERANCE, MAX_CPUS, MAX_SECONDS,
};
pub use csv_out::{compare_csv, rows_csv};
pub use demangle::demangle;
pub use error::Error;
pub use host::facts;
pub use mapping::{
    FunctionEntry, Mapping, MergeRule, OpAccumulator, OpFailure, OpMapping, SamplingCost, Settings,
    SharedFunction, UnsampledCalls, WindowSummary, SCHEMA,
};
pub use names::{
    cut_right, display_width, module_name, short_name, short_names, table_width, wrap, wrap_lines,
    wrap_plain, DEFAULT_WIDTH, MIN_WIDTH,
};
pub use profile::{Partial, Profile, PROFILE_SCHEMA};
pub use profiler::{
    shell_quote, CollectOptions, CollectPlan, Collection, Finish, Finished, Probe, Profiler,
    StackLayer, Target, WindowStats, WindowTotals, VERSION_WAIT,
};
pub use registry::{backend, backends, streaming_backend, BackendRegistration};
pub use report_error::{name_list, quote_cut, LineTooLong, MAX_LINE_BYTES};
pub use row::{
    is_unknown_module, module_basename, parse_figure, Report, Row, StackCount, Unit, UNKNOWN_MODULE,
};

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Data structs that will grow and public enums are `#[non_exhaustive]`:
/// other crates build them through constructors and match them with a
/// wildcard arm, so adding a field or variant is not a breaking change.
/// Each block must fail to compile.
///
/// ```compile_fail,E0639
/// let _ = lotus_core::Target { program: "python3".into(), ..Default::default() };
/// ```
#[cfg(doctest)]
pub struct NonExhaustive;
