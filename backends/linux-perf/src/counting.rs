//! Counting mode: per-window totals of task-clock, context switches, page
//! faults, and cycles and instructions where the CPU has a PMU.
//!
//! One counter per event on the target with `inherit` (on any CPU: a
//! counting event needs no ring buffer, so no per-CPU copies). Reading an
//! inherited counter gives the sum over the target and all its descendants,
//! exited ones included. Counters are enabled and disabled with the
//! samplers, and read once when a window closes: a window's value is the
//! difference from the previous read (nothing counts between windows).
//!
//! A counter the kernel refuses is *unsupported*, never zero: it is kept
//! with the reason, and the window's figure is `None`.

use std::io;

use lotus_core::ProfilerError;
use perf_event::events::{Event, Hardware, Software};
use perf_event::{Builder, Counter};

use crate::error::{event_io, is_permission, open_error};

/// Which per-window counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CounterKind {
    /// CPU time of the target and its descendants (`task-clock`, ns).
    TaskClock,
    /// Context switches (`context-switches`); counted in the kernel, so it
    /// needs permission to count kernel events.
    ContextSwitches,
    /// Page faults (`page-faults`).
    PageFaults,
    /// CPU cycles (hardware).
    Cycles,
    /// Retired instructions (hardware).
    Instructions,
}

impl CounterKind {
    /// Every kind, in the order [`CounterStatus`] lists them.
    pub const ALL: [CounterKind; 5] = [
        CounterKind::TaskClock,
        CounterKind::ContextSwitches,
        CounterKind::PageFaults,
        CounterKind::Cycles,
        CounterKind::Instructions,
    ];

    /// The perf event name (`task-clock`, `cycles`...).
    pub fn name(self) -> &'static str {
        match self {
            CounterKind::TaskClock => "task-clock",
            CounterKind::ContextSwitches => "context-switches",
            CounterKind::PageFaults => "page-faults",
            CounterKind::Cycles => "cycles",
            CounterKind::Instructions => "instructions",
        }
    }

    /// True for events the CPU's PMU counts.
    pub fn is_hardware(self) -> bool {
        matches!(self, CounterKind::Cycles | CounterKind::Instructions)
    }

    fn builder(self) -> Builder<'static> {
        fn b(e: impl Event + 'static) -> Builder<'static> {
            Builder::new(e)
        }
        match self {
            CounterKind::TaskClock => b(Software::TASK_CLOCK),
            CounterKind::ContextSwitches => b(Software::CONTEXT_SWITCHES),
            CounterKind::PageFaults => b(Software::PAGE_FAULTS),
            CounterKind::Cycles => b(Hardware::CPU_CYCLES),
            CounterKind::Instructions => b(Hardware::INSTRUCTIONS),
        }
    }
}

/// Whether a counter could be opened here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterStatus {
    /// The counter.
    pub kind: CounterKind,
    /// True when it is counted.
    pub available: bool,
    /// True when only user-space events are counted (`:u`), because the
    /// kernel refused counting kernel-side events.
    pub user_only: bool,
    /// Why it is not counted (the kernel's answer), when it is not.
    pub reason: Option<String>,
}

struct Slot {
    status: CounterStatus,
    counter: Option<Counter>,
    last: u64,
}

/// The counting events of one collection.
pub(crate) struct Counters {
    slots: Vec<Slot>,
}

/// One window's counter deltas, in [`CounterKind::ALL`] order; `None` for
/// an unsupported counter.
pub(crate) type Deltas = [Option<u64>; 5];

/// Opens `kind` on `pid` (with kernel-side counting if allowed, else
/// user-only, except for context switches, which are kernel-side only).
fn open_one(kind: CounterKind, pid: libc::pid_t) -> (CounterStatus, Option<Counter>) {
    let attempt = |exclude_kernel: bool| {
        kind.builder()
            .observe_pid(pid)
            .any_cpu()
            .inherit(true)
            .exclude_kernel(exclude_kernel)
            .exclude_hv(true)
            .enabled(false)
            .build()
    };
    let status = |available, user_only, reason| CounterStatus {
        kind,
        available,
        user_only,
        reason,
    };
    match attempt(false) {
        Ok(c) => (status(true, false, None), Some(c)),
        Err(e) if is_permission(&e) && kind != CounterKind::ContextSwitches => {
            match attempt(true) {
                Ok(c) => (status(true, true, None), Some(c)),
                Err(e) => (status(false, false, Some(describe(kind, &e))), None),
            }
        }
        Err(e) => (status(false, false, Some(describe(kind, &e))), None),
    }
}

