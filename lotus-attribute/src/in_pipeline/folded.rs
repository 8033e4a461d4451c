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

use lotus_sys::input::Dir;
use std::collections::{BTreeMap, HashMap};

use super::{phased, row_name, Credit, Error, Phases, Role, SampledTrace, Target, SPIN_ROW};
use lotus_samples::{Symbol, SymbolTable, UNKNOWN_SYMBOL};
use lotus_sort::Budget;

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
    /// Whether any sample carries a call stack (false: traced with
    /// `--stacks none`, or by an older lotus).
    pub with_stacks: bool,
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

    /// The rows (root frames, `;`-separated) that `--op NAME` names: an
    /// op's name anywhere in its path (`Loader`), or its whole path
    /// (`ImageFolder/Loader`).
    pub fn rows_named(&self, name: &str) -> Vec<&String> {
        self.row_samples
            .keys()
            .filter(|root| root.split(';').any(|p| p == name) || root.replace(';', "/") == name)
            .collect()
    }

    /// The root frames of the op at `path` (`Outer/Inner`), where it or
    /// an op inside it has samples.
    pub fn op_root(&self, path: &str) -> Option<String> {
        let parts: Vec<String> = path.split('/').map(|p| p.replace(';', ":")).collect();
        let root = parts.join(";");
        let inner = format!("{root};");
        let sampled = self.row_samples.contains_key(&root)
            || self.row_samples.keys().any(|k| k.starts_with(&inner));
        sampled.then_some(root)
    }

    /// The folded lines under `roots` (each row's own and those of the
    /// ops inside it), control characters escaped, and their samples.
    pub fn lines_under(&self, roots: &[&String]) -> (Vec<String>, u64) {
        let kept: Vec<&(String, u64)> = self
            .lines
            .iter()
            .filter(|(frames, _)| {
                roots.iter().any(|r| {
                    frames.as_str() == r.as_str()
                        || frames
                            .strip_prefix(r.as_str())
                            .is_some_and(|rest| rest.starts_with(';'))
                })
            })
            .collect();
        let samples = kept.iter().map(|(_, n)| n).sum();
        let lines = kept
            .iter()
            .map(|(frames, n)| format!("{} {n}", lotus_sys::text::printable(frames)))
            .collect();
        (lines, samples)
    }
}

/// A frame name as folded lines can hold it.
pub(super) fn folded_frame_name(name: &str) -> String {
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

/// The frame a symbol is in folded lines: its function, a kernel one
/// marked `_[k]`.
pub(super) fn symbol_frame(symbols: &SymbolTable, id: u32) -> String {
    folded_frame(symbols.get(id))
}

/// The frame a symbol is in `--format folded` lines (and in `lotus trace
/// view --format firefox`'s stacks): its function, `;` made `:` and line
/// breaks spaces, a kernel one (module `[kernel]`) marked `_[k]`.
pub fn folded_frame(s: &Symbol) -> String {
    s.folded_frame()
}

/// A folder's samples folded under their rows, before they are written
/// as text: what [`folded_folder`] and the callers view
/// ([`super::callers`]) both read.
pub(crate) struct Fold {
    /// Each row's root frames (its op path, `;`-separated, or its one
    /// frame) and its distinct stacks: symbol ids outermost first, and
    /// their samples.
    pub(super) rows: BTreeMap<String, Vec<(Vec<u32>, u64)>>,
    /// The folder's symbols (what the ids name).
    pub(crate) symbols: SymbolTable,
    /// Samples read.
    pub(crate) samples: u64,
    /// Samples whose stack has two frames or more.
    pub(super) deep_samples: u64,
    /// Whether any sample carries a stack id (false: `--stacks none`,
    /// or an older lotus).
    pub(crate) with_stacks: bool,
    /// What is worth telling.
    pub(crate) notes: Vec<String>,
    /// Where the fold was asked by thread: each row's samples by thread
    /// and stack (and `rows` is empty).
    pub(crate) by_thread: Vec<ThreadStack>,
    /// Sampling interval, ns: the CPU time one sample stands for.
    pub(crate) interval_ns: u64,
}

/// A sample's thread, where a fold is kept by thread: its pid, tid and
/// process role (`None`: a process that wrote no log).
pub(super) type Who = Option<(u32, u32, Option<Role>)>;

/// One row's samples of one thread with one stack, in a fold kept by
/// thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ThreadStack {
    /// The row's key, as `lotus attribute DIR` names it (an op's path,
    /// `A/B`; the other rows' names).
    pub(crate) row: String,
    /// The process.
    pub(crate) pid: u32,
    /// The thread.
    pub(crate) tid: u32,
    /// Its process's role (`None`: it wrote no log).
    pub(crate) role: Option<Role>,
    /// The stack's symbol ids, outermost first.
    pub(crate) ids: Vec<u32>,
    /// Samples.
    pub(crate) samples: u64,
}

