//! The training loop of each main process ([`MainLoop`], [`loop_figures`]): its waiting, its workers' start and stop, from one pass over the trace index.
use super::*;

/// The training loop of one main process, read from its trace: how much of
/// it went to waiting for data, and how busy its workers were meanwhile.
///
/// The loop runs from its first batch request (the start of its first
/// `wait`, or of its first own `batch` where it loads its batches itself,
/// `num_workers=0`), or the start of its first workers' `start` before it
/// (`iter(loader)` starting them), to its last consumption (or the end of
/// its last own batch, where no consumption was logged), or the end of its
/// last workers' `stop` after it (the last `next()` stopping them). Its
/// time starting and stopping workers is its `start` and `stop` spans'
/// within the loop. Its waiting time is its
/// `wait` spans' time (the time spent in the DataLoader's `__next__`
/// waiting for a batch) plus, where it loads batches itself, its own
/// `batch` spans' time where it logged no wait (the tracer's wait holds
/// the batch then), within that window. All times are the logs'
/// (wall clock, ns).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct MainLoop {
    /// The main process.
    pub pid: u32,
    /// Its rank, where its log says it.
    pub rank: Option<u32>,
    /// Its first batch request, ns.
    pub start_ns: u64,
    /// Its last consumption, ns.
    pub end_ns: u64,
    /// The loop's time: `end_ns - start_ns`.
    pub loop_ns: u64,
    /// Time waiting for data within the loop, ns.
    pub wait_ns: u64,
    /// Time starting and stopping workers within the loop, ns.
    pub start_stop_ns: u64,
    /// Times it started workers within the loop (one per epoch where
    /// they are not persistent).
    pub starts: u64,
    /// Batches it consumed.
    pub batches: u64,
    /// Whether it loads batches itself (`batch` spans of its own:
    /// `num_workers=0`).
    pub loads_in_process: bool,
    /// Worker processes of its run that ran a batch within the loop
    /// (non-persistent workers count once per epoch).
    pub workers: u64,
    /// The most of them alive at once (each alive from its first batch's
    /// start to its last batch's end): the DataLoader's `num_workers`.
    pub workers_at_once: u64,
    /// Their batch spans' time within the loop, ns.
    pub worker_batch_ns: u64,
    /// Their time alive within the loop, summed over workers, ns.
    pub worker_alive_ns: u64,
}

/// The main loops of a trace (one per main process that requested a
/// batch), and their figures together: what the verdict
/// (`lotus_attribute::Verdict`) rests on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct LoopFigures {
    /// Each main process's loop, by pid.
    pub loops: Vec<MainLoop>,
    /// The loops' time summed, ns.
    pub loop_ns: u64,
    /// Their waiting time summed, ns.
    pub wait_ns: u64,
    /// Their time starting and stopping workers summed, ns.
    pub start_stop_ns: u64,
    /// Their workers' starts summed.
    pub starts: u64,
    /// `wait_ns / loop_ns` (0..1); `None` without a loop.
    pub waiting_share: Option<f64>,
    /// The workers' batch time over their time alive within the loops
    /// (0..1); `None` without workers.
    pub worker_busy_share: Option<f64>,
    /// The most workers alive at once in any loop.
    pub workers_at_once: u64,
    /// Whether some main process loads its batches itself.
    pub loads_in_process: bool,
}

/// Per process, what the first pass learns.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Extent {
    pub(super) first_wait: Option<u64>,
    pub(super) first_batch: Option<u64>,
    pub(super) last_batch_end: Option<u64>,
    pub(super) last_consume: Option<u64>,
    pub(super) consumes: u64,
    pub(super) first_start: Option<u64>,
    pub(super) last_stop_end: Option<u64>,
}

/// `[a, b)` clipped to `[lo, hi)`: its length.
pub(super) fn clipped(a: u64, b: u64, lo: u64, hi: u64) -> u64 {
    b.min(hi).saturating_sub(a.max(lo))
}

