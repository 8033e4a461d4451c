//! Ops from frames: a sampled folder's samples credited to ops from
//! their call stacks' Python frames alone, no tracer log read (a job
//! sampled without the tracer: `lotus trace attach PID`), in the rows the
//! in-pipeline attribution gives, so that its renderers print them
//! unchanged.
//!
//! Each sample goes to the op path its Python frames show (the rules:
//! `frame_rules`, named as the tracer names its spans): a dataset's op
//! with its transforms under it, `Collation`, a `worker_init_fn`. A
//! sample in no op goes to the rows the spans' attribution has for time
//! outside every op, by process role and phase, told from the frames: a
//! process whose stacks show a DataLoader worker's loop is a worker, any
//! other a main process; a worker's phases are bounded by its first and
//! last sample in a batch (a fetch), a main process's by its first and
//! last sample in `next(loader)`, whose samples in no op have a row of
//! their own ([`NEXT_ROW`]); the DataLoader's own threads (a queue's
//! feeder, the pin-memory thread) are "DataLoader threads"; a thread
//! that ran no op and is not its process's main thread is "other
//! threads, cause unknown".
//!
//! What frames cannot give, the rows do not claim: an op row has no calls
//! and no wall time, its CPU is its samples times the sampling interval
//! ([`CpuSource::Sampled`], with the `±` of its count), and the result
//! says where its ops came from ([`InPipelineAttribution::ops_from`] and
//! a note). A parallel runtime's pool thread has no Python frames: its
//! samples are in "other threads, cause unknown", not in the op that
//! handed it work.

use super::folded::{folded_frame_name, Fold, ThreadStack, Who};
use super::frame_rules::{loose, shape, PyFrame, Shape};
use super::frame_spans::{Place, Timeline};
use super::*;
use lotus_samples::StackTable;
use lotus_sys::input::Dir;
use std::rc::Rc;

/// The row of a main process's samples in `next(loader)` in no op
/// (waiting for the workers' batches, receiving them, the DataLoader's
/// own work there): what the spans' attribution counts in "training loop,
/// outside the DataLoader (main)".
pub const NEXT_ROW: &str = "waiting in next(loader), outside every op (main)";

/// Attributes the samples of the sampled folder `dir` (samples of
/// `prefix`), the op rows from `ops`: the tracer's spans
/// (`Some(OpsFrom::Spans)`: [`attribute_folder_by`], helper threads by
/// `rule`), the samples' Python frames whether or not the folder has logs
/// (`Some(OpsFrom::Frames)`: [`attribute_frames`]), or (`None`) the spans
/// where the folder has tracer logs and the frames where it has none.
pub fn attribute_folder_from<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
    top: usize,
    rule: HelperRule,
    ops: Option<OpsFrom>,
) -> Result<InPipelineAttribution, Error> {
    let dir: Dir<'_> = dir.into();
    let asked = ops.is_some();
    let ops = match ops {
        Some(o) => o,
        None if has_logs(dir)? => OpsFrom::Spans,
        None => OpsFrom::Frames,
    };
    match ops {
        OpsFrom::Frames => match attribute_frames(dir, prefix, top) {
            // No logs and no stacks, frames not asked for: the spans'
            // error says what the folder lacks (its trace logs).
            Err(Error::NoStacks { .. }) if !asked => {
                attribute_folder_by(dir, prefix, budget, top, rule)
            }
            other => other,
        },
        _ => attribute_folder_by(dir, prefix, budget, top, rule),
    }
}

/// Attributes the samples of the sampled folder `dir` (samples of
/// `prefix`, with call stacks) to the ops their Python frames show,
/// listing the `top` functions of each row; its logs, if any, are not
/// read. An error where the samples carry no stacks.
pub fn attribute_frames<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    top: usize,
) -> Result<InPipelineAttribution, Error> {
    let (sampling, stacks, credited) = read_and_credit(dir.into(), prefix, Keep::Rows)?;
    Ok(rows_of(sampling, &stacks, credited, top))
}

/// What the credit pass keeps beyond the rows' counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// The counts alone ([`attribute_frames`]).
    Rows,
    /// The samples by row and stack ([`fold_frames`]).
    Folds,
    /// The samples by row, stack and thread ([`fold_frames`] by thread).
    ThreadFolds,
    /// Each thread's samples in time with their op paths, and each
    /// process's role where its frames tell it (`frame_spans`).
    Timeline,
}

