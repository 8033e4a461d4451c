//! Call stacks folded per window, in memory (`lotus map --stacks`,
//! `lotus profile --stacks`, where no samples file is written): the
//! sampler's writer counts each sample of a window under its stack (or its
//! own function, where it has none), and the report names the frames.
//!
//! Memory grows with distinct stacks per window, not samples: the
//! windows of a mapping are its runs, a profile's one.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use crate::{Sample, SampleSink, StackNode, Symbol, MAX_STACK_DEPTH, UNKNOWN_SYMBOL};

/// What a sample is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FoldKey {
    /// Its stack (an id of the writer's prefix tree).
    Stack(u32),
    /// Its own function alone (no stack: a sample added at a thread's
    /// exit, a kernel thread's).
    Leaf(u32),
}

/// The counts, and what names them.
#[derive(Debug, Default)]
pub struct StackFolds {
    /// Samples by (window, key).
    counts: HashMap<(usize, FoldKey), u64>,
    /// Function names by symbol id.
    functions: HashMap<u32, String>,
    /// Stack nodes by id: (parent, symbol).
    nodes: HashMap<u32, (u32, u32)>,
}

/// A writer's and a reader's shared handle.
pub type SharedFolds = Arc<Mutex<StackFolds>>;

impl StackFolds {
    /// Counts one sample of window `window` under `key`.
    pub fn count(&mut self, window: usize, key: FoldKey) {
        *self.counts.entry((window, key)).or_default() += 1;
    }

    /// Counts one sample of window `window`: under its stack `stack`
    /// where it has one (not 0), else under its own function `symbol`.
    /// The rule of the sampler's writer and of a [`FoldSink`] alike.
    pub fn count_sample(&mut self, window: usize, symbol: u32, stack: u32) {
        let key = match stack {
            0 => FoldKey::Leaf(symbol),
            id => FoldKey::Stack(id),
        };
        self.count(window, key);
    }

    /// Names the symbols `new` and adds the stack nodes `nodes`, as a
    /// sampler sends them before the samples that use them.
    pub fn learn(&mut self, new: &[(u32, Symbol)], nodes: &[StackNode]) {
        for (id, symbol) in new {
            self.symbol(*id, symbol);
        }
        self.nodes(nodes);
    }

    /// Names symbol `id` (as collapsed stacks name it: a kernel
    /// function marked `_[k]`).
    pub fn symbol(&mut self, id: u32, symbol: &Symbol) {
        self.functions.insert(id, symbol.folded_frame());
    }

    /// Adds stack nodes.
    pub fn nodes(&mut self, new: &[StackNode]) {
        for n in new {
            self.nodes.insert(n.id, (n.parent, n.symbol));
        }
    }

    /// The stacks of `window` (every window where `None`): (frames
    /// outermost first, samples), most samples first.
    pub fn stacks(&self, window: Option<usize>) -> Vec<(Vec<String>, u64)> {
        let mut by_frames: HashMap<Vec<String>, u64> = HashMap::new();
        for (&(w, key), &n) in &self.counts {
            if window.is_some_and(|want| want != w) {
                continue;
            }
            *by_frames.entry(self.frames(key)).or_default() += n;
        }
        let mut out: Vec<(Vec<String>, u64)> = by_frames.into_iter().collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// The frames of `key`, outermost first.
    fn frames(&self, key: FoldKey) -> Vec<String> {
        let name = |s: u32| {
            self.functions
                .get(&s)
                .cloned()
                .unwrap_or_else(|| UNKNOWN_SYMBOL.to_string())
        };
        match key {
            FoldKey::Leaf(s) => vec![name(s)],
            FoldKey::Stack(mut id) => {
                let mut frames = Vec::new();
                // The writer keeps chains at most MAX_STACK_DEPTH deep; a
                // bound here too, so that no chain can loop.
                while id != 0 && frames.len() < MAX_STACK_DEPTH {
                    let Some(&(parent, symbol)) = self.nodes.get(&id) else {
                        break;
                    };
                    frames.push(name(symbol));
                    id = parent;
                }
                frames.reverse();
                frames
            }
        }
    }
}

/// A sink that keeps nothing: where the samples are folded instead
/// ([`StackFolds`]), not written.
#[derive(Debug, Default)]
pub struct NoSink;

impl SampleSink for NoSink {
    fn counters(&mut self, _counters: usize) -> io::Result<()> {
        Ok(())
    }

    fn symbols(&mut self, _new: &[(u32, Symbol)]) -> io::Result<()> {
        Ok(())
    }

