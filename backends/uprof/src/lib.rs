//! The AMD uProf backend.
//!
//! - the report ([`read_report`]): the reader for the sectioned
//!   `AMDuProfCLI report -f csv` output.
//! - the probe ([`find_cli`], [`probe()`]): finds `AMDuProfCLI`, its
//!   version, and the profile-control library.
//! - live collection ([`collect_args`], [`plan`]): one `AMDuProfCLI collect
//!   --start-paused` per run, then `AMDuProfCLI report`.
//!
//! The profiled process opens uProf's profile-control library
//! (`libAMDProfileController.so`, through lotus's control library) to
//! resume and pause the collection, so the lotus process switches no
//! windows ([`Profiler::switches_windows`] is false). Where that library is
//! loaded from is `lotus_control::uprof_library`'s to say; the probe
//! reports it.
#![deny(missing_docs)]

mod collect;
mod probe;
mod report;

pub use collect::{
    collect_args, interval_in_force, plan, report_args, timer_interval_ms, DEFAULT_CONFIG,
    REPORT_CUTOFF, TIMER_DEFAULT_MS, TIMER_MAX_MS, TIMER_MIN_MS,
};
pub use probe::{find_cli, probe};
pub use report::{read_report, recognizes, stated_interval_s, FUNCTION_SECTION};

use std::io::BufRead;

use lotus_core::{
    BackendRegistration, CollectOptions, CollectPlan, Collection, Error as CoreError, Probe,
    Profiler, Report, ReportFormat, RowIter, Target, Unit,
};

/// AMD uProf.
#[derive(Debug, Default)]
pub struct UProf;

impl Profiler for UProf {
    fn name(&self) -> &'static str {
        "uprof"
    }

    fn description(&self) -> &'static str {
        "AMD uProf (profile-control API, AMDuProfCLI, CSV reports)"
    }

    fn probe(&self) -> Probe {
        probe::probe()
    }

    fn unit(&self) -> Unit {
        Unit::Samples
    }

    fn collect(
        &self,
        target: &Target,
        options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, CoreError> {
        let unavailable = |reason: String| CoreError::Unavailable {
            backend: "uprof".into(),
            reason,
        };
        let probe = self.probe();
        if !probe.available {
            return Err(unavailable(probe.reason.unwrap_or_default()));
        }
        let cli = probe::find_cli()
            .ok_or_else(|| unavailable("AMDuProfCLI disappeared after the probe".into()))?;
        Ok(Box::new(collect::start(&cli, target, options)?))
    }

    fn switches_windows(&self) -> bool {
        false
    }

    /// The timer interval passed to time-based profiling (or its 1 ms);
    /// `None` for other configs.
    fn sample_interval(&self, options: &CollectOptions) -> Option<std::time::Duration> {
        collect::interval_in_force(options)
    }

    fn plan(&self, target: &Target, options: &CollectOptions) -> CollectPlan {
        collect::plan(probe::find_cli().as_deref(), target, options)
    }

    fn read_report(&self, input: &mut dyn BufRead, file: &str) -> Result<Report, CoreError> {
        report::read_report(input, file)
    }

    fn report_format(&self) -> Option<&dyn ReportFormat> {
        Some(self)
    }
}

/// `AMDuProfCLI report -f csv` files, recognized by their function table's
/// title or their first line ([`report::recognizes`]).
impl ReportFormat for UProf {
    fn format_name(&self) -> &'static str {
        "uprof-csv"
    }

    fn recognizes(&self, head: &str) -> bool {
        report::recognizes(head)
    }

    fn unit(&self) -> Unit {
        Unit::Samples
    }

    /// The function table is read whole (it holds the hottest functions
    /// only, 100 by default), then handed out row by row.
    fn rows<'a>(&self, input: &'a mut dyn BufRead, file: &str) -> Result<RowIter<'a>, CoreError> {
        let report = report::read_report(input, file)?;
        Ok(Box::new(report.rows.into_iter().map(Ok)))
    }

    fn stated_interval_s(
        &self,
        input: &mut dyn BufRead,
        file: &str,
    ) -> Result<Option<f64>, CoreError> {
        report::stated_interval_s(input, file)
    }
}

inventory::submit! {
    BackendRegistration { name: "uprof", make: || Box::new(UProf) }
}

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Internals that are not API (a collection is started through the
/// `Profiler` trait): each block must fail to compile (E0603: private).
///
/// ```compile_fail,E0603
/// use lotus_backend_uprof::start;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_backend_uprof::find_session;
/// ```
#[cfg(doctest)]
pub struct PrivateInternals;