/// The main loops of the trace in `index` (see [`MainLoop`]): two passes
/// over its batches, waits and consumptions, memory per process only.
/// Workers belong to the main processes of their group (one run: a
/// folder, a host and a rank; see [`TraceIndex`](crate::TraceIndex)).
pub fn loop_figures(index: &mut TraceIndex) -> Result<LoopFigures, SpillError> {
    let n = index.processes.len();
    let roles: Vec<Role> = index.processes.iter().map(|p| p.process.role).collect();
    let groups = index.groups();
    let mut ext = vec![Extent::default(); n];
    index.each_kept(|kind, p, start, dur| {
        let Some(e) = ext.get_mut(p) else { return };
        let end = start.saturating_add(dur);
        match kind {
            Kind::Batch => {
                e.first_batch = Some(e.first_batch.map_or(start, |f| f.min(start)));
                e.last_batch_end = Some(e.last_batch_end.map_or(end, |l| l.max(end)));
            }
            Kind::Wait => e.first_wait = Some(e.first_wait.map_or(start, |f| f.min(start))),
            Kind::Consume => {
                e.consumes += 1;
                e.last_consume = Some(e.last_consume.map_or(start, |l| l.max(start)));
            }
            Kind::Start => e.first_start = Some(e.first_start.map_or(start, |f| f.min(start))),
            Kind::Stop => e.last_stop_end = Some(e.last_stop_end.map_or(end, |l| l.max(end))),
            _ => {}
        }
    })?;
    // Each main process's window, where it requested a batch.
    let window: Vec<Option<(u64, u64)>> = (0..n)
        .map(|p| {
            let e = ext[p];
            if roles[p] != Role::Main {
                return None;
            }
            let start = match (e.first_wait, e.first_batch) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b)?,
            };
            let end = e.last_consume.or(e.last_batch_end)?;
            // Starting the workers before the first request, and stopping
            // them after the last batch taken, are the loop's.
            let start = e.first_start.map_or(start, |s| s.min(start));
            let end = e.last_stop_end.map_or(end, |s| s.max(end));
            (end > start).then_some((start, end))
        })
        .collect();
    // The main processes of each group.
    let mut mains_of: Vec<Vec<usize>> = vec![Vec::new(); groups.iter().max().map_or(0, |g| g + 1)];
    for m in (0..n).filter(|&m| window[m].is_some()) {
        mains_of[groups[m]].push(m);
    }
    let mut wait = vec![0u64; n];
    let mut start_stop = vec![0u64; n];
    let mut starts = vec![0u64; n];
    let mut busy = vec![0u64; n];
    index.each_kept(|kind, p, start, dur| {
        let end = start.saturating_add(dur);
        match (roles.get(p), kind) {
            // With num_workers=0 the wait holds the batch: its own
            // batches count only where it logged no wait.
            (Some(Role::Main), Kind::Wait) => {
                if let Some((lo, hi)) = window[p] {
                    wait[p] = wait[p].saturating_add(clipped(start, end, lo, hi));
                }
            }
            (Some(Role::Main), Kind::Batch) if ext[p].first_wait.is_none() => {
                if let Some((lo, hi)) = window[p] {
                    wait[p] = wait[p].saturating_add(clipped(start, end, lo, hi));
                }
            }
            (Some(Role::Main), Kind::Start | Kind::Stop) => {
                if let Some((lo, hi)) = window[p] {
                    let t = clipped(start, end, lo, hi);
                    start_stop[p] = start_stop[p].saturating_add(t);
                    starts[p] += u64::from(kind == Kind::Start && t > 0);
                }
            }
            (Some(Role::Worker), Kind::Batch) => {
                for &m in &mains_of[groups[p]] {
                    if let Some((lo, hi)) = window[m] {
                        busy[m] = busy[m].saturating_add(clipped(start, end, lo, hi));
                    }
                }
            }
            _ => {}
        }
    })?;
    let mut loops = Vec::new();
    for m in 0..n {
        let Some((lo, hi)) = window[m] else { continue };
        // Its workers' lives within the loop, and the most at once.
        let mut alive = 0u64;
        let mut workers = 0u64;
        let mut edges: Vec<(u64, i64)> = Vec::new();
        for w in (0..n).filter(|&w| roles[w] == Role::Worker && groups[w] == groups[m]) {
            let (Some(a), Some(b)) = (ext[w].first_batch, ext[w].last_batch_end) else {
                continue;
            };
            let life = clipped(a, b, lo, hi);
            if life == 0 {
                continue;
            }
            workers += 1;
            alive = alive.saturating_add(life);
            edges.push((a.max(lo), 1));
            edges.push((b.min(hi), -1));
        }
        // An end before a start at one time: back-to-back lives are not
        // counted at once.
        edges.sort_unstable();
        let (mut now, mut most) = (0i64, 0i64);
        for (_, d) in edges {
            now += d;
            most = most.max(now);
        }
        let p = &index.processes[m].process;
        loops.push(MainLoop {
            pid: p.pid,
            rank: p.rank,
            start_ns: lo,
            end_ns: hi,
            loop_ns: hi - lo,
            wait_ns: wait[m].min(hi - lo),
            start_stop_ns: start_stop[m].min(hi - lo),
            starts: starts[m],
            batches: ext[m].consumes,
            loads_in_process: ext[m].first_batch.is_some(),
            workers,
            workers_at_once: most as u64,
            worker_batch_ns: busy[m].min(alive),
            worker_alive_ns: alive,
        });
    }
    loops.sort_by_key(|l| (l.pid, l.start_ns));
    let loop_ns = loops.iter().fold(0u64, |a, l| a.saturating_add(l.loop_ns));
    let wait_ns = loops.iter().fold(0u64, |a, l| a.saturating_add(l.wait_ns));
    let start_stop_ns = loops
        .iter()
        .fold(0u64, |a, l| a.saturating_add(l.start_stop_ns));
    let alive = loops
        .iter()
        .fold(0u64, |a, l| a.saturating_add(l.worker_alive_ns));
    let batch = loops
        .iter()
        .fold(0u64, |a, l| a.saturating_add(l.worker_batch_ns));
    Ok(LoopFigures {
        waiting_share: (loop_ns > 0).then(|| wait_ns as f64 / loop_ns as f64),
        worker_busy_share: (alive > 0).then(|| batch as f64 / alive as f64),
        workers_at_once: loops.iter().map(|l| l.workers_at_once).max().unwrap_or(0),
        loads_in_process: loops.iter().any(|l| l.loads_in_process),
        loop_ns,
        wait_ns,
        start_stop_ns,
        starts: loops.iter().map(|l| l.starts).sum(),
        loops,
    })
}