/// The folder's samples and stacks read, and each sample credited (both
/// passes; what else is kept: `keep`): where [`attribute_frames`],
/// [`fold_frames`] and the frame spans start. An error where the samples
/// carry no stacks.
pub(super) fn read_and_credit(
    dir: Dir<'_>,
    prefix: &str,
    keep: Keep,
) -> Result<(Sampling, StackTable, Credited), Error> {
    let sampling = Sampling::read(dir, prefix)?;
    if !samples_of(&sampling.files)?.has_stacks() {
        return Err(Error::NoStacks {
            path: sampling.files.samples.display().to_string(),
        });
    }
    let stacks = sampling
        .files
        .read_stacks()
        .map_err(|e| Error::Io(e.to_string()))?;
    let mut shapes = Shapes::new(&sampling.symbols, &stacks);
    let facts = first_pass(&sampling, &mut shapes)?;
    let credited = credit(&sampling, &mut shapes, &facts, keep)?;
    Ok((sampling, stacks, credited))
}

/// Whether the folder `dir` holds tracer logs: its ops come from their
/// spans where it does, from the samples' Python frames where not.
pub(crate) fn has_logs(dir: Dir<'_>) -> Result<bool, Error> {
    match lotus_trace::TraceFolder::scan(dir) {
        Ok(f) => Ok(!f.logs.is_empty()),
        Err(lotus_trace::TraceError::NoLogs { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The samples of the sampled folder `dir` (of `prefix`, with call
/// stacks) folded under the rows [`attribute_frames`] credits them to:
/// what `--format folded`, the flame graphs and `--by caller` read of a
/// folder without tracer logs (`lotus trace attach`); by thread where
/// `by_thread` asks (`Fold::by_thread`).
pub(super) fn fold_frames(dir: Dir<'_>, prefix: &str, by_thread: bool) -> Result<Fold, Error> {
    let keep = if by_thread {
        Keep::ThreadFolds
    } else {
        Keep::Folds
    };
    let (sampling, stacks, mut c) = read_and_credit(dir, prefix, keep)?;
    let (mut rows, mut deep) = (BTreeMap::<String, Vec<(Vec<u32>, u64)>>::new(), 0);
    let (mut frames, mut threads) = (Vec::new(), Vec::new());
    for ((key, stack, leaf, who), n) in c.folds.take().unwrap_or_default() {
        let root = match key {
            Key::At(Target::Op(p)) => c
                .tree
                .parts(p, &c.ops)
                .iter()
                .map(|s| folded_frame_name(s))
                .collect::<Vec<_>>()
                .join(";"),
            Key::At(t) => folded_frame_name(&row_name(&t, &c.ops)),
            Key::Next => folded_frame_name(NEXT_ROW),
            Key::Hooks(role) => folded_frame_name(&format!("lotus hooks ({role})")),
        };
        let ids = match stacks.frames(stack, &mut frames) {
            true => frames.clone(),
            false => vec![leaf],
        };
        deep += if ids.len() >= 2 { n } else { 0 };
        match who {
            Some((pid, tid, role)) => threads.push(ThreadStack {
                row: match key {
                    Key::At(Target::Op(p)) => c.tree.name(p, &c.ops),
                    Key::At(t) => row_name(&t, &c.ops),
                    Key::Next => NEXT_ROW.to_string(),
                    Key::Hooks(role) => format!("lotus hooks ({role})"),
                },
                pid,
                tid,
                role,
                ids,
                samples: n,
            }),
            None => rows.entry(root).or_default().push((ids, n)),
        }
    }
    for stacks in rows.values_mut() {
        stacks.sort_unstable();
    }
    threads.sort_unstable_by(|a, b| {
        (a.pid, a.tid, &a.row, &a.ids).cmp(&(b.pid, b.tid, &b.row, &b.ids))
    });
    Ok(Fold {
        rows,
        symbols: sampling.symbols.clone(),
        samples: c.total,
        deep_samples: deep,
        with_stacks: true,
        notes: vec![frames_note(&c)],
        by_thread: threads,
        interval_ns: sampling.interval_ns,
    })
}

/// Where a sample goes: a row of the spans' attribution, or
/// [`NEXT_ROW`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    At(Target),
    Next,
    /// The tracer's own code, in a traced job's stacks ("lotus hooks").
    Hooks(Role),
}

/// The shapes of the folder's stacks, each read once.
struct Shapes<'s> {
    symbols: &'s SymbolTable,
    stacks: &'s StackTable,
    /// By (stack id, sampled function): a stack id with no line (or 0)
    /// is read by its function alone.
    whole: HashMap<(u32, u32), Rc<Shape>>,
    cut: HashMap<(u32, u32), Rc<Shape>>,
    /// Each distinct shape once (many stacks show the same ops).
    distinct: HashSet<Rc<Shape>>,
    ids: Vec<u32>,
}

impl<'s> Shapes<'s> {
    fn new(symbols: &'s SymbolTable, stacks: &'s StackTable) -> Shapes<'s> {
        Shapes {
            symbols,
            stacks,
            whole: HashMap::new(),
            cut: HashMap::new(),
            distinct: HashSet::new(),
            ids: Vec::new(),
        }
    }

    /// `s`, held once.
    fn distinct(&mut self, s: Shape) -> Rc<Shape> {
        if let Some(d) = self.distinct.get(&s) {
            return d.clone();
        }
        let d = Rc::new(s);
        self.distinct.insert(d.clone());
        d
    }

    /// The Python frames of a sample's stack, outermost first.
    fn frames(&mut self, stack: u32, leaf: u32) -> Vec<PyFrame<'s>> {
        let have = stack != 0 && self.stacks.frames(stack, &mut self.ids);
        if !have {
            self.ids.clear();
            self.ids.push(leaf);
        }
        let symbols = self.symbols;
        self.ids
            .iter()
            .filter_map(|&id| {
                let s = symbols.get(id);
                PyFrame::of(&s.function, &s.module)
            })
            .collect()
    }

    /// The shape of a sample's stack, read whole.
    fn whole(&mut self, stack: u32, leaf: u32) -> Rc<Shape> {
        let key = (stack, leaf);
        if let Some(s) = self.whole.get(&key) {
            return s.clone();
        }
        let frames = self.frames(stack, leaf);
        let s = shape(&frames);
        let s = self.distinct(s);
        self.whole.insert(key, s.clone());
        s
    }

    /// The shape of a cut stack, read inside a worker's dataset op.
    fn cut(&mut self, stack: u32, leaf: u32, known: &HashSet<String>) -> Rc<Shape> {
        let key = (stack, leaf);
        if let Some(s) = self.cut.get(&key) {
            return s.clone();
        }
        let frames = self.frames(stack, leaf);
        let s = loose(&frames, known);
        let s = self.distinct(s);
        self.cut.insert(key, s.clone());
        s
    }
}

/// First and last of some samples' times.
#[derive(Debug, Clone, Copy, Default)]
struct Window(Option<(u64, u64)>);

impl Window {
    fn see(&mut self, t: u64) {
        self.0 = Some(self.0.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
    }
}

/// What the first pass learns of a process from its samples' frames.
#[derive(Debug, Default)]
struct Process {
    /// A DataLoader worker: its stacks show the worker loop.
    worker: bool,
    /// Its samples in `next(loader)`.
    next: Window,
    /// Its samples in a batch (a fetch, or an op).
    batches: Window,
    /// The dataset ops its whole stacks show, with their samples.
    datasets: HashMap<String, u64>,
}

impl Process {
    fn role(&self) -> Role {
        if self.worker {
            Role::Worker
        } else {
            Role::Main
        }
    }

    /// The dataset op of most samples (by name at a tie).
    fn dataset(&self) -> Option<&str> {
        self.datasets
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(n, _)| n.as_str())
    }
}

/// What the first pass learns: each process, the threads that ran an
/// op, the datasets whole stacks show.
struct Facts {
    processes: HashMap<u32, Process>,
    op_threads: HashSet<(u32, u32)>,
    known: HashSet<String>,
}

/// Pass 1: each process's role, phases and datasets.
fn first_pass(sampling: &Sampling, shapes: &mut Shapes<'_>) -> Result<Facts, Error> {
    let mut facts = Facts {
        processes: HashMap::new(),
        op_threads: HashSet::new(),
        known: HashSet::new(),
    };
    let mut reader = samples_of(&sampling.files)?;
    while let Some(s) = reader.next_with_stack() {
        let (s, stack) = s.map_err(|e| Error::Io(e.to_string()))?;
        let shape = shapes.whole(stack, s.symbol);
        let p = facts.processes.entry(s.pid).or_default();
        p.worker |= shape.worker;
        if shape.next {
            p.next.see(s.time_ns);
        }
        if shape.anchored && (shape.fetch || !shape.ops.is_empty()) {
            p.batches.see(s.time_ns);
        }
        if let Some(i) = shape.dataset.filter(|_| shape.anchored) {
            let name = &shape.ops[i];
            *p.datasets.entry(name.clone()).or_default() += 1;
            if !facts.known.contains(name) {
                facts.known.insert(name.clone());
            }
        }
        if shape.anchored && !shape.ops.is_empty() {
            facts.op_threads.insert((s.pid, s.tid));
        }
    }
    Ok(facts)
}

/// What pass 2 adds up.
#[derive(Default)]
pub(super) struct Credited {
    pub(super) tree: Tree,
    pub(super) ops: Vec<String>,
    /// With [`Keep::Timeline`]: each thread's samples, by (pid, tid), in
    /// reading order, with where each stands.
    pub(super) timeline: Option<Timeline>,
    /// With [`Keep::Timeline`]: each process's role, where its frames
    /// tell it (a worker's loop, or a main process's `next(loader)`).
    pub(super) roles: HashMap<u32, Role>,
    counts: HashMap<Key, u64>,
    functions: HashMap<(Key, u32), u64>,
    sums: HashMap<Key, Vec<u64>>,
    saturated: Vec<bool>,
    pub(super) total: u64,
    /// Samples in ops (their symbols, for the verdict's own-wait figure).
    op_symbols: HashMap<u32, u64>,
    /// A worker's samples, and those in a batch in no op (with their
    /// functions); a main process's in its own batches (`num_workers=0`),
    /// and those in no op.
    worker_samples: u64,
    worker_outside: (u64, HashMap<u32, u64>),
    in_loader: u64,
    loader_outside: (u64, HashMap<u32, u64>),
    independent: HashSet<(u32, u32)>,
    /// Samples of stacks with frames without qualified names in ops.
    bare: u64,
    /// A worker's samples of cut stacks: in all, and those credited to
    /// its dataset op without a frame of it.
    cut: u64,
    cut_to_dataset: u64,
    /// A worker's samples of Python thread pool tasks.
    tasks: u64,
    /// Samples with Python frames.
    python: u64,
    pub(super) cut_bytes: usize,
    /// With a fold asked for: the samples by row, stack id and function
    /// (and thread, with [`Keep::ThreadFolds`]).
    folds: Option<HashMap<(Key, u32, u32, Who), u64>>,
}

impl Credited {
    /// The path of op names `names`, under `prefix` where given.
    fn path(&mut self, prefix: Option<&str>, names: &[String]) -> Option<u32> {
        let mut at: Option<u32> = None;
        for name in prefix.into_iter().chain(names.iter().map(String::as_str)) {
            if at.is_some_and(|p| self.tree.nodes[p as usize].depth + 1 >= MAX_DEPTH) {
                break;
            }
            let op = match self.ops.iter().position(|o| o == name) {
                Some(i) => i as u32,
                None => {
                    self.ops.push(name.to_string());
                    (self.ops.len() - 1) as u32
                }
            };
            at = Some(self.tree.intern(at, op));
        }
        at
    }
}

/// Pass 2, the rule: each sample to its op path, or to a row outside
/// every op.
fn credit(
    sampling: &Sampling,
    shapes: &mut Shapes<'_>,
    facts: &Facts,
    keep: Keep,
) -> Result<Credited, Error> {
    let mut c = Credited {
        folds: matches!(keep, Keep::Folds | Keep::ThreadFolds).then(HashMap::new),
        timeline: (keep == Keep::Timeline).then(HashMap::new),
        ..Credited::default()
    };
    if keep == Keep::Timeline {
        for (&pid, p) in &facts.processes {
            match (p.worker, p.next.0) {
                (true, _) => c.roles.insert(pid, Role::Worker),
                (false, Some(_)) => c.roles.insert(pid, Role::Main),
                _ => None,
            };
        }
    }
    // Paths by (stack key, the dataset op a cut stack lies under).
    let mut paths: HashMap<(u32, u32, Option<&str>), Option<u32>> = HashMap::new();
    let mut reader = samples_of(&sampling.files)?;
    let no_process = Process::default();
    while let Some(s) = reader.next_with_stack() {
        let (s, stack) = s.map_err(|e| Error::Io(e.to_string()))?;
        c.total += 1;
        let p = facts.processes.get(&s.pid).unwrap_or(&no_process);
        let role = p.role();
        let whole = shapes.whole(stack, s.symbol);
        let key = (stack, s.symbol);
        let mut path = None;
        let mut tracer = whole.tracer;
        if whole.anchored && !whole.ops.is_empty() {
            path = match paths.get(&(key.0, key.1, None)) {
                Some(&p) => p,
                None => {
                    let p = c.path(None, &whole.ops);
                    paths.insert((key.0, key.1, None), p);
                    p
                }
            };
            c.bare += u64::from(whole.bare);
        } else if role == Role::Worker && whole.python && (!whole.anchored || whole.task) {
            // A cut stack, or a thread pool's task: inside the dataset op.
            let cut = shapes.cut(stack, s.symbol, &facts.known);
            let under = cut.under_lost_dataset.then(|| p.dataset()).flatten();
            if whole.task {
                c.tasks += 1;
            } else {
                c.cut += 1;
                if cut.under_lost_dataset && under.is_some() {
                    c.cut_to_dataset += 1;
                }
            }
            path = match paths.get(&(key.0, key.1, under)) {
                Some(&p) => p,
                None => {
                    let p = c.path(under, &cut.ops);
                    paths.insert((key.0, key.1, under), p);
                    p
                }
            };
            c.bare += u64::from(cut.bare);
            tracer = cut.tracer;
        }
        let target = match path {
            _ if tracer => Key::Hooks(role),
            Some(p) => Key::At(Target::Op(p)),
            None if whole.machinery => Key::At(Target::Threads(role)),
            None if role == Role::Main && whole.workers => {
                Key::At(Target::Main(MainPhase::Workers))
            }
            None if role == Role::Main && whole.next => Key::Next,
            None if s.tid == s.pid || facts.op_threads.contains(&(s.pid, s.tid)) => {
                Key::At(outside(p, role, s.time_ns))
            }
            None => {
                c.independent.insert((s.pid, s.tid));
                Key::At(Target::Independent(role))
            }
        };
        // The figures of what ran unseen (in a fetch, in no op).
        let in_op = matches!(target, Key::At(Target::Op(_)));
        let in_batch = whole.fetch && !tracer;
        match role {
            Role::Worker => {
                c.worker_samples += 1;
                if in_batch && !in_op {
                    c.worker_outside.0 += 1;
                    *c.worker_outside.1.entry(s.symbol).or_default() += 1;
                }
            }
            Role::Main if in_batch => {
                c.in_loader += 1;
                if !in_op {
                    c.loader_outside.0 += 1;
                    *c.loader_outside.1.entry(s.symbol).or_default() += 1;
                }
            }
            Role::Main => {}
        }
        if in_op {
            *c.op_symbols.entry(s.symbol).or_default() += 1;
        }
        c.python += u64::from(whole.python);
        *c.counts.entry(target).or_default() += 1;
        *c.functions.entry((target, s.symbol)).or_default() += 1;
        if let Some(folds) = &mut c.folds {
            let who = (keep == Keep::ThreadFolds).then_some((s.pid, s.tid, Some(role)));
            *folds.entry((target, stack, s.symbol, who)).or_default() += 1;
        }
        if let Some(timeline) = &mut c.timeline {
            let at = match target {
                Key::At(Target::Op(p)) => Place::Op(p),
                Key::Next => Place::Next,
                _ => Place::None,
            };
            timeline
                .entry((s.pid, s.tid))
                .or_default()
                .push((s.time_ns, at));
        }
        if !s.counters.is_empty() {
            let sum = c
                .sums
                .entry(target)
                .or_insert_with(|| vec![0; s.counters.len()]);
            for (i, (acc, v)) in sum.iter_mut().zip(s.counters.as_slice()).enumerate() {
                *acc = acc.checked_add(*v).unwrap_or_else(|| {
                    c.saturated.resize(c.saturated.len().max(i + 1), false);
                    c.saturated[i] = true;
                    u64::MAX
                });
            }
        }
    }
    c.cut_bytes = reader.cut_bytes();
    Ok(c)
}

/// The row of a sample of process `p` (of `role`) at `t` in no op, by the
/// phase of its run.
fn outside(p: &Process, role: Role, t: u64) -> Target {
    match role {
        Role::Main => match p.next.0 {
            Some((a, _)) if t < a => Target::Main(MainPhase::StartUp),
            Some((_, b)) if t > b => Target::Main(MainPhase::After),
            Some(_) => Target::Main(MainPhase::Loop),
            None => Target::Outside(Role::Main),
        },
        Role::Worker => match p.batches.0 {
            Some((a, _)) if t < a => Target::Worker(WorkerPhase::StartUp),
            Some((_, b)) if t > b => Target::Worker(WorkerPhase::Shutdown),
            _ => Target::Outside(Role::Worker),
        },
    }
}

/// The rows of what pass 2 credited, with their figures and notes.
fn rows_of(
    sampling: Sampling,
    stacks: &StackTable,
    mut c: Credited,
    top: usize,
) -> InPipelineAttribution {
    let interval_ns = sampling.interval_ns;
    let symbols = &sampling.symbols;
    let counters = sampling.counters.clone();
    // Frames read from the interpreter beside the sampler (3.8 to 3.11,
    // and every Python under attach) come from snapshots, each standing
    // for the samples around it: an op row's `±` counts those draws, not
    // its samples (m samples a snapshot on average: √m times wider).
    let per_snapshot = samples_per_snapshot(&sampling.meta);
    let spread = |n: u64| sampled_uncertainty_ns(n.saturating_mul(per_snapshot), interval_ns);
    let op_counts: HashMap<Target, u64> = c
        .counts
        .iter()
        .filter_map(|(k, n)| match k {
            Key::At(t @ Target::Op(_)) => Some((*t, *n)),
            _ => None,
        })
        .collect();
    let figures = op_figures(&c.tree, &op_counts, &HashMap::new(), interval_ns);
    let mut tops: HashMap<Key, Vec<(u32, u64)>> = HashMap::new();
    for ((key, symbol), n) in std::mem::take(&mut c.functions) {
        tops.entry(key).or_default().push((symbol, n));
    }
    let mut spin_samples: HashMap<u32, u64> = HashMap::new();
    let mut top_of = |key: Key, n: u64| -> Vec<TopFunction> {
        let mut functions = tops.remove(&key).unwrap_or_default();
        for &(sym, k) in &functions {
            let s = symbols.get(sym);
            if cause::is_wait(&s.function, &s.module) {
                *spin_samples.entry(sym).or_default() += k;
            }
        }
        functions.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        functions
            .into_iter()
            .take(top)
            .map(|(sym, k)| top_function(symbols, sym, k, k as f64 / n as f64, 0))
            .collect()
    };
    let row_counters = |key: Key| -> BTreeMap<String, u64> {
        match c.sums.get(&key) {
            Some(sum) => counters.iter().cloned().zip(sum.iter().copied()).collect(),
            None => counters.iter().map(|n| (n.clone(), 0)).collect(),
        }
    };
    let mut rows = Vec::new();
    for p in tree_order(&c.tree, &figures) {
        let f = &figures[p as usize];
        let node = c.tree.nodes[p as usize];
        let key = Key::At(Target::Op(p));
        let op_counters = row_counters(key);
        rows.push(AttributedRow {
            name: c.ops[node.op as usize].clone(),
            path: c.tree.name(p, &c.ops),
            parent: node.parent.map(|q| c.tree.name(q, &c.ops)),
            depth: node.depth,
            kind: RowKind::Op,
            samples: f.samples,
            inclusive_samples: f.inclusive_samples,
            pool_samples: 0,
            cpu_ns: f.cpu_ns,
            inclusive_cpu_ns: f.inclusive_cpu_ns,
            cpu_source: CpuSource::Sampled,
            uncertainty_ns: spread(f.basis),
            inclusive_uncertainty_ns: spread(f.inclusive_basis),
            share: 0.0,
            calls: None,
            cpu_per_call_ns: None,
            wall_ns: None,
            exclusive_wall_ns: None,
            top_functions: top_of(key, f.samples),
            cpi: cpi_of(&op_counters),
            counters: op_counters,
        });
    }
    let mut others: Vec<(Key, u64)> = c
        .counts
        .iter()
        .filter(|(k, _)| !matches!(k, Key::At(Target::Op(_))))
        .map(|(k, n)| (*k, *n))
        .collect();
    let name = |k: &Key| match k {
        Key::At(t) => row_name(t, &c.ops),
        Key::Next => NEXT_ROW.to_string(),
        Key::Hooks(role) => format!("lotus hooks ({role})"),
    };
    // lotus's own cost first, as the spans' rows have it; the workers'
    // phases, then the main processes', last, in time order;
    // `next(loader)` in the training loop.
    let order = |k: &Key| match k {
        Key::At(t) => (1, phase_order(t)),
        Key::Next => (1, Some((1, MainPhase::Loop as u8))),
        Key::Hooks(_) => (0, None),
    };
    others.sort_by_key(|(k, n)| (order(k), Reverse(*n), name(k)));
    for (key, n) in others {
        let kind = match key {
            Key::At(Target::Independent(_) | Target::Threads(_)) => RowKind::Independent,
            Key::At(Target::Untraced) => RowKind::Untraced,
            Key::Hooks(_) => RowKind::Hooks,
            _ => RowKind::Outside,
        };
        rows.push(sampled_row(
            name(&key),
            kind,
            n,
            interval_ns,
            top_of(key, n),
            row_counters(key),
        ));
    }
    let total_cpu_ns = rows.iter().fold(0u64, |a, r| a.saturating_add(r.cpu_ns));
    let share = |ns: u64| {
        if total_cpu_ns > 0 {
            ns as f64 / total_cpu_ns as f64
        } else {
            0.0
        }
    };
    for r in &mut rows {
        r.share = share(r.cpu_ns);
        for f in &mut r.top_functions {
            f.cpu_ns = (f.share * r.cpu_ns as f64).round() as u64;
        }
    }
    let mut spinning: Vec<TopFunction> = spin_samples
        .into_iter()
        .map(|(sym, k)| {
            let ns = k.saturating_mul(interval_ns);
            top_function(symbols, sym, k, share(ns), ns)
        })
        .collect();
    spinning.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.function.cmp(&b.function))
    });
    let mut counter_totals: BTreeMap<String, u64> =
        counters.iter().map(|n| (n.clone(), 0)).collect();
    for sum in c.sums.values() {
        for (i, (name, v)) in counters.iter().zip(sum).enumerate() {
            let t = counter_totals.entry(name.clone()).or_default();
            *t = t.checked_add(*v).unwrap_or_else(|| {
                c.saturated.resize(c.saturated.len().max(i + 1), false);
                c.saturated[i] = true;
                u64::MAX
            });
        }
    }
    // The ops' own threads' samples in functions that wait (the
    // verdict's figure; no pool thread is an op's here).
    let own_wait: u64 = c
        .op_symbols
        .iter()
        .filter(|(sym, _)| {
            let f = symbols.get(**sym);
            cause::is_wait(&f.function, &f.module)
        })
        .map(|(_, n)| n)
        .sum();
    let own_work: u64 = c.op_symbols.values().sum::<u64>() - own_wait;
    let unseen = unseen_of(&mut c, symbols, interval_ns, top);
    let mut notes = vec![frames_note(&c)];
    if per_snapshot > 1 {
        notes.push(format!(
            "the Python frames were read beside the sampler, each snapshot standing for about {per_snapshot} samples: an op row's ± counts the snapshots (√{per_snapshot} times what its samples alone would give)"
        ));
    }
    notes.extend(sampling.notes.iter().cloned());
    notes.extend(stacks.skipped_note(&sampling.files.stacks));
    for (name, _) in counters.iter().zip(&c.saturated).filter(|(_, s)| **s) {
        notes.push(format!(
            "{}: counter '{}': its deltas add up past what lotus can count ({}): shown as that maximum; the file is damaged or was not written by lotus",
            sampling.files.samples.display(),
            lotus_sys::input::escaped(name),
            u64::MAX
        ));
    }
    notes.extend(ending_notes(&sampling.meta, c.cut_bytes));
    notes.extend(unseen.iter().map(Unseen::message));
    if let Some(note) = uncertainty_note(&rows) {
        notes.push(note);
    }
    let mut independent: Vec<(u32, u32)> = c.independent.into_iter().collect();
    independent.sort_unstable();
    InPipelineAttribution {
        ops_from: OpsFrom::Frames,
        frequency_hz: sampling.frequency_hz,
        interval_ns,
        total_samples: c.total,
        lost_samples: lost_samples(&sampling.meta),
        partial: partial(&sampling.meta, c.cut_bytes),
        total_cpu_ns,
        rows,
        unseen,
        counters,
        counter_totals,
        counters_unsupported: sampling.counters_unsupported.clone(),
        pool_threads: Vec::new(),
        independent_threads: independent
            .into_iter()
            .map(|(pid, tid)| format!("{pid}/{tid}"))
            .collect(),
        notes,
        spinning,
        pool_figures: [[own_work, own_wait], [0, 0]],
    }
}

