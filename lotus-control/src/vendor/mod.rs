//! Vendor control APIs, called in the profiled process when the active
//! backend is VTune or uProf (no control channel: the vendor's collector
//! switches its own windows).
//!
//! - [`itt`]: Intel ITT (`__itt_resume`, `__itt_pause`, `__itt_detach`).
//! - [`uprof`]: AMD uProf's profile-control library, opened with
//!   `libloading`.

pub(crate) mod itt;
pub(crate) mod uprof;

use crate::backend::{Call, Vendor};
use crate::error::ControlError;

/// Performs `call` through `vendor`'s API.
pub(crate) fn call(vendor: Vendor, call: Call<'_>) -> Result<(), ControlError> {
    match vendor {
        Vendor::Vtune => itt::call(call),
        Vendor::Uprof => uprof::call(call),
    }
}
