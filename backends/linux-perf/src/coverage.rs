//! How much of the CPU time the target ran its samples cover, per process,
//! and the samples that stand for the last partial period of each thread.
//!
//! Why short-lived threads were barely sampled: `cpu-clock` samples on an
//! hrtimer that runs while the thread runs, and each thread gets its own
//! copy of the sampler (one per CPU, through `inherit`) whose timer starts
//! a full period when the thread is first scheduled on that CPU. The first
//! sample comes only after a whole period of that thread's CPU time there,
//! and what the thread runs after its last sample is never sampled: a
//! thread that ran 0.3 ms at 1 kHz is never sampled, one that ran 2.9 ms
//! gets 2 samples. Worse, at a switch between two threads of the target
//! on one CPU the kernel swaps their copies instead of stopping one and
//! starting the other, so the timer's progress passes to the next thread,
//! and is thrown away when that thread exits: a thread that starts short
//! threads one after another and waits for each lost all its samples too.
//! Work split into many short threads lost nearly all its samples, with no
//! record lost and no note (`perf record` does the same). Samplers that
//! read with each sample (see `crate::events`) keep the kernel from
//! swapping (Linux 6.12 or later).
//!
//! The samplers set `inherit_stat`, so the kernel writes each thread's
//! count on each CPU (a `PERF_RECORD_READ`: the CPU time it ran there
//! while sampling was on) into the ring buffer when it exits. Against the
//! thread's samples on that CPU, that gives the unsampled tail: less than
//! one period when no sample was lost. The tails of a process are carried
//! over from thread to thread, and each time they add up to one period a
//! sample is added for the exiting thread, at its exit, where it was last
//! sampled (`[unknown]` when it never was): the samples then cover the CPU
//! time the threads ran, to within a period or two per process. What the
//! count says beyond a period per thread and CPU is missing (samples lost,
//! the kernel throttling, kernel mode not sampled) and is reported, not
//! made up.

use std::collections::{BTreeMap, HashMap};

/// What the samples of one process cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProcessCoverage {
    /// The process id.
    pub pid: u32,
    /// The CPU time its threads ran while sampling was on, as the kernel
    /// counted it (nanoseconds): the exited threads' counts, and for the
    /// target's first thread what the samplers counted in all.
    pub cpu_ns: u64,
    /// Samples the kernel took of it.
    pub samples: u64,
    /// Samples added for its threads' unsampled tails (see the module
    /// docs of `coverage`).
    pub added: u64,
    /// Threads of it whose counts came (threads that exited).
    pub threads: u64,
}

impl ProcessCoverage {
    /// CPU time the samples cover, taken and added, at `period_ns` each.
    pub fn sampled_ns(&self, period_ns: u64) -> u64 {
        (self.samples + self.added).saturating_mul(period_ns)
    }
}

/// What the samples cover, for the whole run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SampleCoverage {
    /// One sampling period (nanoseconds).
    pub period_ns: u64,
    /// Per process, by pid: only processes with counted CPU time or samples.
    pub processes: Vec<ProcessCoverage>,
    /// The CPU time the whole target ran while sampling was on, as the
    /// samplers counted it (nanoseconds); `None` where they could not be
    /// read.
    pub cpu_ns: Option<u64>,
    /// Whether kernel mode was sampled.
    pub kernel: bool,
    /// Whether each thread's sampler copy kept its own timer (Linux 6.12
    /// or later; see [`SampleCoverage::notes`]).
    pub separate_threads: bool,
}

impl SampleCoverage {
    /// Samples taken, all processes.
    pub fn samples(&self) -> u64 {
        self.processes.iter().map(|p| p.samples).sum()
    }

    /// Samples added for unsampled tails, all processes.
    pub fn added(&self) -> u64 {
        self.processes.iter().map(|p| p.added).sum()
    }

    /// The process `pid`'s figures.
    pub fn process(&self, pid: u32) -> Option<&ProcessCoverage> {
        self.processes.iter().find(|p| p.pid == pid)
    }

    /// What the user should know (also among [`crate::PerfReport::notes`]):
    /// how many samples were added for exited threads' last periods, and
    /// each process (the five worst) whose samples miss more of its CPU
    /// time than sampling's own error explains, with the figures.
    pub fn notes(&self) -> Vec<String> {
        notes(self, self.kernel, self.separate_threads)
    }
}

