//! What views and statistics need from a whole trace, gathered in one pass
//! over its events: the processes, every batch, wait and consumption (a
//! few numbers each; far fewer than events), and, for statistics, every
//! event's duration per kind and name (8 bytes per event: exact
//! percentiles need them all).
//!
//! Batches are matched to their consumption within a *group*: the logs of
//! one run, which share a folder, a host and a rank (a process whose log
//! names neither host nor rank joins the one group of its folder that
//! does, where there is exactly one). Batch ids restart
//! every epoch (and each DataLoader has its own), so within a group the
//! k-th preprocessing of batch `b` (in order of its end) is matched with
//! the k-th consumption of `b` and the k-th wait for `b` (in time order).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::event::{Event, Kind, Process, Role};
use super::folder::{LogFile, TraceFolder};
use super::parse::{BadLine, Entry};
use super::{TraceError, Warnings};

/// A process of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEntry {
    /// Its pid, role, host and rank.
    pub process: Process,
    /// The folder of its logs, relative to the trace folder.
    pub folder: String,
    /// The pid it gets in a Chrome trace: its own, unless another process
    /// (another machine, another run) already has that pid; then its pid
    /// plus a multiple of [`PID_STRIDE`].
    pub out_pid: u64,
    /// Its log files.
    pub files: Vec<String>,
    /// How many events it logged.
    pub events: u64,
}

/// What is added to a pid that another process of the trace already has.
pub const PID_STRIDE: u64 = 100_000_000;

/// A batch's preprocessing in a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRec {
    /// The process (index into [`TraceIndex::processes`]).
    pub process: usize,
    /// The batch id.
    pub batch: Option<u64>,
    /// Start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
}

/// A wait of the main process, or a consumption (duration 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MainRec {
    /// The process (index into [`TraceIndex::processes`]).
    pub process: usize,
    /// The batch id.
    pub batch: Option<u64>,
    /// Start, ns.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
    /// For a wait: whether the batch was already there.
    pub ready: Option<bool>,
}

/// A batch with what happened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRow {
    /// Its preprocessing.
    pub preprocessing: BatchRec,
    /// Its consumption, where one matched.
    pub consume: Option<MainRec>,
    /// The main process's wait for it, where one matched.
    pub wait: Option<MainRec>,
}

impl BatchRow {
    /// When preprocessing ended, ns.
    pub fn end_ns(&self) -> u64 {
        self.preprocessing.start_ns + self.preprocessing.dur_ns
    }

    /// From the end of preprocessing to the consumption, ns (negative
    /// where clocks disagree).
    pub fn delay_ns(&self) -> Option<i64> {
        self.consume
            .map(|c| (i128::from(c.start_ns) - i128::from(self.end_ns())) as i64)
    }
}

