//! The lotus mapping engine: which native functions each Python op runs.
//!
//! - [`live::map_live`] runs each op file alone under any registered
//!   backend ([`lotus_core::backend`]): one Python process per run (or one
//!   fork server per op under perf) runs the harness, which calls the op's
//!   `setup()`, warms up, opens a measurement window through the control
//!   library and loops the op in it; the runs are merged by a
//!   [`MergeRule`](lotus_core::MergeRule), and a harness floor (an empty
//!   op) marks the functions every op shows as `baseline`.
//! - [`from_reports::build`] reads vendor reports already on disk,
//!   `DIR/<Op>/<run>.csv`.
//! - [`PreparedProgram`] profiles a whole program under a backend (all
//!   its processes, or the windows it opens itself), its profile
//!   `lotus.profile/1` (`lotus profile`).
//! - [`output::render`] writes a mapping as a table, `lotus.mapping/1`
//!   JSON, the original tool's schema, CSV or Markdown; the caller writes
//!   it through `lotus_sys::write_file` (lotus's one writer: a half-written
//!   file never replaces a good one).
//!
//! **The caller links the backends.** This crate depends on no backend
//! crate: it finds backends in lotus-core's registry
//! ([`lotus_core::backend`]) and asks the trait for what they may offer
//! beyond collect and report ([`lotus_core::Profiler::calibration`],
//! [`lotus_core::Collection::sampling_control`],
//! [`lotus_core::Collection::stamped_windows`]). A binary that maps must
//! name each backend crate it wants registered (`use lotus_backend_perf as
//! _;`), or the linker drops it.
//!
//! Progress goes to a [`Progress`](progress::Progress) the caller gives;
//! the library prints nothing. The control library the profiled processes
//! load (`liblotus_control.so`) is named by the caller
//! ([`live::LiveOptions::new`]).
//!
//! ```no_run
//! use lotus_backend_perf as _; // registers the perf backend
//! use lotus_map::live::{map_live, LiveOptions};
//! use lotus_map::output::{render, Format, NameWidth};
//! use lotus_map::progress::NoProgress;
//! use std::sync::atomic::AtomicBool;
//!
//! let backend = lotus_core::backend("perf")?;
//! let opts = LiveOptions::new("/usr/bin/python3", "target/debug/liblotus_control.so")
//!     .with_runs(1)
//!     .with_min_samples(500);
//! let ops = ["fixtures/ops/RandomHorizontalFlip.py".into()];
//! let outcome = map_live(backend.as_ref(), &ops, &opts, &mut NoProgress, &AtomicBool::new(false))?;
//! print!("{}", render(&outcome.mapping, Format::Json, 0, NameWidth::Full)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod echo;
mod error;
pub mod from_reports;
mod op_harness;
mod program;

pub mod harness {
    //! The Python op harness that a live mapping runs each op file under.
    //!
    //! The harness (`lotus-tracer/python/lotus_harness.py`) and the `lotus`
    //! Python module (`lotus-tracer/python/lotus/__init__.py`), from the `lotus_tracer`
    //! crate, are compiled into the library and written to a
    //! temp folder per mapping with [`write_harness`] (a program that should
    //! `import lotus` can get the module the same way). The profiled command
    //! is then
    //!
    //! ```text
    //! python3 <dir>/lotus_harness.py --op-file OP.py --warmup N --window-ms MS \
    //!     --min-iterations K --result RESULT.json [--empty] [--name NAME] [--threads N] [--cwd DIR]
    //! ```
    //!
    //! (`HarnessArgs::to_args` builds the arguments after the script path)
    //! with [`ENV_CONTROL_LIB`] naming the control library the caller gave
    //! (`LiveOptions::new`), `LOTUS_BACKEND` and, for perf,
    //! `LOTUS_CONTROL_FDS`. It writes its result (`HarnessResult`) to
    //! RESULT.json and exits with one of the `EXIT_*` codes. The arguments and
    //! the result are this crate's business: public only with the
    //! `harness-protocol` feature, which lotus's own end-to-end tests turn
    //! on to run the harness as the engine does (not a stable API).

    pub use crate::op_harness::{
        control_library_for_run, named_control_library, write_control_library, write_harness,
        HarnessFiles, CONTROL_LIBRARY, ENV_CONTROL_LIB,
    };
    #[cfg(feature = "harness-protocol")]
    pub use crate::op_harness::{
        HarnessArgs, HarnessMode, HarnessResult, HarnessStage, UnsampledResult, ENV_ONLY_OP,
        EXIT_BAD_FILE, EXIT_CONTROL, EXIT_HARNESS, EXIT_OK, EXIT_OP_RAISED,
    };
}
pub mod live;
pub mod output;
pub mod progress;

pub use error::{MapError, Result};
/// The lotus process's end of the control channel (the control library's
/// `host`), for callers that serve a profiled program's windows themselves.
pub use lotus_control::host::ControlHost;
pub use program::{PreparedProgram, ProgramOptions, ProgramRun};

/// The harness's arguments and result file are not API: without the
/// `harness-protocol` feature each block must fail to compile (E0432: not
/// exported). A workspace-wide doctest run has the feature on (lotus's
/// end-to-end tests turn it on), so `scripts/test.sh` also runs
/// `cargo test -p lotus-map --doc`, where it is off.
///
/// ```compile_fail,E0432
/// use lotus_map::harness::HarnessResult;
/// ```
///
/// ```compile_fail,E0432
/// use lotus_map::harness::HarnessArgs;
/// ```
#[cfg(all(doctest, not(feature = "harness-protocol")))]
pub struct HarnessProtocolPrivate;

/// Internals that are not API: each block must fail to compile (E0603:
/// private). The echo of an op's output:
///
/// ```compile_fail,E0603
/// use lotus_map::echo::Echo;
/// ```
///
/// Options and results are `#[non_exhaustive]`: built with
/// `LiveOptions::new` and its `with_*` methods, never a literal.
///
/// ```compile_fail,E0639
/// let _ = lotus_map::live::LiveOutcome {
///     mapping: unimplemented!(),
///     failures: Vec::new(),
///     interrupted: false,
/// };
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