fn describe(kind: CounterKind, e: &io::Error) -> String {
    if kind.is_hardware()
        && matches!(
            e.raw_os_error(),
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV)
        )
    {
        format!("not supported here (no hardware PMU visible to this kernel: {e})")
    } else if is_permission(e) {
        format!(
            "not permitted ({e}); counting kernel-side events needs \
             kernel.perf_event_paranoid <= 1 or CAP_PERFMON"
        )
    } else {
        format!("not supported here ({e})")
    }
}

impl Counters {
    /// Opens every counter on `pid`. Only task-clock is required: it is a
    /// software event like the sampler's, so its failure is the collection's.
    pub(crate) fn open(pid: u32) -> Result<Counters, ProfilerError> {
        let pid_t = libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX);
        let mut slots = Vec::new();
        for kind in CounterKind::ALL {
            let (status, counter) = open_one(kind, pid_t);
            if kind == CounterKind::TaskClock && counter.is_none() {
                // Re-open to get the error itself, mapped with its fix.
                let e = kind
                    .builder()
                    .observe_pid(pid_t)
                    .any_cpu()
                    .inherit(true)
                    .exclude_kernel(true)
                    .exclude_hv(true)
                    .build()
                    .err()
                    .unwrap_or_else(|| io::Error::other("task-clock failed to open"));
                return Err(open_error("task-clock counting", e));
            }
            slots.push(Slot {
                status,
                counter,
                last: 0,
            });
        }
        Ok(Counters { slots })
    }

    /// What can be counted here.
    pub(crate) fn status(&self) -> Vec<CounterStatus> {
        self.slots.iter().map(|s| s.status.clone()).collect()
    }

    pub(crate) fn enable(&mut self) -> Result<(), ProfilerError> {
        for c in self.slots.iter_mut().filter_map(|s| s.counter.as_mut()) {
            c.enable()
                .map_err(|e| event_io("enabling the window counters", e))?;
        }
        Ok(())
    }

    pub(crate) fn disable(&mut self) -> Result<(), ProfilerError> {
        let mut first = None;
        for c in self.slots.iter_mut().filter_map(|s| s.counter.as_mut()) {
            if let Err(e) = c.disable() {
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(event_io("disabling the window counters", e)),
        }
    }

    /// Reads every counter and returns the change since the last read.
    /// Values are scaled when the kernel multiplexed a counter.
    pub(crate) fn read_deltas(&mut self) -> Result<Deltas, ProfilerError> {
        let mut out = [None; 5];
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(c) = slot.counter.as_mut() else {
                continue;
            };
            let data = c
                .read_full()
                .map_err(|e| event_io("reading the window counters", e))?;
            let value = match (data.time_enabled(), data.time_running()) {
                (Some(en), Some(run)) if !run.is_zero() && run < en => {
                    let scaled = data.count() as u128 * en.as_nanos() / run.as_nanos().max(1);
                    u64::try_from(scaled).unwrap_or(u64::MAX)
                }
                _ => data.count(),
            };
            if let Some(slot_out) = out.get_mut(i) {
                *slot_out = Some(value.saturating_sub(slot.last));
            }
            slot.last = value;
        }
        Ok(out)
    }
}

/// Whether a hardware cycles counter can be opened on this process: the
/// probe's test for a PMU.
pub(crate) fn hardware_cycles_error() -> Option<io::Error> {
    Builder::new(Hardware::CPU_CYCLES)
        .observe_self()
        .any_cpu()
        .exclude_kernel(true)
        .exclude_hv(true)
        .build()
        .err()
}
