//! A log's first line, `#lotus-trace v1 role=... pid=... host=... rank=...`,
//! read in one place ([`LogHeader::parse`]: the line parser takes host and
//! rank from it), and the folders of one distributed job's hosts merged
//! into one trace by what their headers say ([`JobHosts::merge`]).
//!
//! The tracer writes the header (`lotus_trace/_core.py`, `job_fields`);
//! `fixtures/trace/golden/tracer_headers.txt` pins the two ends together.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::event::Role;
use crate::folder::{LogFile, TraceFolder};
use crate::parse::HEADER_TAG;

/// What a log's header says. Every field is `None` where the header does
/// not say it (or says `-`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogHeader {
    /// `role=`: main process or worker (the file name's wins where they
    /// differ: the tracer renames a log and keeps its first header).
    pub role: Option<Role>,
    /// `pid=`.
    pub pid: Option<u32>,
    /// `host=`: the machine's name.
    pub host: Option<Arc<str>>,
    /// `rank=`: the process's rank in the distributed job (`RANK`; under
    /// `srun` alone, `SLURM_PROCID`).
    pub rank: Option<u32>,
    /// `world_size=`: the job's ranks.
    pub world_size: Option<u32>,
    /// `node=`: the node's index in the job (torchrun's `GROUP_RANK`,
    /// else `SLURM_NODEID`).
    pub node: Option<u32>,
    /// `ray_node=`: the Ray node of a Ray worker (its id's first 12 hex
    /// digits).
    pub ray_node: Option<Arc<str>>,
    /// `job=`: the job every host's logs share
    /// (`torchrun:<run id>@<store address>:<port>`, `slurm:<job>.<step>`,
    /// `ray:<job id>`).
    pub job: Option<Arc<str>>,
    /// `clock=`: the host's clock as the kernel kept it when the run began
    /// (`synced:<estimated error us>:<maximum error us>`,
    /// `unsynced:-:<maximum error us>`, `unknown`).
    pub clock: Option<Arc<str>>,
    /// `wall_ns=`: the wall clock when the log began, ns since the epoch.
    pub wall_ns: Option<u64>,
}

impl LogHeader {
    /// Reads a header line (with or without its tag and line break): the
    /// fields, and what in it could not be read (a field keeps `None`).
    pub fn parse(line: &str) -> (LogHeader, Vec<String>) {
        let mut h = LogHeader::default();
        let mut problems = Vec::new();
        let mut words = line.split_whitespace().peekable();
        if words.peek() == Some(&HEADER_TAG) {
            words.next();
        }
        let number = |key: &str, value: &str, problems: &mut Vec<String>| -> Option<u32> {
            if value == "-" || value.is_empty() {
                return None;
            }
            let n = value.parse().ok();
            if n.is_none() {
                problems.push(format!("header: {key} '{value}' is not a number"));
            }
            n
        };
        for word in words {
            if let Some(v) = word.strip_prefix('v').filter(|v| v.parse::<u32>().is_ok()) {
                if v != "1" {
                    problems.push(format!("trace format version v{v} is unknown; read as v1"));
                }
                continue;
            }
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            match key {
                "role" => {
                    h.role = Role::parse(value);
                    if h.role.is_none() {
                        problems.push(format!("header: role '{value}' is neither main nor worker"));
                    }
                }
                "pid" => {
                    h.pid = value.parse().ok();
                    if h.pid.is_none() {
                        problems.push(format!("header: pid '{value}' is not a process id"));
                    }
                }
                "host" if !value.is_empty() && value != "-" => h.host = Some(Arc::from(value)),
                "rank" => h.rank = number("rank", value, &mut problems),
                "world_size" => h.world_size = number("world_size", value, &mut problems),
                "node" => h.node = number("node", value, &mut problems),
                "job" if !value.is_empty() && value != "-" => h.job = Some(Arc::from(value)),
                "clock" if !value.is_empty() => h.clock = Some(Arc::from(value)),
                "ray_node" if !value.is_empty() && value != "-" => {
                    h.ray_node = Some(Arc::from(value))
                }
                "wall_ns" => h.wall_ns = value.parse().ok(),
                _ => {}
            }
        }
        (h, problems)
    }

    /// The node the process ran on, as tables name it: its Ray node, else
    /// its node's index (`node=`), else `None`.
    pub fn node_label(&self) -> Option<String> {
        self.ray_node
            .as_deref()
            .map(str::to_string)
            .or_else(|| self.node.map(|n| n.to_string()))
    }

