//! `lotus trace run` when things go wrong: the trace cannot be written (a
//! full file system), two runs share a folder, the job's main process is
//! killed with workers running, a link or file is already where a log
//! goes. Python: $LOTUS_PYTHON, else the repository's .venv.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn python() -> PathBuf {
    common::any_python()
}

/// `lotus trace run --out DIR -- python -c CODE ARGS...`, not yet waited for.
fn trace_run(dir: &Path, code: &str, args: &[&Path]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--out"])
        .arg(dir)
        .arg("--")
        .arg(python())
        .args(["-c", code])
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH");
    cmd
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn wait_for(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the job ended ({status}) before writing {}", path.display());
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process that exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|at| s[at + 1..].split_whitespace().next() != Some("Z"))
        })
        .unwrap_or(false)
}

/// A tmpfs of `size` mounted at `at`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=755"),
                "tmpfs",
            ])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Emits `sys.argv[1]` op events.
const MANY_EVENTS: &str = "import sys, lotus_trace\n\
f = lotus_trace.wrap(lambda: None, 'Op')\n\
for _ in range(int(sys.argv[1])):\n    f()\n";

#[test]
fn a_trace_lost_to_a_full_file_system_fails_the_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mnt = tmp.path().join("small");
    let _fs = match Tmpfs::mount(&mnt, "64k") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("skipped: a_trace_lost_to_a_full_file_system_fails_the_run: {why}");
            return;
        }
    };
    // About 40 bytes an event: far more than 64 KiB.
    let mut cmd = trace_run(&mnt, MANY_EVENTS, &[]);
    cmd.arg("50000");
    let out = cmd.output().expect("run lotus");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is incomplete"), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn two_runs_into_one_folder_count_only_their_own_logs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let ready = tmp.path().join("ready");
    let go = tmp.path().join("go");
    // The first run writes its log, then waits while the second runs.
    let waits = "import os, sys, time, lotus_trace\n\
lotus_trace.wrap(lambda: None, 'First')()\n\
lotus_trace.flush()\n\
open(sys.argv[1], 'w').close()\n\
deadline = time.time() + 60\n\
while not os.path.exists(sys.argv[2]) and time.time() < deadline:\n    time.sleep(0.02)\n";
    let mut first = trace_run(&dir, waits, &[&ready, &go])
        .stderr(Stdio::piped())
        .spawn()
        .expect("first run");
    wait_for(&ready, &mut first);
    let mut second = trace_run(&dir, MANY_EVENTS, &[]);
    second.arg("3");
    let second = second.output().expect("second run");
    assert!(second.status.success(), "{}", stderr(&second));
    std::fs::write(&go, "").expect("go");
    let first = first.wait_with_output().expect("first run");
    let err = stderr(&first);
    assert!(first.status.success(), "{err}");
    assert!(err.contains(": 1 log(s) (1 main, 0 worker)"), "{err}");
    let err = stderr(&second);
    assert!(err.contains(": 1 log(s) (1 main, 0 worker)"), "{err}");
    // Beside the logs, the runs' record (`lotus.run`, the last run's).
    let logs = std::fs::read_dir(&dir)
        .expect("trace folder")
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name() != "lotus.run"))
        .count();
    assert_eq!(logs, 2, "one log per run");
}

