//! The rows of a process's time outside every op, by the phase of its run
//! the sample falls in, and the DataLoader's own threads.
//!
//! - A main process: "start-up and imports (main)" (before its first
//!   batch request), "training loop, outside the DataLoader (main)" (to
//!   its last batch taken), "after the last batch (main)"; whenever it
//!   starts or stops its workers (the tracer's `start` and `stop` spans:
//!   `iter(loader)`, pickling the dataset to each spawn worker; the
//!   workers' shutdown), "starting and stopping workers (main)".
//! - A worker: "start-up and imports (worker)" (before its first batch:
//!   the interpreter's start in spawn and forkserver, the imports, the
//!   dataset unpickled, the seed; its `worker_init_fn` is an op row of its
//!   own), "outside any op (worker)" (between its first batch and its last
//!   batch or op: the DataLoader's machinery between ops) and "shutdown
//!   and exit (worker)" (after its last batch or op: the last index, the
//!   queues closed, the interpreter's exit). A worker that ran no batch
//!   keeps all of it in "outside any op (worker)".
//! - The threads the tracer names as the DataLoader's machinery
//!   (`kind=thread`: a queue's feeder thread, which pickles and sends each
//!   batch, the resource sharer, the pin-memory thread, lotus's watch):
//!   "DataLoader threads (main)" / "(worker)", never an op's and never
//!   mixed with the job's own independent threads.
//!
//! The rule ([`super::SampledTrace::credit`]) credits these samples
//! `Outside` and `Independent`; the rows of `attribute` and of `--format
//! folded` split them here, through [`phased`].

use std::collections::{HashMap, HashSet};

use lotus_trace::{Event, Kind, Role};

use super::{Credit, Logs, Target};

/// A main process's training loop on the samples' clock: its first event,
/// its first batch request (the start of its first wait or own batch), its
/// last batch taken (consumption) and the end of its last own batch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MainWindow {
    first_event: Option<u64>,
    first_request: Option<u64>,
    last_taken: Option<u64>,
    last_batch_end: Option<u64>,
}

/// The part of a main process's run a sample outside every op falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum MainPhase {
    /// Before its first batch request (before its first event where it
    /// requested none): the interpreter's and lotus's start-up, imports,
    /// building the model and the DataLoader.
    StartUp,
    /// Starting or stopping its DataLoader's workers, whenever it is.
    Workers,
    /// From its first batch request to its last batch taken: the training
    /// step, between the DataLoader's calls.
    Loop,
    /// After its last batch taken: the last batch's step, then whatever
    /// follows the loop (evaluation, saving, exit).
    After,
}

impl MainWindow {
    /// The phase of time `t`; `None` where the process logged nothing
    /// that bounds it (no event before `t` and no batch request).
    fn phase(&self, t: u64) -> Option<MainPhase> {
        let end = self.last_taken.or(self.last_batch_end);
        match (self.first_request, end) {
            (Some(a), _) if t < a => Some(MainPhase::StartUp),
            (Some(_), Some(b)) if t > b => Some(MainPhase::After),
            (Some(_), _) => Some(MainPhase::Loop),
            (None, _) if self.first_event.is_some_and(|f| t < f) => Some(MainPhase::StartUp),
            (None, _) => None,
        }
    }
}

/// A worker's life on the samples' clock: its first batch's start and
/// the end of its last batch or op span.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WorkerWindow {
    first_batch: Option<u64>,
    last_end: Option<u64>,
}

/// The part of a worker's run a sample outside every op falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum WorkerPhase {
    /// Before its first batch.
    StartUp,
    /// From its first batch to the end of its last batch or op.
    Between,
    /// After the end of its last batch or op.
    Shutdown,
}

impl WorkerWindow {
    /// The phase of time `t`; `None` where the worker ran no batch (a
    /// log with no batch span says nothing of where its work began: all
    /// its time outside every op stays "outside any op", as the note on
    /// unseen work counts it).
    fn phase(&self, t: u64) -> Option<WorkerPhase> {
        let start = self.first_batch?;
        Some(if t < start {
            WorkerPhase::StartUp
        } else if self.last_end.is_some_and(|e| t > e) {
            WorkerPhase::Shutdown
        } else {
            WorkerPhase::Between
        })
    }
}

/// Per process, the bounds its phases are read from (gathered while the
/// logs are read, [`Phases::see`]) and the DataLoader's own threads.
#[derive(Debug, Default)]
pub(crate) struct Phases {
    main: HashMap<u32, MainWindow>,
    /// Per main process, its spans starting and stopping workers (sorted
    /// by start once taken).
    main_workers: HashMap<u32, Vec<(u64, u64)>>,
    workers: HashMap<u32, WorkerWindow>,
    machinery: HashSet<(u32, u32)>,
}