#[cfg(test)]
mod loop_tests {
    use super::*;
    use crate::event::Event;
    use lotus_sort::Budget;

    fn ev(kind: Kind, role: Role, pid: u32, start: u64, dur: u64) -> Event {
        Event {
            batch: Some(0),
            ..Event::span(kind.as_str(), kind, pid, role, start, dur)
        }
    }

    fn index_of(events: &[Event]) -> TraceIndex {
        let mut ix = TraceIndex::new(false, Budget::new(64));
        ix.begin("", "logs");
        for e in events {
            ix.add(e).expect("add");
        }
        ix
    }

    #[test]
    fn the_loop_runs_from_the_first_request_to_the_last_batch_taken() {
        // Main 1: waits [100, 300) and [500, 600), takes batches at 300
        // and 600: a loop of 500, 300 of it waiting. Workers 2 and 3 (two
        // at once): 2 busy [0, 300) and [350, 450) of its life [0, 450)
        // (in the loop: [100, 450), 300 busy), 3 busy [200, 580) of
        // [200, 580). A batch before the loop counts only within it.
        let mut ix = index_of(&[
            ev(Kind::Batch, Role::Worker, 2, 0, 300),
            ev(Kind::Batch, Role::Worker, 2, 350, 100),
            ev(Kind::Batch, Role::Worker, 3, 200, 380),
            ev(Kind::Wait, Role::Main, 1, 100, 200),
            ev(Kind::Consume, Role::Main, 1, 300, 0),
            ev(Kind::Wait, Role::Main, 1, 500, 100),
            ev(Kind::Consume, Role::Main, 1, 600, 0),
        ]);
        let f = loop_figures(&mut ix).expect("figures");
        assert_eq!(f.loops.len(), 1, "{f:#?}");
        let l = &f.loops[0];
        assert_eq!((l.pid, l.start_ns, l.end_ns, l.loop_ns), (1, 100, 600, 500));
        assert_eq!((l.wait_ns, l.batches, l.loads_in_process), (300, 2, false));
        assert_eq!((l.workers, l.workers_at_once), (2, 2));
        assert_eq!(
            (l.worker_batch_ns, l.worker_alive_ns),
            (300 + 380, 350 + 380)
        );
        assert_eq!(f.waiting_share, Some(0.6));
        let busy = f.worker_busy_share.expect("busy");
        assert!((busy - 680.0 / 730.0).abs() < 1e-12, "{busy}");
    }

