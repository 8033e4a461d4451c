//! The sweep over the op spans in time order: which span is open on a
//! thread at a sample's time, and the tree of op paths it builds.

use super::*;

/// A span's `cpu` when its log line has no `cpu=`.
pub(super) const NO_CPU: u64 = u64::MAX;

/// How deep spans nest before deeper ones are folded into their ancestor
/// (a recursive function named with `--op` would otherwise make a row per
/// level).
pub const MAX_DEPTH: u32 = 32;

/// One op span on the samples' clock. `id` is the span's place in
/// reading order among every event of the folder (the count
/// [`lotus_trace::TraceFolder::read_all`] gives, the key `lotus trace
/// view` finds its events by). `cpu` is its own thread's CPU time during
/// it (`cpu=`), [`NO_CPU`] where the log does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SpanRec {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) op: u32,
    pub(super) id: u64,
    pub(super) cpu: u64,
    /// `hook=`, 0 where the log does not say.
    pub(super) hook: u64,
    /// `hook_in=`, 0 where the log does not say.
    pub(super) hook_in: u64,
}

impl SpanRec {
    /// The order of the sweep: by start; at one start the longer span
    /// first (a parent before the children that start with it); at one
    /// start and end the later written first (a span's line is written
    /// when it ends, so a parent's after its child's).
    pub(super) fn key(&self) -> (u64, Reverse<u64>, Reverse<u64>, u32, u32) {
        (
            self.start,
            Reverse(self.end),
            Reverse(self.id),
            self.pid,
            self.tid,
        )
    }
}

impl Ord for SpanRec {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key()
            .cmp(&other.key())
            .then_with(|| self.op.cmp(&other.op))
            .then_with(|| self.cpu.cmp(&other.cpu))
    }
}

impl PartialOrd for SpanRec {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Record for SpanRec {
    const SIZE: usize = 60;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.start)
            .u64(self.end)
            .u32(self.pid)
            .u32(self.tid)
            .u32(self.op)
            .u64(self.id)
            .u64(self.cpu)
            .u64(self.hook)
            .u64(self.hook_in);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        SpanRec {
            start: g.u64(),
            end: g.u64(),
            pid: g.u32(),
            tid: g.u32(),
            op: g.u32(),
            id: g.u64(),
            cpu: g.u64(),
            hook: g.u64(),
            hook_in: g.u64(),
        }
    }
}

/// One place in the op tree: an op under a parent path (`None`: at the
/// top of its thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PathNode {
    pub(super) parent: Option<u32>,
    pub(super) op: u32,
    pub(super) depth: u32,
}

/// What the spans of one path add up to.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PathStats {
    /// Spans of this path.
    pub(super) calls: u64,
    /// Of them, those whose line says `cpu=`.
    pub(super) with_cpu: u64,
    /// Their `cpu=` summed, ns.
    pub(super) cpu_ns: u64,
    /// Their durations summed (wall time), ns.
    pub(super) wall_ns: u64,
}

/// The op paths the sweep met (an op's path: the ops open around it on
/// its thread, outermost first), each with its spans' calls and CPU.
/// A child path's id is always above its parent's.
#[derive(Debug, Default)]
pub(super) struct Tree {
    pub(super) nodes: Vec<PathNode>,
    pub(super) stats: Vec<PathStats>,
    pub(super) index: HashMap<(Option<u32>, u32), u32>,
    /// Spans nested deeper than [`MAX_DEPTH`], counted in their ancestor.
    pub(super) folded: u64,
    /// The spans' `hook=` and `hook_in=` summed per (path, pid) (`hooks`).
    pub(super) hooks: HashMap<(u32, u32), [u64; 2]>,
}

impl Tree {
    /// The path of op `op` under `parent`, made on first sight.
    pub(super) fn intern(&mut self, parent: Option<u32>, op: u32) -> u32 {
        if let Some(&p) = self.index.get(&(parent, op)) {
            return p;
        }
        let depth = parent.map_or(0, |p| self.nodes[p as usize].depth + 1);
        let id = self.nodes.len() as u32;
        self.nodes.push(PathNode { parent, op, depth });
        self.stats.push(PathStats::default());
        self.index.insert((parent, op), id);
        id
    }

    /// `A/B/C`: the op names of path `p`, outermost first.
    pub(super) fn name(&self, p: u32, ops: &[String]) -> String {
        self.parts(p, ops).join("/")
    }

    /// The op names of path `p`, outermost first.
    pub(crate) fn parts<'a>(&self, p: u32, ops: &'a [String]) -> Vec<&'a str> {
        let mut parts = Vec::new();
        let mut at = Some(p);
        while let Some(q) = at {
            let n = self.nodes[q as usize];
            parts.push(ops[n.op as usize].as_str());
            at = n.parent;
        }
        parts.reverse();
        parts
    }
}

/// A span open in the sweep, with its place in the tree.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Open {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) path: u32,
    pub(super) id: u64,
}

