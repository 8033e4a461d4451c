//! Spans from frames: the timeline of a folder of samples alone (a job
//! sampled without the tracer, `lotus trace attach`), each thread's op
//! slices estimated from the ops its samples' Python frames show (the
//! rule of `frame_ops`), for `lotus trace view DIR` ([`crate::ChromeView`]).
//!
//! The rule, per thread, its samples in time order: each sample stands
//! at its op path (the ops its frames show, outermost first, as `lotus
//! attribute DIR` credits it); a main process's sample in `next(loader)`
//! in no op at a path of its own ([`NEXT_ROW`], the attribution's row of
//! it), as the tracer's view shows the main process's waits; any other
//! sample in no op at none. At each level of a path, consecutive samples
//! under the same ops down to that level make one slice, from the first
//! one's time to the last one's plus one sampling interval (cut at the
//! next sample's time where that came sooner, so that a thread's slices
//! nest and never overlap). A sample at another path ends the slices it
//! does not share, a sample in no op ends them all, and so does a gap of
//! more than [`GAP_INTERVALS`] intervals between two samples of the
//! thread (it slept or waited off the CPU). So a slice's samples are its
//! op's inclusive samples during it, and an op path's slices add up to
//! its row's inclusive samples in `lotus attribute DIR`.
//!
//! Nothing here was measured: a slice's length is estimated from samples
//! (a thread is sampled every interval of its CPU time), a call shorter
//! than an interval may fall between two samples, and two calls of one
//! op with no sample between them make one slice.
//!
//! Memory: each thread's samples are held, 16 bytes each (their time and
//! place, to sort them by time), then its slices, 32 bytes each.

use super::frame_ops::{read_and_credit, Keep, NEXT_ROW};
use super::*;

/// A gap between two samples of a thread longer than this many sampling
/// intervals ends its slices: the thread slept or waited off the CPU.
pub const GAP_INTERVALS: u64 = 3;

/// The name of the slices of a main process's samples in `next(loader)`
/// in no op (the row [`NEXT_ROW`]).
pub const NEXT_SLICE: &str = "next(loader)";

/// Each thread's samples, by (pid, tid), with where each stands.
pub(super) type Timeline = HashMap<(u32, u32), Vec<(u64, Place)>>;

/// Where a sample stands on its thread's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// In no op (and not in a main process's `next(loader)`).
    None,
    /// A main process's `next(loader)`, in no op.
    Next,
    /// In the op path of this id (`Tree`'s).
    Op(u32),
}

/// An op of the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameOp {
    /// Its name: the op's (`RandomResizedCrop`), or [`NEXT_SLICE`].
    pub name: String,
    /// Its path as the rows of `lotus attribute DIR` name it
    /// (`Crops/RandomResizedCrop`; [`NEXT_ROW`] for [`NEXT_SLICE`]).
    pub path: String,
    /// Its depth: 0 at the top of its thread.
    pub depth: u32,
}

/// One slice: consecutive samples of a thread under the same ops down to
/// its op's level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameSlice {
    /// Its op: an index into [`FrameSpans::ops`].
    pub op: u32,
    /// The time of its first sample, ns (the samples' clock,
    /// `CLOCK_MONOTONIC`).
    pub start_ns: u64,
    /// The time of its last sample plus one sampling interval, or the
    /// next sample's time where that came sooner, ns.
    pub end_ns: u64,
    /// Its samples.
    pub samples: u64,
}

/// One thread's slices.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrameThread {
    /// Its process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// Its slices by start, an outer one before those it holds.
    pub slices: Vec<FrameSlice>,
}

/// The timeline of a folder of samples alone ([`frame_spans`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FrameSpans {
    /// The ops the slices refer to.
    pub ops: Vec<FrameOp>,
    /// The threads with slices, by process and thread id.
    pub threads: Vec<FrameThread>,
    /// Each process's role where its frames tell it (a worker's loop, a
    /// main process's `next(loader)`, or the process attached to); the
    /// others are not known.
    pub roles: BTreeMap<u32, Role>,
    /// The sampling interval, ns.
    pub interval_ns: u64,
    /// Samples read.
    pub total_samples: u64,
    /// Samples in a slice (in an op, or in a main process's
    /// `next(loader)`).
    pub in_slices: u64,
    /// Whether the samples are those of a run cut short.
    pub partial: bool,
    /// What is worth saying of the samples (a cut file, symbols skipped).
    pub notes: Vec<String>,
}

impl FrameSpans {
    /// The top-level slices alone (what `lotus trace view --coarse`
    /// keeps of a folder of samples alone).
    pub fn top_level(mut self) -> FrameSpans {
        let ops = &self.ops;
        for t in &mut self.threads {
            t.slices.retain(|s| ops[s.op as usize].depth == 0);
        }
        self
    }
}