#[test]
fn workers_left_by_a_killed_main_process_are_ended() {
    let tmp = tempfile::tempdir().expect("tmp");
    let pids = tmp.path().join("pids");
    let job = r#"import multiprocessing as mp, os, sys, time
def work():
    while True:
        time.sleep(0.05)
if __name__ == '__main__':
    mp.set_start_method('fork')
    workers = [mp.Process(target=work) for _ in range(3)]
    for w in workers:
        w.start()
    with open(sys.argv[1] + '.tmp', 'w') as f:
        f.write(' '.join(str(p) for p in [os.getpid()] + [w.pid for w in workers]))
    os.rename(sys.argv[1] + '.tmp', sys.argv[1])
    time.sleep(120)
"#;
    // lotus's stderr goes to a file: workers left running would hold a pipe
    // open, and the test would wait for them.
    let log = tmp.path().join("stderr");
    let mut lotus = trace_run(&tmp.path().join("trace"), job, &[&pids])
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("lotus");
    wait_for(&pids, &mut lotus);
    let ids: Vec<u32> = std::fs::read_to_string(&pids)
        .expect("pids")
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    let (main, workers) = ids.split_first().expect("main pid");
    assert_eq!(workers.len(), 3);
    // SAFETY: kill(2) on the job's main process, a live child of lotus.
    unsafe { libc::kill(*main as libc::pid_t, libc::SIGKILL) };
    let status = lotus.wait().expect("lotus");
    let left: Vec<u32> = workers.iter().copied().filter(|&p| alive(p)).collect();
    for &pid in &left {
        // SAFETY: kill(2); the test's own leftovers.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    let err = std::fs::read_to_string(&log).expect("stderr");
    assert_eq!(status.code(), Some(137), "{err}");
    assert!(left.is_empty(), "workers {left:?} still run\n{err}");
    assert!(err.contains("ended 3 process(es)"), "{err}");
}

#[test]
fn the_tracer_never_writes_through_a_link_or_file_at_its_log_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    std::fs::create_dir(&dir).expect("mkdir");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "precious\n").expect("victim");
    // The process plants, at its own log names, what another user could:
    // a link as its main log, a file as its worker log. Its log must go
    // elsewhere, and the role change must not replace the file.
    let code = "import os, sys, lotus_trace\n\
out, victim = sys.argv[1], sys.argv[2]\n\
lotus_trace.enable(out, torch=False)\n\
pid = os.getpid()\n\
os.symlink(victim, os.path.join(out, f'lotus_main_pid_{pid}'))\n\
with open(os.path.join(out, f'lotus_worker_pid_{pid}'), 'w') as f:\n    f.write('someone else\\n')\n\
lotus_trace.wrap(lambda: None, 'Before')()\n\
lotus_trace.flush()\n\
lotus_trace.set_role('worker')\n\
lotus_trace.wrap(lambda: None, 'After')()\n\
lotus_trace.flush()\n\
print(pid)\n";
    let out = Command::new(python())
        .args(["-c", code])
        .arg(&dir)
        .arg(&victim)
        .env("PYTHONPATH", common::harness_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .output()
        .expect("python");
    assert!(out.status.success(), "{}", stderr(&out));
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(format!("lotus_worker_pid_{pid}"))).expect("theirs"),
        "someone else\n"
    );
    assert!(dir
        .join(format!("lotus_main_pid_{pid}"))
        .symlink_metadata()
        .expect("link")
        .file_type()
        .is_symlink());
    // Both names were taken: the log is the first free one, renamed once.
    let log = std::fs::read_to_string(dir.join(format!("lotus.1_worker_pid_{pid}")))
        .expect("the log under the next free name");
    assert!(log.contains("SBefore,") && log.contains("SAfter,"), "{log}");
    assert!(!dir.join(format!("lotus.1_main_pid_{pid}")).exists());
}

#[test]
fn a_trace_folder_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    std::fs::create_dir(&dir).expect("mkdir");
    for mode in [0o777, 0o1777, 0o770] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let mut cmd = trace_run(&dir, MANY_EVENTS, &[]);
        cmd.arg("3");
        let out = cmd.output().expect("run lotus");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "mode {mode:o}: {err}");
        assert!(
            err.contains("is not safe to write") && err.contains("can be written by"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(&dir).expect("dir").count(),
            0,
            "nothing ran"
        );
    }
    // A folder lotus creates is its own: 0755 whatever the umask.
    let made = tmp.path().join("new/trace");
    let mut cmd = trace_run(&made, MANY_EVENTS, &[]);
    cmd.arg("3");
    let out = cmd.output().expect("run lotus");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// SIGTERM (or SIGHUP) sent to lotus alone, as a batch system ends a job,