/// Folds the samples of the sampled trace folder `dir` (logs of
/// prefix-independent names, samples of `prefix`) under the rows `lotus
/// attribute DIR` credits them to; by thread where `by_thread` asks
/// ([`Fold::by_thread`]).
pub(crate) fn fold<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
    by_thread: bool,
) -> Result<Fold, Error> {
    let dir: Dir<'_> = dir.into();
    // A folder without tracer logs (`lotus trace attach`): its rows from
    // the samples' Python frames, as `lotus attribute DIR` gives them.
    if !super::frame_ops::has_logs(dir)? {
        return super::frame_ops::fold_frames(dir, prefix, by_thread);
    }
    let mut trace = SampledTrace::open(dir, prefix, budget)?;
    let mut folding = Folding::of(&trace, by_thread)?;
    let windows = Phases::take(&mut trace.logs);
    let total = trace.credit(|c| {
        folding.add(phased(&windows, &c), &c);
        Ok(())
    })?;
    let symbols = trace.sampling.symbols.clone();
    Ok(folding.finish(&trace, symbols, total))
}

/// A fold in the making: each sample counted under its row and stack as
/// the rule credits it, by [`fold`] or by the attribution's own pass
/// ([`super::attribute_and_fold`]).
pub(super) struct Folding {
    stacks: std::rc::Rc<lotus_samples::StackTable>,
    counts: HashMap<(Target, Key, Who), u64>,
    /// Whether the samples are kept by thread ([`Fold::by_thread`]).
    by_thread: bool,
    missing: u64,
    with_id: u64,
    frames: Vec<u32>,
    /// Each stack id's depth, once walked (None: it has no line).
    depth_of: HashMap<u32, Option<usize>>,
    deep_samples: u64,
}

impl Folding {
    /// An empty fold of `trace`'s samples (its stacks file read), kept
    /// by thread where `by_thread` asks.
    pub(super) fn of(trace: &SampledTrace, by_thread: bool) -> Result<Folding, Error> {
        Ok(Folding {
            stacks: trace.stacks()?,
            counts: HashMap::new(),
            by_thread,
            missing: 0,
            with_id: 0,
            frames: Vec::new(),
            depth_of: HashMap::new(),
            deep_samples: 0,
        })
    }

    /// Counts the sample `c` credits, under `target` (its row by phase).
    pub(super) fn add(&mut self, target: Target, c: &Credit<'_>) {
        let key = if c.stack == 0 {
            Key::Leaf(c.sample.symbol)
        } else {
            self.with_id += 1;
            let (stacks, frames) = (&self.stacks, &mut self.frames);
            let depth = *self
                .depth_of
                .entry(c.stack)
                .or_insert_with(|| stacks.frames(c.stack, frames).then_some(frames.len()));
            match depth {
                Some(depth) => {
                    self.deep_samples += u64::from(depth >= 2);
                    Key::Stack(c.stack)
                }
                None => {
                    self.missing += 1;
                    Key::Leaf(c.sample.symbol)
                }
            }
        };
        let who = self
            .by_thread
            .then_some((c.sample.pid, c.sample.tid, c.role));
        *self.counts.entry((target, key, who)).or_default() += 1;
    }