/// Where more than [`UNSEEN_PCT`] of the workers' samples, or of a main
/// process's samples in its own batches, ran in a batch in no op.
fn unseen_of(c: &mut Credited, symbols: &SymbolTable, interval_ns: u64, top: usize) -> Vec<Unseen> {
    let mut unseen = Vec::new();
    for (role, (n, functions), of) in [
        (
            Role::Worker,
            std::mem::take(&mut c.worker_outside),
            c.worker_samples,
        ),
        (
            Role::Main,
            std::mem::take(&mut c.loader_outside),
            c.in_loader,
        ),
    ] {
        if of == 0 || n as f64 * 100.0 <= UNSEEN_PCT * of as f64 {
            continue;
        }
        let mut by: Vec<(u32, u64)> = functions.into_iter().collect();
        by.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        let top_functions = by
            .into_iter()
            .take(top)
            .map(|(sym, k)| {
                top_function(
                    symbols,
                    sym,
                    k,
                    k as f64 / n as f64,
                    k.saturating_mul(interval_ns),
                )
            })
            .collect();
        unseen.push(Unseen {
            role,
            samples: n,
            cpu_ns: n.saturating_mul(interval_ns),
            share: n as f64 / of as f64,
            top_functions,
        });
    }
    unseen
}

/// How many samples a snapshot of Python frames stood for, on average
/// (`python_frames_samples` over `python_frames_reads`, at least 1): 1
/// where each sample carried its own frames (3.12+ trampolines).
fn samples_per_snapshot(meta: &HashMap<String, String>) -> u64 {
    if meta.get("python_frames").map(String::as_str) != Some("interpreter") {
        return 1;
    }
    let figure = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let (given, reads) = (
        figure("python_frames_samples"),
        figure("python_frames_reads"),
    );
    given.checked_div(reads).map_or(1, |m| m.max(1))
}