/// reaches the job (its handler runs; its status comes back through
/// lotus); and a lotus killed outright leaves no job running unwatched.
#[test]
fn termination_signals_sent_to_lotus_reach_the_job() {
    let tmp = tempfile::tempdir().expect("tmp");
    let job = r#"import os, signal, sys, time
def ended(signum, frame):
    open(sys.argv[1] + '.got', 'w').write(str(signum))
    sys.exit(3)
signal.signal(signal.SIGTERM, ended)
signal.signal(signal.SIGHUP, ended)
with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write(str(os.getpid()))
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(120)
"#;
    for (signal, name) in [(libc::SIGTERM, "term"), (libc::SIGHUP, "hup")] {
        let ready = tmp.path().join(name);
        let log = tmp.path().join(format!("{name}.stderr"));
        let mut lotus = trace_run(&tmp.path().join(format!("trace-{name}")), job, &[&ready])
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("lotus");
        wait_for(&ready, &mut lotus);
        let started = Instant::now();
        // SAFETY: kill(2) of lotus, our child.
        unsafe { libc::kill(lotus.id() as libc::pid_t, signal) };
        let status = lotus.wait().expect("lotus");
        let err = std::fs::read_to_string(&log).expect("stderr");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name}: lotus took {:?}",
            started.elapsed()
        );
        assert_eq!(status.code(), Some(3), "{name}: {err}");
        let got = std::fs::read_to_string(tmp.path().join(format!("{name}.got")))
            .unwrap_or_else(|e| panic!("{name}: the job's handler did not run ({e}): {err}"));
        assert_eq!(got, signal.to_string());
    }

    // lotus killed outright: the job gets SIGTERM (parent-death signal).
    let ready = tmp.path().join("kill");
    let mut lotus = trace_run(&tmp.path().join("trace-kill"), job, &[&ready])
        .stderr(Stdio::null())
        .spawn()
        .expect("lotus");
    wait_for(&ready, &mut lotus);
    let job_pid: u32 = std::fs::read_to_string(&ready)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    // SAFETY: kill(2) of lotus, our child.
    unsafe { libc::kill(lotus.id() as libc::pid_t, libc::SIGKILL) };
    let _ = lotus.wait();
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(job_pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = alive(job_pid);
    if left {
        // SAFETY: kill(2); the test's own leftover.
        unsafe { libc::kill(job_pid as libc::pid_t, libc::SIGKILL) };
    }
    assert!(!left, "the job ran on after lotus was killed");
    assert!(tmp.path().join("kill.got").exists());
}

/// `--sample --format original` is refused before the job runs: the
/// original format's lines carry no sample ids, so the samples could never
/// be attributed.
#[test]
fn sampling_an_original_format_trace_is_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let ran = tmp.path().join("ran");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--sample", "--format", "original", "--out"])
        .arg(&dir)
        .arg("--")
        .arg(python())
        .args(["-c", "import sys; open(sys.argv[1], 'w').close()"])
        .arg(&ran)
        .env_remove("PYTHONPATH");
    let out = cmd.output().expect("run lotus");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--format original") && err.contains("sample ids"),
        "{err}"
    );
    assert!(!ran.exists(), "the job ran");
    assert!(!dir.join("lotus.samples").exists());
}

