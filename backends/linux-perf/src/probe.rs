//! Whether perf sampling works here: actually open the events lotus needs
//! on this process, rather than guess from sysctls.

use lotus_core::Probe;
use perf_event::events::Software;
use perf_event::Builder;

use crate::counting::hardware_cycles_error;
use crate::error::{is_permission, kernel_refused_note, paranoid_level};
use crate::{BACKEND, PARANOID_PATH};
use lotus_symbols::{addresses_visible, KALLSYMS_PATH};

pub(crate) fn probe() -> Probe {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .ok();
    let paranoid = paranoid_level();
    let opened = Builder::new(Software::CPU_CLOCK)
        .observe_self()
        .any_cpu()
        .exclude_kernel(true)
        .exclude_hv(true)
        .sample_frequency(1000)
        .build();
    let mut p = match opened {
        Ok(_) => Probe::available(BACKEND, kernel),
        Err(e) if is_permission(&e) => Probe::unavailable(
            BACKEND,
            format!(
                "perf_event_open refused a user-space cpu-clock sampler ({e}); \
                 {PARANOID_PATH} is {paranoid}. To fix: `sudo sysctl \
                 kernel.perf_event_paranoid=1` (or lower), or give the lotus binary \
                 CAP_PERFMON"
            ),
        ),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Probe::unavailable(
            BACKEND,
            format!(
                "this kernel has no perf_event_open ({e}): it needs CONFIG_PERF_EVENTS, \
                 or a container/seccomp policy that allows the syscall"
            ),
        ),
        Err(e) => Probe::unavailable(
            BACKEND,
            format!("cannot open a cpu-clock sampler ({e}); {PARANOID_PATH} is {paranoid}"),
        ),
    };
    p.notes.push(format!("perf_event_paranoid = {paranoid}"));
    if p.available {
        p.notes.push(match hardware_cycles_error() {
            None => "hardware counters: available (cycles, instructions)".to_string(),
            Some(e) if is_permission(&e) => {
                format!("hardware counters: not permitted here ({e})")
            }
            Some(e) => format!("hardware counters: not supported here (no PMU: {e})"),
        });
        let kernel = Builder::new(Software::CPU_CLOCK)
            .observe_self()
            .any_cpu()
            .exclude_kernel(false)
            .exclude_hv(true)
            .sample_frequency(1000)
            .build();
        p.notes.push(match kernel {
            Ok(_) => match addresses_visible() {
                Ok(true) => "kernel samples: collected, named from /proc/kallsyms".to_string(),
                Ok(false) => format!(
                    "kernel samples: collected, but unnamed ({KALLSYMS_PATH} shows zeroed \
                     addresses to this user, kernel.kptr_restrict)"
                ),
                Err(e) => format!(
                    "kernel samples: collected, but unnamed ({KALLSYMS_PATH} unreadable: {e})"
                ),
            },
            Err(e) if is_permission(&e) => kernel_refused_note(),
            Err(e) => format!("kernel samples: not collected ({e})"),
        });
        if let Some(max) = crate::events::max_sample_rate() {
            p.notes
                .push(format!("maximum sampling frequency: {max} Hz"));
        }
        p.notes.push(format!(
            "CPUs sampled: {}",
            crate::events::online_cpus().len()
        ));
    }
    p
}
