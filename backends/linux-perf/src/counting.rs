//! Counting mode: per-window totals of task-clock, context switches, page
//! faults, and cycles and instructions where the CPU has a PMU.
//!
//! One counter per event on the target with `inherit` (on any CPU: a
//! counting event needs no ring buffer, so no per-CPU copies). Reading an
//! inherited counter gives the sum over the target and all its descendants,
//! exited ones included. A window's value is the difference between reads
//! at its two ends (counters that run all along, [`crate::WindowSwitch`]
//! `Timestamps`), or the difference from the previous window's end for
//! counters switched by ioctl with the samplers (`Ioctl`).
//!
//! A counter the kernel refuses is *unsupported*, never zero: it is kept
//! with the reason, and the window's figure is `None`.

use std::io;

use lotus_core::Error as CoreError;
use perf_event::events::{Event, Hardware, Software};
use perf_event::{Builder, Counter, Group};

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

    /// The kind named `name` (a perf event name, as [`Self::name`] gives).
    pub fn from_name(name: &str) -> Option<CounterKind> {
        CounterKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// True for events the CPU's PMU counts.
    pub fn is_hardware(self) -> bool {
        matches!(self, CounterKind::Cycles | CounterKind::Instructions)
    }

    pub(crate) fn builder(self) -> Builder<'static> {
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
#[non_exhaustive]
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

impl CounterStatus {
    /// The report's note for a counter that is not counted (`cycles:
    /// not supported here (...)`); `None` when it is counted.
    pub fn note(&self) -> Option<String> {
        match (&self.reason, self.available) {
            (Some(reason), false) => Some(format!("{}: {reason}", self.kind.name())),
            _ => None,
        }
    }
}

struct Member {
    kind: CounterKind,
    counter: Counter,
    last: u64,
}

/// Counters read (and switched) together: a dummy leader gates the group,
/// so one read or one ioctl covers every member (one interrupt of a busy
/// CPU instead of one per counter). Software and hardware counters are in
/// separate groups, so a PMU that cannot schedule the hardware group never
/// stops the software counters.
struct CounterGroup {
    leader: Group,
    members: Vec<Member>,
}

impl CounterGroup {
    fn open(pid: libc::pid_t, enabled: bool) -> io::Result<CounterGroup> {
        let leader = Group::builder()
            .observe_pid(pid)
            .any_cpu()
            .inherit(true)
            .exclude_hv(true)
            .enabled(enabled)
            .build_group()?;
        Ok(CounterGroup {
            leader,
            members: Vec::new(),
        })
    }

    /// Adds `kind` (with kernel-side counting if allowed, else user-only,
    /// except for context switches, which are kernel-side only).
    fn add(&mut self, kind: CounterKind, pid: libc::pid_t) -> CounterStatus {
        let leader = &mut self.leader;
        let mut attempt = |exclude_kernel: bool| {
            // Members stay enabled: the leader's state gates the group.
            let mut builder = kind.builder();
            builder
                .observe_pid(pid)
                .any_cpu()
                .inherit(true)
                .exclude_kernel(exclude_kernel)
                .exclude_hv(true)
                .enabled(true);
            leader.add(&builder)
        };
        let status = |available, user_only, reason| CounterStatus {
            kind,
            available,
            user_only,
            reason,
        };
        let (st, counter) = match attempt(false) {
            Ok(c) => (status(true, false, None), Some(c)),
            Err(e) if is_permission(&e) && kind != CounterKind::ContextSwitches => {
                match attempt(true) {
                    Ok(c) => (status(true, true, None), Some(c)),
                    Err(e) => (status(false, false, Some(describe(kind, &e))), None),
                }
            }
            Err(e) => (status(false, false, Some(describe(kind, &e))), None),
        };
        if let Some(counter) = counter {
            self.members.push(Member {
                kind,
                counter,
                last: 0,
            });
        }
        st
    }
}

/// The counting events of one collection.
pub(crate) struct Counters {
    groups: Vec<CounterGroup>,
    status: Vec<CounterStatus>,
}

/// One window's counter deltas, in [`CounterKind::ALL`] order; `None` for
/// an unsupported counter.
pub(crate) type Deltas = [Option<u64>; 5];

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
    /// Opens every counter on `pid`, counting from the start when `enabled`.
    /// Only task-clock is required: it is a software event like the
    /// sampler's, so its failure is the collection's.
    pub(crate) fn open(pid: u32, enabled: bool) -> Result<Counters, CoreError> {
        let pid_t = libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX);
        let mut software =
            CounterGroup::open(pid_t, enabled).map_err(|e| open_error("counting", e))?;
        let mut hardware =
            CounterGroup::open(pid_t, enabled).map_err(|e| open_error("counting", e))?;
        let mut status = Vec::new();
        for kind in CounterKind::ALL {
            let group = if kind.is_hardware() {
                &mut hardware
            } else {
                &mut software
            };
            let st = group.add(kind, pid_t);
            if kind == CounterKind::TaskClock && !st.available {
                // Re-open alone to get the error itself, mapped with its fix.
                let e = kind
                    .builder()
                    .observe_pid(pid_t)
                    .any_cpu()
                    .inherit(true)
                    .exclude_kernel(true)
                    .exclude_hv(true)
                    .build()
                    .err()
                    .unwrap_or_else(|| io::Error::other(st.reason.unwrap_or_default()));
                return Err(open_error("task-clock counting", e));
            }
            status.push(st);
        }
        let mut groups = vec![software];
        if !hardware.members.is_empty() {
            groups.push(hardware);
        }
        Ok(Counters { groups, status })
    }

    /// Counts thread `tid` too, with what it starts later (a thread of an
    /// attached tree, see `crate::attach`): the counters [`Self::open`]
    /// could open, nothing else. `Ok(false)` where `tid` has exited.
    pub(crate) fn add_task(&mut self, tid: u32, enabled: bool) -> Result<bool, CoreError> {
        let tid_t = libc::pid_t::try_from(tid).unwrap_or(libc::pid_t::MAX);
        let open = || match CounterGroup::open(tid_t, enabled) {
            Ok(g) => Ok(Some(g)),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) => Err(open_error(&format!("counting thread {tid}"), e)),
        };
        let Some(mut software) = open()? else {
            return Ok(false);
        };
        // A group for the hardware counters only where there are some (an
        // open costs ~0.1 ms in a virtual machine; a tree has hundreds of
        // threads).
        let mut hardware = None;
        if self
            .status
            .iter()
            .any(|s| s.available && s.kind.is_hardware())
        {
            let Some(group) = open()? else {
                return Ok(false);
            };
            hardware = Some(group);
        }
        for st in self.status.iter().filter(|s| s.available) {
            let group = match (st.kind.is_hardware(), hardware.as_mut()) {
                (false, _) => &mut software,
                (true, Some(group)) => group,
                (true, None) => continue,
            };
            group.add(st.kind, tid_t);
        }
        self.groups.extend(
            std::iter::once(software)
                .chain(hardware)
                .filter(|g| !g.members.is_empty()),
        );
        Ok(true)
    }

    /// What can be counted here.
    pub(crate) fn status(&self) -> Vec<CounterStatus> {
        self.status.clone()
    }

    /// Enables each group (its leader only: one ioctl per group).
    pub(crate) fn enable(&mut self) -> Result<(), CoreError> {
        for g in &mut self.groups {
            g.leader
                .as_counter_mut()
                .enable()
                .map_err(|e| event_io("enabling the window counters", e))?;
        }
        Ok(())
    }

    /// Disables each group; tries them all even when one fails.
    pub(crate) fn disable(&mut self) -> Result<(), CoreError> {
        let mut first = None;
        for g in &mut self.groups {
            if let Err(e) = g.leader.as_counter_mut().disable() {
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(event_io("disabling the window counters", e)),
        }
    }

    /// Reads every counter so that the next [`Self::read_deltas`] counts
    /// from now (for counters that run between windows).
    pub(crate) fn mark(&mut self) -> Result<(), CoreError> {
        self.read_deltas().map(drop)
    }

    /// Reads every group (one read each) and returns each counter's change
    /// since the last read (all groups' together). Values are scaled when the kernel multiplexed a
    /// group.
    pub(crate) fn read_deltas(&mut self) -> Result<Deltas, CoreError> {
        let mut out: Deltas = [None; 5];
        for g in &mut self.groups {
            let data = match g.leader.read() {
                Ok(data) => data,
                // The thread counted has exited and been reaped (Linux
                // 6.18 answers ECHILD then): its counts stopped at the
                // last read; the other groups' still count.
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => continue,
                Err(e) => return Err(event_io("reading the window counters", e)),
            };
            let scale = |count: u64| match (data.time_enabled(), data.time_running()) {
                (Some(en), Some(run)) if !run.is_zero() && run < en => {
                    let scaled = count as u128 * en.as_nanos() / run.as_nanos().max(1);
                    u64::try_from(scaled).unwrap_or(u64::MAX)
                }
                _ => count,
            };
            for m in &mut g.members {
                let Some(entry) = data.get(&m.counter) else {
                    continue;
                };
                let value = scale(entry.value());
                // Summed over the groups (one per thread of an attached
                // tree; else one group per kind).
                if let Some(i) = CounterKind::ALL.iter().position(|&k| k == m.kind) {
                    let delta = value.saturating_sub(m.last);
                    out[i] = Some(out[i].unwrap_or(0).saturating_add(delta));
                }
                m.last = value;
            }
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