/// One thread's sampler copy on one CPU, as the replay goes.
#[derive(Debug, Default, Clone, Copy)]
struct Copy {
    pid: u32,
    samples: u64,
}

/// Where a thread was last sampled: what an added sample of it repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastSample {
    pub ip: u64,
    pub kernel: bool,
    /// When (CLOCK_MONOTONIC ns).
    pub time: u64,
    /// The thread's samples so far, all CPUs.
    pub samples: u64,
}

/// How recent (in sampling periods of wall time) the last sample of a
/// thread with many samples must be at its exit for its unsampled tail to
/// be added there (see [`Tally::thread_cpu`]).
pub(crate) const RECENT_PERIODS: u64 = 10;
/// Threads with fewer samples always add their tails at their exit: the
/// tail is more than 2% of their time.
pub(crate) const FEW_SAMPLES: u64 = 50;

/// An added sample: for thread `tid` of `pid`, at `last` (`None`: never
/// sampled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Added {
    pub pid: u32,
    pub tid: u32,
    pub last: Option<LastSample>,
}

/// The drain thread's tally, fed in replay (time) order.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    period_ns: u64,
    /// Samplers (CPUs): a thread sends a count from each.
    streams: u64,
    /// Samples may have been dropped: kernel mode is not sampled, or a
    /// sample was lost or throttled.
    dropping: bool,
    /// By (stream, tid): the thread's samples on that CPU's sampler.
    copies: HashMap<(u32, u32), Copy>,
    /// By tid: where it was last sampled. Kept past the thread's exit
    /// record, which the kernel writes before the thread's counts, until
    /// its last count.
    last: HashMap<u32, LastSample>,
    /// By tid: the counts come so far of a thread that is exiting.
    counted: HashMap<u32, u64>,
    /// By pid: figures, and the tails not yet made into a sample (ns;
    /// below zero where the copies took more samples than their counts'
    /// whole periods).
    processes: BTreeMap<u32, (ProcessCoverage, i64)>,
    /// Counted CPU time by stream, summed over the threads that exited.
    exited_ns: HashMap<u32, u64>,
    /// For an attached tree ([`Tally::attached`]): when the attach began
    /// (the records before are its own, written as the tree stood).
    attached_at: Option<u64>,
    /// By pid: the attached process whose threads' samplers each
    /// process's threads carry copies of (see [`Tally::fork`]).
    lineage: HashMap<u32, u32>,
    /// By attached process: the CPU time counted by the threads that
    /// carried copies of its threads' samplers and exited.
    exited_by_root: HashMap<u32, u64>,
}

impl Tally {
    /// A tally for `streams` samplers taking one sample every `period_ns`,
    /// of kernel mode too when `kernel`.
    pub(crate) fn new(period_ns: u64, streams: usize, kernel: bool) -> Tally {
        Tally {
            period_ns: period_ns.max(1),
            streams: (streams as u64).max(1),
            dropping: !kernel,
            ..Tally::default()
        }
    }

    /// The samplers were opened on the threads of processes `roots` at
    /// `since` (an attached tree, see `crate::attach`), each thread's
    /// sampler counting that thread and every thread it starts later.
    /// No thread of theirs sends its count at its exit; what each ran is
    /// its process's samplers' counts less what the threads started from
    /// them counted (their counts come: [`Self::finish_with`]).
    pub(crate) fn attached(&mut self, since: u64, roots: &[u32]) {
        self.attached_at = Some(since);
        self.lineage = roots.iter().map(|&p| (p, p)).collect();
    }

    /// Process `pid` was started by `ppid` at `time`: in an attached tree,
    /// its threads carry copies of the samplers `ppid`'s did.
    pub(crate) fn fork(&mut self, time: u64, pid: u32, ppid: u32) {
        if self.attached_at.is_some_and(|since| time > since) {
            if let Some(&root) = self.lineage.get(&ppid) {
                self.lineage.insert(pid, root);
            }
        }
    }

    /// A sample was lost or throttled: from now on, whole periods missing
    /// from a thread's samples are not taken for its tail.
    pub(crate) fn dropped(&mut self) {
        self.dropping = true;
    }

