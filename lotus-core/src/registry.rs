//! The backend registry.
//!
//! Each backend crate submits a [`BackendRegistration`] with
//! `inventory::submit!`. A binary that links backends must name each crate
//! (`use lotus_backend_perf as _;`), or the linker drops the crate and its
//! registration with it.

use crate::profiler::Profiler;
use crate::Error;

/// A backend's entry in the registry.
pub struct BackendRegistration {
    /// The name users type; must equal the backend's [`Profiler::name`].
    pub name: &'static str,
    /// Makes the backend.
    pub make: fn() -> Box<dyn Profiler>,
}

inventory::collect!(BackendRegistration);

/// Every registered backend, sorted by name.
pub fn backends() -> Vec<Box<dyn Profiler>> {
    let mut regs: Vec<&BackendRegistration> = inventory::iter::<BackendRegistration>().collect();
    regs.sort_by_key(|r| r.name);
    regs.dedup_by_key(|r| r.name);
    regs.into_iter().map(|r| (r.make)()).collect()
}

/// The first registered backend (by name) that streams its samples as
/// they come ([`Profiler::streaming`]): what a trace is sampled through.
/// `None` where no linked backend streams.
pub fn streaming_backend() -> Option<Box<dyn Profiler>> {
    backends().into_iter().find(|b| b.streaming().is_some())
}

/// The names of every registered backend, sorted.
pub fn backend_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = inventory::iter::<BackendRegistration>()
        .map(|r| r.name)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The backend called `name`.
pub fn backend(name: &str) -> Result<Box<dyn Profiler>, Error> {
    inventory::iter::<BackendRegistration>()
        .find(|r| r.name == name)
        .map(|r| (r.make)())
        .ok_or_else(|| Error::UnknownBackend {
            name: name.to_string(),
            known: backend_names(),
        })
}