    /// The fold of `trace`'s `total` samples, once credited; `symbols`:
    /// its symbols (what the fold's ids name).
    pub(super) fn finish(self, trace: &SampledTrace, symbols: SymbolTable, total: u64) -> Fold {
        let Folding {
            stacks,
            counts,
            missing,
            with_id,
            mut frames,
            deep_samples,
            ..
        } = self;
        let mut notes: Vec<String> = trace.notes().to_vec();
        notes.extend(stacks.skipped_note(&trace.sampling.files.stacks));
        if missing > 0 {
            notes.push(format!(
                "{}: {missing} samples name a stack that has no line there (a cut or damaged file): each is shown with its own function alone",
                lotus_sys::input::escaped(&trace.sampling.files.stacks.display().to_string())
            ));
        }
        if with_id == 0 && total > 0 {
            notes.push(
                "the samples carry no call stacks (traced with `--stacks none`, or by an older lotus): each is shown with its own function alone under its row".into(),
            );
        }
        let mut rows: BTreeMap<String, Vec<(Vec<u32>, u64)>> = BTreeMap::new();
        let mut by_thread = Vec::new();
        let mut roots: HashMap<Target, String> = HashMap::new();
        // Frames the symbols file has no line for (a damaged or mismatched
        // folder): drawn as unknown functions, counted for a note.
        let (mut unnamed, mut first_unnamed) = (0u64, None);
        for ((target, key, who), n) in counts {
            let root = roots
                .entry(target)
                .or_insert_with(|| match target {
                    Target::Op(p) | Target::Spin(p) => {
                        let mut parts = trace.tree.parts(p, &trace.logs.ops);
                        if matches!(target, Target::Spin(_)) {
                            parts.push(SPIN_ROW);
                        }
                        parts
                            .iter()
                            .map(|s| folded_frame_name(s))
                            .collect::<Vec<_>>()
                            .join(";")
                    }
                    other => folded_frame_name(&row_name(&other, &trace.logs.ops)),
                })
                .clone();
            let ids = match key {
                Key::Stack(id) => {
                    stacks.frames(id, &mut frames);
                    frames.clone()
                }
                Key::Leaf(s) => vec![s],
            };
            if let Some(&bad) = ids.iter().find(|&&s| !symbols.has(s)) {
                unnamed += n;
                first_unnamed = first_unnamed.min(Some(bad)).or(Some(bad));
            }
            match who {
                Some((pid, tid, role)) => by_thread.push(ThreadStack {
                    row: row_key(trace, target),
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
        by_thread.sort_unstable_by(|a, b| {
            (a.pid, a.tid, &a.row, &a.ids).cmp(&(b.pid, b.tid, &b.row, &b.ids))
        });
        if let Some(first) = first_unnamed {
            notes.push(format!(
                "{}: {unnamed} samples have frames naming functions that {} has no line for (id {first} the first; a damaged file, or files of two runs): shown as {UNKNOWN_SYMBOL}",
                lotus_sys::input::escaped(&trace.sampling.files.stacks.display().to_string()),
                lotus_sys::input::escaped(&trace.sampling.files.symbols.display().to_string()),
            ));
        }
        Fold {
            rows,
            symbols,
            samples: total,
            deep_samples,
            with_stacks: with_id > 0,
            notes,
            by_thread,
            interval_ns: trace.sampling.interval_ns,
        }
    }
}

/// The key of the row `target` is in `lotus attribute DIR`: an op's path
/// (`A/B`, its pool spin `A/B/pool spin`), the other rows' names.
fn row_key(trace: &SampledTrace, target: Target) -> String {
    match target {
        Target::Op(p) => trace.tree.name(p, &trace.logs.ops),
        Target::Spin(p) => format!("{}/{SPIN_ROW}", trace.tree.name(p, &trace.logs.ops)),
        other => row_name(&other, &trace.logs.ops),
    }
}

/// The collapsed stacks of the sampled trace folder `dir` (logs of
/// prefix-independent names, samples of `prefix`), each sample under the
/// row `lotus attribute DIR` credits it to.
pub fn folded_folder<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
) -> Result<FoldedStacks, Error> {
    let dir: Dir<'_> = dir.into();
    Ok(folded_of(fold(dir, prefix, budget, false)?))
}

/// The collapsed stacks of a fold: its lines, written out.
pub(super) fn folded_of(fold: Fold) -> FoldedStacks {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let mut row_samples: BTreeMap<String, u64> = BTreeMap::new();
    // Each frame once: a stack's line is built from the cut names.
    let mut frames: HashMap<u32, String> = HashMap::new();
    for (root, stacks) in &fold.rows {
        for (ids, n) in stacks {
            let mut line = root.clone();
            for &s in ids {
                line.push(';');
                line.push_str(
                    frames
                        .entry(s)
                        .or_insert_with(|| symbol_frame(&fold.symbols, s)),
                );
            }
            *lines.entry(line).or_default() += n;
            *row_samples.entry(root.clone()).or_default() += n;
        }
    }
    let mut notes = fold.notes;
    let cut = frames
        .values()
        .filter(|f| f.ends_with(lotus_samples::FRAME_CUT))
        .count();
    if cut > 0 {
        notes.push(format!(
            "{cut} function name(s) longer than {} bytes are cut in these lines (they end in {})",
            lotus_samples::MAX_FOLDED_FRAME,
            lotus_samples::FRAME_CUT
        ));
    }
    FoldedStacks {
        lines: lines.into_iter().collect(),
        row_samples,
        samples: fold.samples,
        deep_samples: fold.deep_samples,
        with_stacks: fold.with_stacks,
        notes,
    }
}

#[cfg(test)]
mod tests {
    /// Two rows, one inside the other, and a row whose name starts alike.
    fn stacks() -> super::FoldedStacks {
        super::FoldedStacks {
            lines: vec![
                ("A;main;outer;inner".into(), 8),
                ("A;B;main;f".into(), 2),
                ("AB;main;g".into(), 5),
            ],
            row_samples: [("A".into(), 8), ("A;B".into(), 2), ("AB".into(), 5)]
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn an_op_names_its_rows_and_the_lines_under_them() {
        let f = stacks();
        assert_eq!(f.rows_named("B"), [&"A;B".to_string()]);
        assert_eq!(f.rows_named("A/B"), [&"A;B".to_string()]);
        let a = f.rows_named("A");
        assert_eq!(a.len(), 2);
        let (lines, n) = f.lines_under(&[&"A".to_string()]);
        // A's own and its inner op's, not AB's (a name that starts alike).
        assert_eq!(n, 10, "{lines:?}");
        assert_eq!(f.op_root("A/B").as_deref(), Some("A;B"));
        assert_eq!(f.op_root("A").as_deref(), Some("A"));
        assert_eq!(f.op_root("C"), None);
    }

    use super::*;
    use lotus_samples::{SampleFiles, StackNode};

    /// A worker (pid 10) whose main thread runs op A over [1000, 2000),
    /// sampled every 100 ns with stacks: in A, `main;outer;inner` (one
    /// sample's stack is missing from the file, one's is caught in a
    /// cycle, one has none); outside A, `main;outer` and a kernel frame.
    fn folder() -> tempfile::TempDir {
        let symbols = [
            (0, Symbol::new("main", "/bin/x")),
            (1, Symbol::new("outer", "/bin/x")),
            (2, Symbol::new("inner", "/bin/x")),
            (3, Symbol::new("do_page_fault", "[kernel]")),
        ];
        let stacks = [
            StackNode::new(1, 0, 0),
            StackNode::new(2, 1, 1),
            StackNode::new(3, 2, 2),
            StackNode::new(4, 2, 3),
        ];
        let dir = tempfile::tempdir().expect("tmp");
        lotus_testkit::sampled::worker_folder(
            dir.path(),
            &[("A;B", 1000, 1000, "kind=op")],
            &symbols,
            &stacks,
            |t| {
                let in_a = (1000..2000).contains(&t);
                let id = match t {
                    1100 => 42,
                    1200 => 6,
                    1300 => 0,
                    _ if in_a => 3,
                    _ => 4,
                };
                (if in_a { 2 } else { 3 }, !in_a, id)
            },
            &[],
        );
        let files = SampleFiles::of(dir.path(), "lotus");
        // A cycle: 5 under 6 and 6 under 5; neither can be read.
        let mut text = std::fs::read_to_string(&files.stacks).expect("stacks");
        text += "5\t6\t1\n6\t5\t1\n";
        std::fs::write(&files.stacks, text).expect("cycle");
        dir
    }

    /// The report's one pass gives what the two readings give apart: the
    /// attribution and the fold, notes included; and a stacks file that
    /// cannot be read leaves the attribution standing, saying why.
    #[test]
    fn one_pass_attributes_and_folds_as_the_two_readings_do() {
        let dir = folder();
        let (a, f) = super::super::attribute_and_fold(dir.path(), "lotus", Budget::default(), 5)
            .expect("one pass");
        let alone = super::super::attribute_folder(dir.path(), "lotus", Budget::default(), 5)
            .expect("attributed");
        assert_eq!(a, alone);
        assert!(
            f.as_ref().is_ok_and(|f| f.samples > 0 && f.with_stacks),
            "{f:?}"
        );
        assert_eq!(
            f.expect("folded"),
            folded_folder(dir.path(), "lotus", Budget::default()).expect("folded")
        );
        let files = SampleFiles::of(dir.path(), "lotus");
        std::fs::remove_file(&files.stacks).expect("rm");
        std::os::unix::fs::symlink("/etc/passwd", &files.stacks).expect("link out");
        let (a, f) = super::super::attribute_and_fold(dir.path(), "lotus", Budget::default(), 5)
            .expect("the attribution stands");
        assert!(a.total_samples > 0);
        let why = f.expect_err("no fold").to_string();
        assert!(why.contains("lotus.stacks"), "{why}");
    }

    #[test]
    fn each_row_folds_its_stacks_and_bad_stacks_fall_back_to_the_leaf() {
        let dir = folder();
        let f = folded_folder(dir.path(), "lotus", Budget::default()).expect("folded");
        let lines: Vec<(&str, u64)> = f.lines.iter().map(|(l, n)| (l.as_str(), *n)).collect();
        assert_eq!(
            lines,
            vec![
                // The op's path is its root frames; the three samples
                // without a readable stack show their own function.
                ("A:B;inner", 3),
                ("A:B;main;outer;inner", 7),
                ("outside any op (worker);main;outer;do_page_fault_[k]", 40),
            ],
            "{}",
            f.text()
        );
        assert_eq!(f.samples, 50);
        assert_eq!(f.deep_samples, 47);
        assert!(f.with_stacks);
        assert_eq!(f.row_samples["A:B"], 10);
        assert_eq!(f.row_samples["outside any op (worker)"], 40);
        let notes = f.notes.join("\n");
        assert!(
            notes.contains("lotus.stacks: 2 line(s) skipped")
                && notes.contains("its parent 6 is not a stack of an earlier line"),
            "{notes}"
        );
        assert!(
            notes.contains("lotus.stacks: 2 samples name a stack that has no line there"),
            "{notes}"
        );
        assert!(f.text().ends_with(" 40\n"));
    }
}
