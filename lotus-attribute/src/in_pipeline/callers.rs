//! Who calls a function (`lotus attribute DIR --by caller --function
//! NAME`), from the same stacks as the folded output
//! ([`super::folded`]): for each row whose stacks hold NAME, NAME's
//! samples there and the call paths that lead to it, nearest caller
//! first, merged by caller frame (its function and module), as a tree
//! [`CALLER_DEPTH`] levels deep: each caller with its own callers under
//! it.
//!
//! - NAME is matched whole against the frames as the folded output names
//!   them (a kernel function ends in `_[k]`); no substring match, so that
//!   a figure is never the sum of functions the user did not name. Where
//!   no frame is NAME, [`Callers::suggestions`] holds the names that
//!   contain it (any case), else the frames with the most samples.
//! - A sample counts once: where NAME is on its stack several times
//!   (recursion), its outermost call is the one followed.
//! - Where the stack ends above NAME (or above a caller), the caller is
//!   [`ROOT_FRAME`]: the shares of every level add up to the level
//!   above, and the first level to all of NAME's samples in the row.
//! - A sample without a stack (`--stacks none`, a stack id the file
//!   lacks) is its own function alone: where that is NAME, its caller is
//!   [`ROOT_FRAME`]. [`Callers::with_stacks`] says whether the folder
//!   has stacks at all.
//!
//! Memory grows with the distinct (row, stack) pairs, as the folded
//! output's does.

use lotus_sys::input::Dir;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::folded::{fold, symbol_frame};
use super::Error;
use lotus_sort::Budget;

/// How many levels of callers [`callers_folder`] follows above the
/// function (the nearest first).
pub const CALLER_DEPTH: usize = 3;

/// The caller shown where a stack ends: the function (or the caller) was
/// the stack's outermost frame, run by the row itself.
pub const ROOT_FRAME: &str = "(no caller: outermost frame)";

/// A caller of the function, with its own callers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CallerNode {
    /// Its frame as the folded output names it ([`ROOT_FRAME`] where the
    /// stack ended).
    pub frame: String,
    /// Its module (empty where unknown, and for [`ROOT_FRAME`]).
    pub module: String,
    /// The function's samples reached through it (along the path above).
    pub samples: u64,
    /// `samples` over the function's samples in the row.
    pub share: f64,
    /// Its own callers (up to [`Callers::depth`] levels in all), the most
    /// samples first; they add up to `samples` where there are any.
    pub callers: Vec<CallerNode>,
}

/// The callers of the function in one row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct FunctionCallers {
    /// The row: an op's path (`Outer/Inner`), or the row's name.
    pub row: String,
    /// The row's samples.
    pub row_samples: u64,
    /// The row's samples whose stack holds the function.
    pub samples: u64,
    /// `samples` over `row_samples`.
    pub share_of_row: f64,
    /// Its nearest callers, the most samples first; they add up to
    /// `samples`.
    pub callers: Vec<CallerNode>,
}

/// The callers of a function in a sampled trace folder
/// ([`callers_folder`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Callers {
    /// The function, as asked for.
    pub function: String,
    /// The levels of callers followed.
    pub depth: usize,
    /// Each row whose stacks hold the function, in the rows' order (op
    /// paths first, sorted, then the other rows).
    pub rows: Vec<FunctionCallers>,
    /// Samples read.
    pub samples: u64,
    /// Whether the samples carry call stacks.
    pub with_stacks: bool,
    /// Where no row holds the function: frames whose name contains it
    /// (any case), else the frames in the most samples; at most 8.
    pub suggestions: Vec<String>,
    /// What is worth telling (a cut stacks file...).
    pub notes: Vec<String>,
}

/// A tree of callers being built: by (frame, module), its samples and
/// its own callers.
#[derive(Default)]
struct Tree {
    samples: u64,
    callers: HashMap<(String, String), Tree>,
}

impl Tree {
    fn into_nodes(self, total: u64) -> Vec<CallerNode> {
        let mut nodes: Vec<CallerNode> = self
            .callers
            .into_iter()
            .map(|((frame, module), t)| CallerNode {
                frame,
                module,
                samples: t.samples,
                share: t.samples as f64 / total.max(1) as f64,
                callers: t.into_nodes(total),
            })
            .collect();
        nodes.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.frame.cmp(&b.frame))
                .then_with(|| a.module.cmp(&b.module))
        });
        nodes
    }
}

/// The callers of `function` (a frame as `--format folded` names it) in
/// the sampled trace folder `dir` (samples of `prefix`), [`CALLER_DEPTH`]
/// levels up. A function no stack holds is not an error here: the result
/// has no rows and says what the folder has instead
/// ([`Callers::suggestions`]).
pub fn callers_folder<'a>(
    dir: impl Into<Dir<'a>>,
    prefix: &str,
    budget: Budget,
    function: &str,
) -> Result<Callers, Error> {
    let dir: Dir<'_> = dir.into();
    let fold = fold(dir, prefix, budget, false)?;
    let symbols = &fold.symbols;
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut name = |id: u32| -> String {
        names
            .entry(id)
            .or_insert_with(|| symbol_frame(symbols, id))
            .clone()
    };
    // Each frame's samples (a stack counted once per frame name), for the
    // suggestions.
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    let mut found: Vec<(String, FunctionCallers)> = Vec::new();
    for (root, stacks) in &fold.rows {
        let mut tree = Tree::default();
        let mut row_samples = 0u64;
        for (ids, n) in stacks {
            row_samples += n;
            let frames: Vec<String> = ids.iter().map(|&id| name(id)).collect();
            let mut counted: Vec<&str> = Vec::new();
            for f in &frames {
                if !counted.contains(&f.as_str()) {
                    counted.push(f);
                    *seen.entry(f.clone()).or_default() += n;
                }
            }
            let Some(at) = frames.iter().position(|f| f == function) else {
                continue;
            };
            tree.samples += n;
            let mut node = &mut tree;
            for level in 0..CALLER_DEPTH {
                let key = match at.checked_sub(level + 1) {
                    Some(i) => (frames[i].clone(), symbols.get(ids[i]).module.clone()),
                    None => (ROOT_FRAME.to_string(), String::new()),
                };
                let end = key.0 == ROOT_FRAME;
                node = node.callers.entry(key).or_default();
                node.samples += n;
                if end {
                    break;
                }
            }
        }
        if tree.samples == 0 {
            continue;
        }
        let samples = tree.samples;
        found.push((
            root.clone(),
            FunctionCallers {
                row: root.replace(';', "/"),
                row_samples,
                samples,
                share_of_row: samples as f64 / row_samples.max(1) as f64,
                callers: tree.into_nodes(samples),
            },
        ));
    }
    let suggestions = if found.is_empty() {
        suggest(function, &seen)
    } else {
        Vec::new()
    };
    Ok(Callers {
        function: function.to_string(),
        depth: CALLER_DEPTH,
        rows: found.into_iter().map(|(_, c)| c).collect(),
        samples: fold.samples,
        with_stacks: fold.with_stacks,
        suggestions,
        notes: fold.notes,
    })
}

