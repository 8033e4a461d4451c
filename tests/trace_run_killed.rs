//! `lotus trace run` when a process of the job is killed outright
//! (SIGKILL, as the OOM killer does): every event it recorded is in its
//! log, the log is cut to its lines, and lotus says which process died and
//! how. Python: $LOTUS_PYTHON, else the repository's .venv.

use crate::common;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

/// `lotus trace run --out DIR [EXTRA] -- python -c CODE ARGS...`, run
/// (through the shared [`common::trace_logs::trace_run`]).
fn trace_run(dir: &Path, extra: &[&str], code: &str, args: &[&Path]) -> Output {
    let mut all: Vec<&OsStr> = vec![OsStr::new("-c"), OsStr::new(code)];
    all.extend(args.iter().map(|a| a.as_os_str()));
    common::trace_logs::trace_run(dir, extra, &common::any_python(), &all)
}

/// What the job wrote of itself: `<pid> <ops it ran>`.
fn own_count(path: &Path) -> (u32, usize) {
    let text = std::fs::read_to_string(path).expect("the job's own count");
    let mut words = text.split_whitespace();
    let pid = words.next().and_then(|w| w.parse().ok()).expect("pid");
    let ops = words.next().and_then(|w| w.parse().ok()).expect("ops");
    (pid, ops)
}

/// The log of `pid` in `dir` (`*_<role>_pid_<pid>`), as bytes.
fn log_of(dir: &Path, role: &str, pid: u32) -> Vec<u8> {
    let name = format!("lotus_{role}_pid_{pid}");
    std::fs::read(dir.join(&name)).unwrap_or_else(|e| {
        let there: Vec<_> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        panic!("{name}: {e}; the folder holds {there:?}")
    })
}

/// Lines of `log` that are spans of op `name`.
fn op_lines(log: &[u8], name: &str) -> usize {
    let tag = format!("S{name},");
    String::from_utf8_lossy(log)
        .lines()
        .filter(|l| l.starts_with(&tag) && l.contains("kind=op"))
        .count()
}

/// A worker (a multiprocessing child, role worker) runs `argv[1]` ops
/// (fewer than the tracer ever buffered), writes its pid and its own count
/// of them to `argv[2]`, then SIGKILLs itself; the main process waits for
/// it and exits 0.
const WORKER_KILLED: &str = r#"import os, sys, multiprocessing as mp, lotus_trace
def work(n, out):
    lotus_trace.set_role('worker')
    op = lotus_trace.wrap(lambda: None, 'Op')
    done = 0
    for _ in range(n):
        op()
        done += 1
    with open(out, 'w') as f:
        f.write(f'{os.getpid()} {done}')
    os.kill(os.getpid(), 9)
if __name__ == '__main__':
    lotus_trace.wrap(lambda: None, 'Main')()
    p = mp.get_context('fork').Process(target=work, args=(int(sys.argv[1]), sys.argv[2]))
    p.start()
    p.join()
    sys.exit(0 if p.exitcode == -9 else 3)
"#;

