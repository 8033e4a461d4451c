//! The AMD uProf backend.
//!
//! - [`report`]: the reader for the sectioned `AMDuProfCLI report -f csv`
//!   output.
//! - [`probe`]: finds `AMDuProfCLI` and its version.
//!
//! Live collection (the profile-control API and the `AMDuProfCLI` driver) is
//! not built yet: [`Profiler::collect`] says so.
#![deny(missing_docs)]

pub mod probe;
pub mod report;

use std::io::BufRead;

use lotus_core::{
    BackendRegistration, CollectOptions, Collection, Probe, Profiler, ProfilerError, Report,
    ReportError, Target, Unit,
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
        _target: &Target,
        _options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, ProfilerError> {
        let probe = self.probe();
        if !probe.available {
            return Err(ProfilerError::Unavailable {
                backend: "uprof".into(),
                reason: probe.reason.unwrap_or_default(),
            });
        }
        Err(ProfilerError::Unsupported {
            backend: "uprof".into(),
            what: "live collection in this version of lotus; run AMDuProfCLI yourself and use `lotus map --backend uprof --from-reports DIR`".into(),
        })
    }

    fn read_report(&self, input: &mut dyn BufRead, file: &str) -> Result<Report, ReportError> {
        report::read_report(input, file)
    }
}

inventory::submit! {
    BackendRegistration { name: "uprof", make: || Box::new(UProf) }
}
