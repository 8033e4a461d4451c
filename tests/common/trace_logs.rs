//! The tests' own reader of `lotus_trace` logs (not lotus-core's): strict,
//! every line must be `S<Name>,<start_ns>,<duration_ns>[,key=value...]`, a
//! `#` comment, or the `#lotus-trace v1` header; and the runs that write
//! them.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// One event line.
#[derive(Debug, Clone)]
pub struct Ev {
    pub name: String,
    pub start: u64,
    pub dur: u64,
    pub fields: BTreeMap<String, String>,
}

impl Ev {
    pub fn end(&self) -> u64 {
        self.start + self.dur
    }
    pub fn kind(&self) -> &str {
        self.fields.get("kind").map(String::as_str).unwrap_or("")
    }
    pub fn num(&self, key: &str) -> Option<u64> {
        self.fields.get(key).map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}={v} is not a number in {self:?}"))
        })
    }
    pub fn batch(&self) -> Option<u64> {
        self.num("batch")
    }
    pub fn sample(&self) -> Option<u64> {
        self.num("sample")
    }
    /// Whether `self` lies within `outer`.
    pub fn within(&self, outer: &Ev) -> bool {
        self.start >= outer.start && self.end() <= outer.end()
    }
}

/// One process's log.
#[derive(Debug)]
pub struct Log {
    /// `main` or `worker`, from the file name.
    pub role: String,
    /// The pid, from the file name.
    pub pid: u32,
    /// The header's `key=value` words.
    pub header: BTreeMap<String, String>,
    /// The events, in file order (the threads named apart).
    pub events: Vec<Ev>,
    /// The tracer's `kind=thread` lines: the DataLoader's machinery
    /// threads it named (a name, not a span).
    pub threads: Vec<Ev>,
    /// The `#` lines after the header, without the `#`.
    pub comments: Vec<String>,
}

pub fn parse_line(line: &str, file: &str, no: usize) -> Ev {
    let mut parts = line.split(',');
    let name = parts.next().unwrap_or("");
    let name = name
        .strip_prefix('S')
        .filter(|n| !n.is_empty() && !n.contains(char::is_whitespace))
        .unwrap_or_else(|| panic!("{file}:{no}: bad name in {line:?}"));
    let num = |s: Option<&str>| -> u64 {
        s.and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{file}:{no}: bad number in {line:?}"))
    };
    let start = num(parts.next());
    let dur = num(parts.next());
    let mut fields = BTreeMap::new();
    for f in parts {
        let (k, v) = f
            .split_once('=')
            .unwrap_or_else(|| panic!("{file}:{no}: field {f:?} is not key=value"));
        assert!(
            fields.insert(k.to_string(), v.to_string()).is_none(),
            "{file}:{no}: {k} twice"
        );
    }
    Ev {
        name: name.to_string(),
        start,
        dur,
        fields,
    }
}

/// Every file in `dir` must be a log named `lotus_<role>_pid_<pid>`, but
/// the run's record (`lotus.run`, what `lotus report` shows at its top)
/// and a sampled run's files (`lotus.samples`, `.symbols`, `.stacks`,
/// `.sampling`).
pub fn read_logs(dir: &Path) -> Vec<Log> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).expect("trace folder") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().to_string();
        let sampled = ["samples", "symbols", "stacks", "sampling"].map(|x| format!("lotus.{x}"));
        if name == "lotus.run" || sampled.contains(&name) {
            continue;
        }
        let (role, pid) = if let Some(p) = name.strip_prefix("lotus_main_pid_") {
            ("main", p)
        } else if let Some(p) = name.strip_prefix("lotus_worker_pid_") {
            ("worker", p)
        } else {
            panic!("unexpected file {name} in the trace folder");
        };
        let pid: u32 = pid.parse().unwrap_or_else(|_| panic!("pid in {name}"));
        let text = std::fs::read_to_string(entry.path()).expect("read log");
        assert!(text.ends_with('\n'), "{name}: last line not ended");
        let mut lines = text.lines();
        let header = lines.next().unwrap_or("");
        assert_eq!(
            header.split_whitespace().take(4).collect::<Vec<_>>(),
            [
                "#lotus-trace",
                "v1",
                &format!("role={role}"),
                &format!("pid={pid}")
            ],
            "{name}: header"
        );
        assert!(header.contains(" host=") && header.contains(" rank="));
        let header: BTreeMap<String, String> = header
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut events = Vec::new();
        let mut threads = Vec::new();
        let mut comments = Vec::new();
        for (i, line) in lines.enumerate() {
            if let Some(c) = line.strip_prefix('#') {
                comments.push(c.to_string());
                continue;
            }
            let e = parse_line(line, &name, i + 2);
            if e.kind() == "thread" {
                threads.push(e);
            } else {
                events.push(e);
            }
        }
        logs.push(Log {
            role: role.to_string(),
            pid,
            header,
            events,
            threads,
            comments,
        });
    }
    logs.sort_by_key(|l| (l.role.clone(), l.pid));
    logs
}

/// `lotus trace run --out DIR [extra] -- python ARGS`.
pub fn trace_run(dir: &Path, extra: &[&str], py: &Path, args: &[&OsStr]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--out"])
        .arg(dir)
        .args(extra)
        .arg("--")
        .arg(py)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH");
    cmd.output().expect("run lotus")
}

/// `python ARGS` with lotus_trace importable (from the source tree), no
/// `lotus trace run`.
pub fn python_with_tracer(py: &Path, args: &[&OsStr]) -> Output {
    Command::new(py)
        .args(args)
        .env("PYTHONPATH", super::harness_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .output()
        .expect("run python")
}

/// Fails the test, with its output, when `out` is not a success.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A JSON list of pids.
pub fn pids(v: &Value) -> BTreeSet<u32> {
    v.as_array()
        .expect("pid list")
        .iter()
        .map(|p| p.as_u64().expect("pid") as u32)
        .collect()
}

/// A JSON report a fixture wrote.
pub fn read_report(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("report JSON")
}