/// Batches matched with their consumptions and waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Joined {
    /// Every batch, in order of start.
    pub rows: Vec<BatchRow>,
    /// Consumptions with no batch to match.
    pub consumed_without_batch: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProcKey {
    folder: String,
    host: Option<Arc<str>>,
    role: Role,
    pid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct GroupKey {
    folder: String,
    host: Option<Arc<str>>,
    rank: Option<u32>,
}

/// The process of the events being added, kept while a file is read.
#[derive(Debug, Clone)]
struct Current {
    folder: String,
    file: String,
    last: Option<(Process, usize)>,
}

/// A whole trace, gathered.
#[derive(Debug, Clone)]
pub struct TraceIndex {
    /// The processes, in the order they were met.
    pub processes: Vec<ProcessEntry>,
    keys: HashMap<ProcKey, usize>,
    used_pids: HashSet<u64>,
    /// Batch preprocessing spans.
    pub batches: Vec<BatchRec>,
    /// Waits of main processes.
    pub waits: Vec<MainRec>,
    /// Consumptions.
    pub consumes: Vec<MainRec>,
    /// Events read.
    pub events: u64,
    /// Events per kind.
    pub per_kind: BTreeMap<Kind, u64>,
    /// The earliest start, ns.
    pub min_start_ns: Option<u64>,
    /// The latest end, ns.
    pub max_end_ns: Option<u64>,
    /// Durations per kind and name, when collected.
    pub durations: Option<HashMap<Kind, HashMap<String, Vec<i64>>>>,
    /// The bad lines.
    pub warnings: Warnings,
    current: Option<Current>,
}

impl TraceIndex {
    /// An empty index; `collect_durations` keeps every event's duration
    /// (for statistics).
    pub fn new(collect_durations: bool) -> Self {
        TraceIndex {
            processes: Vec::new(),
            keys: HashMap::new(),
            used_pids: HashSet::new(),
            batches: Vec::new(),
            waits: Vec::new(),
            consumes: Vec::new(),
            events: 0,
            per_kind: BTreeMap::new(),
            min_start_ns: None,
            max_end_ns: None,
            durations: collect_durations.then(HashMap::new),
            warnings: Warnings::default(),
            current: None,
        }
    }

    /// Reads every log of `folder`. `on_bad` sees each bad line as it is
    /// met (the index keeps the first [`Warnings::KEEP`] and the count).
    pub fn load(
        folder: &TraceFolder,
        collect_durations: bool,
        mut on_bad: impl FnMut(&BadLine),
    ) -> Result<TraceIndex, TraceError> {
        let mut index = TraceIndex::new(collect_durations);
        for log in &folder.logs {
            index.begin_file(log);
            for entry in log.open()? {
                match entry? {
                    Entry::Event(e) => {
                        index.add(&e);
                    }
                    Entry::Bad(b) => {
                        on_bad(&b);
                        index.warnings.push(b);
                    }
                }
            }
        }
        Ok(index)
    }

    /// Sets the file whose events come next.
    pub fn begin_file(&mut self, log: &LogFile) {
        self.begin(&log.folder, &log.display);
    }

    /// Sets the folder (relative to the trace folder) and file whose
    /// events come next.
    pub fn begin(&mut self, folder: &str, file: &str) {
        self.current = Some(Current {
            folder: folder.to_string(),
            file: file.to_string(),
            last: None,
        });
    }

    /// The process of `e` (from the current file), registered if new.
    pub fn resolve(&mut self, e: &Event) -> usize {
        let cur = self.current.get_or_insert_with(|| Current {
            folder: String::new(),
            file: String::new(),
            last: None,
        });
        if let Some((p, idx)) = &cur.last {
            if p.pid == e.pid && p.role == e.role && p.host == e.host && p.rank == e.rank {
                return *idx;
            }
        }
        let key = ProcKey {
            folder: cur.folder.clone(),
            host: e.host.clone(),
            role: e.role,
            pid: e.pid,
        };
        let file = cur.file.clone();
        let idx = match self.keys.get(&key) {
            Some(&i) => i,
            None => {
                let mut out_pid = u64::from(e.pid);
                while self.used_pids.contains(&out_pid) {
                    out_pid += PID_STRIDE;
                }
                self.used_pids.insert(out_pid);
                self.processes.push(ProcessEntry {
                    process: e.process(),
                    folder: key.folder.clone(),
                    out_pid,
                    files: Vec::new(),
                    events: 0,
                });
                self.keys.insert(key, self.processes.len() - 1);
                self.processes.len() - 1
            }
        };
        let p = &mut self.processes[idx];
        if !file.is_empty() && p.files.last() != Some(&file) && !p.files.contains(&file) {
            p.files.push(file);
        }
        if let Some(cur) = &mut self.current {
            cur.last = Some((e.process(), idx));
        }
        idx
    }

    /// Adds one event; returns its process.
    pub fn add(&mut self, e: &Event) -> usize {
        let process = self.resolve(e);
        self.events += 1;
        self.processes[process].events += 1;
        *self.per_kind.entry(e.kind).or_insert(0) += 1;
        self.min_start_ns = Some(self.min_start_ns.map_or(e.start_ns, |m| m.min(e.start_ns)));
        self.max_end_ns = Some(self.max_end_ns.map_or(e.end_ns(), |m| m.max(e.end_ns())));
        let main = MainRec {
            process,
            batch: e.batch,
            start_ns: e.start_ns,
            dur_ns: e.dur_ns,
            ready: e.ready,
        };
        match e.kind {
            Kind::Batch => self.batches.push(BatchRec {
                process,
                batch: e.batch,
                start_ns: e.start_ns,
                dur_ns: e.dur_ns,
            }),
            Kind::Wait => self.waits.push(main),
            Kind::Consume => self.consumes.push(main),
            _ => {}
        }
        if let Some(d) = &mut self.durations {
            let names = d.entry(e.kind).or_default();
            let dur = i64::try_from(e.dur_ns).unwrap_or(i64::MAX);
            match names.get_mut(e.name.as_str()) {
                Some(v) => v.push(dur),
                None => {
                    names.insert(e.name.clone(), vec![dur]);
                }
            }
        }
        process
    }

    /// Each process's group (see the module documentation).
    pub fn groups(&self) -> Vec<usize> {
        let key = |p: &ProcessEntry| GroupKey {
            folder: p.folder.clone(),
            host: p.process.host.clone(),
            rank: p.process.rank,
        };
        // The named groups of each folder.
        let mut named: BTreeMap<&str, Vec<GroupKey>> = BTreeMap::new();
        for p in &self.processes {
            if p.process.host.is_some() || p.process.rank.is_some() {
                let v = named.entry(p.folder.as_str()).or_default();
                let k = key(p);
                if !v.contains(&k) {
                    v.push(k);
                }
            }
        }
        let mut ids: BTreeMap<GroupKey, usize> = BTreeMap::new();
        self.processes
            .iter()
            .map(|p| {
                let mut k = key(p);
                if k.host.is_none() && k.rank.is_none() {
                    if let Some([only]) = named.get(p.folder.as_str()).map(Vec::as_slice) {
                        k = only.clone();
                    }
                }
                let n = ids.len();
                *ids.entry(k).or_insert(n)
            })
            .collect()
    }

    /// Batches matched with their consumptions and waits (see the module
    /// documentation).
    pub fn joined(&self) -> Joined {
        type Key = (usize, u64);
        let groups = self.groups();
        let group = |p: usize| groups[p];
        let mut batches: BTreeMap<Key, Vec<BatchRec>> = BTreeMap::new();
        let mut rows = Vec::new();
        for b in &self.batches {
            match b.batch {
                Some(id) => batches.entry((group(b.process), id)).or_default().push(*b),
                None => rows.push(BatchRow {
                    preprocessing: *b,
                    consume: None,
                    wait: None,
                }),
            }
        }
        let by_key = |recs: &[MainRec]| {
            let mut m: BTreeMap<Key, Vec<MainRec>> = BTreeMap::new();
            for r in recs {
                if let Some(id) = r.batch {
                    m.entry((group(r.process), id)).or_default().push(*r);
                }
            }
            for v in m.values_mut() {
                v.sort_by_key(|r| (r.start_ns, r.dur_ns));
            }
            m
        };
        let consumes = by_key(&self.consumes);
        let waits = by_key(&self.waits);
        let mut matched_consumes = 0u64;
        for (key, mut list) in batches {
            list.sort_by_key(|b| (b.start_ns + b.dur_ns, b.start_ns));
            let c = consumes.get(&key).map(Vec::as_slice).unwrap_or(&[]);
            let w = waits.get(&key).map(Vec::as_slice).unwrap_or(&[]);
            for (k, b) in list.into_iter().enumerate() {
                let consume = c.get(k).copied();
                matched_consumes += u64::from(consume.is_some());
                rows.push(BatchRow {
                    preprocessing: b,
                    consume,
                    wait: w.get(k).copied(),
                });
            }
        }
        rows.sort_by_key(|r| {
            (
                r.preprocessing.start_ns,
                self.processes[r.preprocessing.process].out_pid,
            )
        });
        Joined {
            rows,
            consumed_without_batch: self.consumes.len() as u64 - matched_consumes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: Kind, role: Role, pid: u32, batch: u64, start: u64, dur: u64) -> Event {
        Event {
            name: kind.as_str().into(),
            kind,
            pid,
            role,
            start_ns: start,
            dur_ns: dur,
            batch: Some(batch),
            sample: None,
            ready: None,
            host: None,
            rank: None,
        }
    }

    #[test]
    fn batches_match_per_epoch_and_group() {
        let mut ix = TraceIndex::new(false);
        ix.begin("run", "w");
        // Epoch 1 and 2 of batch 0, in worker 2; consumed by main 1.
        ix.add(&ev(Kind::Batch, Role::Worker, 2, 0, 100, 50));
        ix.add(&ev(Kind::Batch, Role::Worker, 2, 0, 1000, 50));
        ix.begin("run", "m");
        ix.add(&ev(Kind::Consume, Role::Main, 1, 0, 1200, 0));
        ix.add(&ev(Kind::Consume, Role::Main, 1, 0, 200, 0));
        ix.add(&ev(Kind::Wait, Role::Main, 1, 0, 120, 80));
        // Another run (folder) with the same pids: its own processes.
        ix.begin("other", "m");
        ix.add(&ev(Kind::Consume, Role::Main, 1, 0, 5000, 0));
        let j = ix.joined();
        assert_eq!(j.rows.len(), 2);
        assert_eq!(j.rows[0].delay_ns(), Some(50));
        assert_eq!(j.rows[0].wait.map(|w| w.dur_ns), Some(80));
        assert_eq!(j.rows[1].delay_ns(), Some(150));
        assert_eq!(j.rows[1].wait, None);
        assert_eq!(j.consumed_without_batch, 1);
        let pids: Vec<u64> = ix.processes.iter().map(|p| p.out_pid).collect();
        assert_eq!(pids, vec![2, 1, 1 + PID_STRIDE]);
        assert_eq!(ix.processes[0].files, vec!["w".to_string()]);
    }
}