    fn process(&mut self, pid: u32) -> &mut (ProcessCoverage, i64) {
        self.processes.entry(pid).or_insert_with(|| {
            (
                ProcessCoverage {
                    pid,
                    ..ProcessCoverage::default()
                },
                0,
            )
        })
    }

    /// A sample the kernel took, from ring buffer `stream`.
    pub(crate) fn sample(
        &mut self,
        time: u64,
        stream: u32,
        pid: u32,
        tid: u32,
        ip: u64,
        kernel: bool,
    ) {
        let copy = self.copies.entry((stream, tid)).or_default();
        copy.pid = pid;
        copy.samples += 1;
        let samples = self.last.get(&tid).map_or(0, |l| l.samples) + 1;
        self.last.insert(
            tid,
            LastSample {
                ip,
                kernel,
                time,
                samples,
            },
        );
        self.process(pid).0.samples += 1;
    }

    /// Thread `tid` of `pid` exited at `time` having run `ns` on
    /// `stream`'s CPU: the samples to add for it (0 or more; more only if
    /// a thread's tail completes the carry of several).
    ///
    /// The samples must be written in time order, so an added sample
    /// stands at the exit. That is where a short thread's tail ran, but
    /// the tail of a long-lived thread that had long been idle (a pool's
    /// thread at the end of the run) ran long before, in whatever it did
    /// then: added at its exit it would count where the thread did not
    /// run. So a thread adds its tail only if it took fewer than
    /// [`FEW_SAMPLES`] samples (its tail is a large part of its time), or
    /// its last sample came within [`RECENT_PERIODS`] periods of its exit;
    /// a tail left out is less than a period a CPU, a small part of such
    /// a thread's samples, and counted as missing.
    pub(crate) fn thread_cpu(
        &mut self,
        time: u64,
        stream: u32,
        pid: u32,
        tid: u32,
        ns: u64,
    ) -> Vec<Added> {
        let period = self.period_ns;
        let samples = self.copies.remove(&(stream, tid)).map_or(0, |c| c.samples);
        *self.exited_ns.entry(stream).or_insert(0) += ns;
        if let Some(&root) = self.lineage.get(&pid) {
            *self.exited_by_root.entry(root).or_insert(0) += ns;
        }
        // The timer fires after each whole period: `samples` periods were
        // sampled, the rest of the count is the tail (less than a period)
        // and, beyond it, whole periods whose samples are missing.
        // The tail, signed: a copy can also hold a sample more than its
        // count's whole periods where the kernel passed a timer's progress
        // from one thread to the next (see the module docs). A copy can
        // also miss a whole period with no sample lost: the timer fires
        // late (tens of us in a virtual machine), after a thread that ran
        // a little over a period has gone. Where samples may have been
        // dropped (lost or throttled so far, or kernel mode not sampled),
        // whole periods beyond the tail are taken as missing: reported,
        // not added.
        let period_i = i64::try_from(period).unwrap_or(i64::MAX);
        let sampled = i128::from(samples) * i128::from(period);
        let tail = i128::from(ns) - sampled;
        let tail = if tail >= i128::from(period) && self.dropping {
            tail % i128::from(period)
        } else {
            tail.max(-i128::from(period))
        };
        let tail = i64::try_from(tail).unwrap_or(i64::MAX);
        let adds = self.last.get(&tid).is_none_or(|l| {
            l.samples < FEW_SAMPLES
                || time.saturating_sub(l.time) <= period.saturating_mul(RECENT_PERIODS)
        });
        let tail = if adds { tail } else { tail.min(0) };
        let last = self.last.get(&tid).copied();
        let counts = self.counted.entry(tid).or_insert(0);
        *counts += 1;
        if *counts >= self.streams {
            // Its last count: the thread is gone, its id free.
            self.counted.remove(&tid);
            self.last.remove(&tid);
        }
        let (figures, carry) = self.process(pid);
        figures.cpu_ns = figures.cpu_ns.saturating_add(ns);
        figures.threads += 1;
        *carry += tail;
        let mut added = Vec::new();
        // Only a thread whose own tail may be added stands for the carry:
        // the carry of other threads' tails given to a long-idle thread
        // at its exit would count where it did not run (a pool's thread
        // at the end of a run, then judged busy outside the ops and taken
        // for an independent one by `lotus attribute`). The carry waits
        // for the next thread that adds.
        while adds && *carry >= period_i {
            *carry -= period_i;
            figures.added += 1;
            added.push(Added { pid, tid, last });
        }
        added
    }

