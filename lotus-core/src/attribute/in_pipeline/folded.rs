//! Collapsed stacks of a sampled trace (`lotus attribute DIR --format
//! folded`): every sample credited by the rule (see [the parent
//! module](super)), its row as the outermost frames and its call stack
//! (`<prefix>.stacks`, `lotus trace run --stacks fp`) under it, one line
//! per distinct stack with its count, as `inferno-flamegraph`,
//! `flamegraph.pl` and speedscope read them:
//!
//! ```text
//! ImageFolder;Loader;__libc_start_call_main;main;decode;inflate 412
//! outside any op (worker);__libc_start_call_main;main;[unknown] 9
//! ```
//!
//! An op row's frames are its path (`RandomApply;GaussianBlur`); the
//! other rows are one frame (`outside any op (worker)`, `untraced
//! processes`). Frames are function names; a kernel function ends in
//! `_[k]` (as `stackcollapse-perf.pl --kernel` marks them, which the
//! flame graph tools colour apart). A `;` in a name becomes `:` and a line
//! break a space, so that every line splits the same way. A sample
//! without a stack (a trace taken with `--stacks none`, or a stack id the
//! stacks file lacks) shows its own function alone under its row, so the
//! lines of a row add up to the row's samples
//! ([`FoldedStacks::row_samples`]).
//!
//! Memory grows with distinct (row, stack) pairs, not with samples: the
//! samples are streamed once.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::{row_name, InPipelineError, SampledTrace, Target};
use crate::spill::Budget;
use crate::trace::samples::{StackTable, SymbolTable, UNKNOWN_SYMBOL};

/// The collapsed stacks of a folder ([`folded_folder`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldedStacks {
    /// One line per distinct stack under its row: the frames outermost
    /// first, `;`-separated, and its samples; sorted by the frames.
    pub lines: Vec<(String, u64)>,
    /// Each row's samples, by its root frames (what its lines add up to).
    pub row_samples: BTreeMap<String, u64>,
    /// Samples read.
    pub samples: u64,
    /// Samples whose stack has two frames or more.
    pub deep_samples: u64,
    /// What is worth telling (a cut file, stack lines skipped...).
    pub notes: Vec<String>,
}

impl FoldedStacks {
    /// The folded text: `frames count` lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for (frames, n) in &self.lines {
            out.push_str(frames);
            out.push(' ');
            out.push_str(&n.to_string());
            out.push('\n');
        }
        out
    }
}

/// A frame name as folded lines can hold it.
fn frame(name: &str) -> String {
    let name = if name.is_empty() {
        UNKNOWN_SYMBOL
    } else {
        name
    };
    name.replace(';', ":").replace(['\n', '\r'], " ")
}

/// What a sample is folded under: its stack, or its own function alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Stack(u32),
    Leaf(u32),
}

fn symbol_frame(symbols: &SymbolTable, id: u32) -> String {
    let s = symbols.get(id);
    let mut f = frame(&s.function);
    if s.module == "[kernel]" {
        f.push_str("_[k]");
    }
    f
}

/// The collapsed stacks of the sampled trace folder `dir` (logs of
/// prefix-independent names, samples of `prefix`), each sample under the
/// row `lotus attribute DIR` credits it to.
pub fn folded_folder(
    dir: &Path,
    prefix: &str,
    budget: Budget,
) -> Result<FoldedStacks, InPipelineError> {
    let mut trace = SampledTrace::open(dir, prefix, budget)?;
    let stacks: StackTable = trace
        .files
        .read_stacks()
        .map_err(|e| InPipelineError::Io(e.to_string()))?;
    let mut counts: HashMap<(Target, Key), u64> = HashMap::new();
    let (mut missing, mut with_id) = (0u64, 0u64);
    let mut frames = Vec::new();
    // Each stack id's depth, once walked (None: it has no line).
    let mut depth_of: HashMap<u32, Option<usize>> = HashMap::new();
    let mut deep_samples = 0u64;
    let total = trace.credit(|c| {
        let key = if c.stack == 0 {
            Key::Leaf(c.sample.symbol)
        } else {
            with_id += 1;
            let depth = *depth_of
                .entry(c.stack)
                .or_insert_with(|| stacks.frames(c.stack, &mut frames).then_some(frames.len()));
            match depth {
                Some(depth) => {
                    deep_samples += u64::from(depth >= 2);
                    Key::Stack(c.stack)
                }
                None => {
                    missing += 1;
                    Key::Leaf(c.sample.symbol)
                }
            }
        };
        *counts.entry((c.target, key)).or_default() += 1;
        Ok(())
    })?;
    let mut notes: Vec<String> = trace.notes().to_vec();
    notes.extend(stacks.skipped_note(&trace.files.stacks));
    if missing > 0 {
        notes.push(format!(
            "{}: {missing} samples name a stack that has no line there (a cut or damaged file): each is shown with its own function alone",
            crate::input::escaped(&trace.files.stacks.display().to_string())
        ));
    }
    if with_id == 0 && total > 0 {
        notes.push(
            "the samples carry no call stacks (traced with `--stacks none`, or by an older lotus): each is shown with its own function alone under its row".into(),
        );
    }
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let mut row_samples: BTreeMap<String, u64> = BTreeMap::new();
    let mut roots: HashMap<Target, String> = HashMap::new();
    for ((target, key), n) in counts {
        let root = roots
            .entry(target)
            .or_insert_with(|| match target {
                Target::Op(p) => trace
                    .tree
                    .parts(p, &trace.logs.ops)
                    .iter()
                    .map(|s| frame(s))
                    .collect::<Vec<_>>()
                    .join(";"),
                other => frame(&row_name(&other, &trace.logs.ops)),
            })
            .clone();
        let mut line = root.clone();
        match key {
            Key::Stack(id) => {
                stacks.frames(id, &mut frames);
                for &s in &frames {
                    line.push(';');
                    line.push_str(&symbol_frame(&trace.symbols, s));
                }
            }
            Key::Leaf(s) => {
                line.push(';');
                line.push_str(&symbol_frame(&trace.symbols, s));
            }
        }
        *lines.entry(line).or_default() += n;
        *row_samples.entry(root).or_default() += n;
    }
    Ok(FoldedStacks {
        lines: lines.into_iter().collect(),
        row_samples,
        samples: total,
        deep_samples,
        notes,
    })
}
