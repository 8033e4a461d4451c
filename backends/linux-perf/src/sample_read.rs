//! Counters read with each sample (`lotus trace run --sample --counters`):
//! each CPU's sampler leads a group of counters, and every sample carries
//! the group's values (`PERF_SAMPLE_READ`, `PERF_FORMAT_GROUP | ID`).
//!
//! With `inherit`, the kernel (Linux 6.12 and later, with `PERF_SAMPLE_TID`)
//! gives each thread its own copy of the group and a sample reads the
//! copy of the thread it interrupted: the thread's running totals on that
//! CPU (an event bound to a task and a CPU counts only while the task runs
//! there). So a delta is taken per (sampler, thread): the value of a
//! sample minus that of the thread's previous sample on the same sampler
//! (0 before its first: a thread's copy starts at zero when it is
//! created). A delta covers the interval between the two samples and is
//! closed by the later one, so it goes wherever that sample goes. Lost
//! samples lose no counts: their share lands in the next sample's delta.
//! What a thread counts after its last sample on a CPU (under one
//! sampling interval of its time there) is closed by no sample and is in
//! no row.
//! Only the last value per live (sampler, thread) is held; a thread's
//! entries go when its exit is replayed, so memory stays flat however
//! many threads come and go.
//!
//! With a PMU, the sampler and its hardware counters are one group, which
//! the kernel schedules as a unit: where other perf users share the PMU to
//! the point of multiplexing, the sampler pauses with its counters. (Not
//! tested here: this machine has no PMU.)
//!
//! Counters the kernel refuses (no PMU for `cycles` in a virtual
//! machine, a kernel too old for group reads with `inherit`) are
//! [`SampleCounters::unsupported`], with the kernel's reason: the samples
//! carry no counters then, never zeros.

use std::collections::HashMap;

use lotus_samples::{unsupported_note, CounterValues, MAX_COUNTERS};

use crate::counting::CounterKind;

/// The counters read with each sample by default: where the PMU allows.
pub const DEFAULT_SAMPLE_COUNTERS: [CounterKind; 2] =
    [CounterKind::Cycles, CounterKind::Instructions];

/// What was asked of the counters read with each sample, and what the
/// kernel allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SampleCounters {
    /// The counters every sample carries, in record order (empty when none
    /// were asked for or they are unsupported).
    pub read: Vec<CounterKind>,
    /// The counters asked for that could not be read, with the kernel's
    /// reason; `None` when they are read or none were asked for.
    pub unsupported: Option<UnsupportedCounters>,
}

/// Counters the kernel refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnsupportedCounters {
    /// The counters asked for.
    pub asked: Vec<CounterKind>,
    /// Why not: the event and the kernel's answer.
    pub reason: String,
}

impl SampleCounters {
    /// How the user is told: `hardware counters: not supported here
    /// (reason)` (`counters` when none of them is a hardware counter);
    /// `None` when nothing was refused.
    pub fn unsupported_note(&self) -> Option<String> {
        let u = self.unsupported.as_ref()?;
        Some(unsupported_note(
            u.asked.iter().any(|k| k.is_hardware()),
            &u.reason,
        ))
    }
}

/// Turns running totals into per-sample deltas, per (sampler, thread).
#[derive(Debug, Default)]
pub(crate) struct DeltaTracker {
    /// Per thread: (sampler, its last totals there).
    last: HashMap<u32, Vec<(u32, [u64; MAX_COUNTERS])>>,
}

impl DeltaTracker {
    /// The deltas of a sample of `tid` on sampler `stream` whose group read
    /// `totals`, and `totals` kept as the thread's last there. A total
    /// below the last one (a new thread that reused the id before its
    /// predecessor's exit was replayed) counts from zero.
    pub(crate) fn delta(&mut self, stream: u32, tid: u32, totals: CounterValues) -> CounterValues {
        if totals.is_empty() {
            return totals;
        }
        let per_stream = self.last.entry(tid).or_default();
        let slot = match per_stream.iter().position(|(s, _)| *s == stream) {
            Some(i) => &mut per_stream[i].1,
            None => {
                per_stream.push((stream, [0; MAX_COUNTERS]));
                &mut per_stream.last_mut().expect("pushed").1
            }
        };
        let mut deltas = [0u64; MAX_COUNTERS];
        for (i, &total) in totals.as_slice().iter().enumerate() {
            deltas[i] = total.checked_sub(slot[i]).unwrap_or(total);
            slot[i] = total;
        }
        CounterValues::new(&deltas[..totals.len()]).unwrap_or_default()
    }

    /// Forgets thread `tid` (it exited).
    pub(crate) fn exit(&mut self, tid: u32) {
        self.last.remove(&tid);
    }

    /// Threads held (for tests).
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(x: &[u64]) -> CounterValues {
        CounterValues::new(x).expect("values")
    }

    #[test]
    fn deltas_are_per_sampler_and_thread_and_exits_free_them() {
        let mut t = DeltaTracker::default();
        // First sample of a thread: everything since it started.
        assert_eq!(t.delta(0, 7, v(&[100, 2])), v(&[100, 2]));
        assert_eq!(t.delta(0, 7, v(&[250, 2])), v(&[150, 0]));
        // The same thread on another CPU's sampler has its own totals.
        assert_eq!(t.delta(1, 7, v(&[40, 1])), v(&[40, 1]));
        assert_eq!(t.delta(0, 7, v(&[300, 3])), v(&[50, 1]));
        // Another thread.
        assert_eq!(t.delta(0, 8, v(&[10, 0])), v(&[10, 0]));
        // A reused id before the exit was seen: counts from zero.
        assert_eq!(t.delta(0, 8, v(&[4, 0])), v(&[4, 0]));
        assert_eq!(t.threads(), 2);
        t.exit(7);
        t.exit(8);
        assert_eq!(t.threads(), 0);
        assert_eq!(t.delta(0, 7, v(&[5, 0])), v(&[5, 0]));
        // No counters: nothing held.
        assert!(t.delta(0, 9, CounterValues::default()).is_empty());
        assert_eq!(t.threads(), 1);
    }
}