#[test]
fn a_worker_killed_outright_keeps_its_events_and_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let count = tmp.path().join("count");
    let n = Path::new("300");
    let out = trace_run(&dir, &[], WORKER_KILLED, &[n, &count]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // The job's own status: its main process ended well.
    assert_eq!(out.status.code(), Some(0), "{err}");
    let (pid, ops) = own_count(&count);
    assert_eq!(ops, 300);
    let log = log_of(&dir, "worker", pid);
    assert_eq!(op_lines(&log, "Op"), ops, "every op the worker ran: {err}");
    assert!(!log.contains(&0), "the log is cut to its lines");
    assert!(
        err.contains(&format!(
            "worker pid {pid} was killed by SIGKILL (signal 9): its log was cut short at"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{ops} events kept")), "{err}");
    // The note stays in the folder, at the end of that log.
    let text = String::from_utf8_lossy(&log);
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with("# lotus-trace: lotus trace run: worker pid") && last.contains("SIGKILL"),
        "{last}"
    );
    // The parent's log is whole (the forked worker never wrote into its
    // mapping), and notes how its child ended.
    let main: Vec<_> = std::fs::read_dir(&dir)
        .expect("trace folder")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("lotus_main_pid_")
        })
        .map(|e| std::fs::read(e.path()).expect("main log"))
        .collect();
    assert_eq!(main.len(), 1);
    let text = String::from_utf8_lossy(&main[0]);
    assert!(!main[0].contains(&0));
    assert_eq!(op_lines(&main[0], "Main"), 1, "{text}");
    assert_eq!(op_lines(&main[0], "Op"), 0, "{text}");
    assert!(
        text.contains(&format!(
            "# lotus-trace: child pid={pid} ended by signal=9 (SIGKILL)"
        )),
        "{text}"
    );
    // Every reader reads it: `trace stats` counts its ops, no bad line.
    let stats = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "stats", "--format", "json"])
        .arg(&dir)
        .output()
        .expect("trace stats");
    let json = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.status.success(), "{json}");
    assert!(json.contains("\"bad_lines\": 0"), "{json}");
}

#[test]
fn a_main_process_killed_outright_keeps_its_events_and_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let count = tmp.path().join("count");
    let code = r#"import os, sys, lotus_trace
op = lotus_trace.wrap(lambda: None, 'Op')
done = 0
for _ in range(int(sys.argv[1])):
    op()
    done += 1
with open(sys.argv[2], 'w') as f:
    f.write(f'{os.getpid()} {done}')