/// The op spans open at the time of the last sample, per thread, and the
/// tree of the spans taken in so far.
pub(super) struct Sweep<I: Iterator<Item = Result<SpanRec, SpillError>>> {
    pub(super) spans: std::iter::Peekable<I>,
    pub(super) open: HashMap<(u32, u32), Vec<Open>>,
    pub(super) pushed: u64,
    pub(super) tree: Tree,
    /// The op of the tracer's `gc` spans: a collection hands no pool work.
    pub(super) gc_op: Option<u32>,
}

impl<I: Iterator<Item = Result<SpanRec, SpillError>>> Sweep<I> {
    pub(super) fn new(spans: I) -> Self {
        Sweep {
            spans: spans.peekable(),
            open: HashMap::new(),
            pushed: 0,
            tree: Tree::default(),
            gc_op: None,
        }
    }

    /// [`Sweep::innermost`] less the `gc` spans: the op a pool works for
    /// (a collection running inside it calls no pool).
    pub(super) fn caller(&mut self, pid: u32, tid: u32, t: u64) -> Option<Open> {
        let gc = self.gc_op;
        let nodes = &self.tree.nodes;
        let list = self.open.get_mut(&(pid, tid))?;
        list.retain(|s| s.end > t);
        list.iter()
            .rev()
            .find(|s| s.start <= t && Some(nodes[s.path as usize].op) != gc)
            .copied()
    }

    /// Takes in every span that starts at or before `t`. A span's parent
    /// is the innermost span open on its thread when it starts (spans are
    /// taken in by start, a parent before its children).
    pub(super) fn advance(&mut self, t: u64) -> Result<(), SpillError> {
        while let Some(next) = self.spans.peek() {
            match next {
                Ok(s) if s.start > t => break,
                _ => {}
            }
            let s = self.spans.next().expect("peeked")?;
            let list = self.open.entry((s.pid, s.tid)).or_default();
            list.retain(|o| o.end > s.start);
            let parent = list.last().map(|o| o.path);
            let deep = parent.is_some_and(|p| self.tree.nodes[p as usize].depth + 1 >= MAX_DEPTH);
            let path = match parent {
                Some(p) if deep => {
                    self.tree.folded += 1;
                    p
                }
                _ => {
                    let path = self.tree.intern(parent, s.op);
                    let st = &mut self.tree.stats[path as usize];
                    st.calls += 1;
                    st.wall_ns = st.wall_ns.saturating_add(s.end.saturating_sub(s.start));
                    if s.cpu != NO_CPU {
                        st.with_cpu += 1;
                        st.cpu_ns = st.cpu_ns.saturating_add(s.cpu);
                    }
                    if s.hook > 0 || s.hook_in > 0 {
                        let h = self.tree.hooks.entry((path, s.pid)).or_default();
                        h[0] = h[0].saturating_add(s.hook);
                        h[1] = h[1].saturating_add(s.hook_in);
                    }
                    path
                }
            };
            list.push(Open {
                start: s.start,
                end: s.end,
                path,
                id: s.id,
            });
            self.pushed += 1;
            if self.pushed.is_multiple_of(4096) {
                // Spans come by start: one that ended by this one's start
                // is no parent of a later span, nor open at a later sample.
                let now = s.start;
                self.open.retain(|_, v| {
                    v.retain(|o| o.end > now);
                    !v.is_empty()
                });
            }
        }
        Ok(())
    }

    /// Takes in the spans left (those after the last sample), so that the
    /// tree counts every span.
    pub(super) fn finish(mut self) -> Result<Tree, SpillError> {
        self.advance(u64::MAX)?;
        Ok(self.tree)
    }

    /// The innermost span open on thread (pid, tid) at `t`: the last
    /// taken in of those still open.
    pub(super) fn innermost(&mut self, pid: u32, tid: u32, t: u64) -> Option<Open> {
        let list = self.open.get_mut(&(pid, tid))?;
        list.retain(|s| s.end > t);
        list.iter().rev().find(|s| s.start <= t).copied()
    }
}

/// Per-thread spans (sorted by start, not overlapping) met by samples in
/// time order: one cursor per thread, so each span is passed once.
pub(super) struct SpanCursor {
    pub(super) spans: HashMap<(u32, u32), Vec<(u64, u64)>>,
    pub(super) at: HashMap<(u32, u32), usize>,
}

impl SpanCursor {
    pub(super) fn new(spans: HashMap<(u32, u32), Vec<(u64, u64)>>) -> SpanCursor {
        SpanCursor {
            spans,
            at: HashMap::new(),
        }
    }

    /// Whether `time` lies in one of thread `tid` of `pid`'s spans; `None`
    /// when that thread has none. Times must not go back per thread.
    pub(super) fn inside(&mut self, pid: u32, tid: u32, time: u64) -> Option<bool> {
        // Most traces have no such spans: no hashing per sample then.
        if self.spans.is_empty() {
            return None;
        }
        let spans = self.spans.get(&(pid, tid))?;
        let i = self.at.entry((pid, tid)).or_insert(0);
        while spans.get(*i).is_some_and(|b| b.1 <= time) {
            *i += 1;
        }
        Some(spans.get(*i).is_some_and(|b| b.0 <= time))
    }
}