/// The timeline of the sampled folder `dir` (samples of `prefix`, with
/// call stacks, no tracer logs read): each thread's slices, estimated
/// from the ops its samples' Python frames show (the module's rule). An
/// error where the samples carry no stacks ([`Error::NoStacks`]) or
/// cannot be read.
pub fn frame_spans<'a>(dir: impl Into<Dir<'a>>, prefix: &str) -> Result<FrameSpans, Error> {
    let (sampling, stacks, mut c) = read_and_credit(dir.into(), prefix, Keep::Timeline)?;
    let interval_ns = sampling.interval_ns;
    let mut ops: Vec<FrameOp> = c
        .tree
        .nodes
        .iter()
        .enumerate()
        .map(|(p, node)| FrameOp {
            name: c.ops[node.op as usize].clone(),
            path: c.tree.name(p as u32, &c.ops),
            depth: node.depth,
        })
        .collect();
    let next = ops.len() as u32;
    ops.push(FrameOp {
        name: NEXT_SLICE.into(),
        path: NEXT_ROW.into(),
        depth: 0,
    });
    let mut timeline: Vec<_> = c.timeline.take().unwrap_or_default().into_iter().collect();
    timeline.sort_unstable_by_key(|(thread, _)| *thread);
    let (mut threads, mut in_slices) = (Vec::new(), 0);
    for ((pid, tid), mut samples) in timeline {
        // Stable: samples of one time keep their reading order.
        samples.sort_by_key(|&(t, _)| t);
        in_slices += samples.iter().filter(|s| s.1 != Place::None).count() as u64;
        let slices = thread_slices(&samples, |at, out| levels(&c.tree, at, out), interval_ns);
        if slices.is_empty() {
            continue;
        }
        let slices = slices
            .into_iter()
            .map(|s| FrameSlice {
                op: match s.at {
                    Place::Op(p) => p,
                    _ => next,
                },
                start_ns: s.start_ns,
                end_ns: s.end_ns,
                samples: s.samples,
            })
            .collect();
        threads.push(FrameThread { pid, tid, slices });
    }
    let mut roles: BTreeMap<u32, Role> = c.roles.iter().map(|(&p, &r)| (p, r)).collect();
    if let Some(pid) = sampling
        .meta
        .get("attached_pid")
        .and_then(|p| p.parse::<u32>().ok())
    {
        roles.entry(pid).or_insert(Role::Main);
    }
    let mut notes = sampling.notes.clone();
    notes.extend(stacks.skipped_note(&sampling.files.stacks));
    notes.extend(ending_notes(&sampling.meta, c.cut_bytes));
    Ok(FrameSpans {
        ops,
        threads,
        roles,
        interval_ns,
        total_samples: c.total,
        in_slices,
        partial: partial(&sampling.meta, c.cut_bytes),
        notes,
    })
}

/// The levels of a place, outermost first: an op path's ops, or
/// `next(loader)` alone, or none.
fn levels(tree: &Tree, at: Place, out: &mut Vec<Place>) {
    out.clear();
    match at {
        Place::None => {}
        Place::Next => out.push(Place::Next),
        Place::Op(p) => {
            let mut q = Some(p);
            while let Some(n) = q {
                out.push(Place::Op(n));
                q = tree.nodes[n as usize].parent;
            }
            out.reverse();
        }
    }
}

/// A slice of one thread, at one level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slice {
    at: Place,
    depth: u32,
    start_ns: u64,
    end_ns: u64,
    samples: u64,
}

/// A slice still open: its first and last sample's times, its samples.
struct Open {
    at: Place,
    start: u64,
    last: u64,
    samples: u64,
}

/// The slices of one thread's samples (`(time, place)`, in time order),
/// each place's levels given by `levels`: the module's rule. By start, an
/// outer slice before those it holds.
fn thread_slices(
    samples: &[(u64, Place)],
    mut levels: impl FnMut(Place, &mut Vec<Place>),
    interval_ns: u64,
) -> Vec<Slice> {
    let gap = interval_ns.saturating_mul(GAP_INTERVALS);
    let (mut open, mut out, mut path) = (Vec::<Open>::new(), Vec::new(), Vec::new());
    let mut previous: Option<u64> = None;
    for &(t, at) in samples {
        levels(at, &mut path);
        let slept = previous.is_some_and(|p| t.saturating_sub(p) > gap);
        let keep = if slept {
            0
        } else {
            open.iter()
                .zip(&path)
                .take_while(|(o, p)| o.at == **p)
                .count()
        };
        close(
            &mut open,
            keep,
            (!slept).then_some(t),
            interval_ns,
            &mut out,
        );
        for o in &mut open {
            o.last = t;
            o.samples += 1;
        }
        open.extend(path[keep..].iter().map(|&at| Open {
            at,
            start: t,
            last: t,
            samples: 1,
        }));
        previous = Some(t);
    }
    close(&mut open, 0, None, interval_ns, &mut out);
    out.sort_by_key(|s| (s.start_ns, s.depth));
    out
}

/// Closes the open slices deeper than `keep` levels: each ends one
/// interval after its last sample, or at `next` (the sample that ends
/// it) where that came sooner.
fn close(
    open: &mut Vec<Open>,
    keep: usize,
    next: Option<u64>,
    interval_ns: u64,
    out: &mut Vec<Slice>,
) {
    while open.len() > keep {
        let Some(o) = open.pop() else { break };
        let end = o.last.saturating_add(interval_ns);
        out.push(Slice {
            at: o.at,
            depth: open.len() as u32,
            start_ns: o.start,
            end_ns: next.map_or(end, |n| end.min(n.max(o.last))),
            samples: o.samples,
        });
    }
}

#[cfg(test)]
mod tests;