os.kill(os.getpid(), 9)
"#;
    let out = trace_run(&dir, &[], code, &[Path::new("200"), &count]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // The job's status passes through: 128 + 9.
    assert_eq!(out.status.code(), Some(137), "{err}");
    let (pid, ops) = own_count(&count);
    let log = log_of(&dir, "main", pid);
    assert_eq!(op_lines(&log, "Op"), ops, "{err}");
    assert!(!log.contains(&0));
    assert!(
        err.contains(&format!(
            "the main process pid {pid} was killed by SIGKILL (signal 9): its log was cut short at"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{ops} events kept")), "{err}");
}

#[test]
fn an_original_format_log_of_a_killed_worker_is_cut_to_its_lines() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let count = tmp.path().join("count");
    let out = trace_run(
        &dir,
        &["--format", "original"],
        WORKER_KILLED,
        &[Path::new("150"), &count],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let (pid, ops) = own_count(&count);
    let log = log_of(&dir, "worker", pid);
    assert!(!log.contains(&0), "NUL bytes would break pandas' read_csv");
    // Three columns on every line, the worker's ops all there.
    let text = String::from_utf8(log).expect("text");
    assert!(text.lines().all(|l| l.split(',').count() == 3), "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("SOp,")).count(), ops);
    // Its parent's note of it cannot go in a log of this format: lotus
    // names the log, with no known cause.
    assert!(
        err.contains(&format!(
            "worker pid {pid} ended without closing its log (killed?)"
        )),
        "{err}"
    );
}

/// A sampled worker spins `argv[1]` ops of 2 ms of its own CPU each, writes
/// its pid, the ops and the CPU time it ran them in (its thread's clock)
/// to `argv[2]`, then SIGKILLs itself.
const SPINNING_WORKER_KILLED: &str = r#"import os, sys, time, multiprocessing as mp, lotus_trace
def spin():
    t = time.thread_time_ns() + 2_000_000
    while time.thread_time_ns() < t:
        pass
def work(n, out):
    lotus_trace.set_role('worker')
    op = lotus_trace.wrap(spin, 'Spin')
    cpu = time.thread_time_ns()
    for _ in range(n):
        op()
    with open(out, 'w') as f:
        f.write(f'{os.getpid()} {n} {time.thread_time_ns() - cpu}')
    os.kill(os.getpid(), 9)
if __name__ == '__main__':
    lotus_trace.wrap(lambda: None, 'Main')()
    p = mp.get_context('fork').Process(target=work, args=(int(sys.argv[1]), sys.argv[2]))
    p.start()
    p.join()
    sys.exit(0 if p.exitcode == -9 else 3)
"#;

#[test]
fn a_killed_workers_samples_are_its_ops_not_untraced_processes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let count = tmp.path().join("count");
    let out = trace_run(
        &dir,
        &["--sample", "--frequency", "1000"],
        SPINNING_WORKER_KILLED,
        &[Path::new("150"), &count],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let status = common::sampled::sampling(&dir)
        .get("status")
        .cloned()
        .unwrap_or_default();
    if status != "complete" {
        eprintln!("skipped: a_killed_workers_samples_are_its_ops_not_untraced_processes: sampling did not run here (status {status:?}): {err}");
        return;
    }
    let text = std::fs::read_to_string(&count).expect("the worker's own count");
    let cpu_ns: f64 = text
        .split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .expect("cpu");
    let a = common::sampled::attribute_json(&dir);
    let interval = a["interval_ns"].as_f64().expect("interval");
    let total = a["total_samples"].as_f64().expect("total");
    let rows = a["rows"].as_array().expect("rows");
    let samples = |name: &str| {
        rows.iter()
            .filter(|r| r["name"] == name)
            .map(|r| r["samples"].as_f64().unwrap_or(0.0))
            .sum::<f64>()
    };
    // The worker's samples went to its op (at least half of what its own
    // clock ran, whatever samples a busy machine lost), and the processes
    // of the job without a log took none of them.
    let names: Vec<String> = rows
        .iter()
        .map(|r| format!("{}: {} samples", r["name"], r["samples"]))
        .collect();
    let spin = samples("Spin");
    assert!(
        spin * interval >= 0.5 * cpu_ns,
        "Spin: {spin} samples of {interval} ns against {cpu_ns} ns of the worker's own CPU: {names:?}"
    );
    let untraced = samples("untraced processes");
    assert!(
        untraced <= 0.05 * total,
        "untraced processes: {untraced} of {total} samples: {names:?}"
    );
}

/// A DataLoader worker SIGKILLs itself at item `argv[1]`, having written
/// its pid and how many items it loaded to `argv[2]`; the main process
/// fails as a killed worker makes it fail (its RuntimeError).
const DATALOADER_WORKER_KILLED: &str = r#"import os, sys, torch
from torch.utils.data import DataLoader, Dataset
class Items(Dataset):
    loaded = 0
    def __len__(self):
        return 64
    def __getitem__(self, i):
        if i == int(sys.argv[1]):
            with open(sys.argv[2], 'w') as f:
                f.write(f'{os.getpid()} {self.loaded}')
            os.kill(os.getpid(), 9)
        self.loaded += 1
        return torch.tensor([i])
for batch in DataLoader(Items(), batch_size=4, num_workers=1):
    pass
"#;

#[test]
fn a_dataloader_worker_killed_outright_keeps_its_samples_and_is_named() {
    let test = "a_dataloader_worker_killed_outright_keeps_its_samples_and_is_named";
    let Some(py) = common::torch::torch_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let count = tmp.path().join("count");
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(&dir)
        .arg("--")
        .arg(py)
        .args(["-c", DATALOADER_WORKER_KILLED, "22"])
        .arg(&count)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH")
        .output()
        .expect("run lotus");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // The job's own status: its main process raised.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let (pid, loaded) = own_count(&count);
    assert_eq!(loaded, 22);
    let log = log_of(&dir, "worker", pid);
    assert!(!log.contains(&0));
    let samples = String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(",kind=sample"))
        .count();
    assert_eq!(samples, loaded, "every item the worker loaded: {err}");
    assert!(
        err.contains(&format!(
            "worker pid {pid} was killed by SIGKILL (signal 9): its log was cut short at"
        )),
        "{err}"
    );
}
