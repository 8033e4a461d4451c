//! In-pipeline attribution (`lotus attribute DIR`): the samples of a
//! sampled trace (`lotus trace run --sample`) credited to the op spans that
//! were open when they were taken, with no mapping and no splitting rule.
//!
//! The rule:
//!
//! 1. a sample is credited to the innermost op span open on its own thread
//!    at its time (spans carry their thread, `tid=`; times are put on the
//!    samples' clock with the clock pairs each log measured);
//! 2. a helper thread of a process (a thread with no op spans of its own)
//!    whose frames show a parallel runtime's pool (OpenMP, OpenBLAS,
//!    oneTBB, rayon, torch's pool: see the `cause` module) is credited by
//!    cause, sample by sample: a working sample to the innermost op open
//!    on its process's main thread then (the caller waits for its pool),
//!    a waiting one (spin, yield) to the op of the last work handed to it,
//!    inside that op's call or, once it returned, in the op's
//!    [`RowKind::PoolSpin`] row;
//!    a Python thread pool's thread (`ThreadPoolExecutor`) by cause too:
//!    its samples inside a `kind=task` span go to the op its submitting
//!    thread (`by=`) had open when it handed the task over (`at=`);
//! 3. any other helper thread is judged by timing: it is that process's
//!    intra-op pool when it runs with the ops: its
//!    sampling rate while the process's main thread is outside every op
//!    is under a fifth of its rate while it is inside one, or at least 90%
//!    of its samples fall inside the ops, 3 standard errors above the
//!    share of its window the ops cover (`is_pool`); both measured
//!    between the thread's own first and last sample (a thread started
//!    late is not judged by the process's start-up) and no later than
//!    the end of the main thread's last op (nor by its shutdown: a
//!    pool's threads torn down, the tail samples the sampler adds at a
//!    thread's exit, stamped there, more of them on a busy machine).
//!    Its samples
//!    taken while the main thread is inside an op are credited to the
//!    innermost op open there; the others go to "outside any op"
//!    ([`HelperRule::Timing`] judges every helper thread so);
//! 4. the others' cause is not known: their samples go to "other
//!    threads, cause unknown" (per process role), never to an op.
//!
//! Everything else is an explicit row: "other threads, cause unknown" per
//! role, "DataLoader threads" per role (the threads the tracer names as its
//! machinery), "untraced processes" (processes of the job that wrote no
//! log), a worker's samples outside every op by phase ("start-up and
//! imports (worker)", "outside any op (worker)": DataLoader machinery
//! between ops, "shutdown and exit (worker)"; see `phases`) and, last,
//! a main process's samples outside every op by phase:
//! "start-up and imports (main)" (before its first batch request),
//! "training loop, outside the DataLoader (main)" (to its last batch taken)
//! and "after the last batch (main)" ("outside any op (main)" where it
//! requested no batch). The rows add up to every sample read.
//!
//! **Wall time.** Each op row also has its spans' durations summed
//! (`wall_ns`, inclusive like `inclusive_cpu_ns`; `exclusive_wall_ns` less
//! its direct children's).
//!
//! **The op tree.** Spans nest: on one thread, a span that starts while
//! another is open is its child (the tracer's spans are calls, so they nest
//! in time). An op row is keyed by its path, the ops open around it then
//! its own name (`RandomApply/GaussianBlur`): a row's samples are its own
//! (exclusive: the rule credits the innermost span), its inclusive figures
//! add those of the rows under it, and the rows come as a tree (each
//! after its parent, siblings by inclusive CPU). Deeper than
//! [`MAX_DEPTH`] levels, spans are counted in their ancestor.
//!
//! **Exact CPU.** Where every span of a row and of its children says its
//! own thread's CPU time (`cpu=`, read from the thread's CPU clock at the
//! span's start and end), the row's CPU is exact on that thread: its spans'
//! `cpu=` less its children's; its pool threads' samples (times the
//! interval) are added. A row whose spans say `cpu=` but some child's do
//! not (an ITT task inside a Python op) takes that child's own-thread
//! samples off its clock instead ([`CpuSource::ClockLessSampled`]).
//! Elsewhere it is its samples times the interval.
//! A figure resting on `n` samples has a 95% interval of ±1.96·√n
//! intervals (a Poisson count; [`sampled_uncertainty_ns`]), given per row;
//! op rows uncertain past [`UNCERTAIN_PCT`] are named in a note. The rows'
//! exclusive CPU add up to [`InPipelineAttribution::total_cpu_ns`], the
//! shares are of it.
//!
//! **What was not seen.** Where more than [`UNSEEN_PCT`] of the workers'
//! samples (or of a main process's samples inside its own batches, when
//! it runs the DataLoader itself) are outside every op, a note says so
//! with the figure, the top functions there and what to do ([`Unseen`],
//! [`unseen_work`]).
//!
//! Counters read with each sample (samples file version 2; see
//! [`lotus_samples`]) follow their sample: each sample's deltas,
//! which cover its thread's interval since its previous sample, are added
//! to the row the sample is credited to. So the rows' counters add up to
//! the job's counts, and an op's `task-clock` is its CPU time measured
//! rather than estimated from sample counts. CPI (cycles per instruction)
//! is given per row where both `cycles` and `instructions` are read.
//! Counters the kernel refused are said once, in a note and in
//! [`InPipelineAttribution::counters_unsupported`], never as zeros.
//!
//! Memory: the samples are streamed (twice: once to tell pools from
//! other threads, once to credit); the op spans are sorted by start
//! through [`lotus_sort`] (in memory up to its budget, past that in a
//! temporary file) and swept alongside; only the spans open at a time and
//! per-thread, per-op and per-symbol counts are held.

use lotus_sys::input::Dir;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::BufReader;

use serde::Serialize;

pub(crate) use crate::Error;
use lotus_protocol::{clock_pair_of_line, ClockMap};
use lotus_samples::{Sample, SampleFiles, SymbolTable};
use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Budget, Record, Sorter, SpillError, Spool};
use lotus_trace::LogFile;
use lotus_trace::{Kind, Role};
pub(crate) use phases::{phase_order, phase_row_name, phased, MainPhase, Phases, WorkerPhase};

mod callers;
pub(crate) mod cause;
mod folded;
mod frame_ops;
mod frame_rules;
mod frame_spans;
mod hooks;
mod logs;
mod phases;
mod rows;
mod sampled;
mod sweep;
mod timeline;
pub use callers::{callers_folder, CallerNode, Callers, FunctionCallers, CALLER_DEPTH, ROOT_FRAME};
pub use cause::HelperRule;
pub(crate) use folded::{fold, ThreadStack};
pub use folded::{folded_folder, folded_frame, FoldedStacks};
pub(crate) use frame_ops::has_logs;
pub use frame_ops::{attribute_folder_from, attribute_frames, NEXT_ROW};
pub use frame_spans::{
    frame_spans, FrameOp, FrameSlice, FrameSpans, FrameThread, GAP_INTERVALS, NEXT_SLICE,
};
use logs::*;
pub use rows::*;
pub(crate) use sampled::*;
pub use sweep::MAX_DEPTH;
pub(crate) use sweep::*;
pub use timeline::{for_each_clocked_event, ClockedItem, ClockedSummary};

/// The slowdown by sampling (percent) above which `attribute DIR` says so.
const SLOWDOWN_NOTE_PCT: f64 = 5.0;

/// How many top functions each row lists by default.
pub const TOP_FUNCTIONS: usize = 5;
/// A helper thread is an intra-op pool when its sampling rate outside the
/// main thread's ops is under this fraction of its rate inside them.
pub const POOL_RATE_RATIO: f64 = 0.2;
/// Or when at least this share of its samples fall inside the ops...
pub const POOL_MIN_INSIDE: f64 = 0.9;
/// ...standing this many standard errors above the share of its window
/// the ops cover.
pub const POOL_MIN_Z: f64 = 3.0;

/// Attributes the samples of the sampled trace folder `dir` (logs of
/// prefix-independent names, samples of `prefix`) to its ops, listing the
/// `top` functions of each row.
pub fn attribute_folder<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
    top: usize,
) -> Result<InPipelineAttribution, Error> {
    let dir: Dir<'_> = dir.into();
    attribute_folder_by(dir, prefix, budget, top, HelperRule::Cause)
}

/// [`attribute_folder`], crediting helper threads by `rule`
/// (`HelperRule::Timing`: the earlier rule, for comparison).
pub fn attribute_folder_by<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
    top: usize,
    rule: HelperRule,
) -> Result<InPipelineAttribution, Error> {
    let dir: Dir<'_> = dir.into();
    let trace = SampledTrace::open_by(dir, prefix, budget, rule)?;
    Ok(attribute_trace(trace, top, false)?.0)
}

/// [`attribute_folder`] and [`folded_folder`] of `dir` from one pass over
/// its logs and samples (what `lotus report` draws its flame graphs from):
/// the attribution, and the collapsed stacks or why they cannot be read
/// (a stacks file that cannot be opened leaves the attribution standing).
/// A folder without tracer logs (`lotus trace attach`) is read as `lotus
/// attribute DIR` reads it: its ops from the samples' Python frames
/// ([`attribute_frames`]), folded under the same rows.
pub fn attribute_and_fold<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
    top: usize,
) -> Result<(InPipelineAttribution, Result<FoldedStacks, Error>), Error> {
    let dir: Dir<'_> = dir.into();
    if !has_logs(dir)? {
        let a = attribute_frames(dir, prefix, top)?;
        let fold = frame_ops::fold_frames(dir, prefix, false).map(folded::folded_of);
        return Ok((a, fold));
    }
    let trace = SampledTrace::open(dir, prefix, budget)?;
    let (a, fold) = attribute_trace(trace, top, true)?;
    let fold = fold.unwrap_or_else(|| Err(Error::Io("no fold was asked for".into())));
    Ok((a, fold.map(folded::folded_of)))
}