    /// The figures, given `target` (the first process) and what the
    /// samplers counted in all on each stream (`None` when unread).
    ///
    /// One thread never sends a count: the one holding the samplers
    /// themselves (not copies) when it exited. That is the target's first
    /// thread, unless the kernel swapped its events with another thread's
    /// (see `crate::events`): then it is the one sampled thread that sent
    /// no count. Its time is the total less the other threads' counts.
    #[cfg(test)]
    pub(crate) fn finish(self, target: u32, totals: Option<Vec<u64>>) -> SampleCoverage {
        self.finish_with(target, totals, None, true, true)
    }

    /// [`Self::finish`], saying whether kernel mode was sampled and
    /// whether each thread's copy kept its own timer. For an attached
    /// tree, `by_process` is what the samplers opened on each attached
    /// process's threads counted in all: each such process ran that
    /// less what the threads started from them counted (`None`: the
    /// attached processes' own threads are left out of the figures).
    pub(crate) fn finish_with(
        mut self,
        target: u32,
        totals: Option<Vec<u64>>,
        by_process: Option<Vec<(u32, u64)>>,
        kernel: bool,
        separate_threads: bool,
    ) -> SampleCoverage {
        let cpu_ns = totals.as_ref().map(|t| t.iter().sum::<u64>());
        let streams = self.streams;
        if self.attached_at.is_some() {
            for (pid, counted) in by_process.unwrap_or_default() {
                let started = self.exited_by_root.get(&pid).copied().unwrap_or(0);
                let figures = &mut self.process(pid).0;
                figures.cpu_ns = figures
                    .cpu_ns
                    .saturating_add(counted.saturating_sub(started));
            }
        } else if let Some(totals) = totals {
            let own: u64 = totals
                .iter()
                .enumerate()
                .map(|(s, &t)| {
                    t.saturating_sub(self.exited_ns.get(&(s as u32)).copied().unwrap_or(0))
                })
                .sum();
            let mut left: Vec<u32> = self.copies.values().map(|c| c.pid).collect();
            left.sort_unstable();
            left.dedup();
            let holder = match left[..] {
                [pid] => pid,
                _ => target,
            };
            let figures = &mut self.process(holder).0;
            figures.cpu_ns = figures.cpu_ns.saturating_add(own);
        }
        SampleCoverage {
            period_ns: self.period_ns,
            processes: self
                .processes
                .into_values()
                .map(|(mut p, _)| {
                    // Counted per copy so far.
                    p.threads = p.threads.div_ceil(streams);
                    p
                })
                .collect(),
            cpu_ns,
            kernel,
            separate_threads,
        }
    }
}