/// The note that says where the ops came from and what that leaves out,
/// with what the frames could not name well.
fn frames_note(c: &Credited) -> String {
    let mut note = "ops from the samples' Python frames, not from the tracer's spans: each sample is credited to the ops its frames show (a dataset's __getitem__ by the class that defines it, each Python function its code calls by name, a transform's __call__ or forward by its class, a Compose's transforms each on its own, the collate function as Collation; a C function a dataset calls stays the dataset's); op rows have no calls and no wall time, and their CPU is samples times the sampling interval; a runtime's pool threads are not credited to the op that handed them work; `lotus trace run --sample` gives the spans".to_string();
    if c.python == 0 {
        note.push_str("; no sample has Python frames: they need Python 3.12+ (perf trampolines) or 3.8 to 3.11 read beside the sampler");
    }
    if c.bare > 0 {
        note.push_str(&format!(
            "; {} samples' ops are named from frames without qualified names (Python 3.8 to 3.10: a function's name, not its class), as function@file.py",
            c.bare
        ));
    }
    if c.cut > 0 {
        note.push_str(&format!(
            "; {} samples of DataLoader workers had their stacks cut above their Python frames (the kernel keeps a call chain's innermost frames) and were read as inside the dataset op ({} of them showing no frame of it, credited to the dataset their process's other stacks show)",
            c.cut, c.cut_to_dataset
        ));
    }
    if c.tasks > 0 {
        note.push_str(&format!(
            "; {} samples of Python thread pool tasks in DataLoader workers were read as inside the worker's dataset op",
            c.tasks
        ));
    }
    if c.bare == 0 && c.python > 0 {
        note.push_str(
            "; a dataset whose __getitem__ a base class defines is named after that class (ImageFolder's: DatasetFolder)",
        );
    }
    note
}

#[cfg(test)]
pub(super) mod tests;
