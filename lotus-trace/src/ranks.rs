//! Per-rank statistics of a distributed job (torchrun, DDP): every process
//! whose log header names a rank (`rank=<RANK>`; DataLoader workers inherit
//! their rank's environment, so they carry it too) belongs to that rank, a
//! log without a header to the rank of its group (see [`super::index`]),
//! and each rank gets the whole of [`TraceStats`] over its own logs.
//!
//! Each rank's statistics come from a second reading of that rank's files
//! only, with the same streaming index as the whole job's: the files are
//! read once for the job and once for their rank, and memory stays flat
//! (one index at a time) however many ranks there are.

use std::collections::{BTreeMap, BTreeSet};

use lotus_sort::Budget;
use serde::Serialize;

use super::folder::TraceFolder;
use super::index::TraceIndex;
use super::stats::{OutlierRule, TraceStats};
use super::TraceError;

/// The statistics of one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RankStats {
    /// The rank (`RANK` of the process's environment).
    pub rank: u32,
    /// The machines its processes ran on, where the logs name them.
    pub hosts: Vec<String>,
    /// Its logs, as shown in messages.
    pub files: Vec<String>,
    /// Everything [`TraceStats`] gives, over this rank's logs only.
    #[serde(flatten)]
    pub stats: TraceStats,
}

/// Each process's rank (in [`TraceIndex::processes`]'s order): its own, or,
/// for a log without a rank, the rank of its group (the one run of its
/// folder that names one, as for matching batches); `None` where neither.
pub fn process_ranks(index: &TraceIndex) -> Vec<Option<u32>> {
    let groups = index.groups();
    let mut group_rank: BTreeMap<usize, u32> = BTreeMap::new();
    for (p, g) in index.processes.iter().zip(&groups) {
        if let Some(r) = p.process.rank {
            group_rank.entry(*g).or_insert(r);
        }
    }
    index
        .processes
        .iter()
        .zip(&groups)
        .map(|(p, g)| p.process.rank.or_else(|| group_rank.get(g).copied()))
        .collect()
}

/// The logs of each rank of `index` (gathered from `folder`): rank, hosts
/// and a folder holding only that rank's logs, by rank. Empty when no log
/// names a rank.
pub fn rank_folders(
    folder: &TraceFolder,
    index: &TraceIndex,
) -> Vec<(u32, Vec<String>, TraceFolder)> {
    let mut files: BTreeMap<u32, (BTreeSet<String>, BTreeSet<&str>)> = BTreeMap::new();
    for (p, rank) in index.processes.iter().zip(process_ranks(index)) {
        let Some(rank) = rank else {
            continue;
        };
        let (hosts, names) = files.entry(rank).or_default();
        if let Some(h) = &p.process.host {
            hosts.insert(h.to_string());
        }
        names.extend(p.files.iter().map(String::as_str));
    }
    files
        .into_iter()
        .map(|(rank, (hosts, names))| {
            let logs = folder
                .logs
                .iter()
                .filter(|l| names.contains(l.display.as_str()));
            (
                rank,
                hosts.into_iter().collect(),
                logs_of(folder, logs.cloned().collect()),
            )
        })
        .collect()
}

/// Each rank's statistics (see the module documentation), by rank; empty
/// when no log names a rank. Bad lines were reported with the whole job's
/// reading and are not reported again.
pub fn rank_stats(folder: &TraceFolder, index: &TraceIndex) -> Result<Vec<RankStats>, TraceError> {
    rank_stats_with(folder, index, OutlierRule::Flag)
}

/// [`rank_stats`] with the outlier rule `rule` (as the whole job's).
pub fn rank_stats_with(
    folder: &TraceFolder,
    index: &TraceIndex,
    rule: OutlierRule,
) -> Result<Vec<RankStats>, TraceError> {
    let budget = index.budget();
    let mut out = Vec::new();
    for (rank, hosts, sub) in rank_folders(folder, index) {
        let (stats, files) = stats_of(&sub, budget, rule)?;
        out.push(RankStats {
            rank,
            hosts,
            files,
            stats,
        });
    }
    Ok(out)
}

/// The statistics of one node of a distributed job or a Ray cluster.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct NodeStats {
    /// The node ([`crate::LogHeader::node_label`]: a Ray node's id, or
    /// the node's index).
    pub node: String,
    /// The machines its processes ran on, where the logs name them.
    pub hosts: Vec<String>,
    /// Its logs, as shown in messages.
    pub files: Vec<String>,
    /// Everything [`TraceStats`] gives, over this node's logs only.
    #[serde(flatten)]
    pub stats: TraceStats,
}

/// Each node's statistics, where the logs' headers name two nodes or
/// more (empty otherwise): each node's logs read again, as each rank's
/// are. Logs that name no node (a Ray driver) are in none.
pub fn node_stats_with(
    folder: &TraceFolder,
    index: &TraceIndex,
    rule: OutlierRule,
) -> Result<Vec<NodeStats>, TraceError> {
    let mut nodes: BTreeMap<String, (BTreeSet<String>, Vec<crate::LogFile>)> = BTreeMap::new();
    for log in &folder.logs {
        let Some(h) = crate::LogHeader::of(log) else {
            continue;
        };
        let Some(node) = h.node_label() else {
            continue;
        };
        let (hosts, logs) = nodes.entry(node).or_default();
        hosts.extend(h.host.as_deref().map(str::to_string));
        logs.push(log.clone());
    }
    if nodes.len() < 2 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (node, (hosts, logs)) in nodes {
        let (stats, files) = stats_of(&logs_of(folder, logs), index.budget(), rule)?;
        out.push(NodeStats {
            node,
            hosts: hosts.into_iter().collect(),
            files,
            stats,
        });
    }
    Ok(out)
}