    /// The header of `log`, where its first line is one (`None` where the
    /// log has none or cannot be read: its reading says why).
    pub fn of(log: &LogFile) -> Option<LogHeader> {
        let file = log.open_file().ok()?;
        let mut first = Vec::new();
        // The header is a few hundred bytes; a longer first line is not one.
        std::io::BufReader::new(file.take(4096))
            .read_until(b'\n', &mut first)
            .ok()?;
        let text = std::str::from_utf8(&first).ok()?;
        let text = text.trim_start_matches('\u{feff}').trim();
        (text.split_whitespace().next() == Some(HEADER_TAG)).then(|| LogHeader::parse(text).0)
    }
}

/// One host's folder of a job merged by [`JobHosts::merge`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HostFolder {
    /// The folder given.
    pub path: PathBuf,
    /// Its name in the merged trace (the folder's own name, or its path
    /// where two names repeat): its logs' group, and what tables show.
    pub label: String,
    /// The machines its logs name.
    pub hosts: Vec<String>,
    /// The nodes (`node=`) its logs name.
    pub nodes: Vec<u32>,
    /// The ranks its logs name.
    pub ranks: Vec<u32>,
    /// Its host's clock when the run began, as its logs say (`clock=`:
    /// `synced:<est us>:<max us>`, `unsynced:-:<max us>`), where they do.
    pub clock: Option<String>,
    /// The earliest `wall_ns=` of its logs.
    #[serde(skip)]
    pub first_wall_ns: Option<u64>,
}

/// The folders of one job's hosts ([`JobHosts::merge`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct JobHosts {
    /// The job, as every folder's headers name it.
    pub job: String,
    /// The job's ranks (`world_size=`), where the headers say.
    pub world_size: Option<u32>,
    /// Each host's folder, in the order given.
    pub hosts: Vec<HostFolder>,
}

/// Why folders are not one job's hosts ([`JobHosts::merge`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
#[non_exhaustive]
pub struct NotOneJob {
    /// Why, naming the folders.
    pub reason: String,
    /// Whether any folder's logs name a job at all (where none does, the
    /// folders are plain runs: configurations to compare, nothing to say).
    pub named: bool,
}