/// The frames whose name holds `function` (any case), else the frames in
/// the most samples: at most 8, the most samples first.
fn suggest(function: &str, seen: &BTreeMap<String, u64>) -> Vec<String> {
    let wanted = function.to_lowercase();
    let mut near: Vec<(&String, u64)> = seen
        .iter()
        .filter(|(f, _)| !wanted.is_empty() && f.to_lowercase().contains(&wanted))
        .map(|(f, n)| (f, *n))
        .collect();
    if near.is_empty() {
        near = seen.iter().map(|(f, n)| (f, *n)).collect();
    }
    near.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    near.into_iter().take(8).map(|(f, _)| f.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_samples::{StackNode, Symbol};

    /// A worker whose op A runs over [1000, 2000) sampled every 100 ns:
    /// `main;outer;inner` 6 times, `main;other;inner` 3 times, `inner`
    /// alone (no stack) once; outside A, `main;outer`.
    fn folder() -> tempfile::TempDir {
        let symbols = [
            (0, Symbol::new("main", "/bin/x")),
            (1, Symbol::new("outer", "/bin/x")),
            (2, Symbol::new("inner", "/lib/libspin.so")),
            (3, Symbol::new("other", "/bin/x")),
        ];
        let stacks = [
            StackNode::new(1, 0, 0),
            StackNode::new(2, 1, 1),
            StackNode::new(3, 2, 2),
            StackNode::new(4, 1, 3),
            StackNode::new(5, 4, 2),
        ];
        let dir = tempfile::tempdir().expect("tmp");
        lotus_testkit::sampled::worker_folder(
            dir.path(),
            &[("A", 1000, 1000, "kind=op")],
            &symbols,
            &stacks,
            |t| {
                let in_a = (1000..2000).contains(&t);
                let id = match t {
                    1000 => 0,
                    1100..=1300 => 5,
                    _ if in_a => 3,
                    _ => 2,
                };
                (if in_a { 2 } else { 1 }, false, id)
            },
            &[],
        );
        dir
    }

    fn sum(nodes: &[CallerNode]) -> u64 {
        nodes.iter().map(|n| n.samples).sum()
    }

    #[test]
    fn the_callers_of_a_function_add_up_to_its_samples_at_every_level() {
        let dir = folder();
        let c = callers_folder(dir.path(), "lotus", Budget::default(), "inner").expect("callers");
        assert!(c.with_stacks);
        assert_eq!(c.rows.len(), 1, "{c:?}");
        let a = &c.rows[0];
        assert_eq!((a.row.as_str(), a.row_samples, a.samples), ("A", 10, 10));
        let first: Vec<(&str, u64)> = a
            .callers
            .iter()
            .map(|n| (n.frame.as_str(), n.samples))
            .collect();
        assert_eq!(first, [("outer", 6), ("other", 3), (ROOT_FRAME, 1)]);
        assert_eq!(sum(&a.callers), a.samples);
        assert_eq!(a.callers[0].module, "/bin/x");
        assert!((a.callers[0].share - 0.6).abs() < 1e-9);
        // outer's own caller is main, whose stack ends there.
        let outer = &a.callers[0];
        assert_eq!(outer.callers.len(), 1);
        assert_eq!(
            (outer.callers[0].frame.as_str(), outer.callers[0].samples),
            ("main", 6)
        );
        assert_eq!(outer.callers[0].callers[0].frame, ROOT_FRAME);
        assert!(a.callers[2].callers.is_empty());
        // outer is called by main in and outside A.
        let c = callers_folder(dir.path(), "lotus", Budget::default(), "outer").expect("outer");
        let rows: Vec<(&str, u64)> = c.rows.iter().map(|r| (r.row.as_str(), r.samples)).collect();
        assert_eq!(rows, [("A", 6), ("outside any op (worker)", 40)]);
        for r in &c.rows {
            assert_eq!(sum(&r.callers), r.samples);
        }
    }

    #[test]
    fn a_function_no_stack_holds_gives_the_names_that_contain_it() {
        let dir = folder();
        let c = callers_folder(dir.path(), "lotus", Budget::default(), "INN").expect("callers");
        assert!(c.rows.is_empty());
        assert_eq!(c.suggestions, ["inner"]);
        let c = callers_folder(dir.path(), "lotus", Budget::default(), "zzz").expect("callers");
        assert_eq!(c.suggestions[0], "main", "{:?}", c.suggestions);
    }
}
