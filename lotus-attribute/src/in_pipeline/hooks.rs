//! lotus's own cost per wrapped call, as its own rows ("lotus hooks").
//!
//! A wrapped call costs its thread CPU outside the op's span (the
//! wrapper's call and return, the span's start before its clock read, the
//! line's formatting and write after the end clock read): that CPU runs
//! inside the parent op's span, so the parent's exact exclusive CPU (its
//! `cpu=` less its children's) held it. And some inside the span, after
//! its start clock read and before its end one: in the op's own `cpu=`.
//! The tracer writes both with each span (`hook=`, `hook_in=`); here each
//! exact path gives back its children's `hook=` and its own spans'
//! `hook_in=`, and the rows `lotus hooks (worker)` / `lotus hooks (main)`
//! show them, so the rows still add up to the total.

use std::collections::HashMap;

use lotus_trace::Role;

use super::{sampled_row, AttributedRow, CpuSource, RowKind, Tree};

/// Each path's spans' `hook=` and `hook_in=` per pid, as what they are
/// due from: (the path whose exclusive CPU holds it, pid, ns). A span's
/// `hook=` is in its parent's CPU (a top-level span's in no op's: left
/// out), its `hook_in=` in its own.
fn dues(tree: &Tree) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
    tree.hooks
        .iter()
        .flat_map(|(&(path, pid), &[out, inside])| {
            let parent = tree.nodes[path as usize].parent;
            parent
                .map(|q| (q, pid, out))
                .into_iter()
                .chain(std::iter::once((path, pid, inside)))
                .filter(|&(_, _, ns)| ns > 0)
        })
}

/// Per path: lotus's cost its exclusive CPU holds (its direct children's
/// `hook=` and its own spans' `hook_in=`, summed).
pub(super) fn due(tree: &Tree) -> Vec<u64> {
    let mut out = vec![0u64; tree.nodes.len()];
    for (path, _, ns) in dues(tree) {
        let o = &mut out[path as usize];
        *o = o.saturating_add(ns);
    }
    out
}

/// `own` (a path's exact exclusive CPU) less lotus's cost in it (`due`),
/// and what was taken (at most `own`).
pub(super) fn take(own: u64, due: u64) -> (u64, u64) {
    let taken = due.min(own);
    (own - taken, taken)
}

/// The rows `lotus hooks (<role>)`: what each path gave back (`taken`,
/// per path), split among the roles of the processes its cost came from
/// (in proportion to it). Rows with no CPU are left out.
pub(super) fn rows(
    tree: &Tree,
    taken: &[u64],
    roles: &HashMap<u32, Role>,
    counters: &[String],
) -> Vec<AttributedRow> {
    // Per path: what it is due, per role.
    let mut by_path: HashMap<u32, [u64; 2]> = HashMap::new();
    for (path, pid, ns) in dues(tree) {
        let role = roles.get(&pid).copied().unwrap_or(Role::Worker);
        let r = &mut by_path.entry(path).or_default()[usize::from(role == Role::Main)];
        *r = r.saturating_add(ns);
    }
    let mut sums = [0u64; 2];
    for (path, split) in by_path {
        let t = taken.get(path as usize).copied().unwrap_or(0);
        let whole = split[0].saturating_add(split[1]);
        if t == 0 || whole == 0 {
            continue;
        }
        // Most of it is one role's; the main's part in proportion, the
        // rest the workers', so the parts add up to what was taken.
        let main = ((t as u128 * split[1] as u128) / whole as u128) as u64;
        sums[1] = sums[1].saturating_add(main);
        sums[0] = sums[0].saturating_add(t - main);
    }
    [(Role::Worker, sums[0]), (Role::Main, sums[1])]
        .into_iter()
        .filter(|&(_, ns)| ns > 0)
        .map(|(role, ns)| row(role, ns, counters))
        .collect()
}

/// The row `lotus hooks (<role>)` of `ns`: no samples (its counters 0),
/// its CPU the spans' own figures.
fn row(role: Role, ns: u64, counters: &[String]) -> AttributedRow {
    let zeros = counters.iter().map(|c| (c.clone(), 0)).collect();
    let mut r = sampled_row(
        format!("lotus hooks ({role})"),
        RowKind::Hooks,
        0,
        0,
        Vec::new(),
        zeros,
    );
    r.cpu_ns = ns;
    r.inclusive_cpu_ns = ns;
    r.cpu_source = CpuSource::Exact;
    r
}

#[cfg(test)]
mod tests {
    use super::super::tests::{row_at, sample_at, sampled_folder};
    use super::super::{attribute_folder, TOP_FUNCTIONS};
    use super::*;
    use lotus_samples::{Sample, Symbol};
    use lotus_sort::Budget;

    /// A worker's op A (cpu=1000) calls B twice (cpu=100 each, hook=40
    /// each: lotus's cost outside B's spans, inside A's; hook_in=10: inside
    /// B's own), then C (no hook=, an older tracer's span) once: A gives
    /// back 80 and B 20 to `lotus hooks (worker)`, and the rows still add
    /// up to the total.
    #[test]
    fn children_hook_cost_leaves_the_parent_for_its_own_row() {
        let off = 1_000_000u64;
        let log = format!(
            "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
             SB,{},300,kind=op,cpu=100,hook=40,hook_in=10\n\
             SB,{},300,kind=op,cpu=100,hook=40,hook_in=10\n\
             SC,{},300,kind=op,cpu=50\n\
             SA,{},4000,kind=op,cpu=1000,hook=30\n\
             # lotus-trace: clock wall_ns={} monotonic_ns=9000\n",
            off + 1100,
            off + 1500,
            off + 2000,
            off + 1000,
            off + 9000
        );
        let samples: Vec<Sample> = (0..90u64).map(|i| sample_at(i * 100, 10, 0)).collect();
        let dir = sampled_folder(&log, &[(0, Symbol::new("f", "/py"))], &samples, 100);
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        let row = |path: &str| row_at(&a, path);
        assert_eq!(row("A").cpu_ns, 1000 - 200 - 50 - 80);
        assert_eq!(row("A").inclusive_cpu_ns, 1000 - 80 - 20);
        assert_eq!(row("A/B").cpu_ns, 200 - 20);
        let hooks = row("lotus hooks (worker)");
        assert_eq!((hooks.kind, hooks.cpu_ns), (RowKind::Hooks, 80 + 20));
        // A's own hook= has no parent span to leave: it stays where it
        // ran (outside any op).
        assert!(a.rows.iter().all(|r| r.path != "lotus hooks (main)"));
        assert_eq!(a.rows.iter().map(|r| r.cpu_ns).sum::<u64>(), a.total_cpu_ns);
    }

    #[test]
    fn taking_never_passes_what_the_parent_ran() {
        assert_eq!(take(1000, 300), (700, 300));
        assert_eq!(take(200, 300), (0, 200));
        assert_eq!(take(0, 0), (0, 0));
    }
}
