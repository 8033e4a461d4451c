//! Across the ranks of a distributed job: each op's figures per rank
//! ([`ops_by_rank`]), and the input straggler, the rank whose batches take
//! longest to make and the op that makes it so ([`straggler`]).

use serde::Serialize;

use crate::ranks::{NodeStats, RankStats};
use crate::TraceStats;

/// How much longer than the other ranks' (their median) a rank's median
/// batch must take to be named the straggler: 20%. Below it the ranks are
/// said to be even (run-to-run spread on one machine is some 5-10%).
pub const STRAGGLER_RATIO: f64 = 1.2;

/// Of the ops that explain at least this share of the largest excess,
/// the narrowest (least time per batch on the straggler) is named: an op
/// inside another (a transform inside the dataset's `__getitem__`) carries
/// its parent's excess, and is where the time goes.
const NARROWEST_WITHIN: f64 = 0.75;

/// One op on one rank (`--by rank`) or one node (`--by node`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct OpOnRank {
    /// The op.
    pub op: String,
    /// The rank (`--by rank`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The node (`--by node`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The machines of its processes.
    pub hosts: Vec<String>,
    /// Its spans.
    pub calls: u64,
    /// Their wall time summed, ns.
    pub total_ns: i64,
    /// That per batch the rank or node made, ns (`None` where it made none).
    pub per_batch_ns: Option<f64>,
    /// Their own threads' CPU time summed (`cpu=`), ns, where every span says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
}

/// Each op's figures on each rank (`--by rank`): by op in the order of
/// their time over all ranks, then by rank.
pub fn ops_by_rank(ranks: &[RankStats]) -> Vec<OpOnRank> {
    ops_by(
        ranks
            .iter()
            .map(|r| ((Some(r.rank), None), &r.hosts, &r.stats)),
    )
}

/// Each op's figures on each node (`--by node`), as [`ops_by_rank`].
pub fn ops_by_node(nodes: &[NodeStats]) -> Vec<OpOnRank> {
    ops_by(
        nodes
            .iter()
            .map(|n| ((None, Some(n.node.clone())), &n.hosts, &n.stats)),
    )
}

/// Each op's figures in each group (a rank, a node).
fn ops_by<'a>(
    groups: impl Iterator<
        Item = (
            (Option<u32>, Option<String>),
            &'a Vec<String>,
            &'a TraceStats,
        ),
    >,
) -> Vec<OpOnRank> {
    let mut out: Vec<OpOnRank> = Vec::new();
    for ((rank, node), hosts, stats) in groups {
        let batches = stats.batches.summary.as_ref().map_or(0, |b| b.count);
        for o in &stats.ops {
            out.push(OpOnRank {
                op: o.name.clone(),
                rank,
                node: node.clone(),
                hosts: hosts.clone(),
                calls: o.summary.count,
                total_ns: o.summary.total_ns,
                per_batch_ns: (batches > 0).then(|| o.summary.total_ns as f64 / batches as f64),
                cpu_ns: o.cpu_ns,
            });
        }
    }
    let mut totals: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for o in &out {
        *totals.entry(o.op.clone()).or_default() += o.total_ns;
    }
    out.sort_by(|a, b| {
        totals[&b.op]
            .cmp(&totals[&a.op])
            .then_with(|| a.op.cmp(&b.op))
            .then_with(|| (a.rank, &a.node).cmp(&(b.rank, &b.node)))
    });
    out
}

/// The op that makes the straggler slow.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct StragglerOp {
    /// The op.
    pub name: String,
    /// Its time per batch on the straggler, ns.
    pub per_batch_ns: f64,
    /// The other ranks' (their median), ns.
    pub others_per_batch_ns: f64,
    /// The difference, ns per batch.
    pub excess_per_batch_ns: f64,
    /// That difference over the batches' (mean against the others'
    /// median mean): how much of the straggler's extra time per batch the
    /// op explains (above 1 where other ops are faster there).
    pub share_of_excess: Option<f64>,
}