impl JobHosts {
    /// [`JobHosts::merge`] of the trace folders at `dirs` (two or more;
    /// one is not several hosts). The outer error: a folder that cannot be
    /// read; the inner: why they are not one job's hosts.
    #[allow(clippy::type_complexity)]
    pub fn of_dirs(
        dirs: &[PathBuf],
    ) -> Result<Result<(TraceFolder, JobHosts), NotOneJob>, crate::TraceError> {
        if dirs.len() < 2 {
            return Ok(Err(NotOneJob {
                reason: "one folder is one host's: give the folders of each host of the job, two or more".to_string(),
                named: false,
            }));
        }
        let folders = dirs
            .iter()
            .map(|d| TraceFolder::scan(d.as_path()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(JobHosts::merge(folders))
    }

    /// `job torchrun:...: 2 hosts merged: node0 (host a, node 0, rank 0),
    /// node1 (...)`: a line for tables.
    pub fn summary(&self) -> String {
        let hosts: Vec<String> = self
            .hosts
            .iter()
            .map(|h| {
                let join = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
                let mut said = vec![format!("host {}", h.hosts.join(" "))];
                if !h.nodes.is_empty() {
                    said.push(format!("node {}", join(&h.nodes)));
                }
                if !h.ranks.is_empty() {
                    said.push(format!("rank {}", join(&h.ranks)));
                }
                said.push(clock_words(h.clock.as_deref()));
                format!("{} ({})", h.label, said.join(", "))
            })
            .collect();
        format!(
            "Job {}: {} hosts' folders merged, on each host's wall clock: {}",
            self.job,
            self.hosts.len(),
            hosts.join("; ")
        )
    }

    /// Merges the trace folders of one distributed job's hosts (each
    /// `lotus trace run` on one node) into one trace: every log keeps its
    /// place under its host's label, so that processes, batches and ranks
    /// of different hosts never mix, and the timelines line up on the
    /// wall clock every host's logs are written in. Refused, with the
    /// reason, where a folder's logs name no job, two jobs, or another
    /// job than the first folder's, or where a rank is in two folders (a
    /// folder given twice, or two launches that reused one job id).
    pub fn merge(folders: Vec<TraceFolder>) -> Result<(TraceFolder, JobHosts), NotOneJob> {
        let mut job: Option<(String, String)> = None;
        let mut world = None;
        let mut hosts = Vec::new();
        let mut rank_at: BTreeMap<u32, String> = BTreeMap::new();
        // Each log's header, read once.
        let heads: Vec<Vec<LogHeader>> = folders
            .iter()
            .map(|f| f.logs.iter().filter_map(LogHeader::of).collect())
            .collect();
        let named = heads.iter().flatten().any(|h| h.job.is_some());
        let roots: Vec<&std::path::Path> = folders.iter().map(|f| f.root.as_path()).collect();
        let labels = crate::configurations::labels_of(&roots);
        for ((f, label), heads) in folders.iter().zip(&labels).zip(&heads) {
            let shown = f.root.display().to_string();
            let mut jobs = BTreeSet::new();
            let mut host = HostFolder {
                path: f.root.clone(),
                label: label.clone(),
                hosts: Vec::new(),
                nodes: Vec::new(),
                ranks: Vec::new(),
                clock: None,
                first_wall_ns: None,
            };
            let (mut names, mut nodes, mut ranks) =
                (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
            for h in heads {
                if let Some(j) = &h.job {
                    jobs.insert(j.to_string());
                }
                names.extend(h.host.as_deref().map(str::to_string));
                nodes.extend(h.node);
                ranks.extend(h.rank);
                world = world.or(h.world_size);
                host.clock = host.clock.take().or(h.clock.as_deref().map(str::to_string));
                host.first_wall_ns = match (host.first_wall_ns, h.wall_ns) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            let this = match jobs.into_iter().collect::<Vec<_>>().as_slice() {
                [one] => one.clone(),
                none_or_many => {
                    let what = if f.logs.is_empty() {
                        "holds no trace logs".to_string()
                    } else if none_or_many.is_empty() {
                        "names no distributed job (its logs were not written under torchrun, srun or Ray, or by an older lotus)".to_string()
                    } else {
                        format!(
                            "names {} jobs, not one ({})",
                            none_or_many.len(),
                            none_or_many.join(", ")
                        )
                    };
                    return Err(NotOneJob {
                        reason: format!("{shown}: {what}"),
                        named,
                    });
                }
            };
            match &job {
                None => job = Some((this, shown.clone())),
                Some((first, at)) if *first != this => {
                    return Err(NotOneJob {
                        reason: format!("{shown} is job {this}, {at} is job {first}: folders of different jobs are not one job's hosts"),
                        named: true,
                    })
                }
                Some(_) => {}
            }
            for &r in &ranks {
                if let Some(other) = rank_at.insert(r, shown.clone()) {
                    return Err(NotOneJob {
                        reason: format!("rank {r} is in both {other} and {shown}: not two hosts of one run (a folder given twice, or two launches with one job id)"),
                        named: true,
                    });
                }
            }
            host.hosts = names.into_iter().collect();
            host.nodes = nodes.into_iter().collect();
            host.ranks = ranks.into_iter().collect();
            hosts.push(host);
        }
        let Some((job, _)) = job else {
            return Err(NotOneJob {
                reason: "no folders to merge".to_string(),
                named: false,
            });
        };
        let mut merged = TraceFolder {
            root: folders[0].root.clone(),
            ..TraceFolder::default()
        };
        for (f, label) in folders.into_iter().zip(&labels) {
            merged.logs.extend(f.logs.into_iter().map(|mut l| {
                l.folder = if l.folder.is_empty() {
                    label.clone()
                } else {
                    format!("{label}/{}", l.folder)
                };
                l
            }));
            merged.torch.extend(f.torch);
            merged.views.extend(f.views);
        }
        Ok((
            merged,
            JobHosts {
                job,
                world_size: world,
                hosts,
            },
        ))
    }
}

/// A host's clock in words, from its `clock=`: how far it may be off.
fn clock_words(clock: Option<&str>) -> String {
    let mut parts = clock.unwrap_or("").split(':');
    let (state, est, max) = (parts.next(), parts.next(), parts.next());
    let ms = |us: Option<&str>| us.and_then(|u| u.parse::<f64>().ok()).map(|u| u / 1000.0);
    match (state, ms(est), ms(max)) {
        (Some("synced"), Some(e), Some(m)) => {
            format!("clock synchronized, estimated error {e:.1} ms, at most {m:.0} ms")
        }
        (Some("unsynced"), _, _) => "clock not synchronized (no time service steers it: its tracks may be off by any amount)".to_string(),
        _ => "clock state not recorded".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_its_fields_and_says_what_it_cannot() {
        let (h, problems) = LogHeader::parse(
            "#lotus-trace v1 role=worker pid=42 host=n1 rank=3 local_rank=1 world_size=8 node=1 job=torchrun:7@10.0.0.1:29500 run=ab ppid=1 wall_ns=5 monotonic_ns=6",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(h.role, Some(Role::Worker));
        assert_eq!(
            (h.pid, h.rank, h.world_size, h.node),
            (Some(42), Some(3), Some(8), Some(1))
        );
        assert_eq!(h.host.as_deref(), Some("n1"));
        assert_eq!(h.job.as_deref(), Some("torchrun:7@10.0.0.1:29500"));
        assert_eq!(h.wall_ns, Some(5));
        let (h, problems) = LogHeader::parse("#lotus-trace v2 rank=x node=- job=- host=-");
        assert_eq!((h.rank, h.node, h.job, h.host), (None, None, None, None));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].contains("v2") && problems[1].contains("rank 'x'"),
            "{problems:?}"
        );
    }

    /// A host's folder: a main log and a worker log of `rank`, of `job`.
    fn host(root: &std::path::Path, name: &str, job: &str, rank: u32) -> TraceFolder {
        let d = root.join(name);
        std::fs::create_dir_all(&d).expect("mkdir");
        for (role, pid) in [("main", 100), ("worker", 101)] {
            let head = format!(
                "#lotus-trace v1 role={role} pid={pid} host=same rank={rank} world_size=2 node={rank} job={job} clock=synced:500:16000 wall_ns={}\n",
                1000 + rank
            );
            std::fs::write(
                d.join(format!("l_{role}_pid_{pid}")),
                head + "SA,1,2,kind=op\n",
            )
            .expect("write");
        }
        TraceFolder::scan(&d).expect("scan")
    }

    #[test]
    fn folders_of_one_job_merge_and_others_are_refused_with_the_reason() {
        let tmp = tempfile::tempdir().expect("tmp");
        let t = tmp.path();
        let a = host(t, "node0", "torchrun:x@h:1", 0);
        let b = host(t, "node1", "torchrun:x@h:1", 1);
        let (merged, job) = JobHosts::merge(vec![a.clone(), b.clone()]).expect("one job");
        assert_eq!(job.job, "torchrun:x@h:1");
        assert_eq!(job.world_size, Some(2));
        let labels: Vec<(&str, &[u32], &[u32])> = job
            .hosts
            .iter()
            .map(|h| (h.label.as_str(), h.ranks.as_slice(), h.nodes.as_slice()))
            .collect();
        assert_eq!(
            labels,
            [("node0", &[0][..], &[0][..]), ("node1", &[1][..], &[1][..])]
        );
        assert_eq!(job.hosts[1].first_wall_ns, Some(1001));
        let said = job.summary();
        assert!(
            said.contains("node1 (host same, node 1, rank 1, clock synchronized, estimated error 0.5 ms, at most 16 ms)"),
            "{said}"
        );
        // Each log keeps its host's label: the same pids on two hosts are
        // two processes.
        assert_eq!(merged.logs.len(), 4);
        let index =
            crate::TraceIndex::load(&merged, true, lotus_sort::Budget::new(1 << 20), |_| {})
                .expect("load");
        assert_eq!(index.processes.len(), 4);

        let other = host(t, "other", "torchrun:y@h:2", 1);
        let e = JobHosts::merge(vec![a.clone(), other]).expect_err("two jobs");
        assert!(
            e.named && e.reason.contains("torchrun:y@h:2") && e.reason.contains("torchrun:x@h:1"),
            "{e}"
        );
        let e = JobHosts::merge(vec![a.clone(), a.clone()]).expect_err("rank twice");
        assert!(e.reason.contains("rank 0 is in both"), "{e}");
        let plain = t.join("plain");
        std::fs::create_dir(&plain).expect("mkdir");
        std::fs::write(plain.join("l_main_pid_5"), "SA,1,2\n").expect("write");
        let plain = TraceFolder::scan(&plain).expect("scan");
        let e = JobHosts::merge(vec![plain.clone(), plain.clone()]).expect_err("no job");
        assert!(
            !e.named && e.reason.contains("names no distributed job"),
            "{e}"
        );
        let e = JobHosts::merge(vec![plain, b]).expect_err("one without");
        assert!(e.named, "{e}");
    }
}