/// The attribution of `trace`'s samples, with their fold where `fold`
/// asks (from the same credit of each sample).
fn attribute_trace(
    mut trace: SampledTrace,
    top: usize,
    fold: bool,
) -> Result<(InPipelineAttribution, Option<Result<folded::Fold, Error>>), Error> {
    let mut folding = fold.then(|| folded::Folding::of(&trace, false));
    let mut counts: HashMap<Target, u64> = HashMap::new();
    let mut pools: HashMap<u32, u64> = HashMap::new();
    let mut worker_samples = 0u64;
    let mut functions: HashMap<(Target, u32), u64> = HashMap::new();
    let mut sums: HashMap<Target, Vec<u64>> = HashMap::new();
    // Counters whose sum went past what a u64 holds (saturated, said).
    let mut saturated: Vec<bool> = Vec::new();
    // The main processes' DataLoader at work (num_workers=0): samples of
    // the thread running a batch, and those of them outside every op.
    let mut loader = SpanCursor::new(std::mem::take(&mut trace.logs.loader_spans));
    let (mut in_loader, mut loader_outside) = (0u64, 0u64);
    let mut loader_functions: HashMap<u32, u64> = HashMap::new();
    // The workers' samples outside every op within their batches (where
    // a worker has no batch span at all, every one of them), and the
    // functions there.
    let mut batches = SpanCursor::new(std::mem::take(&mut trace.logs.worker_batches));
    let batched_pids: HashSet<u32> = batches.spans.keys().map(|&(pid, _)| pid).collect();
    let mut worker_outside = 0u64;
    let mut worker_functions: HashMap<u32, u64> = HashMap::new();
    let windows = Phases::take(&mut trace.logs);
    // The ops' samples (and their pools' spin after them), by (on a pool
    // thread, function).
    let mut op_symbols: HashMap<(bool, u32), u64> = HashMap::new();
    let total = trace.credit(|c| {
        let s = c.sample;
        let target = phased(&windows, &c);
        if let Some(Ok(f)) = folding.as_mut() {
            f.add(target, &c);
        }
        if c.role == Some(Role::Worker) && c.target == Target::Outside(Role::Worker) {
            let in_batch = !batched_pids.contains(&s.pid)
                || batches.inside(s.pid, s.tid, s.time_ns) == Some(true);
            if in_batch {
                worker_outside += 1;
                *worker_functions.entry(s.symbol).or_default() += 1;
            }
        }
        if c.role == Some(Role::Main) && loader.inside(s.pid, s.tid, s.time_ns) == Some(true) {
            in_loader += 1;
            if c.target == Target::Outside(Role::Main) {
                loader_outside += 1;
                *loader_functions.entry(s.symbol).or_default() += 1;
            }
        }
        *counts.entry(target).or_default() += 1;
        if let (true, Target::Op(p)) = (c.pool, target) {
            *pools.entry(p).or_default() += 1;
        }
        if matches!(target, Target::Op(_) | Target::Spin(_)) {
            *op_symbols.entry((c.pool, s.symbol)).or_default() += 1;
        }
        if c.role == Some(Role::Worker) {
            worker_samples += 1;
        }
        *functions.entry((target, c.sample.symbol)).or_default() += 1;
        if !c.sample.counters.is_empty() {
            let sum = sums
                .entry(target)
                .or_insert_with(|| vec![0; c.sample.counters.len()]);
            for (i, (acc, v)) in sum.iter_mut().zip(c.sample.counters.as_slice()).enumerate() {
                *acc = acc.checked_add(*v).unwrap_or_else(|| {
                    saturated.resize(saturated.len().max(i + 1), false);
                    saturated[i] = true;
                    u64::MAX
                });
            }
        }
        Ok(())
    })?;
    let fold = folding.map(|f| f.map(|f| f.finish(&trace, trace.sampling.symbols.clone(), total)));
    // Those by [on a pool thread][in a function that waits for work].
    let mut pool_figures = [[0u64; 2]; 2];
    for ((pool, sym), n) in op_symbols {
        let f = trace.sampling.symbols.get(sym);
        pool_figures[usize::from(pool)][usize::from(cause::is_wait(&f.function, &f.module))] += n;
    }
    let counters = trace.sampling.counters.clone();
    let partial = trace.partial();
    let interval_ns = trace.sampling.interval_ns;
    let logs = &trace.logs;
    let tree = &trace.tree;
    let mut figures = op_figures(tree, &counts, &pools, interval_ns);
    // A pool's spin after an op is that op's: in its inclusive figures
    // and its ancestors', a row of its own under it.
    for (t, &n) in &counts {
        if let Target::Spin(p) = *t {
            let mut at = Some(p);
            while let Some(q) = at {
                let f = &mut figures[q as usize];
                f.inclusive_samples += n;
                f.inclusive_basis += n;
                f.inclusive_cpu_ns = f
                    .inclusive_cpu_ns
                    .saturating_add(n.saturating_mul(interval_ns));
                at = tree.nodes[q as usize].parent;
            }
        }
    }

    let mut tops: HashMap<Target, Vec<(u32, u64)>> = HashMap::new();
    for ((target, symbol), n) in functions {
        tops.entry(target).or_default().push((symbol, n));
    }
    // Samples in functions that spin or wait for work, over every row and
    // every function (not only the top ones shown: the verdict's figure
    // does not depend on `--top`).
    let mut spin_samples: HashMap<u32, u64> = HashMap::new();
    let mut top_of = |target: Target, n: u64, top: usize| -> Vec<TopFunction> {
        let mut functions = tops.remove(&target).unwrap_or_default();
        for &(sym, k) in &functions {
            let s = trace.sampling.symbols.get(sym);
            if cause::is_wait(&s.function, &s.module) {
                *spin_samples.entry(sym).or_default() += k;
            }
        }
        functions.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        functions
            .into_iter()
            .take(top)
            .map(|(sym, k)| top_function(&trace.sampling.symbols, sym, k, k as f64 / n as f64, 0))
            .collect()
    };
    let row_counters = |target: Target| -> BTreeMap<String, u64> {
        match sums.get(&target) {
            Some(sum) => counters.iter().cloned().zip(sum.iter().copied()).collect(),
            None => counters.iter().map(|c| (c.clone(), 0)).collect(),
        }
    };
    let mut rows = Vec::new();
    // Ops, every path the sweep met (those that got no sample too), as a
    // tree: each after its parent, siblings by inclusive CPU.
    for p in tree_order(tree, &figures) {
        let f = &figures[p as usize];
        let node = tree.nodes[p as usize];
        let target = Target::Op(p);
        let calls = tree.stats[p as usize].calls;
        let op_counters = row_counters(target);
        rows.push(AttributedRow {
            name: logs.ops[node.op as usize].clone(),
            path: tree.name(p, &logs.ops),
            parent: node.parent.map(|q| tree.name(q, &logs.ops)),
            depth: node.depth,
            kind: RowKind::Op,
            samples: f.samples,
            inclusive_samples: f.inclusive_samples,
            pool_samples: f.pool_samples,
            cpu_ns: f.cpu_ns,
            inclusive_cpu_ns: f.inclusive_cpu_ns,
            cpu_source: f.source,
            uncertainty_ns: sampled_uncertainty_ns(f.basis, interval_ns),
            inclusive_uncertainty_ns: sampled_uncertainty_ns(f.inclusive_basis, interval_ns),
            share: 0.0,
            calls: Some(calls),
            cpu_per_call_ns: (calls > 0).then(|| f.inclusive_cpu_ns / calls),
            wall_ns: Some(tree.stats[p as usize].wall_ns),
            exclusive_wall_ns: Some(exclusive_wall(tree, p)),
            top_functions: top_of(target, f.samples, top),
            cpi: cpi_of(&op_counters),
            counters: op_counters,
        });
        let spin = Target::Spin(p);
        if let Some(&n) = counts.get(&spin) {
            let path = tree.name(p, &logs.ops);
            let mut r = sampled_row(
                SPIN_ROW.to_string(),
                RowKind::PoolSpin,
                n,
                interval_ns,
                top_of(spin, n, top),
                row_counters(spin),
            );
            r.path = format!("{path}/{SPIN_ROW}");
            r.parent = Some(path);
            r.depth = node.depth + 1;
            r.pool_samples = n;
            rows.push(r);
        }
    }
    let hooked: Vec<u64> = figures.iter().map(|f| f.hooks_ns).collect();
    rows.extend(hooks::rows(tree, &hooked, &logs.roles, &counters));
    let mut others: Vec<(Target, u64)> = counts
        .iter()
        .filter(|(t, _)| !matches!(t, Target::Op(_) | Target::Spin(_)))
        .map(|(t, n)| (*t, *n))
        .collect();
    // The workers' phases, then the main processes', last, in time order.
    others.sort_by_key(|(t, n)| (phase_order(t), Reverse(*n), row_name(t, &logs.ops)));
    for (target, n) in others {
        let kind = match target {
            Target::Op(_) => RowKind::Op,
            Target::Spin(_) => RowKind::PoolSpin,
            Target::Outside(_) | Target::Main(_) | Target::Worker(_) => RowKind::Outside,
            Target::Independent(_) | Target::Threads(_) => RowKind::Independent,
            Target::Untraced => RowKind::Untraced,
        };
        rows.push(sampled_row(
            row_name(&target, &logs.ops),
            kind,
            n,
            interval_ns,
            top_of(target, n, top),
            row_counters(target),
        ));
    }
    let mut spinning: Vec<TopFunction> = spin_samples
        .into_iter()
        .map(|(sym, k)| {
            top_function(
                &trace.sampling.symbols,
                sym,
                k,
                0.0,
                k.saturating_mul(interval_ns),
            )
        })
        .collect();
    spinning.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.function.cmp(&b.function))
    });
    let total_cpu_ns = rows.iter().fold(0u64, |a, r| a.saturating_add(r.cpu_ns));
    for f in &mut spinning {
        f.share = if total_cpu_ns > 0 {
            f.cpu_ns as f64 / total_cpu_ns as f64
        } else {
            0.0
        };
    }
    for r in &mut rows {
        r.share = if total_cpu_ns > 0 {
            r.cpu_ns as f64 / total_cpu_ns as f64
        } else {
            0.0
        };
        for f in &mut r.top_functions {
            f.cpu_ns = (f.share * r.cpu_ns as f64).round() as u64;
        }
    }
    let mut counter_totals: BTreeMap<String, u64> =
        counters.iter().map(|c| (c.clone(), 0)).collect();
    for sum in sums.values() {
        for (i, (name, v)) in counters.iter().zip(sum).enumerate() {
            let t = counter_totals.entry(name.clone()).or_default();
            *t = t.checked_add(*v).unwrap_or_else(|| {
                saturated.resize(saturated.len().max(i + 1), false);
                saturated[i] = true;
                u64::MAX
            });
        }
    }
    for (name, _) in counters.iter().zip(&saturated).filter(|(_, s)| **s) {
        trace.notes.push(format!(
            "{}: counter '{}': its deltas add up past what lotus can count ({}): shown as that maximum; the file is damaged or was not written by lotus",
            trace.sampling.files.samples.display(),
            lotus_sys::input::escaped(name),
            u64::MAX
        ));
    }
    // The workers' CPU outside every op within their batches (outside
    // them: start-up, the wait for the next index, exit); the main
    // process's only within its batches (its CPU outside them is the
    // training step's).
    let mut unseen = Vec::new();
    // The top functions of `counts` (samples per symbol) of `of` samples.
    let tops = |counts: HashMap<u32, u64>, of: u64| -> Vec<TopFunction> {
        let mut by: Vec<(u32, u64)> = counts.into_iter().collect();
        by.sort_by_key(|&(sym, k)| (Reverse(k), sym));
        by.into_iter()
            .take(top)
            .map(|(sym, k)| {
                top_function(
                    &trace.sampling.symbols,
                    sym,
                    k,
                    k as f64 / of as f64,
                    k.saturating_mul(interval_ns),
                )
            })
            .collect()
    };
    let worker_tops = tops(worker_functions, worker_outside);
    let loader_tops = tops(loader_functions, loader_outside);
    for (role, n, of, top_functions) in [
        (Role::Worker, worker_outside, worker_samples, worker_tops),
        (Role::Main, loader_outside, in_loader, loader_tops),
    ] {
        if of > 0 && n as f64 * 100.0 > UNSEEN_PCT * of as f64 {
            unseen.push(Unseen {
                role,
                samples: n,
                cpu_ns: n.saturating_mul(interval_ns),
                share: n as f64 / of as f64,
                top_functions,
            });
        }
    }
    let lost_samples = trace.lost_samples();
    let mut notes = trace.notes;
    notes.extend(unseen.iter().map(Unseen::message));
    if let Some(note) = uncertainty_note(&rows) {
        notes.push(note);
    }
    let a = InPipelineAttribution {
        ops_from: OpsFrom::Spans,
        frequency_hz: trace.sampling.frequency_hz,
        interval_ns,
        total_samples: total,
        lost_samples,
        partial,
        total_cpu_ns,
        rows,
        unseen,
        counters,
        counter_totals,
        counters_unsupported: trace.sampling.counters_unsupported.clone(),
        pool_threads: trace.pool_threads,
        independent_threads: trace.independent_threads,
        notes,
        spinning,
        pool_figures,
    };
    Ok((a, fold))
}