/// Waits up to `limit` for `child`; kills it (and fails) when it runs on.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `SOp,` lines of the main logs in `dir`.
fn op_lines(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains("_main_pid_"))
                .map(|e| {
                    std::fs::read_to_string(e.path())
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| l.starts_with("SOp,"))
                        .count()
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Emits `sys.argv[2]` op events (fewer than a write's worth: they stay
/// buffered), says how many in `sys.argv[1]`, then sleeps.
const EVENTS_THEN_SLEEP: &str = "import os, sys, time, lotus_trace\n\
f = lotus_trace.wrap(lambda: None, 'Op')\n\
n = int(sys.argv[2])\n\
for _ in range(n):\n    f()\n\
with open(sys.argv[1] + '.tmp', 'w') as out:\n    out.write(str(n))\n\
os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n\
time.sleep(120)\n";

/// SIGTERM, SIGHUP or SIGINT sent to lotus is passed on to the job, whose
/// tracer writes the events it buffered before the program's action for
/// the signal (here the default: death by it; KeyboardInterrupt for
/// SIGINT); lotus exits 128 + the signal, as shells expect.
#[test]
fn a_job_ended_by_a_signal_to_lotus_keeps_its_buffered_events() {
    let tmp = tempfile::tempdir().expect("tmp");
    for (signal, sig, sample) in [
        (libc::SIGTERM, "term", false),
        (libc::SIGHUP, "hup", false),
        (libc::SIGINT, "int", false),
        (libc::SIGTERM, "term", true),
        (libc::SIGINT, "int", true),
    ] {
        let name = format!("{sig}{}", if sample { "-sampled" } else { "" });
        let name = name.as_str();
        let ready = tmp.path().join(name);
        let dir = tmp.path().join(format!("trace-{name}"));
        let log = tmp.path().join(format!("{name}.stderr"));
        let mut cmd = trace_run(&dir, EVENTS_THEN_SLEEP, &[&ready]);
        if sample {
            // `--sample` goes before `--out`: rebuild the arguments.
            cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
            cmd.args(["trace", "run", "--sample", "--out"])
                .arg(&dir)
                .arg("--")
                .arg(python())
                .args(["-c", EVENTS_THEN_SLEEP])
                .arg(&ready)
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .env_remove("LOTUS_TRACE_DIR")
                .env_remove("PYTHONPATH");
        }
        cmd.arg("240")
            .stderr(std::fs::File::create(&log).expect("log"));
        let mut lotus = cmd.spawn().expect("lotus");
        wait_for(&ready, &mut lotus);
        let emitted: usize = std::fs::read_to_string(&ready)
            .expect("count")
            .parse()
            .expect("count");
        // SAFETY: kill(2) of lotus, our child.
        unsafe { libc::kill(lotus.id() as libc::pid_t, signal) };
        let status = wait_bounded(&mut lotus, Duration::from_secs(30), name);
        let err = std::fs::read_to_string(&log).expect("stderr");
        assert_eq!(status.code(), Some(128 + signal), "{name}: {err}");
        if signal == libc::SIGINT {
            assert!(err.contains("KeyboardInterrupt"), "{name}: {err}");
        }
        assert_eq!(op_lines(&dir), emitted, "{name}: {err}");
        assert!(err.contains("1 log(s) (1 main, 0 worker)"), "{name}: {err}");
    }
}

/// A job with workers started both ways (two forked, one spawned), all of
/// them looping for ever; it writes its pids (main first) to
/// `sys.argv[1]` once they all run.
const JOB_WITH_WORKERS: &str = r#"import multiprocessing as mp, os, sys, time
def work(ready):
    ready.put(os.getpid())
    while True:
        time.sleep(0.05)
if __name__ == '__main__':
    fork, spawn = mp.get_context('fork'), mp.get_context('spawn')
    q = spawn.Queue()
    workers = [fork.Process(target=work, args=(q,)) for _ in range(2)]
    workers.append(spawn.Process(target=work, args=(q,)))
    for w in workers:
        w.start()
    pids = [q.get(timeout=60) for _ in workers]
    with open(sys.argv[1] + '.tmp', 'w') as f:
        f.write(' '.join(str(p) for p in [os.getpid()] + pids))
    os.rename(sys.argv[1] + '.tmp', sys.argv[1])
    time.sleep(120)
"#;

/// `kill -9` of lotus (plain and with `--sample`): the job's main process
/// and its workers, forked or spawned, end within a bounded time (the
/// tracer in each watches lotus), instead of running on unwatched.
#[test]
fn a_killed_lotus_leaves_no_process_of_the_job_running() {
    let tmp = tempfile::tempdir().expect("tmp");
    let script = tmp.path().join("job.py");
    std::fs::write(&script, JOB_WITH_WORKERS).expect("job");
    for sample in [false, true] {
        let name = if sample { "sampled" } else { "plain" };
        let pids = tmp.path().join(format!("{name}.pids"));
        let log = tmp.path().join(format!("{name}.stderr"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
        cmd.args(["trace", "run", "--out"])
            .arg(tmp.path().join(format!("trace-{name}")));
        if sample {
            cmd.arg("--sample");
        }
        cmd.arg("--")
            .arg(python())
            .arg(&script)
            .arg(&pids)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("LOTUS_TRACE_DIR")
            .env_remove("PYTHONPATH")
            .stderr(std::fs::File::create(&log).expect("log"));
        let mut lotus = cmd.spawn().expect("lotus");
        wait_for(&pids, &mut lotus);
        let ids: Vec<u32> = std::fs::read_to_string(&pids)
            .expect("pids")
            .split_whitespace()
            .map(|p| p.parse().expect("pid"))
            .collect();
        assert_eq!(ids.len(), 4, "{name}: main and 3 workers");
        // SAFETY: kill(2) of lotus, our child.
        unsafe { libc::kill(lotus.id() as libc::pid_t, libc::SIGKILL) };
        let _ = lotus.wait();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut left: Vec<u32> = ids.clone();
        while !left.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            left.retain(|&p| alive(p));
        }
        for &pid in &left {
            // SAFETY: kill(2); the test's own leftovers.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let err = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            left.is_empty(),
            "{name}: {left:?} of {ids:?} (main first) still run 20 s after lotus was killed\n{err}"
        );
        if sample {
            // The status names the dead lotus, for readers to say so.
            let pairs = sampling_of(&tmp.path().join(format!("trace-{name}")));
            if sampling_value(&pairs, "status").as_deref() == Some("running") {
                assert_eq!(
                    sampling_value(&pairs, "lotus_pid"),
                    Some(lotus.id().to_string()),
                    "{pairs:?}"
                );
            }
        }
    }
}

/// The `key=value` lines of `DIR/lotus.sampling`.
fn sampling_of(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("lotus.sampling"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sampling_value(pairs: &[(String, String)], key: &str) -> Option<String> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// `--sample` into a file system that fills up: lotus exits non-zero
/// with a message, and the status in `lotus.sampling` says the run failed
/// and why (disk full), not `running` or `complete`.
#[test]
fn a_sampled_trace_on_a_full_file_system_says_so_in_its_status() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mnt = tmp.path().join("small");
    let _fs = match Tmpfs::mount(&mnt, "64k") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!(
                "skipped: a_sampled_trace_on_a_full_file_system_says_so_in_its_status: {why}"
            );
            return;
        }
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--sample", "--out"])
        .arg(&mnt)
        .arg("--")
        .arg(python())
        .args(["-c", MANY_EVENTS, "50000"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH");
    let out = cmd.output().expect("run lotus");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let pairs = sampling_of(&mnt);
    let status = sampling_value(&pairs, "status");
    if status.as_deref() == Some("unavailable") {
        eprintln!("skipped: a_sampled_trace_on_a_full_file_system_says_so_in_its_status: perf cannot sample here");
        return;
    }
    assert_eq!(status.as_deref(), Some("failed"), "{pairs:?}\n{err}");
    let reason = sampling_value(&pairs, "reason").unwrap_or_default();
    assert!(reason.starts_with("disk full"), "{reason}");
    assert!(sampling_value(&pairs, "lotus_pid").is_some(), "{pairs:?}");
}

/// A job that drops its privileges (to `nobody`) cannot write its logs
/// into root's trace folder, nor a report into lotus's private folder:
/// each of its processes (the main one and a child forked after the drop)
/// reports the loss through the inherited report pipe, and lotus exits
/// non-zero naming them and why, instead of 0 with "no trace written: was
/// the program Python?".
#[test]
fn processes_that_dropped_privileges_report_their_lost_trace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "skipped: processes_that_dropped_privileges_report_their_lost_trace: not root: cannot drop to another user"
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let job = "import os, lotus_trace\n\
os.setgroups([]); os.setgid(65534); os.setuid(65534)\n\
f = lotus_trace.wrap(lambda: None, 'Op')\n\
pid = os.fork()\n\
for _ in range(3):\n    f()\n\
if pid == 0:\n    lotus_trace.flush()\n    os._exit(0)\n\
os.waitpid(pid, 0)\n";
    let out = trace_run(&tmp.path().join("trace"), job, &[])
        .output()
        .expect("run lotus");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let reported = err
        .lines()
        .filter(|l| {
            l.starts_with("lotus: cannot write the trace of pid") && l.contains("Permission denied")
        })
        .count();
    assert_eq!(reported, 2, "both processes are named\n{err}");
    assert!(
        err.contains("2 process(es) could not write their logs"),
        "{err}"
    );
    assert!(err.contains("setpriv"), "the fix is named\n{err}");
    assert!(!err.contains("was the program Python"), "{err}");
}

/// `lotus trace run [--sample] --out DIR` of three events with TMPDIR
/// `tmp`, under the descriptor limit `limit` (soft and hard) when given.
fn limited_run(dir: &Path, tmp: &Path, sample: bool, limit: Option<u64>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run"]);
    if sample {
        cmd.arg("--sample");
    }
    cmd.arg("--out")
        .arg(dir)
        .arg("--")
        .arg(python())
        .args(["-c", MANY_EVENTS, "3"])
        .env("TMPDIR", tmp)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH");
    if let Some(n) = limit {
        // SAFETY: setrlimit is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

/// With `ulimit -n` 4 or 5 (plain and `--sample`), lotus fails at once,
/// naming the limit and the fix, and leaves neither a tracer folder in
/// its TMPDIR nor an empty `lotus.samples`; an empty `lotus.samples` a
/// killed run left does not block the next run into the same folder.
#[test]
fn too_few_descriptors_fail_cleanly_and_leave_nothing_to_block_the_next_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let lotus_tmp = tmp.path().join("lotus-tmp");
    std::fs::create_dir(&lotus_tmp).expect("mkdir");
    let dir = tmp.path().join("trace");
    for limit in [4, 5] {
        for sample in [false, true] {
            let out = limited_run(&dir, &lotus_tmp, sample, Some(limit))
                .output()
                .expect("run lotus");
            let err = stderr(&out);
            let what = format!("ulimit -n {limit}, sample {sample}");
            assert_eq!(out.status.code(), Some(1), "{what}: {err}");
            assert!(
                err.contains(&format!("is {limit}")) && err.contains("ulimit -n 4096"),
                "{what}: the limit and the fix are named: {err}"
            );
            assert!(!err.contains("panicked"), "{what}: {err}");
            let left: Vec<_> = std::fs::read_dir(&lotus_tmp)
                .expect("tmp")
                .flatten()
                .map(|e| e.path())
                .collect();
            assert!(left.is_empty(), "{what}: left in TMPDIR: {left:?}");
            assert!(
                !dir.join("lotus.samples").exists(),
                "{what}: an empty lotus.samples is left"
            );
        }
    }
    // What a run killed before its first sample leaves.
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("lotus.samples"), "").expect("empty samples");
    let out = limited_run(&dir, &lotus_tmp, true, None)
        .output()
        .expect("run lotus");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("removed the empty sample file(s)"), "{err}");
}

/// Python 3.12+ warns (a DeprecationWarning) when a process with threads
/// forks: the tracer's watch of lotus starts no thread in a plain
/// job's main process (the kernel's parent-death signal ends it with
/// lotus), so a program that forks from its main module runs as without
/// lotus.
#[test]
fn a_plain_job_that_forks_gets_no_thread_warning_from_the_tracer() {
    let Some(py) =
        common::python312("a_plain_job_that_forks_gets_no_thread_warning_from_the_tracer")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let job = "import os, lotus_trace\n\
f = lotus_trace.wrap(lambda: None, 'Op')\n\
f()\n\
pid = os.fork()\n\
if pid == 0:\n    os._exit(0)\n\
_, status = os.waitpid(pid, 0)\n\
assert status == 0\n";
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--no-torch", "--out"])
        .arg(tmp.path().join("trace"))
        .arg("--")
        .arg(&py)
        .args(["-c", job])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH")
        .output()
        .expect("run lotus");
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("DeprecationWarning"), "{err}");
    assert!(err.contains("1 log(s) (1 main, 0 worker)"), "{err}");
}

/// `--sample` where perf cannot start (too few descriptors for its
/// events): the job runs without samples, and SIGTERM sent to lotus still
/// reaches it (before, lotus waited for it without passing the signal on).
#[test]
fn a_sampled_job_without_perf_still_gets_the_signals_sent_to_lotus() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let ready = tmp.path().join("ready");
    let dir = tmp.path().join("trace");
    let log = tmp.path().join("stderr");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--sample", "--out"])
        .arg(&dir)
        .arg("--")
        .arg(python())
        .args(["-c", EVENTS_THEN_SLEEP])
        .arg(&ready)
        .arg("50")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH")
        .stderr(std::fs::File::create(&log).expect("log"));
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 10,
                rlim_max: 10,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut lotus = cmd.spawn().expect("lotus");
    wait_for(&ready, &mut lotus);
    // SAFETY: kill(2) of lotus, our child.
    unsafe { libc::kill(lotus.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_bounded(&mut lotus, Duration::from_secs(30), "lotus");
    let err = std::fs::read_to_string(&log).expect("stderr");
    if !err.contains("no samples") {
        eprintln!("skipped: a_sampled_job_without_perf_still_gets_the_signals_sent_to_lotus: perf started with 10 descriptors: {err}");
        return;
    }
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert_eq!(op_lines(&dir), 50, "{err}");
}

/// A job started as another user (`setpriv` in the command) reads the
/// tracer (its temp folder must stay readable to all: 0755), cannot write
/// into root's trace folder, and says so through the report pipe: lotus
/// exits 1 naming the process and the fix, not 0 with "was the program
/// Python?".
#[test]
fn a_job_started_as_another_user_reports_its_lost_trace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: a_job_started_as_another_user_reports_its_lost_trace: not root");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: a_job_started_as_another_user_reports_its_lost_trace: no setpriv");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let out = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--out"])
        .arg(tmp.path().join("trace"))
        .args([
            "--",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .arg(python())
        .args(["-c", MANY_EVENTS, "3"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LOTUS_TRACE_DIR")
        .env_remove("PYTHONPATH")
        .output()
        .expect("run lotus");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("lotus: cannot write the trace of pid") && err.contains("Permission denied"),
        "{err}"
    );
    assert!(err.contains("setpriv"), "{err}");
    assert!(!err.contains("was the program Python"), "{err}");
}

/// A job that ignores SIGTERM, SIGINT and SIGHUP does not keep lotus
/// waiting for ever: the first two termination signals sent to lotus are
/// passed on (and ignored by the job), the third kills the job (SIGKILL),
/// saying so, and lotus ends; sampled or not.
#[test]
fn a_third_termination_signal_kills_a_job_that_ignores_them() {
    let code = "\
import signal, sys, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
open(sys.argv[1], 'w').close()
while True:
    time.sleep(0.05)
";
    for sample in [false, true] {
        let tmp = tempfile::tempdir().expect("tmp");
        let started = tmp.path().join("started");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
        cmd.args(["trace", "run"]);
        if sample {
            cmd.args(["--sample", "-F", "100", "--counters", "none"]);
        }
        cmd.arg("--out")
            .arg(tmp.path().join("out"))
            .arg("--")
            .arg(python())
            .args(["-c", code])
            .arg(&started)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env_remove("LOTUS_TRACE_DIR")
            .env_remove("PYTHONPATH");
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("lotus");
        wait_for(&started, &mut child);
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGTERM] {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, signal) };
            std::thread::sleep(Duration::from_millis(300));
        }
        let status = wait_bounded(
            &mut child,
            Duration::from_secs(120),
            "lotus after three signals",
        );
        assert!(!status.success(), "sample={sample}: {status}");
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("read stderr");
        assert!(
            err.contains("3 termination signals received") && err.contains("SIGKILL"),
            "sample={sample}: {err}"
        );
    }
}