/// The notes for the user: the samples added, and every process whose
/// samples miss more of its CPU time than sampling's own error explains.
/// `kernel` says whether kernel mode was sampled.
fn notes(coverage: &SampleCoverage, kernel: bool, separate: bool) -> Vec<String> {
    let period = coverage.period_ns.max(1);
    let secs = |ns: u64| ns as f64 / 1e9;
    let mut notes = Vec::new();
    let added = coverage.added();
    if added > 0 {
        let threads: u64 = coverage.processes.iter().map(|p| p.threads).sum();
        let threads = if threads == 1 {
            "1 thread".to_string()
        } else {
            format!("{threads} threads")
        };
        let how = if separate {
            "the kernel's sampling timer starts anew for each thread on each CPU, so a \
             thread's last partial period is never sampled"
        } else {
            "the kernel's sampling timer starts anew for each thread on each CPU, and this \
             kernel (before 6.12) lets a thread that exits take away the timer progress of \
             the one that ran before it: the samples added stand for both"
        };
        notes.push(format!(
            "{added} samples ({:.3} s) were added for the CPU time {threads} ran that their \
             samples do not cover, mostly after their last sample before exiting ({how}); each \
             stands at its thread's exit, in the function it was last sampled in ([unknown] if \
             it never was)",
            secs(added.saturating_mul(period))
        ));
    }
    let mut short: Vec<(&ProcessCoverage, u64)> = coverage
        .processes
        .iter()
        .filter_map(|p| {
            let sampled = p.sampled_ns(period);
            let missing = p.cpu_ns.saturating_sub(sampled);
            // Sampling's error: the tails (added up to less than a period
            // per process, a period more for the first thread's), and the
            // statistical spread of the count; beyond both and 5% of the
            // time, samples are missing.
            let expected = p.cpu_ns / period;
            let allowance = (2 + 3 * (expected as f64).sqrt() as u64) * period;
            (missing > allowance && missing * 20 > p.cpu_ns).then_some((p, missing))
        })
        .collect();
    short.sort_by_key(|&(p, missing)| (std::cmp::Reverse(missing), p.pid));
    const SHOWN: usize = 5;
    let why = if kernel {
        "samples were lost or throttled"
    } else {
        "kernel mode is not sampled, or samples were lost or throttled"
    };
    for (p, _) in short.iter().take(SHOWN) {
        let sampled = p.sampled_ns(period);
        notes.push(format!(
            "samples cover {:.3} s of the {:.3} s CPU process {} ran ({:.0}%): {why}",
            secs(sampled),
            secs(p.cpu_ns),
            p.pid,
            100.0 * sampled as f64 / p.cpu_ns as f64
        ));
    }
    if short.len() > SHOWN {
        let missing: u64 = short[SHOWN..].iter().map(|(_, m)| m).sum();
        notes.push(format!(
            "and {} more processes whose samples miss {:.3} s of their CPU time",
            short.len() - SHOWN,
            secs(missing)
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 1_000_000;

    #[test]
    fn tails_add_up_to_samples_per_process() {
        let mut t = Tally::new(P, 2, true);
        // Thread 11 of process 10: 2 samples on CPU 0, ran 2.6 periods
        // there and 0.3 on CPU 1 (never sampled there).
        t.sample(0, 0, 10, 11, 0x1000, false);
        t.sample(0, 0, 10, 11, 0x2000, false);
        assert!(t.thread_cpu(0, 0, 10, 11, 2 * P + 600_000).is_empty());
        let added = t.thread_cpu(0, 1, 10, 11, 300_000);
        assert!(added.is_empty(), "0.9 of a period carried");
        // Thread 12 never sampled: its 0.4 completes a period.
        let added = t.thread_cpu(0, 0, 10, 12, 400_000);
        assert_eq!(
            added,
            [Added {
                pid: 10,
                tid: 12,
                last: None
            }]
        );
        // Thread 11 sent its counts from both CPUs: forgotten.
        assert!(!t.last.contains_key(&11) && !t.counted.contains_key(&11));
        // Another process carries its own.
        assert!(t.thread_cpu(0, 1, 20, 21, 900_000).is_empty());
        let cov = t.finish(10, None);
        let p = cov.process(10).expect("10");
        assert_eq!((p.samples, p.added, p.threads), (2, 1, 2));
        assert_eq!(p.cpu_ns, 3 * P + 300_000);
        assert_eq!(cov.process(20).expect("20").added, 0);
        assert_eq!(cov.cpu_ns, None);
    }

    #[test]
    fn an_added_sample_repeats_where_the_thread_was_last_sampled() {
        let mut t = Tally::new(P, 2, true);
        t.sample(0, 0, 10, 11, 0x1000, false);
        t.sample(0, 1, 10, 11, 0xffff_0000, true);
        let added = t.thread_cpu(0, 1, 10, 11, P + P / 2);
        assert!(added.is_empty());
        let added = t.thread_cpu(0, 0, 10, 11, P + P / 2);
        assert_eq!(
            added[0].last,
            Some(LastSample {
                ip: 0xffff_0000,
                kernel: true,
                time: 0,
                samples: 2,
            })
        );
    }

    #[test]
    fn missing_periods_are_not_added_but_reported() {
        let mut t = Tally::new(P, 2, true);
        // 100 periods counted, 40 sampled, samples were lost: 60 missing,
        // none added.
        t.dropped();
        for _ in 0..40 {
            t.sample(0, 0, 10, 11, 0x1000, false);
        }
        assert!(t.thread_cpu(0, 0, 10, 11, 100 * P).is_empty());
        // The first thread: the samplers counted 10 periods more in all.
        for _ in 0..10 {
            t.sample(0, 0, 10, 10, 0x1000, false);
        }
        let cov = t.finish(10, Some(vec![110 * P]));
        assert_eq!(cov.cpu_ns, Some(110 * P));
        let p = cov.process(10).expect("10");
        assert_eq!((p.cpu_ns, p.samples), (110 * P, 50));
        let notes = cov.notes();
        assert_eq!(
            notes,
            [
                "samples cover 0.050 s of the 0.110 s CPU process 10 ran (45%): samples were lost \
              or throttled"
            ]
        );
        // Within sampling's error: no note.
        let mut t = Tally::new(P, 2, true);
        t.dropped();
        for _ in 0..98 {
            t.sample(0, 0, 10, 11, 0x1000, false);
        }
        t.thread_cpu(0, 0, 10, 11, 100 * P);
        assert!(notes_of(t).is_empty());
    }

    #[test]
    fn with_nothing_dropped_a_late_timer_s_missing_period_is_added() {
        let mut t = Tally::new(P, 2, true);
        // 1.05 periods, no sample: the timer fired after the thread left.
        assert_eq!(t.thread_cpu(0, 0, 10, 11, P + P / 20).len(), 1);
        // Kernel mode not sampled: samples may be missing, not added.
        let mut t = Tally::new(P, 2, false);
        assert!(t.thread_cpu(0, 0, 10, 11, P + P / 20).is_empty());
    }

    #[test]
    fn a_thread_long_idle_before_its_exit_adds_nothing_there() {
        let mut t = Tally::new(P, 1, true);
        // Sampled 60 times up to 60 ms, exits 1 s later with 0.9 of a
        // period unsampled: nothing added (the tail ran long before).
        for i in 1..=60 {
            t.sample(i * 1_000_000, 0, 10, 11, 0x1000, false);
        }
        assert!(t
            .thread_cpu(1_000_000_000, 0, 10, 11, 60 * P + 900_000)
            .is_empty());
        // The next thread's tail starts the carry afresh.
        assert!(t.thread_cpu(1_000_000_000, 0, 10, 12, 500_000).is_empty());
        assert_eq!(t.thread_cpu(1_000_000_000, 0, 10, 13, 500_000).len(), 1);
        // One sampled just before its exit adds its tail, and one with
        // few samples however long it was idle.
        let mut t = Tally::new(P, 1, true);
        for i in 1..=60 {
            t.sample(i * 1_000_000, 0, 10, 11, 0x1000, false);
        }
        assert_eq!(t.thread_cpu(62_000_000, 0, 10, 11, 61 * P).len(), 1);
        t.sample(1_000_000, 0, 10, 12, 0x1000, false);
        assert_eq!(t.thread_cpu(1_000_000_000, 0, 10, 12, 2 * P).len(), 1);
    }

    /// An attached tree: the attached processes' own threads send no
    /// count; each ran what its samplers counted less what the threads
    /// started from them counted, wherever those ran.
    #[test]
    fn an_attached_process_ran_its_count_less_what_it_started() {
        let mut t = Tally::new(P, 2, true);
        t.attached(100, &[10, 20]);
        // The attach's own records (at its start) change nothing.
        t.fork(100, 20, 10);
        // 30 forked from 10, 40 from 30: both carry 10's samplers.
        t.fork(200, 30, 10);
        t.fork(300, 40, 30);
        t.fork(300, 50, 99);
        // (Never sampled: their periods are added, which is not at issue.)
        t.thread_cpu(400, 0, 30, 30, 5 * P);
        t.thread_cpu(400, 1, 40, 40, 2 * P);
        // A thread 10 started, and one of 20's.
        t.thread_cpu(500, 0, 10, 11, P);
        t.thread_cpu(500, 0, 20, 21, P);
        let cov = t.finish_with(
            10,
            Some(vec![20 * P, 5 * P]),
            Some(vec![(10, 20 * P), (20, 5 * P)]),
            true,
            true,
        );
        let cpu = |pid| cov.process(pid).map_or(0, |p| p.cpu_ns);
        // 10: its new thread's P, and 20 - (5 + 2 + 1) of its own.
        assert_eq!(cpu(10), P + 12 * P);
        assert_eq!(cpu(20), P + 4 * P);
        assert_eq!((cpu(30), cpu(40)), (5 * P, 2 * P));
        assert_eq!(cov.cpu_ns, Some(25 * P));
    }

    fn notes_of(t: Tally) -> Vec<String> {
        t.finish(10, None).notes()
    }
}
