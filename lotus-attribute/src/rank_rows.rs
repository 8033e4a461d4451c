//! Sampled trace folders' rows per rank (`lotus attribute DIR... --by
//! rank`): each sample credited to its row by the rule `lotus attribute
//! DIR` applies (through the fold `--format folded` draws, kept by
//! thread, as the pprof export is), then summed per rank (the rank its
//! process's log names), row and leaf function. Several folders: one
//! distributed job's hosts, each folder's samples on its own processes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use lotus_sort::Budget;
use serde::Serialize;

use crate::in_pipeline::fold;
use crate::pprof::places_of;
use crate::{sampled_uncertainty_ns, Error, TopFunction};

/// What [`rows_by_rank`] keys the rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RowsBy {
    /// Each rank its rows (`--by rank`).
    Rank,
    /// Each host its rows: the machine its logs name, else its folder
    /// (`--by host`).
    Host,
    /// Every rank and host summed (several hosts' folders, `--by op`).
    All,
}

/// One row on one rank (or one host, or all of them).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RankRow {
    /// The rank (`None`: processes whose logs name none, or that wrote no
    /// log).
    pub rank: Option<u32>,
    /// The machines of its processes, where their logs name them.
    pub hosts: Vec<String>,
    /// The row, as `lotus attribute DIR` keys it (an op's path `A/B`, or a
    /// row's name such as `outside any op (worker)`).
    pub row: String,
    /// Samples credited to it.
    pub samples: u64,
    /// Their CPU time (samples times the interval), ns.
    pub cpu_ns: u64,
    /// Its 95% half-width, ns (a Poisson count).
    pub uncertainty_ns: u64,
    /// Its share of its rank's (or host's, or all) samples (0..1).
    pub share_of_rank: f64,
    /// The functions its samples were in, most first.
    pub top_functions: Vec<TopFunction>,
}

/// `lotus.attribution-ranks/1`'s schema.
pub const RANKS_SCHEMA: &str = "lotus.attribution-ranks/1";

/// Every folder's samples per rank and row ([`rows_by_rank`]); as JSON,
/// `lotus.attribution-ranks/1`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct RankRows {
    /// [`RANKS_SCHEMA`].
    pub schema: &'static str,
    /// What the rows are keyed by: `rank`, `host` or `all` ([`RowsBy`]).
    pub by: &'static str,
    /// The job, where several hosts' folders were merged ([`RankRows::with_job`]).
    pub job: Option<lotus_trace::JobHosts>,
    /// By rank (unranked last), then by CPU, most first.
    pub rows: Vec<RankRow>,
    /// Samples read in all.
    pub samples: u64,
    /// What is worth telling.
    pub notes: Vec<String>,
}

impl RankRow {
    /// Where it ran, as a table's first column says it: its rank, its
    /// host, or `all`; `-` for the processes that name no rank.
    pub fn place(&self, by: &str) -> String {
        match (by, self.rank) {
            ("host", _) => self.hosts.join(" "),
            ("all", _) => "all".to_string(),
            (_, Some(r)) => r.to_string(),
            (_, None) => "-".to_string(),
        }
    }
}

impl RankRows {
    /// The heading of its table: the job, where several hosts' folders were
    /// merged, then what the rows are.
    pub fn heading(&self) -> String {
        let job = self
            .job
            .as_ref()
            .map_or(String::new(), |j| j.summary() + "\n\n");
        let on = match self.by {
            "rank" => "on each rank",
            "host" => "on each host",
            _ => "summed over every rank and host",
        };
        format!("{job}Each row {on} ({} samples)", self.samples)
    }

    /// The same rows, of `job`'s hosts' folders.
    pub fn with_job(mut self, job: lotus_trace::JobHosts) -> RankRows {
        self.job = Some(job);
        self
    }
}

/// What a row is kept under: its rank, or its host (or neither: all).
type Place = (Option<u32>, Option<String>);