/// The input straggler of a distributed job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Straggler {
    /// The rank.
    pub rank: u32,
    /// Its machines.
    pub hosts: Vec<String>,
    /// Its batches' median preprocessing time, ns.
    pub batch_p50_ns: f64,
    /// The other ranks' (the median of their medians), ns.
    pub others_batch_p50_ns: f64,
    /// The first over the second.
    pub ratio: f64,
    /// Its main process's waits for data summed, ns.
    pub wait_total_ns: Option<i64>,
    /// The other ranks' (their median), ns.
    pub others_wait_total_ns: Option<f64>,
    /// The op that makes it so, where one takes longer there.
    pub op: Option<StragglerOp>,
}

impl Straggler {
    /// What tables say of it, with `ms` writing a duration in ns.
    pub fn sentence(&self, ms: impl Fn(f64) -> String) -> String {
        let hosts = if self.hosts.is_empty() {
            String::new()
        } else {
            format!(" (host {})", self.hosts.join(" "))
        };
        let mut s = format!(
            "Input straggler: rank {}{hosts}: its batches take {:.1}x the other ranks' (median {} against {})",
            self.rank,
            self.ratio,
            ms(self.batch_p50_ns),
            ms(self.others_batch_p50_ns)
        );
        if let Some(op) = &self.op {
            s += &format!(
                "; {} takes {} more per batch there ({} against {}",
                op.name,
                ms(op.excess_per_batch_ns),
                ms(op.per_batch_ns),
                ms(op.others_per_batch_ns)
            );
            if let Some(share) = op.share_of_excess {
                s += &format!(", {:.0}% of the difference", share * 100.0);
            }
            s.push(')');
        }
        s + "."
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The input straggler of `ranks` (see [`Straggler`]): the rank whose
/// median batch takes longest, where it takes [`STRAGGLER_RATIO`] times
/// the other ranks' median or more, with the op whose time per batch
/// exceeds the others' most (the narrowest of those within a quarter of
/// the largest excess). `None` with fewer than two ranks that made
/// batches, or where no rank is that much slower.
pub fn straggler(ranks: &[RankStats]) -> Option<Straggler> {
    let made: Vec<(&RankStats, f64, u64, f64)> = ranks
        .iter()
        .filter_map(|r| {
            let b = r.stats.batches.summary.as_ref()?;
            (b.count > 0).then_some((r, b.p50_ns, b.count, b.mean_ns))
        })
        .collect();
    if made.len() < 2 {
        return None;
    }
    let &(slow, p50, batches, mean) = made.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let others: Vec<&(&RankStats, f64, u64, f64)> =
        made.iter().filter(|m| m.0.rank != slow.rank).collect();
    let others_p50 = median(others.iter().map(|m| m.1).collect())?;
    let ratio = if others_p50 > 0.0 {
        p50 / others_p50
    } else {
        f64::INFINITY
    };
    if ratio < STRAGGLER_RATIO {
        return None;
    }
    let others_mean = median(others.iter().map(|m| m.3).collect())?;
    let per_batch = |r: &RankStats, n: u64, op: &str| {
        r.stats
            .ops
            .iter()
            .find(|o| o.name == op)
            .map_or(0.0, |o| o.summary.total_ns as f64 / n as f64)
    };
    let mut excess: Vec<StragglerOp> = slow
        .stats
        .ops
        .iter()
        .filter_map(|o| {
            let here = o.summary.total_ns as f64 / batches as f64;
            let there = median(
                others
                    .iter()
                    .map(|m| per_batch(m.0, m.2, &o.name))
                    .collect(),
            )?;
            (here > there).then(|| StragglerOp {
                name: o.name.clone(),
                per_batch_ns: here,
                others_per_batch_ns: there,
                excess_per_batch_ns: here - there,
                share_of_excess: (mean > others_mean)
                    .then(|| (here - there) / (mean - others_mean)),
            })
        })
        .collect();
    let most = excess
        .iter()
        .map(|o| o.excess_per_batch_ns)
        .fold(0.0, f64::max);
    excess.retain(|o| o.excess_per_batch_ns >= NARROWEST_WITHIN * most);
    let op = excess.into_iter().min_by(|a, b| {
        a.per_batch_ns
            .total_cmp(&b.per_batch_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    let wait = |r: &RankStats| r.stats.wait.summary.as_ref().map(|w| w.total_ns);
    Some(Straggler {
        rank: slow.rank,
        hosts: slow.hosts.clone(),
        batch_p50_ns: p50,
        others_batch_p50_ns: others_p50,
        ratio,
        wait_total_ns: wait(slow),
        others_wait_total_ns: median(
            others
                .iter()
                .filter_map(|m| wait(m.0))
                .map(|w| w as f64)
                .collect(),
        ),
        op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{rank_stats, TraceFolder, TraceIndex};
    use lotus_sort::Budget;
    use std::fmt::Write as _;
    use std::fs;

    /// A folder of `ranks` ranks, each a worker making 10 batches, each
    /// batch a `Dataset` span holding `Crop` and `Flip`; `slow` gives a
    /// rank's Flip its time in ns.
    fn job(flip: &[u64]) -> (tempfile::TempDir, Vec<RankStats>) {
        let tmp = tempfile::tempdir().expect("tmp");
        for (r, &f) in flip.iter().enumerate() {
            let mut body = format!(
                "#lotus-trace v1 role=worker pid={} host=n{r} rank={r}\n",
                10 + r
            );
            for b in 0..10u64 {
                let t = b * 100_000;
                let crop = 1000 + b % 3;
                let ds = crop + f + 50;
                writeln!(body, "SCrop,{t},{crop},kind=op,batch={b}").expect("fmt");
                writeln!(body, "SFlip,{},{f},kind=op,batch={b}", t + crop).expect("fmt");
                writeln!(body, "SDataset,{t},{ds},kind=op,batch={b}").expect("fmt");
                writeln!(body, "SBatch,{t},{},kind=batch,batch={b}", ds + 10).expect("fmt");
            }
            fs::write(tmp.path().join(format!("l_worker_pid_{}", 10 + r)), body).expect("write");
        }
        let folder = TraceFolder::scan(tmp.path()).expect("scan");
        let index = TraceIndex::load(&folder, true, Budget::new(1 << 20), |_| {}).expect("load");
        let ranks = rank_stats(&folder, &index).expect("ranks");
        (tmp, ranks)
    }

    #[test]
    fn the_slow_rank_is_named_with_the_narrowest_op_that_explains_it() {
        let (_t, ranks) = job(&[500, 4000, 520]);
        let s = straggler(&ranks).expect("a straggler");
        assert_eq!(s.rank, 1);
        assert_eq!(s.hosts, ["n1"]);
        assert!(s.ratio > 2.0, "{s:?}");
        let op = s.op.expect("an op");
        // The dataset's span holds Flip's excess too; Flip is named.
        assert_eq!(op.name, "Flip");
        // The others: the median of 500 and 520.
        assert!(
            (op.excess_per_batch_ns - (4000.0 - 510.0)).abs() < 1.0,
            "{op:?}"
        );
        assert!(
            op.share_of_excess.is_some_and(|s| (s - 1.0).abs() < 0.05),
            "{op:?}"
        );
    }

    #[test]
    fn even_ranks_have_no_straggler_and_one_rank_is_none() {
        let (_t, ranks) = job(&[500, 540]);
        assert_eq!(straggler(&ranks), None);
        let (_t, ranks) = job(&[500]);
        assert_eq!(straggler(&ranks), None);
    }

    #[test]
    fn ops_by_rank_gives_each_op_per_rank_with_its_time_per_batch() {
        let (_t, ranks) = job(&[500, 4000]);
        let rows = ops_by_rank(&ranks);
        let names: Vec<(&str, u32)> = rows
            .iter()
            .map(|r| (r.op.as_str(), r.rank.expect("a rank")))
            .collect();
        assert_eq!(
            names,
            [
                ("Dataset", 0),
                ("Dataset", 1),
                ("Flip", 0),
                ("Flip", 1),
                ("Crop", 0),
                ("Crop", 1)
            ]
        );
        let flip1 = &rows[3];
        assert_eq!((flip1.calls, flip1.total_ns), (10, 40_000));
        assert_eq!(flip1.per_batch_ns, Some(4000.0));
        assert_eq!(flip1.hosts, ["n1"]);
    }
}