/// Symbol `sym`'s top-function entry: `samples` of it, `share` of its
/// row's, `cpu_ns`.
fn top_function(
    symbols: &SymbolTable,
    sym: u32,
    samples: u64,
    share: f64,
    cpu_ns: u64,
) -> TopFunction {
    let s = symbols.get(sym);
    TopFunction {
        function: s.function.clone(),
        module: s.module.clone(),
        samples,
        share,
        cpu_ns,
    }
}

/// A row of `n` samples whose CPU is their count times the interval (a
/// row of no calls: outside the ops, threads of no op, an op's pool spin),
/// at the top of the tree unless the caller places it.
fn sampled_row(
    name: String,
    kind: RowKind,
    n: u64,
    interval_ns: u64,
    top_functions: Vec<TopFunction>,
    counters: BTreeMap<String, u64>,
) -> AttributedRow {
    let cpu_ns = n.saturating_mul(interval_ns);
    let unc = sampled_uncertainty_ns(n, interval_ns);
    AttributedRow {
        path: name.clone(),
        name,
        parent: None,
        depth: 0,
        kind,
        samples: n,
        inclusive_samples: n,
        pool_samples: 0,
        cpu_ns,
        inclusive_cpu_ns: cpu_ns,
        cpu_source: CpuSource::Sampled,
        uncertainty_ns: unc,
        inclusive_uncertainty_ns: unc,
        share: 0.0,
        calls: None,
        cpu_per_call_ns: None,
        wall_ns: None,
        exclusive_wall_ns: None,
        top_functions,
        cpi: cpi_of(&counters),
        counters,
    }
}

/// The figures of one op path.
#[derive(Debug, Clone, Copy)]
struct Figures {
    samples: u64,
    pool_samples: u64,
    inclusive_samples: u64,
    cpu_ns: u64,
    inclusive_cpu_ns: u64,
    source: CpuSource,
    /// The samples `cpu_ns` rests on (for an exact row, its pool's).
    basis: u64,
    inclusive_basis: u64,
    /// lotus's cost it held (its children's `hook=`, its own spans'
    /// `hook_in=`), taken off `cpu_ns` (`hooks`).
    hooks_ns: u64,
}

/// Each path's exclusive and inclusive figures. A path's CPU comes from
/// the thread clock where every span of it says `cpu=`: its own thread's
/// CPU is its spans' `cpu=` less its children's (children run on the same
/// thread): their `cpu=` where every span of theirs says it (the row is
/// then exact), else their own-thread samples times the interval (the row
/// is then partly sampled: [`CpuSource::ClockLessSampled`]), less lotus's
/// own cost in it (`hooks::due`: shown as its own row); its pool
/// threads' samples (times the interval) are added. Otherwise it is its
/// samples times the interval. Inclusive figures sum the subtree's
/// exclusive ones (a child's id is above its parent's).
fn op_figures(
    tree: &Tree,
    counts: &HashMap<Target, u64>,
    pools: &HashMap<u32, u64>,
    interval_ns: u64,
) -> Vec<Figures> {
    let n = tree.nodes.len();
    let all_cpu = |p: usize| {
        let st = tree.stats[p];
        st.calls > 0 && st.with_cpu == st.calls
    };
    let samples: Vec<u64> = (0..n)
        .map(|p| counts.get(&Target::Op(p as u32)).copied().unwrap_or(0))
        .collect();
    let pool: Vec<u64> = (0..n)
        .map(|p| pools.get(&(p as u32)).copied().unwrap_or(0))
        .collect();
    // Samples of each subtree on its own thread (not its pools').
    let mut own_thread: Vec<u64> = (0..n).map(|p| samples[p] - pool[p]).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for p in (0..n).rev() {
        if let Some(q) = tree.nodes[p].parent {
            own_thread[q as usize] += own_thread[p];
            children[q as usize].push(p);
        }
    }
    let due = hooks::due(tree);
    let mut figures: Vec<Figures> = (0..n)
        .map(|p| {
            let mut hooks_ns = 0;
            let (cpu_ns, source, basis) = if all_cpu(p) {
                let (mut less, mut basis, mut sampled) = (0u64, pool[p], false);
                for &c in &children[p] {
                    if all_cpu(c) {
                        less = less.saturating_add(tree.stats[c].cpu_ns);
                    } else {
                        less = less.saturating_add(own_thread[c].saturating_mul(interval_ns));
                        basis += own_thread[c];
                        sampled = true;
                    }
                }
                let own = tree.stats[p].cpu_ns.saturating_sub(less);
                let (own, taken) = hooks::take(own, due[p]);
                hooks_ns = taken;
                (
                    own.saturating_add(pool[p].saturating_mul(interval_ns)),
                    if sampled {
                        CpuSource::ClockLessSampled
                    } else {
                        CpuSource::Exact
                    },
                    basis,
                )
            } else {
                (
                    samples[p].saturating_mul(interval_ns),
                    CpuSource::Sampled,
                    samples[p],
                )
            };
            Figures {
                samples: samples[p],
                pool_samples: pool[p],
                inclusive_samples: samples[p],
                cpu_ns,
                inclusive_cpu_ns: cpu_ns,
                source,
                basis,
                inclusive_basis: basis,
                hooks_ns,
            }
        })
        .collect();
    for p in (0..n).rev() {
        if let Some(q) = tree.nodes[p].parent {
            let c = figures[p];
            let f = &mut figures[q as usize];
            f.inclusive_samples += c.inclusive_samples;
            f.inclusive_cpu_ns = f.inclusive_cpu_ns.saturating_add(c.inclusive_cpu_ns);
            f.inclusive_basis += c.inclusive_basis;
        }
    }
    figures
}

/// Path `p`'s wall time less its direct children's (their spans lie in
/// its own, on its thread).
fn exclusive_wall(tree: &Tree, p: u32) -> u64 {
    let inner = tree
        .nodes
        .iter()
        .zip(&tree.stats)
        .filter(|(n, _)| n.parent == Some(p))
        .fold(0u64, |a, (_, st)| a.saturating_add(st.wall_ns));
    tree.stats[p as usize].wall_ns.saturating_sub(inner)
}

/// The paths in table order: depth first, siblings by inclusive CPU (most
/// first), then by name.
fn tree_order(tree: &Tree, figures: &[Figures]) -> Vec<u32> {
    let mut children: HashMap<Option<u32>, Vec<u32>> = HashMap::new();
    for (p, node) in tree.nodes.iter().enumerate() {
        children.entry(node.parent).or_default().push(p as u32);
    }
    for list in children.values_mut() {
        list.sort_by_key(|&p| (Reverse(figures[p as usize].inclusive_cpu_ns), p));
    }
    let mut order = Vec::with_capacity(tree.nodes.len());
    let mut stack: Vec<u32> = children
        .get(&None)
        .map(|l| l.iter().rev().copied().collect())
        .unwrap_or_default();
    while let Some(p) = stack.pop() {
        order.push(p);
        if let Some(l) = children.get(&Some(p)) {
            stack.extend(l.iter().rev());
        }
    }
    order
}