/// A row on a rank in the making: samples, hosts, leaf functions.
#[derive(Default)]
struct Sum {
    samples: u64,
    cpu_ns: u64,
    interval_ns: u64,
    hosts: std::collections::BTreeSet<String>,
    leaves: HashMap<(String, String), u64>,
}

/// The samples of each folder of `dirs` (of `prefix`) per rank (or host,
/// or all summed: `by`) and row, with each row's `top` functions.
pub fn rows_by_rank(
    dirs: &[&Path],
    prefix: &str,
    budget: Budget,
    top: usize,
    by: RowsBy,
) -> Result<RankRows, Error> {
    let mut sums: BTreeMap<(Place, String), Sum> = BTreeMap::new();
    let (mut samples, mut notes) = (0, Vec::new());
    for dir in dirs {
        let f = fold(*dir, prefix, budget, true)?;
        let places = places_of(dir);
        samples += f.samples;
        notes.extend(f.notes.iter().map(|n| format!("{}: {n}", dir.display())));
        let folder = dir.display().to_string();
        for t in &f.by_thread {
            let place = places.get(&t.pid);
            let host = place.and_then(|p| p.host.clone());
            let key = match by {
                RowsBy::Rank => (place.and_then(|p| p.rank), None),
                // The folder tells hosts apart where two share a name.
                RowsBy::Host => (
                    None,
                    Some(format!("{} ({folder})", host.as_deref().unwrap_or("-"))),
                ),
                RowsBy::All => (None, None),
            };
            let sum = sums.entry((key, t.row.clone())).or_default();
            sum.samples += t.samples;
            sum.cpu_ns += t.samples.saturating_mul(f.interval_ns);
            sum.interval_ns = sum.interval_ns.max(f.interval_ns);
            sum.hosts.extend(host);
            let leaf = t.ids.last().map(|&id| f.symbols.get(id));
            let key = leaf.map_or_else(
                || (lotus_samples::UNKNOWN_SYMBOL.to_string(), String::new()),
                |s| (s.function.clone(), s.module.clone()),
            );
            *sum.leaves.entry(key).or_default() += t.samples;
        }
    }
    let mut per_rank: HashMap<Place, u64> = HashMap::new();
    for ((key, _), s) in &sums {
        *per_rank.entry(key.clone()).or_default() += s.samples;
    }
    let mut rows: Vec<RankRow> = sums
        .into_iter()
        .map(|((key, row), s)| {
            let mut leaves: Vec<((String, String), u64)> = s.leaves.into_iter().collect();
            leaves.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let top_functions = leaves
                .into_iter()
                .take(top)
                .map(|((function, module), n)| TopFunction {
                    function,
                    module,
                    samples: n,
                    share: n as f64 / s.samples.max(1) as f64,
                    cpu_ns: (s.cpu_ns as u128 * n as u128 / s.samples.max(1) as u128) as u64,
                })
                .collect();
            let share_of_rank = s.samples as f64 / per_rank[&key].max(1) as f64;
            RankRow {
                rank: key.0,
                hosts: match key.1 {
                    Some(host) => vec![host],
                    None => s.hosts.into_iter().collect(),
                },
                row,
                samples: s.samples,
                cpu_ns: s.cpu_ns,
                uncertainty_ns: sampled_uncertainty_ns(s.samples, s.interval_ns),
                share_of_rank,
                top_functions,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        (a.rank.is_none(), a.rank, &a.hosts)
            .cmp(&(b.rank.is_none(), b.rank, &b.hosts))
            .then_with(|| b.cpu_ns.cmp(&a.cpu_ns))
            .then_with(|| a.row.cmp(&b.row))
    });
    Ok(RankRows {
        schema: RANKS_SCHEMA,
        by: match by {
            RowsBy::Rank => "rank",
            RowsBy::Host => "host",
            RowsBy::All => "all",
        },
        job: None,
        rows,
        samples,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_samples::{StackNode, Symbol};

    /// A worker's sampled folder (`lotus_testkit::sampled::worker_folder`)
    /// whose log names `rank` and host `h<rank>`: op `A` from 1,000 to
    /// `1000 + a_ns` in `decode`, the rest in `idle`.
    fn ranked(dir: &Path, rank: u32, a_ns: u64) {
        let symbols = [
            (1, Symbol::new("decode", "/libjpeg.so")),
            (2, Symbol::new("idle", "/libc.so")),
        ];
        let stacks = [StackNode::new(1, 0, 1), StackNode::new(2, 0, 2)];
        lotus_testkit::sampled::worker_folder(
            dir,
            &[("A", 1000, a_ns, "kind=op")],
            &symbols,
            &stacks,
            |t| match (1000..1000 + a_ns).contains(&t) {
                true => (1, false, 1),
                false => (2, false, 2),
            },
            &[],
        );
        let log = dir.join("lotus_worker_pid_10");
        let text = std::fs::read_to_string(&log).expect("log");
        let text = text.replacen("pid=10 ", &format!("pid=10 host=h{rank} rank={rank} "), 1);
        std::fs::write(&log, text).expect("log");
    }

    #[test]
    fn each_folders_rows_go_to_the_rank_its_logs_name_as_attribute_counts_them() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (d0, d1) = (tmp.path().join("n0"), tmp.path().join("n1"));
        for d in [&d0, &d1] {
            std::fs::create_dir(d).expect("mkdir");
        }
        ranked(&d0, 0, 1000);
        ranked(&d1, 1, 3000);
        let got =
            rows_by_rank(&[&d0, &d1], "lotus", Budget::default(), 3, RowsBy::Rank).expect("rows");
        assert_eq!(got.samples, 100);
        for (rank, dir) in [(0, &d0), (1, &d1)] {
            let alone = crate::attribute_folder(dir.as_path(), "lotus", Budget::default(), 3)
                .expect("attributed");
            let a = alone.rows.iter().find(|r| r.path == "A").expect("A alone");
            let row = got
                .rows
                .iter()
                .find(|r| r.rank == Some(rank) && r.row == "A")
                .expect("A on its rank");
            assert_eq!(row.samples, a.samples, "rank {rank}");
            assert_eq!(row.hosts, [format!("h{rank}")]);
            assert_eq!(row.top_functions[0].function, "decode");
            assert_eq!(row.top_functions[0].share, 1.0);
            let on_rank: u64 = got
                .rows
                .iter()
                .filter(|r| r.rank == Some(rank))
                .map(|r| r.samples)
                .sum();
            assert_eq!(on_rank, 50, "rank {rank}: every sample of its folder");
        }
        // Rank 0's rows first, each rank's by CPU.
        assert_eq!(got.rows[0].rank, Some(0));
        assert!(got
            .rows
            .windows(2)
            .all(|w| w[0].rank != w[1].rank || w[0].cpu_ns >= w[1].cpu_ns));
        assert_eq!(got.rows.iter().filter(|r| r.rank.is_none()).count(), 0);
        // All summed: each row once, its samples both ranks'; by host: each
        // host's, named as its logs name it.
        let all =
            rows_by_rank(&[&d0, &d1], "lotus", Budget::default(), 3, RowsBy::All).expect("all");
        let a: Vec<&RankRow> = all.rows.iter().filter(|r| r.row == "A").collect();
        assert_eq!(a.len(), 1);
        let each: u64 = got
            .rows
            .iter()
            .filter(|r| r.row == "A")
            .map(|r| r.samples)
            .sum();
        assert_eq!((a[0].rank, a[0].samples), (None, each));
        let hosts =
            rows_by_rank(&[&d0, &d1], "lotus", Budget::default(), 3, RowsBy::Host).expect("hosts");
        let on: Vec<(&[String], u64)> = hosts
            .rows
            .iter()
            .filter(|r| r.row == "A")
            .map(|r| (r.hosts.as_slice(), r.samples))
            .collect();
        assert_eq!(on.len(), 2);
        assert_eq!(on[0].0, [format!("h0 ({})", d0.display())]);
        assert_eq!(hosts.rows[0].place(hosts.by), on[0].0[0]);
        assert!(
            all.heading().contains("summed over every rank"),
            "{}",
            all.heading()
        );
    }
}
