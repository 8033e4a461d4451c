//! The Linux perf backend: sampling through `perf_event_open`, no `perf`
//! binary needed.
#![deny(missing_docs)]

use lotus_core::{
    BackendRegistration, Collection, CollectOptions, Probe, Profiler, ProfilerError, Target, Unit,
};

/// Where the kernel says how much unprivileged users may measure.
pub const PARANOID_PATH: &str = "/proc/sys/kernel/perf_event_paranoid";

/// Linux perf events.
#[derive(Debug, Default)]
pub struct LinuxPerf;

impl Profiler for LinuxPerf {
    fn name(&self) -> &'static str {
        "perf"
    }

    fn description(&self) -> &'static str {
        "Linux perf events (perf_event_open sampling and counting; no perf binary needed)"
    }

    fn probe(&self) -> Probe {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .ok();
        match std::fs::read_to_string(PARANOID_PATH) {
            Ok(level) => {
                let mut p = Probe::available("perf", kernel);
                p.notes.push(format!("perf_event_paranoid = {}", level.trim()));
                p
            }
            Err(e) => Probe::unavailable(
                "perf",
                format!("cannot read {PARANOID_PATH} ({e}): this kernel may lack perf events"),
            ),
        }
    }

    fn unit(&self) -> Unit {
        Unit::Samples
    }

    fn collect(
        &self,
        _target: &Target,
        _options: &CollectOptions,
    ) -> Result<Box<dyn Collection>, ProfilerError> {
        Err(ProfilerError::Unsupported {
            backend: "perf".into(),
            what: "live collection yet".into(),
        })
    }
}

inventory::submit! {
    BackendRegistration { name: "perf", make: || Box::new(LinuxPerf) }
}