    fn samples(&mut self, _block: &[Sample]) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn with_stacks(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A boxed sink is a sink: a layer (`lotus-pyframes`' `PySink`) wraps
/// whichever sink the sampler was given.
impl<S: SampleSink + ?Sized> SampleSink for Box<S> {
    fn counters(&mut self, count: usize) -> io::Result<()> {
        (**self).counters(count)
    }
    fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()> {
        (**self).symbols(new)
    }
    fn samples(&mut self, block: &[Sample]) -> io::Result<()> {
        (**self).samples(block)
    }
    fn finish(&mut self) -> io::Result<()> {
        (**self).finish()
    }
    fn with_stacks(&mut self) -> io::Result<()> {
        (**self).with_stacks()
    }
    fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
        (**self).stacks(new)
    }
    fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
        (**self).samples_with_stacks(block, stacks)
    }
}

/// The window a sample's time falls in (`None`: in none, not counted).
pub type WindowOf = Box<dyn Fn(u64) -> Option<usize> + Send>;

/// A sink that folds what reaches it into [`StackFolds`], each sample
/// under the window its time falls in: where something between the
/// sampler and the folds rewrites the stacks (Python frames spliced in by
/// `lotus-pyframes`), so that the folds count the stacks as rewritten.
/// Without such a layer the sampler's writer counts them itself.
pub struct FoldSink {
    folds: SharedFolds,
    window_of: WindowOf,
}

impl FoldSink {
    /// Folds into `folds`, windows told by `window_of`.
    pub fn new(folds: SharedFolds, window_of: WindowOf) -> FoldSink {
        FoldSink { folds, window_of }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StackFolds> {
        self.folds.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SampleSink for FoldSink {
    fn counters(&mut self, _counters: usize) -> io::Result<()> {
        Ok(())
    }

    fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()> {
        self.lock().learn(new, &[]);
        Ok(())
    }

    fn samples(&mut self, block: &[Sample]) -> io::Result<()> {
        self.samples_with_stacks(block, &[])
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn with_stacks(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
        self.lock().learn(&[], new);
        Ok(())
    }

    /// As the sampler's writer counts them: under the stack where there
    /// is one, else under the sample's own function.
    fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
        let windows: Vec<Option<usize>> =
            block.iter().map(|s| (self.window_of)(s.time_ns)).collect();
        let mut f = self.lock();
        for (i, (s, w)) in block.iter().zip(windows).enumerate() {
            if let Some(w) = w {
                f.count_sample(w, s.symbol, stacks.get(i).copied().unwrap_or(0));
            }
        }
        Ok(())
    }
}

impl std::fmt::Debug for FoldSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoldSink").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stacks are named outermost first, per window or all together; a
    /// sample without a stack is its function alone.
    #[test]
    fn folds_name_stacks_per_window() {
        let mut f = StackFolds::default();
        f.symbol(0, &Symbol::new("main", "/bin/a"));
        f.symbol(1, &Symbol::new("outer", "/bin/a"));
        f.symbol(2, &Symbol::new("inner", "/bin/a"));
        f.nodes(&[
            StackNode::new(1, 0, 0),
            StackNode::new(2, 1, 1),
            StackNode::new(3, 2, 2),
        ]);
        for _ in 0..3 {
            f.count(0, FoldKey::Stack(3));
        }
        f.count(1, FoldKey::Stack(3));
        f.count(1, FoldKey::Leaf(2));
        let frames = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            f.stacks(Some(0)),
            vec![(frames(&["main", "outer", "inner"]), 3)]
        );
        let all = f.stacks(None);
        assert_eq!(all[0].1, 4);
        assert_eq!(all[1].0, frames(&["inner"]));
        assert_eq!(f.stacks(Some(7)), Vec::new());
    }

    /// A fold sink counts what reaches it as the sampler's writer would:
    /// under its stack (its function alone where it has none), in the
    /// window its time falls in, and not at all outside every window.
    #[test]
    fn a_fold_sink_counts_by_the_window_of_each_samples_time() {
        let folds = SharedFolds::default();
        // Windows [100, 200) and [300, 400).
        let window: WindowOf = Box::new(|t| match t {
            100..200 => Some(0),
            300..400 => Some(1),
            _ => None,
        });
        let mut sink: Box<dyn SampleSink> = Box::new(FoldSink::new(Arc::clone(&folds), window));
        sink.with_stacks().expect("stacks");
        sink.symbols(&[
            (0, Symbol::new("main", "/bin/a")),
            (1, Symbol::new("work", "/bin/a")),
        ])
        .expect("symbols");
        sink.stacks(&[StackNode::new(1, 0, 0), StackNode::new(2, 1, 1)])
            .expect("nodes");
        let at = |time_ns| Sample {
            time_ns,
            pid: 1,
            tid: 1,
            symbol: 1,
            kernel: false,
            counters: Default::default(),
        };
        sink.samples_with_stacks(&[at(150), at(160), at(250), at(350)], &[2, 0, 2, 2])
            .expect("samples");
        sink.finish().expect("finish");
        let f = folds.lock().expect("folds");
        let frames = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut first = f.stacks(Some(0));
        first.sort();
        assert_eq!(
            first,
            vec![(frames(&["main", "work"]), 1), (frames(&["work"]), 1)]
        );
        assert_eq!(f.stacks(Some(1)), vec![(frames(&["main", "work"]), 1)]);
        // The sample at 250 is in no window.
        assert_eq!(f.stacks(None).iter().map(|s| s.1).sum::<u64>(), 3);
    }
}
