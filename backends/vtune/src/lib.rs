//! The Intel VTune backend.
//!
//! - the report ([`read_hotspots`]): the reader for `vtune -report hotspots
//!   -format csv` output (and other VTune function-grouped CSV reports).
//! - the probe ([`find_vtune`], [`probe()`]): finds the `vtune` command and
//!   its version.
//! - live collection ([`collect_args`], [`plan`]): `vtune -collect ...
//!   -start-paused` on the target, then `vtune -report hotspots ... -format
//!   csv`.
//! - sampling ([`Sampling`]): the hotspots analysis's sampling mode and
//!   interval.
//!
//! The windows are opened by the profiled process itself: the lotus control
//! library calls ITT's `__itt_resume` / `__itt_pause` when
//! `LOTUS_BACKEND=vtune`, so [`Profiler::switches_windows`] is false and no
//! control channel is needed.
#![deny(missing_docs)]

mod collect;
mod probe;
mod report;
mod sampling;

pub use collect::{collect_args, plan, report_args, DEFAULT_COLLECT_TYPE, KEPT_PREFIX};
pub use probe::{find_vtune, probe, ENV_VTUNE_DIR};
pub use report::{read_hotspots, HotspotRows};
pub use sampling::{
    interval_in_force, note, Sampling, DEFAULT_MS, HARDWARE_MIN_MS, HOTSPOTS, MAX_MS,
    USER_MODE_MIN_MS,
};

use std::io::BufRead;

use lotus_core::{
    BackendRegistration, CollectOptions, CollectPlan, Collection, Error as CoreError, Probe,
    Profiler, Report, ReportFormat, RowIter, Target, Unit,
};

/// Intel VTune Profiler.
#[derive(Debug, Default)]
pub struct VTune;

impl Profiler for VTune {
    fn name(&self) -> &'static str {
        "vtune"
    }

    fn description(&self) -> &'static str {
        "Intel VTune Profiler (ITT pause/resume, vtune CLI, CSV reports)"
    }

    fn probe(&self) -> Probe {
        probe::probe()
    }

    fn unit(&self) -> Unit {
        Unit::Seconds
    }

    fn collect(
        &self,
        target: &Target,
        options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, CoreError> {
        let Some(vtune) = probe::find_vtune() else {
            return Err(CoreError::Unavailable {
                backend: "vtune".into(),
                reason: self
                    .probe()
                    .reason
                    .unwrap_or_else(|| "`vtune` was not found".into()),
            });
        };
        Ok(Box::new(collect::start(&vtune, target, options)?))
    }

    /// False: the profiled process resumes and pauses VTune itself (ITT).
    fn switches_windows(&self) -> bool {
        false
    }

    /// The interval passed to hotspots (or its default); `None` for other
    /// analyses.
    fn sample_interval(&self, options: &CollectOptions) -> Option<std::time::Duration> {
        sampling::interval_in_force(collect::collect_type(options), options)
    }

    fn plan(&self, target: &Target, options: &CollectOptions) -> CollectPlan {
        collect::plan(probe::find_vtune().as_deref(), target, options)
    }

    fn read_report(&self, input: &mut dyn BufRead, file: &str) -> Result<Report, CoreError> {
        report::read_hotspots(input, file)
    }

    fn report_format(&self) -> Option<&dyn ReportFormat> {
        Some(self)
    }
}

/// `vtune -report hotspots -format csv` files (and other function-grouped
/// CSV reports). Nothing in them names VTune, so they are not recognized
/// by content: a reader tries the formats that are, then this one.
impl ReportFormat for VTune {
    fn format_name(&self) -> &'static str {
        "vtune-csv"
    }

    fn unit(&self) -> Unit {
        Unit::Seconds
    }

    /// Row by row ([`report::HotspotRows`]): a report of a row per
    /// function and thread is never held whole.
    fn rows<'a>(&self, input: &'a mut dyn BufRead, file: &str) -> Result<RowIter<'a>, CoreError> {
        Ok(Box::new(report::HotspotRows::new(input, file)?))
    }
}

inventory::submit! {
    BackendRegistration { name: "vtune", make: || Box::new(VTune) }
}

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals that are not API (a collection is started through the
/// `Profiler` trait): each block must fail to compile (E0603: private).
///
/// ```compile_fail,E0603
/// use lotus_backend_vtune::start;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_backend_vtune::VTuneFiles;
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;
