//! lotus's calls into the profilers' own control APIs (our code, not a
//! vendored copy): what `lotus_resume` / `lotus_pause` / `lotus_detach` do
//! in the profiled process when the active backend is VTune or uProf.
//! There is no control channel then: the profiler's collector, running in
//! or beside the process, switches its own windows when asked through its
//! API.
//!
//! - [`itt`]: Intel's ITT API, for VTune (`__itt_resume`, `__itt_pause`,
//!   `__itt_detach`, through the `ittapi` crate).
//! - [`uprof`]: AMD uProf's profile-control API
//!   (`libAMDProfileController.so`, opened with `libloading`).
//! - [`uprof_library`]: where that library is loaded from (public: the
//!   uProf backend's probe reports the same search).
//!
//! The other direction, native code written for those APIs reaching
//! lotus's windows, is `itt_collector` (an ITT collector) and
//! `amd_exports` (uProf's entry points, exported).

pub(crate) mod itt;
pub(crate) mod uprof;
pub mod uprof_library;

use crate::backend::{Call, Vendor};
use crate::error::ControlError;

/// Performs `call` through `vendor`'s API.
pub(crate) fn call(vendor: Vendor, call: Call<'_>) -> Result<(), ControlError> {
    match vendor {
        Vendor::Vtune => itt::call(call),
        Vendor::Uprof => uprof::call(call),
    }
}