/// A folder holding `logs` of `folder` alone (read through its shared
/// copy, where it has one): a rank's, a node's.
fn logs_of(folder: &TraceFolder, logs: Vec<crate::LogFile>) -> TraceFolder {
    TraceFolder {
        root: folder.root.clone(),
        logs,
        torch: Vec::new(),
        views: Vec::new(),
        shared: folder.shared.clone(),
    }
}

/// The statistics of `sub`'s logs, read again, and its logs as shown.
fn stats_of(
    sub: &TraceFolder,
    budget: Budget,
    rule: OutlierRule,
) -> Result<(TraceStats, Vec<String>), TraceError> {
    let mut ix = TraceIndex::load(sub, true, budget, |_| {})?;
    let (stats, _rows) = TraceStats::compute_with(&mut ix, rule)?;
    Ok((stats, sub.logs.iter().map(|l| l.display.clone()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_sort::Budget;
    use std::fs;

    #[test]
    fn each_rank_gets_the_statistics_of_its_own_logs() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        let log = |name: &str, rank: &str, body: &str| {
            let head = format!("#lotus-trace v1 role=x pid=1 host=n{rank} rank={rank}\n");
            fs::write(d.join(name), head + body).expect("write");
        };
        log(
            "l_main_pid_10",
            "0",
            "SWait,100,5,kind=wait,batch=0,ready=0\nSConsume,106,0,kind=consume,batch=0\n",
        );
        log(
            "l_worker_pid_11",
            "0",
            "SA,10,7,kind=op,batch=0\nSBatch,10,20,kind=batch,batch=0\n",
        );
        log(
            "l_main_pid_20",
            "1",
            "SWait,100,9,kind=wait,batch=0,ready=0\nSConsume,110,0,kind=consume,batch=0\n",
        );
        log(
            "l_worker_pid_21",
            "1",
            "SA,10,3,kind=op,batch=0\nSA,40,5,kind=op,batch=1\n",
        );
        fs::write(d.join("l_worker_pid_30"), "SA,1,1000\n").expect("write");
        let folder = TraceFolder::scan(d).expect("scan");
        let mut index =
            TraceIndex::load(&folder, true, Budget::new(1 << 20), |_| {}).expect("load");
        let (all, _) = TraceStats::compute(&mut index).expect("stats");
        assert_eq!(all.events, 9);
        let ranks = rank_stats(&folder, &index).expect("ranks");
        assert_eq!(ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(ranks[0].hosts, ["n0"]);
        assert_eq!(ranks[1].files.len(), 2);
        // Rank 0: A once (7 ns), one batch, one wait of 5; rank 1: A twice.
        let a = |r: &RankStats| {
            let s = &r
                .stats
                .ops
                .iter()
                .find(|o| o.name == "A")
                .expect("A")
                .summary;
            (s.count, s.total_ns)
        };
        assert_eq!((a(&ranks[0]), a(&ranks[1])), ((1, 7), (2, 8)));
        assert_eq!(ranks[0].stats.events, 4);
        assert_eq!(ranks[1].stats.events, 4);
        let wait = |r: &RankStats| r.stats.wait.summary.as_ref().map(|s| s.total_ns);
        assert_eq!((wait(&ranks[0]), wait(&ranks[1])), (Some(5), Some(9)));
        assert_eq!(
            ranks[0].stats.delay.summary.as_ref().map(|s| s.count),
            Some(1)
        );
        assert_eq!(ranks[1].stats.delay.consumed_without_batch, 1);
    }

    #[test]
    fn a_log_without_a_header_joins_the_rank_of_its_folder() {
        let tmp = tempfile::tempdir().expect("tmp");
        for r in ["0", "1"] {
            let d = tmp.path().join(format!("r{r}"));
            fs::create_dir(&d).expect("mkdir");
            let head = format!("#lotus-trace v1 role=main pid=5 host=h rank={r}\n");
            fs::write(d.join("l_main_pid_5"), head + "SA,1,2\n").expect("write");
            fs::write(d.join("l_worker_pid_6"), "SB,1,3\n").expect("write");
        }
        let folder = TraceFolder::scan(tmp.path()).expect("scan");
        let index = TraceIndex::load(&folder, true, Budget::new(1 << 20), |_| {}).expect("load");
        let ranks = rank_stats(&folder, &index).expect("ranks");
        assert_eq!(ranks.len(), 2);
        for (i, r) in ranks.iter().enumerate() {
            assert_eq!(r.rank as usize, i);
            assert_eq!(r.files.len(), 2, "{:?}", r.files);
            assert!(r.files.iter().all(|f| f.contains(&format!("r{i}"))));
            assert_eq!(r.stats.events, 2);
        }
    }

    #[test]
    fn no_rank_no_rows() {
        let tmp = tempfile::tempdir().expect("tmp");
        fs::write(tmp.path().join("l_main_pid_1"), "SA,1,2\n").expect("write");
        let folder = TraceFolder::scan(tmp.path()).expect("scan");
        let index = TraceIndex::load(&folder, true, Budget::new(1 << 20), |_| {}).expect("load");
        assert!(rank_stats(&folder, &index).expect("ranks").is_empty());
    }
}