fn min(a: Option<u64>, t: u64) -> Option<u64> {
    Some(a.map_or(t, |a| a.min(t)))
}

fn max(a: Option<u64>, t: u64) -> Option<u64> {
    Some(a.map_or(t, |a| a.max(t)))
}

impl Phases {
    /// Takes in event `e`, which ran from `start` to `end` on the
    /// samples' clock (`None` where its log's clock could not place it).
    pub(crate) fn see(&mut self, e: &Event, start: Option<u64>, end: Option<u64>) {
        let Some(start) = start else { return };
        match e.role {
            Role::Main => {
                let w = self.main.entry(e.pid).or_default();
                w.first_event = min(w.first_event, start);
                match e.kind {
                    Kind::Wait | Kind::Batch => w.first_request = min(w.first_request, start),
                    Kind::Consume => w.last_taken = max(w.last_taken, start),
                    _ => {}
                }
                if let (Kind::Batch, Some(end)) = (e.kind, end) {
                    w.last_batch_end = max(w.last_batch_end, end);
                }
                if let (Kind::Start | Kind::Stop, Some(end)) = (e.kind, end) {
                    self.main_workers
                        .entry(e.pid)
                        .or_default()
                        .push((start, end));
                }
            }
            Role::Worker => {
                // A thread's name is a point in time, not the worker's work.
                if e.kind == Kind::Thread {
                    return;
                }
                let w = self.workers.entry(e.pid).or_default();
                if e.kind == Kind::Batch {
                    w.first_batch = min(w.first_batch, start);
                }
                if matches!(e.kind, Kind::Batch | Kind::Op) {
                    w.last_end = max(w.last_end, end.unwrap_or(start));
                }
            }
        }
    }

    /// The phases of `logs` (taken from it), with its machinery threads.
    pub(super) fn take(logs: &mut Logs) -> Phases {
        let mut p = std::mem::take(&mut logs.phases);
        p.machinery = logs.machinery_threads.clone();
        for v in p.main_workers.values_mut() {
            v.sort_unstable();
        }
        p
    }

    /// Whether main process `pid` was starting or stopping workers at `t`.
    fn main_at_workers(&self, pid: u32, t: u64) -> bool {
        let Some(spans) = self.main_workers.get(&pid) else {
            return false;
        };
        // The spans do not overlap (one thread runs them, one at a time).
        let i = spans.partition_point(|s| s.0 <= t);
        i > 0 && spans[i - 1].1 >= t
    }
}

/// The row of credit `c`: its target, where that is a process's time
/// outside every op, by the phase of its run the sample falls in, and
/// where it is an independent thread the tracer named as the
/// DataLoader's, that row (the rows of the table and of `--format folded`
/// alike).
pub(crate) fn phased(p: &Phases, c: &Credit<'_>) -> Target {
    let (pid, t) = (c.sample.pid, c.sample.time_ns);
    match c.target {
        Target::Outside(Role::Main) if p.main_at_workers(pid, t) => {
            Target::Main(MainPhase::Workers)
        }
        Target::Outside(Role::Main) => p
            .main
            .get(&pid)
            .and_then(|w| w.phase(t))
            .map_or(c.target, Target::Main),
        Target::Outside(Role::Worker) => match p.workers.get(&pid).and_then(|w| w.phase(t)) {
            Some(WorkerPhase::Between) | None => c.target,
            Some(phase) => Target::Worker(phase),
        },
        Target::Independent(role) if p.machinery.contains(&(pid, c.sample.tid)) => {
            Target::Threads(role)
        }
        t => t,
    }
}

/// The name of a row [`phased`] may give, `None` for the others.
pub(crate) fn phase_row_name(target: &Target) -> Option<&'static str> {
    Some(match target {
        Target::Main(MainPhase::StartUp) => "start-up and imports (main)",
        Target::Main(MainPhase::Workers) => "starting and stopping workers (main)",
        Target::Main(MainPhase::Loop) => "training loop, outside the DataLoader (main)",
        Target::Main(MainPhase::After) => "after the last batch (main)",
        Target::Worker(WorkerPhase::StartUp) => "start-up and imports (worker)",
        Target::Worker(WorkerPhase::Between) => "outside any op (worker)",
        Target::Worker(WorkerPhase::Shutdown) => "shutdown and exit (worker)",
        Target::Threads(Role::Main) => "DataLoader threads (main)",
        Target::Threads(Role::Worker) => "DataLoader threads (worker)",
        _ => return None,
    })
}

