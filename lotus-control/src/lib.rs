//! The lotus control library: what a profiled process calls to open and
//! close measurement windows.
//!
//! Built as `liblotus_control.so` (C ABI, declared in `include/lotus.h`)
//! and as a Rust library. The lotus process says which backend is active
//! through the environment (`LOTUS_BACKEND`, `LOTUS_CONTROL_FDS`, see
//! [`lotus_protocol`]); the library reads it once, on the first call.
//!
//! - Not under lotus (neither variable set): every call succeeds and does
//!   nothing, so op scripts run standalone.
//! - With a control channel (the perf backend): each call writes one
//!   request line and blocks until the lotus process answers, which it
//!   does once it has noted the window's start (or end) time: its samplers
//!   run all along and keep the samples stamped inside windows (or, in
//!   the perf backend's ioctl mode, once it has switched them); a window
//!   is open when [`resume`] returns.
//! - VTune / uProf without a channel: the vendor's API is called in this
//!   process (`__itt_resume` / `__itt_pause` / `__itt_detach` through
//!   `ittapi`; uProf's profile-control library through `libloading`, found
//!   as [`uprof_library`] says); the calls live in the private module
//!   `profiler_api`.
//! - The library is also an ITT collector (it exports `__itt_api_init`):
//!   with `INTEL_LIBITTNOTIFY64` naming it, scripts that switch their own
//!   windows with ITT (`ittapi.resume()`) reach lotus's windows.
//! - It also exports uProf's profile-control entry points
//!   (`amdProfileResume`, `amdProfilePause`, their 5.x `...Impl` forms,
//!   `amdGetLastProfileError`): native code written for uProf, linked
//!   against this library, opens lotus's windows under any backend.
//!
//! The channel belongs to the process that first used the library: a
//! forked child (a DataLoader worker) that calls it gets an error instead of
//! corrupting the parent's conversation. Call [`active`] (or
//! `lotus_active()`) early, before forking, to bind it.
//!
//! [`host`] is the lotus process's end of the channel.
#![deny(missing_docs)]

mod amd_exports;
mod backend;
mod channel;
mod error;
mod ffi;
pub mod host;
mod itt_collector;
mod itt_tasks;
mod profiler_api;

pub use error::ControlError;
pub use profiler_api::uprof_library;

use backend::{Call, Control};

/// Opens a measurement window for `op` (may be empty).
pub fn resume(op: &str) -> Result<(), ControlError> {
    Control::get().call(Call::Resume(op))
}

/// Closes the open measurement window.
pub fn pause() -> Result<(), ControlError> {
    Control::get().call(Call::Pause)
}

/// Says no window will open again in this process; the channel is closed.
pub fn detach() -> Result<(), ControlError> {
    Control::get().call(Call::Detach)
}

/// Whether this process runs under lotus (its environment is set). Binds
/// the control channel to this process on the first call.
pub fn active() -> bool {
    Control::get().active()
}

/// Makes this process the control channel's owner: for a child forked on
/// purpose, whose parent does not call the library until the child is
/// done (lotus's fork server runs each op run in such a child).
pub fn adopt() {
    Control::get().adopt()
}

/// The active backend's name (`LOTUS_BACKEND`), if set.
pub fn backend() -> Option<&'static str> {
    Control::get()
        .backend_name
        .as_deref()
        .and_then(|name| name.to_str().ok())
}

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The calls into the profilers' APIs are internal (only where uProf's
/// library is loaded from is public, as [`uprof_library`]): this block must
/// fail to compile (E0603: private).
///
/// ```compile_fail,E0603
/// use lotus_control::profiler_api::uprof_library;
/// ```
#[cfg(doctest)]
pub struct PrivateProfilerApi;