    #[test]
    fn starting_and_stopping_workers_is_in_the_loop() {
        // Two epochs: workers started over [0, 100) and [700, 900),
        // stopped over [500, 650) (inside the loop) and [1100, 1300)
        // (after its last batch taken, 1000); waits [100, 200) and
        // [900, 1000). The loop is [0, 1300): 650 starting and stopping,
        // 200 waiting. A start of no length is no start.
        let mut ix = index_of(&[
            ev(Kind::Start, Role::Main, 1, 0, 100),
            ev(Kind::Wait, Role::Main, 1, 100, 100),
            ev(Kind::Consume, Role::Main, 1, 200, 0),
            ev(Kind::Stop, Role::Main, 1, 500, 150),
            ev(Kind::Start, Role::Main, 1, 700, 200),
            ev(Kind::Wait, Role::Main, 1, 900, 100),
            ev(Kind::Consume, Role::Main, 1, 1000, 0),
            ev(Kind::Stop, Role::Main, 1, 1100, 200),
            ev(Kind::Start, Role::Main, 1, 1200, 0),
        ]);
        let f = loop_figures(&mut ix).expect("figures");
        let l = &f.loops[0];
        assert_eq!((l.start_ns, l.end_ns, l.loop_ns), (0, 1300, 1300));
        assert_eq!((l.wait_ns, l.start_stop_ns, l.starts), (200, 650, 2));
        assert_eq!((f.start_stop_ns, f.starts), (650, 2));
        // Without them: the loop as before, nothing starting or stopping.
        let mut ix = index_of(&[
            ev(Kind::Wait, Role::Main, 1, 100, 100),
            ev(Kind::Consume, Role::Main, 1, 200, 0),
        ]);
        let f = loop_figures(&mut ix).expect("figures");
        assert_eq!(
            (f.loop_ns, f.wait_ns, f.start_stop_ns, f.starts),
            (100, 100, 0, 0)
        );
    }

    #[test]
    fn a_main_process_loading_its_own_batches_waits_for_them() {
        // num_workers=0 without waits logged: its batches are its wait.
        let mut ix = index_of(&[
            ev(Kind::Batch, Role::Main, 1, 100, 100),
            ev(Kind::Consume, Role::Main, 1, 200, 0),
            ev(Kind::Batch, Role::Main, 1, 400, 100),
            ev(Kind::Consume, Role::Main, 1, 500, 0),
        ]);
        let f = loop_figures(&mut ix).expect("figures");
        assert!(f.loads_in_process);
        assert_eq!((f.loop_ns, f.wait_ns), (400, 200));
        assert_eq!(f.worker_busy_share, None);
        // With waits holding the batches (the tracer's), they are not
        // counted twice.
        let mut ix = index_of(&[
            ev(Kind::Batch, Role::Main, 1, 110, 80),
            ev(Kind::Wait, Role::Main, 1, 100, 100),
            ev(Kind::Consume, Role::Main, 1, 200, 0),
        ]);
        let f = loop_figures(&mut ix).expect("figures");
        assert_eq!((f.loop_ns, f.wait_ns), (100, 100));
        // No request: no loop.
        let mut ix = index_of(&[ev(Kind::Batch, Role::Worker, 2, 0, 300)]);
        let f = loop_figures(&mut ix).expect("figures");
        assert!(f.loops.is_empty());
        assert_eq!(f.waiting_share, None);
    }
}