/// The note on op rows whose `±` passes [`UNCERTAIN_PCT`] of their CPU.
fn uncertainty_note(rows: &[AttributedRow]) -> Option<String> {
    let mut uncertain: Vec<(&AttributedRow, f64)> = rows
        .iter()
        .filter(|r| r.kind == RowKind::Op && r.cpu_ns > 0)
        .map(|r| (r, r.uncertainty_ns as f64 * 100.0 / r.cpu_ns as f64))
        .filter(|(_, pct)| *pct > UNCERTAIN_PCT)
        .collect();
    if uncertain.is_empty() {
        return None;
    }
    uncertain.sort_by(|a, b| b.1.total_cmp(&a.1));
    let named: Vec<String> = uncertain
        .iter()
        .take(5)
        .map(|(r, pct)| format!("{} (±{pct:.0}%)", r.path))
        .collect();
    let more = uncertain.len().saturating_sub(named.len());
    Some(format!(
        "{} op rows rest on too few samples to be known within {UNCERTAIN_PCT:.0}%: {}{}; ± is a 95% interval, 1.96·√n sampling intervals for n samples; a higher --frequency or a longer run narrows it (spans with cpu= from the tracer are exact on their own thread)",
        uncertain.len(),
        named.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

/// The names of the counters the samples carry: `counters=` of the
/// sampling description, which must name as many as the records hold.
fn counter_names(
    meta: &HashMap<String, String>,
    files: &SampleFiles,
) -> Result<Vec<String>, Error> {
    let carried = samples_of(files)?.counters();
    let named: Vec<String> = meta
        .get("counters")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    // Each counter is a column of its own: one named twice would merge
    // two columns into one in silence.
    for (i, name) in named.iter().enumerate() {
        if named[..i].contains(name) {
            return Err(Error::Io(format!(
                "{}: counter '{}' is named twice in `counters=`: the file is damaged or was not written by lotus; trace again",
                files.sampling.display(),
                lotus_sys::input::escaped(name)
            )));
        }
    }
    if named.len() != carried {
        return Err(Error::Io(format!(
            "{}: its records carry {carried} counter values, but {} names {} (`counters=`): the two files are not of the same run; trace again",
            files.samples.display(),
            files.sampling.display(),
            named.len()
        )));
    }
    Ok(named)
}

/// Cycles per instruction of a row's counters, where both are read.
fn cpi_of(counters: &BTreeMap<String, u64>) -> Option<f64> {
    let cycles = *counters.get("cycles")?;
    let instructions = *counters.get("instructions")?;
    (instructions > 0).then(|| cycles as f64 / instructions as f64)
}

fn row_name(target: &Target, ops: &[String]) -> String {
    match target {
        Target::Op(op) => ops[*op as usize].clone(),
        Target::Outside(role) => format!("outside any op ({role})"),
        Target::Main(_) | Target::Worker(_) | Target::Threads(_) => {
            phase_row_name(target).unwrap_or_default().to_string()
        }
        Target::Independent(role) => format!("other threads, cause unknown ({role})"),
        Target::Spin(_) => SPIN_ROW.to_string(),
        Target::Untraced => "untraced processes".to_string(),
    }
}

/// The note on a sampling that did not end `complete`: it failed (and
/// why), or its status still says `running` and lotus, named by
/// `lotus_pid=` and `lotus_start=` (its start time, so a reused pid is not
/// taken for it), is gone (killed outright) or still running.
fn how_it_ended(meta: &HashMap<String, String>) -> String {
    const TAIL: &str = "what was written is analysed";
    match meta.get("status").map(String::as_str) {
        Some("failed") => format!(
            "partial: the sampling failed ({}); {TAIL}",
            meta.get("reason").map_or("no reason given", String::as_str)
        ),
        Some("running") => {
            let pid = meta.get("lotus_pid").and_then(|p| p.parse::<u32>().ok());
            let start = meta.get("lotus_start").and_then(|t| t.parse::<u64>().ok());
            match (pid, start) {
                (Some(pid), Some(start)) if process_start(pid) == Some(start) => format!(
                    "partial: lotus (pid {pid}) is still sampling this run; {TAIL} so far"
                ),
                (Some(pid), Some(_)) => format!(
                    "partial: lotus (pid {pid}) was killed while the job ran (its status still says running); {TAIL}"
                ),
                _ => format!(
                    "partial: the sampling did not end normally (lotus was stopped while the job ran); {TAIL}"
                ),
            }
        }
        _ => format!(
            "partial: the sampling did not end normally (lotus was stopped while the job ran); {TAIL}"
        ),
    }
}

/// Field 22 of `/proc/<pid>/stat` (the process's start time), or None when
/// there is no such process.
fn process_start(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use lotus_samples::{SampleSink, SamplesWriter, Symbol};

    /// A sampled trace folder: the log `lotus_worker_pid_10` holding
    /// `log`, the samples (in time order) with their symbols, a complete
    /// sampling at `interval_ns`.
    pub(crate) fn sampled_folder(
        log: &str,
        symbols: &[(u32, Symbol)],
        samples: &[Sample],
        interval_ns: u64,
    ) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("lotus_worker_pid_10"), log).expect("log");
        let mut w = SamplesWriter::create(dir.path(), "lotus").expect("w");
        w.symbols(symbols).expect("s");
        w.samples(samples).expect("samples");
        w.finish().expect("finish");
        lotus_samples::write_sampling(
            &SampleFiles::of(dir.path(), "lotus").sampling,
            &[
                ("status", "complete".into()),
                ("frequency_hz", (1_000_000_000 / interval_ns).to_string()),
                ("interval_ns", interval_ns.to_string()),
            ],
        )
        .expect("sampling");
        dir
    }

    /// A folder: one worker (pid 10) whose main thread runs op A over
    /// [1000, 2000) and B over [3000, 4000) (monotonic), a pool thread 11
    /// busy only during them, an independent thread 12 busy throughout, and
    /// an untraced process 99.
    pub(crate) fn folder() -> tempfile::TempDir {
        folder_with(&[])
    }

    /// [`folder`] with `extra` samples added, after its own (in time order).
    pub(crate) fn folder_with(extra: &[Sample]) -> tempfile::TempDir {
        // wall = monotonic + 1_000_000.
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={} monotonic_ns=0\n\
             SA,{},1000,kind=op\nSB,{},1000,kind=op\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            off,
            1000 + off,
            3000 + off,
            5000 + off
        );
        let symbols = [
            (0, Symbol::new("ka", "/k.so")),
            (1, Symbol::new("kb", "/k.so")),
            (2, Symbol::new("spin", "/bg.so")),
            (3, Symbol::new("loop", "/py")),
        ];
        let mut samples = Vec::new();
        for t in (0..5000).step_by(100) {
            let in_a = (1000..2000).contains(&t);
            let in_b = (3000..4000).contains(&t);
            let sym = if in_a {
                0
            } else if in_b {
                1
            } else {
                3
            };
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: sym,
                kernel: false,
                counters: Default::default(),
            });
            if in_a || in_b {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 10,
                    tid: 11,
                    symbol: sym,
                    kernel: false,
                    counters: Default::default(),
                });
            }
            samples.push(Sample {
                time_ns: t + 2,
                pid: 10,
                tid: 12,
                symbol: 2,
                kernel: false,
                counters: Default::default(),
            });
            samples.push(Sample {
                time_ns: t + 3,
                pid: 99,
                tid: 99,
                symbol: 3,
                kernel: false,
                counters: Default::default(),
            });
        }
        samples.extend_from_slice(extra);
        sampled_folder(&log, &symbols, &samples, 100)
    }

    /// A pool's thread that runs (or is given the samples the sampler adds
    /// at its exit: the unsampled tail of its whole life, stamped at the
    /// exit) after the process's last op is still its pool: what it does
    /// at the process's shutdown says nothing of whether it ran with the
    /// ops. [`folder`]'s pool thread 11 with 5 samples at one instant past
    /// the last op (a burst like the one that made a pool thread of the
    /// kernel pipeline "independent" on a busy machine, its op losing half
    /// its time): a pool, its op rows as without the burst, the burst in
    /// "outside any op".
    #[test]
    fn a_pool_thread_busy_at_shutdown_is_still_a_pool() {
        let burst: Vec<Sample> = (0..5)
            .map(|_| Sample {
                time_ns: 4500,
                pid: 10,
                tid: 11,
                symbol: 1,
                kernel: false,
                counters: Default::default(),
            })
            .collect();
        let dir = folder_with(&burst);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        assert_eq!(a.pool_threads, vec!["10/11"], "{a:#?}");
        assert_eq!(a.independent_threads, vec!["10/12"]);
        assert_eq!(row("A").samples, 20);
        assert_eq!(row("B").samples, 20);
        assert_eq!(row("outside any op (worker)").samples, 35);
        assert_eq!(a.total_samples, 175);
    }

    #[test]
    fn empty_logs_are_skipped_and_unusable_logs_say_why() {
        let dir = folder();
        let budget = Budget::default();
        std::fs::write(dir.path().join("lotus_main_pid_5"), "").expect("empty");
        // Only a cut line: nothing complete was written either.
        std::fs::write(dir.path().join("lotus_worker_pid_6"), "#lotus-tr").expect("cut");
        let a = attribute_folder(dir.path(), "lotus", budget, 5).expect("attributed");
        for (log, why) in [
            ("lotus_main_pid_5", "empty: the process wrote nothing"),
            ("lotus_worker_pid_6", "no complete line"),
        ] {
            assert!(
                a.notes.iter().any(|n| n.contains(log) && n.contains(why)),
                "{:?}",
                a.notes
            );
        }
        assert!(a.rows.iter().any(|r| r.name == "A" && r.samples > 0));
        std::fs::write(dir.path().join("lotus_main_pid_5"), "SBatchWait_0,5,1000\n").expect("w");
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("original");
        assert!(matches!(e, Error::OriginalFormat { .. }), "{e}");
        assert!(e.to_string().contains("without `--format original`"), "{e}");
        std::fs::write(
            dir.path().join("lotus_main_pid_5"),
            "#lotus-trace v1 role=main pid=5\nSWait,5,1000,kind=wait\n",
        )
        .expect("w");
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("old");
        assert!(matches!(e, Error::NoClock { .. }), "{e}");
    }

    #[test]
    fn counter_sums_past_u64_saturate_and_say_so() {
        use lotus_samples::CounterValues;
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        std::fs::remove_file(&files.samples).expect("rm");
        std::fs::remove_file(&files.symbols).expect("rm");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 2).expect("w");
        let samples: Vec<Sample> = (0..3u64)
            .map(|i| Sample {
                time_ns: 1000 + i,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: CounterValues::new(&[u64::MAX / 2, 7]).expect("2"),
            })
            .collect();
        w.samples(&samples).expect("samples");
        w.finish().expect("finish");
        lotus_samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("counters", "cycles,instructions".into()),
            ],
        )
        .expect("sampling");
        let a = attribute_folder(dir.path(), "lotus", Budget::default(), 5).expect("attributed");
        assert_eq!(a.counter_totals["cycles"], u64::MAX);
        assert_eq!(a.counter_totals["instructions"], 21);
        let said: Vec<&String> = a
            .notes
            .iter()
            .filter(|n| n.contains("add up past"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", a.notes);
        assert!(said[0].contains("counter 'cycles'"), "{}", said[0]);
    }

    #[test]
    fn sampling_figures_that_cannot_be_trusted_are_refused_by_name() {
        let dir = folder();
        let budget = Budget::default();
        let sampling = SampleFiles::of(dir.path(), "lotus").sampling;
        let write = |pairs: &[(&str, String)]| {
            lotus_samples::write_sampling(&sampling, pairs).expect("sampling")
        };
        write(&[
            ("status", "complete".into()),
            ("interval_ns", u64::MAX.to_string()),
        ]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("overflow");
        assert!(matches!(e, Error::Overflow { .. }), "{e}");
        assert!(
            e.to_string().contains(&format!("interval_ns={}", u64::MAX)),
            "{e}"
        );
        // The largest interval the file's samples can be multiplied by
        // still reads.
        let records = samples_of(&SampleFiles::of(dir.path(), "lotus"))
            .expect("samples")
            .most_records();
        write(&[
            ("status", "complete".into()),
            ("interval_ns", (u64::MAX / records).to_string()),
        ]);
        attribute_folder(dir.path(), "lotus", budget, 5).expect("largest interval");
        write(&[("status", "complete".into()), ("status", "running".into())]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("twice");
        assert!(e.to_string().contains("`status=` is given twice"), "{e}");
        write(&[
            ("status", "complete".into()),
            ("counters", "\u{1b}x,\u{1b}x".into()),
        ]);
        let e = attribute_folder(dir.path(), "lotus", budget, 5).expect_err("counter twice");
        assert!(
            e.to_string().contains("counter '\\x1bx' is named twice"),
            "{e}"
        );
    }

    #[test]
    fn the_rule_on_a_small_folder() {
        let dir = folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        // 10 samples of each op on the main thread, 10 of its pool thread.
        assert_eq!(row("A").samples, 20);
        assert_eq!(row("B").samples, 20);
        assert_eq!(row("A").top_functions[0].function, "ka");
        assert_eq!(row("A").calls, Some(1));
        assert_eq!(row("A").cpu_ns, 2000);
        assert_eq!(row("outside any op (worker)").samples, 30);
        assert_eq!(row("other threads, cause unknown (worker)").samples, 50);
        assert_eq!(row("untraced processes").samples, 50);
        assert_eq!(a.pool_threads, vec!["10/11"]);
        assert_eq!(a.independent_threads, vec!["10/12"]);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        assert_eq!(a.total_samples, 170);
        assert!(!a.partial);
        // Thread 11's samples went to A and B by timing alone: said, with
        // their size, as a guess.
        assert!(
            a.notes.iter().any(|n| n.starts_with(
                "20 samples (0.000 s) of helper threads 10/11 went to ops by timing alone"
            )),
            "{:?}",
            a.notes
        );
    }

    /// The counts of a busy test run (5 CPU hogs on 2 CPUs): a pool
    /// thread with 16 of its 263 samples just after its ops, in a worker
    /// whose ops covered 85% of the window, is a pool (the rate test alone
    /// said independent); background threads that run regardless of the
    /// ops, with fewer of their samples inside than the ops cover, are not.
    #[test]
    fn a_pool_whose_work_runs_past_its_ops_is_still_a_pool() {
        let h = |inside: u64, outside: u64, covered_ns: u64, window_ns: u64| HelperCounts {
            inside,
            outside,
            first: 1_000,
            last: 1_000 + window_ns,
            covered_ns,
        };
        assert!(is_pool(&h(247, 16, 1_783_151_589, 2_102_130_292)));
        assert!(is_pool(&h(273, 0, 1_863_039_980, 2_027_945_216)));
        assert!(!is_pool(&h(293, 89, 1_900_540_371, 2_213_666_237)));
        assert!(!is_pool(&h(276, 50, 1_997_847_190, 2_188_549_128)));
        assert!(!is_pool(&h(0, 2, 599_069_068, 816_512_574)));
        // Uniform over a window the ops cover 85% of: independent.
        assert!(!is_pool(&h(850, 150, 850_000_000, 1_000_000_000)));
        // Few samples: no share test to pass.
        assert!(!is_pool(&h(9, 1, 850_000_000, 1_000_000_000)));
    }

    /// A thread the tracer names as the DataLoader's machinery
    /// (`kind=thread`: a queue's feeder thread) is never a pool, even busy
    /// only while ops run: [`folder`]'s pool thread 11, so named, is
    /// independent, and its samples leave the ops.
    /// A worker's log (pid 10, wall = monotonic + 1 ms, a clock pair at
    /// 5000): `S<name>,<start>,<dur>,<fields>` per event, times monotonic.
    fn worker_log(events: &[(&str, u64, u64, &str)]) -> String {
        let off = 1_000_000u64;
        let mut log = format!("#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n");
        for (name, start, dur, fields) in events {
            log.push_str(&format!("S{name},{},{dur},{fields}\n", start + off));
        }
        log.push_str(&format!(
            "# lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            5000 + off
        ));
        log
    }

    /// Credit by cause: a thread its frames show an OpenBLAS pool's
    /// (`blas_thread_server`) works for op A (samples in a BLAS kernel
    /// while A is open), then spins through the gap and all of op B, which
    /// never calls BLAS. Its work is A's, its spin A's `pool spin` row,
    /// never B's; the same folder by timing gives B the spin (the thread
    /// runs far more while ops are open than between them).
    #[test]
    fn a_pools_spin_after_an_op_is_that_ops_not_the_next_ones() {
        let log = worker_log(&[("A", 1000, 1000, "kind=op"), ("B", 3000, 1000, "kind=op")]);
        let blas = "/x/libscipy_openblas64_.so";
        let symbols = vec![
            (0, Symbol::new("a_work", "/py")),
            (1, Symbol::new("b_work", "/py")),
            (2, Symbol::new("dgemm_kernel_SKYLAKEX", blas)),
            (3, Symbol::new("blas_thread_server", blas)),
        ];
        let sample = sample_at;
        let mut samples = Vec::new();
        for t in (1000..4000).step_by(100) {
            if (1000..2000).contains(&t) {
                samples.push(sample(t, 10, 0));
                samples.push(sample(t + 1, 11, 2));
            } else {
                if (3000..4000).contains(&t) {
                    samples.push(sample(t, 10, 1));
                }
                // A spins through the gap (rarely: yielding) and B.
                if t >= 3000 || t % 500 == 0 {
                    samples.push(sample(t + 1, 11, 3));
                }
            }
        }
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attributed");
        let spin = row_at(&a, "A/pool spin");
        // Its sample 1 ns after A returned stands for CPU in A's call.
        assert_eq!(
            (spin.kind, spin.samples),
            (RowKind::PoolSpin, 11),
            "{:#?}",
            a.rows
        );
        assert_eq!(spin.parent.as_deref(), Some("A"));
        assert_eq!(row_at(&a, "A").samples, 21);
        assert_eq!(row_at(&a, "A").pool_samples, 11);
        assert_eq!(row_at(&a, "A").inclusive_samples, 32);
        assert_eq!(row_at(&a, "B").samples, 10);
        assert_eq!(a.pool_threads, vec!["10/11 (OpenBLAS)".to_string()]);
        // By timing, the thread is B's pool as much as A's.
        let t = attribute_folder_by(dir.path(), "lotus", Budget::new(64), 5, HelperRule::Timing)
            .expect("attributed");
        assert_eq!(row_at(&t, "B").samples, 20, "{:#?}", t.rows);
        assert!(!t.rows.iter().any(|r| r.kind == RowKind::PoolSpin));
    }

    /// Two calls of op A ([1000, 2000) and [3000, 4000)) hand work to an
    /// OpenBLAS thread (11) sampled every 100 ns of its CPU. A sample
    /// stands for its thread's CPU since its previous one, and a thread
    /// runs in the moments before it is sampled: one that straddles a
    /// call's edge goes to the side where more than half an interval of
    /// its wall time lies. So the pool's sample 10 ns after the first call
    /// returned (its previous in the call) is the call's, not its spin;
    /// and its first of the second call, 20 ns after the start (its
    /// previous at 2800, spinning), is the first call's spin, though the
    /// caller was seen handing work inside `exec_blas` at 3000 (the
    /// hand-off decided, and an OpenBLAS op's pool CPU read 5% high).
    #[test]
    fn a_pool_sample_straddling_a_calls_edge_goes_where_most_of_its_interval_lies() {
        let log = worker_log(&[("A", 1000, 1000, "kind=op"), ("A", 3000, 1000, "kind=op")]);
        let blas = "/x/libscipy_openblas64_.so";
        let symbols = vec![
            (0, Symbol::new("a_work", "/py")),
            (1, Symbol::new("exec_blas", blas)),
            (2, Symbol::new("dgemm_kernel_SKYLAKEX", blas)),
            (3, Symbol::new("blas_thread_server", blas)),
        ];
        let sample = sample_at;
        // Spinning from its creation: known as OpenBLAS's by its frames.
        let mut samples = vec![sample(501, 11, 3)];
        for t in (1000..4000).step_by(100) {
            if (1000..2000).contains(&t) || (3000..4000).contains(&t) {
                samples.push(sample(t, 10, if t == 3000 { 1 } else { 0 }));
            }
            match t {
                1000..=1900 => samples.push(sample(t + 60, 11, 2)),
                2000 => samples.push(sample(2010, 11, 3)),
                2400 | 2800 => samples.push(sample(t, 11, 3)),
                3000..=3900 => samples.push(sample(t + 20, 11, 2)),
                _ => {}
            }
        }
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attributed");
        assert_eq!(a.pool_threads, vec!["10/11 (OpenBLAS)".to_string()]);
        // 10 in the first call and the one just after it, 9 in the
        // second; 3020 is the spin before it, with 2400 and 2800.
        assert_eq!(row_at(&a, "A").pool_samples, 20, "{:#?}", a.rows);
        assert_eq!(row_at(&a, "A/pool spin").samples, 3, "{:#?}", a.rows);
    }

    /// Credit by cause for a Python thread pool: op A hands a task to
    /// thread 12 (`kind=task`, `by=10` at 1500) and returns; the task runs
    /// over [2100, 3000) while op B is open on the main thread. Its samples
    /// are A's (pool samples, though A returned), none B's; the thread is
    /// listed as a Python thread pool's; by timing they were B's.
    #[test]
    fn a_tasks_samples_are_the_op_that_handed_it_over() {
        let at = format!("kind=task,tid=12,by=10,at={}", 1500 + 1_000_000);
        let log = worker_log(&[
            ("A", 1000, 1000, "kind=op"),
            ("B", 2000, 2000, "kind=op"),
            ("crunch", 2100, 900, &at),
        ]);
        let symbols = vec![
            (0, Symbol::new("a_work", "/py")),
            (1, Symbol::new("b_work", "/py")),
            (2, Symbol::new("sqrt_loop", "/x/numpy.so")),
        ];
        let mut samples = Vec::new();
        for t in (1000..4000).step_by(100) {
            samples.push(sample_at(t, 10, if t < 2000 { 0 } else { 1 }));
            if (2100..3000).contains(&t) {
                samples.push(sample_at(t + 1, 12, 2));
            }
        }
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attributed");
        assert_eq!(row_at(&a, "A").pool_samples, 9, "{:#?}", a.rows);
        assert_eq!(row_at(&a, "B").pool_samples, 0, "{:#?}", a.rows);
        assert_eq!(
            a.pool_threads,
            vec!["10/12 (Python thread pool)".to_string()]
        );
        assert!(
            !a.notes.iter().any(|n| n.contains("by timing alone")),
            "no guess: {:?}",
            a.notes
        );
        let t = attribute_folder_by(dir.path(), "lotus", Budget::new(64), 5, HelperRule::Timing)
            .expect("attributed");
        assert_eq!(row_at(&t, "B").pool_samples, 9, "{:#?}", t.rows);
        assert_eq!(row_at(&t, "A").pool_samples, 0, "{:#?}", t.rows);
    }

    /// A task that calls an op of its own (a wrapped transform): the
    /// pool thread's samples inside that op's span are the op's, the rest
    /// of the task's are still the op that handed it over.
    #[test]
    fn an_op_inside_a_task_keeps_its_samples_and_the_rest_is_the_handing_ops() {
        let at = format!("kind=task,tid=12,by=10,at={}", 1500 + 1_000_000);
        let log = worker_log(&[
            ("A", 1000, 1000, "kind=op"),
            ("crunch", 2100, 900, &at),
            ("C", 2400, 200, "kind=op,tid=12"),
        ]);
        let symbols = vec![(0, Symbol::new("work", "/py"))];
        let mut samples: Vec<Sample> = (1000..2000)
            .step_by(100)
            .map(|t| sample_at(t, 10, 0))
            .collect();
        samples.extend((2100..3000).step_by(100).map(|t| sample_at(t + 1, 12, 0)));
        let dir = sampled_folder(&log, &symbols, &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attributed");
        assert_eq!(row_at(&a, "C").samples, 2, "{:#?}", a.rows);
        assert_eq!(row_at(&a, "A").pool_samples, 7, "{:#?}", a.rows);
    }

    #[test]
    fn a_machinery_thread_is_never_a_pool() {
        let dir = folder();
        let log = dir.path().join("lotus_worker_pid_10");
        let mut text = std::fs::read_to_string(&log).expect("log");
        text.push_str("SQueueFeederThread,1001500,0,kind=thread,tid=11\n");
        std::fs::write(&log, text).expect("log");
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |name: &str| {
            a.rows
                .iter()
                .find(|r| r.name == name)
                .unwrap_or_else(|| panic!("{name}: {a:#?}"))
        };
        assert!(a.pool_threads.is_empty(), "{:?}", a.pool_threads);
        assert_eq!(a.independent_threads, vec!["10/11", "10/12"]);
        assert_eq!(row("A").samples, 10);
        assert_eq!(row("B").samples, 10);
        // Its samples are the DataLoader's threads' row, not the job's
        // other threads'.
        assert_eq!(row("other threads, cause unknown (worker)").samples, 50);
        assert_eq!(row("DataLoader threads (worker)").samples, 20);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
    }

    /// [`folder`] with its samples rewritten to carry cycles and
    /// instructions: 300 and 100 for a sample in an op's kernel (symbols 0
    /// and 1), 10 and 10 otherwise.
    fn folder_with_counters() -> tempfile::TempDir {
        use lotus_samples::CounterValues;
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        let samples: Vec<Sample> = files.samples().expect("r").map(Result::unwrap).collect();
        let symbols = std::fs::read_to_string(&files.symbols).expect("symbols");
        std::fs::remove_file(&files.samples).expect("rm");
        std::fs::remove_file(&files.symbols).expect("rm");
        let mut w = SamplesWriter::create_with_counters(dir.path(), "lotus", 2).expect("w");
        let with: Vec<Sample> = samples
            .into_iter()
            .map(|s| Sample {
                counters: CounterValues::new(if s.symbol <= 1 {
                    &[300, 100]
                } else {
                    &[10, 10]
                })
                .expect("2"),
                ..s
            })
            .collect();
        w.samples(&with).expect("samples");
        w.finish().expect("finish");
        std::fs::write(&files.symbols, symbols).expect("symbols");
        lotus_samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("interval_ns", "100".into()),
                ("counters", "cycles,instructions".into()),
            ],
        )
        .expect("sampling");
        dir
    }

    #[test]
    fn counters_follow_their_samples_and_add_up() {
        let dir = folder_with_counters();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert_eq!(a.counters, vec!["cycles", "instructions"]);
        let row = |name: &str| a.rows.iter().find(|r| r.name == name).expect(name);
        // A's 20 samples (main thread and pool) are all in its kernel.
        assert_eq!(row("A").counters["cycles"], 20 * 300);
        assert_eq!(row("A").counters["instructions"], 20 * 100);
        assert_eq!(row("A").cpi, Some(3.0));
        assert_eq!(row("untraced processes").counters["cycles"], 50 * 10);
        assert_eq!(row("untraced processes").cpi, Some(1.0));
        for c in ["cycles", "instructions"] {
            let sum: u64 = a.rows.iter().map(|r| r.counters[c]).sum();
            assert_eq!(sum, a.counter_totals[c], "{c}");
        }
        assert_eq!(a.counter_totals["cycles"], 40 * 300 + 130 * 10);
        assert!(a.counters_unsupported.is_none());

        // A description that does not name what the records carry.
        let files = SampleFiles::of(dir.path(), "lotus");
        lotus_samples::write_sampling(&files.sampling, &[("status", "complete".into())])
            .expect("sampling");
        let err = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect_err("mismatch")
            .to_string();
        assert!(
            err.contains("lotus.samples") && err.contains("carry 2 counter values"),
            "{err}"
        );
    }

    #[test]
    fn refused_counters_are_said_once_never_as_zeros() {
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        lotus_samples::write_sampling(
            &files.sampling,
            &[
                ("status", "complete".into()),
                ("interval_ns", "100".into()),
                ("counters_unsupported", "cycles,instructions".into()),
                ("counters_reason", "cycles: no PMU".into()),
                ("counters_kind", "hardware".into()),
            ],
        )
        .expect("sampling");
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.counters.is_empty() && a.counter_totals.is_empty());
        assert!(a
            .rows
            .iter()
            .all(|r| r.counters.is_empty() && r.cpi.is_none()));
        let u = a.counters_unsupported.expect("unsupported");
        assert_eq!(u.counters, vec!["cycles", "instructions"]);
        assert_eq!(u.reason, "cycles: no PMU");
        let said: Vec<_> = a
            .notes
            .iter()
            .filter(|n| n.contains("not supported here"))
            .collect();
        assert_eq!(
            said,
            vec!["hardware counters: not supported here (cycles: no PMU)"]
        );
    }

    #[test]
    fn a_sampling_that_did_not_complete_says_how_it_ended() {
        let meta = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let failed = how_it_ended(&meta(&[("status", "failed"), ("reason", "disk full: x")]));
        assert!(
            failed.contains("the sampling failed (disk full: x)"),
            "{failed}"
        );
        let me = std::process::id();
        let start = process_start(me).expect("our start time").to_string();
        let mine = me.to_string();
        let running = how_it_ended(&meta(&[
            ("status", "running"),
            ("lotus_pid", &mine),
            ("lotus_start", &start),
        ]));
        assert!(running.contains("is still sampling"), "{running}");
        let other_start = (process_start(me).expect("start") + 1).to_string();
        let killed = how_it_ended(&meta(&[
            ("status", "running"),
            ("lotus_pid", &mine),
            ("lotus_start", &other_start),
        ]));
        assert!(
            killed.contains(&format!("lotus (pid {me}) was killed")),
            "{killed}"
        );
        let old = how_it_ended(&meta(&[("status", "running")]));
        assert!(old.contains("did not end normally"), "{old}");
    }

    #[test]
    fn a_noticeable_slowdown_by_sampling_is_said_with_its_figure() {
        for (pct, said) in [("12.5", true), ("1.9", false)] {
            let dir = folder();
            let files = SampleFiles::of(dir.path(), "lotus");
            lotus_samples::write_sampling(
                &files.sampling,
                &[
                    ("status", "complete".into()),
                    ("frequency_hz", "5000".into()),
                    ("sampling_cost_us", "25.00".into()),
                    ("sampling_slowdown_pct", pct.into()),
                ],
            )
            .expect("sampling");
            let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
                .expect("attribute");
            let notes = a.notes.join("\n");
            assert_eq!(
                notes.contains("slowed the job's threads by about 12%"),
                said,
                "{notes}"
            );
            assert_eq!(notes.contains("25.00 us a sample"), said, "{notes}");
        }
    }

    #[test]
    fn a_run_stopped_while_writing_is_analysed_and_marked_partial() {
        let dir = folder();
        let files = SampleFiles::of(dir.path(), "lotus");
        lotus_samples::write_sampling(
            &files.sampling,
            &[("status", "running".into()), ("interval_ns", "100".into())],
        )
        .expect("sampling");
        let len = std::fs::metadata(&files.samples).expect("m").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&files.samples)
            .expect("open")
            .set_len(len - 30)
            .expect("cut");
        let a = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.partial);
        // The last record whole and 6 bytes of the one before it: 2 gone.
        assert_eq!(a.total_samples, 168);
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("cut record") && notes.contains("partial"),
            "{notes}"
        );
    }

    /// A worker (pid 10) whose main thread runs op A over [1000, 5000)
    /// holding B over [2000, 3000) holding C over [2200, 2500), then C
    /// again at the top over [5200, 5400) (monotonic; the lines written in
    /// the order the spans end, as the tracer writes them, with `cpu`'s
    /// `cpu=` per span where given); the main thread sampled every 100 ns
    /// at `main_times`, a pool thread 11 one ns after each main sample in
    /// A.
    pub(crate) fn nested_folder(cpu: [Option<u64>; 4], main_times: &[u64]) -> tempfile::TempDir {
        let off = 1_000_000u64;
        let span = |name: &str, start: u64, end: u64, cpu: Option<u64>| {
            format!(
                "S{name},{},{},kind=op{}\n",
                start + off,
                end - start,
                cpu.map_or(String::new(), |c| format!(",cpu={c}"))
            )
        };
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n{}{}{}{}# lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            span("C", 2200, 2500, cpu[2]),
            span("B", 2000, 3000, cpu[1]),
            span("A", 1000, 5000, cpu[0]),
            span("C", 5200, 5400, cpu[3]),
            9000 + off
        );
        let symbols = [
            (0, Symbol::new("main_fn", "/py")),
            (1, Symbol::new("pool_fn", "/k.so")),
        ];
        let mut samples = Vec::new();
        for &t in main_times {
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: Default::default(),
            });
            if (1000..5000).contains(&t) {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 10,
                    tid: 11,
                    symbol: 1,
                    kernel: false,
                    counters: Default::default(),
                });
            }
        }
        sampled_folder(&log, &symbols, &samples, 100)
    }

    pub(crate) fn every_100_ns(from: u64, to: u64) -> Vec<u64> {
        (from..to).step_by(100).collect()
    }

    /// A sample of worker 10's thread `tid` at `time_ns` in function
    /// `symbol`, with no counters.
    pub(crate) fn sample_at(time_ns: u64, tid: u32, symbol: u32) -> Sample {
        Sample {
            time_ns,
            pid: 10,
            tid,
            symbol,
            kernel: false,
            counters: Default::default(),
        }
    }

    /// The row of path `path` (a test failure naming it where none is).
    pub(crate) fn row_at<'a>(a: &'a InPipelineAttribution, path: &str) -> &'a AttributedRow {
        a.rows
            .iter()
            .find(|r| r.path == path)
            .unwrap_or_else(|| panic!("{path}: {a:#?}"))
    }

    #[test]
    fn nested_spans_credit_the_innermost_and_form_a_tree() {
        let dir = nested_folder([None; 4], &every_100_ns(0, 6000));
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // Main thread: A 40 samples, of them B 10, of them C 3; the pool's
        // 40 follow the main thread's innermost op.
        let (ra, rb, rc) = (row_at(&a, "A"), row_at(&a, "A/B"), row_at(&a, "A/B/C"));
        assert_eq!(
            (ra.samples, ra.pool_samples, ra.inclusive_samples),
            (60, 30, 80)
        );
        assert_eq!(
            (rb.samples, rb.pool_samples, rb.inclusive_samples),
            (14, 7, 20)
        );
        assert_eq!(
            (rc.samples, rc.pool_samples, rc.inclusive_samples),
            (6, 3, 6)
        );
        assert_eq!((rc.name.as_str(), rc.depth), ("C", 2));
        assert_eq!(rc.parent.as_deref(), Some("A/B"));
        assert_eq!(rb.parent.as_deref(), Some("A"));
        assert_eq!(ra.parent, None);
        // C at the top is a row of its own.
        let top_c = row_at(&a, "C");
        assert_eq!((top_c.samples, top_c.depth, top_c.calls), (2, 0, Some(1)));
        // Old logs: no cpu=, every figure from the samples.
        assert!(a.rows.iter().all(|r| r.cpu_source == CpuSource::Sampled));
        assert_eq!((ra.cpu_ns, ra.inclusive_cpu_ns), (6000, 8000));
        assert_eq!(ra.uncertainty_ns, sampled_uncertainty_ns(60, 100));
        assert_eq!(sampled_uncertainty_ns(60, 100), 1518);
        assert_eq!(ra.inclusive_uncertainty_ns, sampled_uncertainty_ns(80, 100));
        // The tree in table order: A, its subtree, then C at the top.
        let paths: Vec<&str> = a
            .rows
            .iter()
            .filter(|r| r.kind == RowKind::Op)
            .map(|r| r.path.as_str())
            .collect();
        assert_eq!(paths, vec!["A", "A/B", "A/B/C", "C"]);
        // Exclusive figures add up to the totals.
        assert_eq!(
            a.rows.iter().map(|r| r.samples).sum::<u64>(),
            a.total_samples
        );
        assert_eq!(a.rows.iter().map(|r| r.cpu_ns).sum::<u64>(), a.total_cpu_ns);
        assert!((a.rows.iter().map(|r| r.share).sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(row_at(&a, "outside any op (worker)").samples, 18);
    }

    #[test]
    fn cpu_of_the_spans_is_exact_and_takes_precedence_over_samples() {
        let cpu = [Some(3000), Some(800), Some(250), Some(150)];
        let a = attribute_folder(
            nested_folder(cpu, &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        let (ra, rb, rc) = (row_at(&a, "A"), row_at(&a, "A/B"), row_at(&a, "A/B/C"));
        // Own thread: the spans' cpu= less their children's; pool samples
        // added (and only they make the figure uncertain).
        assert_eq!(rc.cpu_ns, 250 + 3 * 100);
        assert_eq!(rb.cpu_ns, 800 - 250 + 7 * 100);
        assert_eq!(ra.cpu_ns, 3000 - 800 + 30 * 100);
        assert_eq!(ra.inclusive_cpu_ns, ra.cpu_ns + rb.cpu_ns + rc.cpu_ns);
        assert_eq!(ra.cpu_source, CpuSource::Exact);
        assert_eq!(ra.uncertainty_ns, sampled_uncertainty_ns(30, 100));
        assert_eq!(ra.inclusive_uncertainty_ns, sampled_uncertainty_ns(40, 100));
        assert_eq!(row_at(&a, "C").cpu_ns, 150);
        // The samples divide the exact figure among the functions: A's
        // 30 main-thread samples and 30 pool samples, half each.
        let f: Vec<(&str, u64)> = ra
            .top_functions
            .iter()
            .map(|f| (f.function.as_str(), f.cpu_ns))
            .collect();
        assert_eq!(f, vec![("main_fn", 2600), ("pool_fn", 2600)]);
        assert_eq!(row_at(&a, "C").uncertainty_ns, 0);
        assert_eq!(ra.cpu_per_call_ns, Some(ra.inclusive_cpu_ns));
        assert_eq!(a.rows.iter().map(|r| r.cpu_ns).sum::<u64>(), a.total_cpu_ns);

        // A child without cpu=: it rests on samples, its parent's clock
        // less its samples; the grandparent, whose children all say, stays
        // exact.
        let cpu = [Some(3000), Some(800), None, Some(150)];
        let a = attribute_folder(
            nested_folder(cpu, &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        assert_eq!(row_at(&a, "A/B/C").cpu_source, CpuSource::Sampled);
        assert_eq!(row_at(&a, "A/B/C").cpu_ns, 600);
        // B: its clock less C's 3 own-thread samples, plus its pool's 7.
        assert_eq!(row_at(&a, "A/B").cpu_source, CpuSource::ClockLessSampled);
        assert_eq!(row_at(&a, "A/B").cpu_ns, 800 - 300 + 700);
        assert_eq!(
            row_at(&a, "A/B").uncertainty_ns,
            sampled_uncertainty_ns(7 + 3, 100)
        );
        assert_eq!(row_at(&a, "A").cpu_source, CpuSource::Exact);
        assert_eq!(row_at(&a, "A").cpu_ns, 3000 - 800 + 3000);
    }

    #[test]
    fn a_parent_and_child_of_one_start_and_end_nest_as_written() {
        let off = 1_000_000u64;
        // Q (the child) ends first, so its line comes first.
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\nSQ,{},1000,kind=op\nSP,{},1000,kind=op\n# lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
            1000 + off,
            1000 + off,
            5000 + off
        );
        let samples: Vec<Sample> = every_100_ns(1000, 2000)
            .into_iter()
            .map(|t| sample_at(t, 10, 0))
            .collect();
        let dir = sampled_folder(&log, &[(0, Symbol::new("f", "/py"))], &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert_eq!(row_at(&a, "P/Q").samples, 10);
        assert_eq!(row_at(&a, "P").samples, 0);
        assert_eq!(row_at(&a, "P").inclusive_samples, 10);
    }

    #[test]
    fn work_outside_every_op_is_said_past_five_percent() {
        // 18 of the worker's 100 samples outside every op.
        let a = attribute_folder(
            nested_folder([None; 4], &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
        let u = &a.unseen[0];
        assert_eq!((u.role, u.samples, u.cpu_ns), (Role::Worker, 18, 1800));
        assert!((u.share - 0.18).abs() < 1e-9);
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("18% of the DataLoader workers' CPU")
                && notes.contains("main_fn (100%)")
                && notes.contains("--op MODULE:QUALNAME")
                && notes.contains("lotus_trace.span"),
            "{notes}"
        );
        // 2 of 82 (under 5%): nothing said.
        let mut times = every_100_ns(1000, 5000);
        times.extend([5200, 5300, 5500, 5600]);
        let a = attribute_folder(
            nested_folder([None; 4], &times).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        assert_eq!(row_at(&a, "outside any op (worker)").samples, 2);
        assert!(a.unseen.is_empty(), "{:?}", a.unseen);
        assert!(
            !a.notes.join("\n").contains("outside every op"),
            "{:?}",
            a.notes
        );
    }

    /// A worker's CPU outside every op is judged within its batches: its
    /// start-up before the first, its wait and its exit after the last are
    /// no op's, and say nothing (they are its start-up and shutdown rows).
    #[test]
    fn a_workers_work_outside_its_batches_is_not_said_unseen() {
        let times = every_100_ns(0, 9000);
        let plain = nested_folder([None; 4], &times);
        let a = attribute_folder(plain.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // No batch span: every sample outside the ops counts.
        assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
        assert_eq!(a.unseen[0].samples, 48);
        // The same worker with one batch over [1000, 5600): 4 of its
        // samples in the batch are outside every op (of 130: said nothing).
        let log = std::fs::read_to_string(plain.path().join("lotus_worker_pid_10")).expect("log");
        let batch = format!("SBatch,{},4600,kind=batch,batch=0\n", 1000 + 1_000_000u64);
        let log = log.replacen(
            "# lotus-trace: clock",
            &format!("{batch}# lotus-trace: clock"),
            1,
        );
        std::fs::write(plain.path().join("lotus_worker_pid_10"), log).expect("write");
        let a = attribute_folder(plain.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        assert!(a.unseen.is_empty(), "{:?}", a.unseen);
        let n = |name: &str| row_at(&a, name).samples;
        // Before the batch: [0, 1000), 10 samples; after its end and the
        // last op's: the rest.
        assert_eq!(n("start-up and imports (worker)"), 10);
        assert_eq!(
            n("start-up and imports (worker)")
                + n("outside any op (worker)")
                + n("shutdown and exit (worker)"),
            48
        );
        assert!(n("outside any op (worker)") <= 5, "{a:#?}");
    }

    /// A main process (pid 10, no workers) running batches itself over
    /// [1000, 3000) and [4000, 6000), op A over [1000, 1500) and
    /// [4000, 4500) in them, its training step over [6000, 9000); sampled
    /// every 100 ns throughout.
    fn main_only_folder() -> tempfile::TempDir {
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=main pid=10 wall_ns={off} monotonic_ns=0\n\
             SA,{},500,kind=op,batch=0\nSBatch,{},2000,kind=batch,batch=0\n\
             SA,{},500,kind=op,batch=1\nSBatch,{},2000,kind=batch,batch=1\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            1000 + off,
            1000 + off,
            4000 + off,
            4000 + off,
            9000 + off
        );
        let samples: Vec<Sample> = every_100_ns(0, 9000)
            .into_iter()
            .map(|t| Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: u32::from(!(1000..3000).contains(&t) && !(4000..6000).contains(&t)),
                kernel: false,
                counters: Default::default(),
            })
            .collect();
        let dir = sampled_folder(
            &log,
            &[
                (0, Symbol::new("decode", "/py")),
                (1, Symbol::new("train_step", "/py")),
            ],
            &samples,
            100,
        );
        std::fs::rename(
            dir.path().join("lotus_worker_pid_10"),
            dir.path().join("lotus_main_pid_10"),
        )
        .expect("rename");
        dir
    }

    #[test]
    fn a_main_process_batch_work_outside_every_op_is_said() {
        let dir = main_only_folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // In its batches: 40 samples, 10 in A, 30 outside every op; the
        // training step's 50 outside the batches are not judged.
        assert_eq!(row_at(&a, "A").samples, 10);
        // Outside every op: before its first batch, from it to its last
        // batch's end, after it.
        assert_eq!(row_at(&a, "start-up and imports (main)").samples, 10);
        assert_eq!(
            row_at(&a, "training loop, outside the DataLoader (main)").samples,
            41
        );
        assert_eq!(row_at(&a, "after the last batch (main)").samples, 29);
        assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
        let u = &a.unseen[0];
        assert_eq!((u.role, u.samples), (Role::Main, 30));
        assert!((u.share - 0.75).abs() < 1e-9);
        assert_eq!(u.top_functions[0].function, "decode");
        assert_eq!(
            u.top_functions.len(),
            1,
            "train_step is outside the batches"
        );
        let notes = a.notes.join("\n");
        assert!(
            notes.contains("75% of the main process's CPU in its batches"),
            "{notes}"
        );
    }

    #[test]
    fn op_rows_have_their_spans_wall_time_inclusive_and_exclusive() {
        // A [1000, 5000) holds A/B [2000, 3000), which holds A/B/C
        // [2200, 2500); C [5200, 5400) at the top.
        let dir = nested_folder([None; 4], &every_100_ns(0, 6000));
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let wall = |p: &str| {
            let r = row_at(&a, p);
            (r.wall_ns, r.exclusive_wall_ns)
        };
        assert_eq!(wall("A"), (Some(4000), Some(3000)));
        assert_eq!(wall("A/B"), (Some(1000), Some(700)));
        assert_eq!(wall("A/B/C"), (Some(300), Some(300)));
        assert_eq!(wall("C"), (Some(200), Some(200)));
        for r in a.rows.iter().filter(|r| r.kind != RowKind::Op) {
            assert_eq!((r.wall_ns, r.exclusive_wall_ns), (None, None), "{}", r.name);
        }
    }

    /// A main process (pid 10) with two workers' batches handed to it:
    /// waits [2000, 2500) and [4000, 4200), consumptions at 2500 and 4200,
    /// op A in a worker (pid 20) over [2000, 2400); the main thread sampled
    /// every 100 ns over [0, 6000), the worker at 2000..2400.
    fn main_loop_folder() -> tempfile::TempDir {
        let off = 1_000_000u64;
        let main = format!(
            "#lotus-trace v1 role=main pid=10 wall_ns={off} monotonic_ns=0\n\
             SWait,{},500,kind=wait,batch=0,ready=0\nSConsume,{},0,kind=consume,batch=0\n\
             SWait,{},200,kind=wait,batch=1,ready=0\nSConsume,{},0,kind=consume,batch=1\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            2000 + off,
            2500 + off,
            4000 + off,
            4200 + off,
            9000 + off
        );
        let worker = format!(
            "#lotus-trace v1 role=worker pid=20 wall_ns={off} monotonic_ns=0\n\
             SA,{},400,kind=op,batch=0\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            2000 + off,
            9000 + off
        );
        let mut samples: Vec<Sample> = Vec::new();
        for t in every_100_ns(0, 6000) {
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol: 0,
                kernel: false,
                counters: Default::default(),
            });
            if (2000..2400).contains(&t) {
                samples.push(Sample {
                    time_ns: t + 1,
                    pid: 20,
                    tid: 20,
                    symbol: 1,
                    kernel: false,
                    counters: Default::default(),
                });
            }
        }
        let dir = sampled_folder(
            &worker,
            &[
                (0, Symbol::new("step", "/py")),
                (1, Symbol::new("decode", "/k.so")),
            ],
            &samples,
            100,
        );
        std::fs::rename(
            dir.path().join("lotus_worker_pid_10"),
            dir.path().join("lotus_worker_pid_20"),
        )
        .expect("rename");
        std::fs::write(dir.path().join("lotus_main_pid_10"), main).expect("main");
        dir
    }

    #[test]
    fn the_main_process_rows_are_split_by_phase_and_come_last() {
        let dir = main_loop_folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // [0, 2000): before the first request; [2000, 4200]: the loop;
        // after: the rest.
        let names: Vec<(&str, u64)> = a
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.samples))
            .collect();
        assert_eq!(
            names,
            [
                ("A", 4),
                ("start-up and imports (main)", 20),
                ("training loop, outside the DataLoader (main)", 23),
                ("after the last batch (main)", 17),
            ],
            "{a:#?}"
        );
        assert!(
            !a.rows.iter().any(|r| r.name == "outside any op (main)"),
            "{a:#?}"
        );
        let sum: u64 = a.rows.iter().map(|r| r.samples).sum();
        assert_eq!(sum, a.total_samples);
    }

    #[test]
    fn rows_resting_on_few_samples_are_said_uncertain() {
        let a = attribute_folder(
            nested_folder([None; 4], &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        let notes = a.notes.join("\n");
        // C at the top: 2 samples, ±138%.
        assert!(
            notes.contains("4 op rows rest on too few samples") && notes.contains("C (±138%)"),
            "{notes}"
        );
        // Exact rows with no pool are certain.
        let cpu = [Some(3000), Some(800), Some(250), Some(150)];
        let a = attribute_folder(
            nested_folder(cpu, &every_100_ns(0, 6000)).path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
        )
        .expect("attribute");
        let notes = a.notes.join("\n");
        assert!(notes.contains("3 op rows rest on too few"), "{notes}");
        assert!(!notes.contains(" C (±"), "{notes}");
    }

    #[test]
    fn folders_without_samples_or_clock() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("lotus_main_pid_1"), "SA,1,2,kind=op\n").expect("w");
        let err = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect_err("no samples");
        assert!(err.to_string().contains("--sample"), "{err}");
        let mut w = SamplesWriter::create(dir.path(), "lotus").expect("w");
        w.finish().expect("f");
        let err = attribute_folder(dir.path(), "lotus", Budget::default(), TOP_FUNCTIONS)
            .expect_err("no clock");
        assert!(err.to_string().contains("no clock pairs"), "{err}");
    }
}