/// The order of the phase rows after the others: a worker's (its time
/// between batches among them), then a main process's, each in time
/// order.
pub(crate) fn phase_order(target: &Target) -> Option<(u8, u8)> {
    match target {
        Target::Worker(p) => Some((0, *p as u8)),
        Target::Outside(Role::Worker) => Some((0, WorkerPhase::Between as u8)),
        Target::Main(p) => Some((1, *p as u8)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{sample_at, sampled_folder};
    use super::super::{attribute_folder, TOP_FUNCTIONS};
    use lotus_samples::{Sample, Symbol};
    use lotus_sort::Budget;

    /// A worker (pid 10) whose `worker_init_fn` runs over [200, 400), with
    /// batches over [1000, 2000) and [3000, 4000), each all op `A`; its
    /// main thread sampled every 100 ns over [0, 5000), and a feeder
    /// thread 11 named by the tracer sampled over [2000, 3000).
    #[test]
    fn a_workers_time_outside_ops_is_split_by_phase() {
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
             Sinit_worker,{},200,kind=op\n\
             SA,{},1000,kind=op,batch=0\nSBatch,{},1000,kind=batch,batch=0\n\
             SA,{},1000,kind=op,batch=1\nSBatch,{},1000,kind=batch,batch=1\n\
             SQueueFeederThread,{},0,kind=thread,tid=11\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            200 + off,
            1000 + off,
            1000 + off,
            3000 + off,
            3000 + off,
            2000 + off,
            5000 + off
        );
        let symbols = [(0, Symbol::new("f", "/k.so"))];
        let mut samples: Vec<Sample> = (0..5000)
            .step_by(100)
            .map(|t| sample_at(t + 50, 10, 0))
            .collect();
        samples.extend((2000..3000).step_by(100).map(|t| sample_at(t + 60, 11, 0)));
        samples.sort_by_key(|s| s.time_ns);
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let n = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
                .samples
        };
        assert_eq!(n("init_worker"), 2);
        assert_eq!(n("start-up and imports (worker)"), 8);
        assert_eq!(n("A"), 20);
        assert_eq!(n("outside any op (worker)"), 10);
        assert_eq!(n("shutdown and exit (worker)"), 10);
        assert_eq!(n("DataLoader threads (worker)"), 10);
        assert!(!a.rows.iter().any(|r| r.name.starts_with("independent")));
        assert_eq!(a.rows.iter().map(|r| r.samples).sum::<u64>(), 60);
        // The phases come after the other rows, in time order.
        let names: Vec<&str> = a.rows.iter().map(|r| r.name.as_str()).collect();
        let at = |name: &str| names.iter().position(|n| *n == name).expect("row");
        assert!(at("DataLoader threads (worker)") < at("start-up and imports (worker)"));
        assert!(at("start-up and imports (worker)") < at("outside any op (worker)"));
        assert!(at("outside any op (worker)") < at("shutdown and exit (worker)"));
    }

    /// A main process (pid 5) that starts its workers over [100, 300),
    /// waits for a batch over [300, 400), takes it at 400, and stops them
    /// over [600, 700): its samples there are "starting and stopping
    /// workers (main)", before and after as before.
    #[test]
    fn a_main_process_starting_and_stopping_workers_is_its_row() {
        let off = 1_000_000u64;
        let samples: Vec<Sample> = (0..1000)
            .step_by(100)
            .map(|t| Sample {
                time_ns: t + 50,
                pid: 5,
                tid: 5,
                symbol: 0,
                kernel: false,
                counters: Default::default(),
            })
            .collect();
        let dir = sampled_folder("", &[(0, Symbol::new("f", "/k.so"))], &samples, 100);
        std::fs::remove_file(dir.path().join("lotus_worker_pid_10")).expect("rm");
        std::fs::write(
            dir.path().join("lotus_main_pid_5"),
            format!(
                "#lotus-trace v1 role=main pid=5 wall_ns={off} monotonic_ns=0\n\
                 SWorkersStart,{},200,kind=start\n\
                 SWait,{},100,kind=wait,batch=0,ready=0\n\
                 SConsume,{},0,kind=consume,batch=0\n\
                 SWorkersStop,{},100,kind=stop\n\
                 # lotus-trace: clock wall_ns={} monotonic_ns=1000\n",
                100 + off,
                300 + off,
                400 + off,
                600 + off,
                1000 + off
            ),
        )
        .expect("log");
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let n = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
                .samples
        };
        // 50 before; 150 and 250 in the start, 650 in the stop; 350 in
        // the loop; 450, 550 and 750 to 950 after the batch taken.
        assert_eq!(n("start-up and imports (main)"), 1);
        assert_eq!(n("starting and stopping workers (main)"), 3);
        assert_eq!(n("training loop, outside the DataLoader (main)"), 1);
        assert_eq!(n("after the last batch (main)"), 5);
    }
}
