//! The Intel VTune backend.
//!
//! - [`report`]: the reader for `vtune -report hotspots -format csv` output
//!   (and other VTune function-grouped CSV reports).
//! - [`probe`]: finds the `vtune` command and its version.
//!
//! Live collection (ITT control and the `vtune` driver) is not built yet:
//! [`Profiler::collect`] says so.
#![deny(missing_docs)]

pub mod probe;
pub mod report;

use std::io::BufRead;

use lotus_core::{
    BackendRegistration, CollectOptions, Collection, Probe, Profiler, ProfilerError, Report,
    ReportError, Target, Unit,
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
        _target: &Target,
        _options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, ProfilerError> {
        let probe = self.probe();
        if !probe.available {
            return Err(ProfilerError::Unavailable {
                backend: "vtune".into(),
                reason: probe.reason.unwrap_or_default(),
            });
        }
        Err(ProfilerError::Unsupported {
            backend: "vtune".into(),
            what: "live collection in this version of lotus; run vtune yourself and use `lotus map --backend vtune --from-reports DIR`".into(),
        })
    }

    fn read_report(&self, input: &mut dyn BufRead, file: &str) -> Result<Report, ReportError> {
        report::read_hotspots(input, file)
    }
}

inventory::submit! {
    BackendRegistration { name: "vtune", make: || Box::new(VTune) }
}
