//! Attaching to a process lotus did not start (`attach_streaming`): its
//! threads and child processes already running, and those started after
//! the attach, sampled as a started job's are, with the code loaded before
//! the attach named and unwound.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use lotus_backend_perf::{CallStacks, LinuxPerf, PerfOptions};
use lotus_core::{CollectOptions, Collection, Error as CoreError, StreamOptions};
use lotus_samples::{Sample, SampleSink, StackNode, Symbol};

/// What the sink was given.
#[derive(Default)]
struct Got {
    symbols: HashMap<u32, Symbol>,
    /// By stack id: (parent, symbol).
    stacks: HashMap<u32, (u32, u32)>,
    /// Each sample with its stack id (0: none).
    samples: Vec<(Sample, u32)>,
}

impl Got {
    fn depth(&self, mut stack: u32) -> usize {
        let mut n = 0;
        while let Some(&(parent, _)) = self.stacks.get(&stack) {
            n += 1;
            stack = parent;
            assert!(n < 10_000, "a cycle of stacks");
        }
        n
    }

    fn name(&self, symbol: u32) -> String {
        self.symbols
            .get(&symbol)
            .map_or("?".into(), |s| format!("{} ({})", s.function, s.module))
    }
}

/// A sink that keeps everything in memory, shared with the test.
struct Keep(Arc<Mutex<Got>>);

impl SampleSink for Keep {
    fn counters(&mut self, _count: usize) -> io::Result<()> {
        Ok(())
    }

    fn symbols(&mut self, new: &[(u32, Symbol)]) -> io::Result<()> {
        let mut got = self.0.lock().expect("lock");
        got.symbols.extend(new.iter().cloned());
        Ok(())
    }

    fn samples(&mut self, block: &[Sample]) -> io::Result<()> {
        let mut got = self.0.lock().expect("lock");
        got.samples.extend(block.iter().map(|s| (*s, 0)));
        Ok(())
    }

    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn with_stacks(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn stacks(&mut self, new: &[StackNode]) -> io::Result<()> {
        let mut got = self.0.lock().expect("lock");
        got.stacks
            .extend(new.iter().map(|n| (n.id, (n.parent, n.symbol))));
        Ok(())
    }

    fn samples_with_stacks(&mut self, block: &[Sample], stacks: &[u32]) -> io::Result<()> {
        let mut got = self.0.lock().expect("lock");
        got.samples
            .extend(block.iter().copied().zip(stacks.iter().copied()));
        Ok(())
    }
}

/// The job: two threads and a child process spinning from the start;
/// after `go` on stdin (the attach), each burns `BUDGET` more CPU seconds,
/// and 0.5 s later the main thread forks a new child and starts a new
/// thread that burn as much. Each worker prints `done NAME PID TID NS`,
/// NS its thread's CPU time (`time.thread_time_ns`) at the end.
const JOB: &str = r#"
import os, select, sys, threading, time

BUDGET = float(sys.argv[1])

def out(line):
    os.write(1, (line + "\n").encode())

def burn(until):
    x = 0
    while not until():
        for i in range(3000):
            x += i * i
    return x

def report(name):
    out(f"done {name} {os.getpid()} {threading.get_native_id()} {time.thread_time_ns()}")

go = threading.Event()

def old_thread(name):
    burn(go.is_set)
    base = time.thread_time()
    burn(lambda: time.thread_time() - base >= BUDGET)
    report(name)

def new_worker(name):
    burn(lambda: time.thread_time() >= BUDGET)
    report(name)

r, w = os.pipe()
child = os.fork()
if child == 0:
    os.close(w)
    burn(lambda: select.select([r], [], [], 0)[0] != [])
    base = time.thread_time()
    burn(lambda: time.thread_time() - base >= BUDGET)
    report("old_child")
    os._exit(0)
os.close(r)
threads = [threading.Thread(target=old_thread, args=(f"old_thread{i}",)) for i in (1, 2)]
for t in threads:
    t.start()
time.sleep(0.2)
out(f"ready {os.getpid()} {child} " + " ".join(str(t.native_id) for t in threads))
sys.stdin.readline()
go.set()
os.write(w, b"g")
time.sleep(0.5)
new_child = os.fork()
if new_child == 0:
    new_worker("new_child")
    os._exit(0)
t3 = threading.Thread(target=new_worker, args=("new_thread",))
t3.start()
for t in threads + [t3]:
    t.join()
os.waitpid(child, 0)
os.waitpid(new_child, 0)
out("end")
"#;

/// The Python interpreter itself (not pyenv's shell shim), if there is one.
fn python() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !path.is_empty()).then_some(path)
}

/// A job started by the test, not by lotus, with its output's lines.
struct Job {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Job {
    fn start(program: &str, args: &[&str]) -> Job {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the job");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Job {
            child,
            stdin,
            lines,
        }
    }

    /// The next line (within 120 s: a bound for a hang, not a timing).
    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("a line from the job")
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"go\n").expect("write go");
        stdin.flush().expect("flush");
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The CPU time thread `tid` of `pid` has run (ns), from its schedstat.
fn thread_cpu_ns(pid: u32, tid: u32) -> u64 {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).expect("schedstat");
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("schedstat's first field")
}

/// Waits (up to 120 s) for the collection to say its process ended.
fn wait_end(c: &mut dyn Collection) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = c.try_wait().expect("try_wait") {
            assert_eq!(status.code(), Some(0), "an attached job ends with status 0");
            return;
        }
        assert!(Instant::now() < deadline, "the job did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The scenario of [`JOB`], attached with DWARF stacks at `hz`.
#[test]
fn an_attached_tree_is_sampled_old_and_new_threads_and_processes_alike() {
    let _serial = serial();
    let Some(python) = python() else {
        eprintln!("python3 not found; skipped");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("job.py");
    std::fs::write(&script, JOB).expect("script");
    let budget = 0.8;
    let mut job = Job::start(
        &python,
        &[script.to_str().expect("path"), &budget.to_string()],
    );
    let ready = job.line();
    let ids: Vec<u32> = ready
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().expect("id"))
        .collect();
    let [pid, old_child, t1, t2] = ids[..] else {
        panic!("{ready}");
    };
    assert_eq!(pid, job.child.id());

    let got = Arc::new(Mutex::new(Got::default()));
    let hz = 1000;
    let mut options = CollectOptions::default();
    options.frequency_hz = Some(hz);
    let perf = PerfOptions::default().with_stacks(CallStacks::Dwarf);
    let t = Instant::now();
    let mut c = LinuxPerf::default()
        .attach_streaming(pid, &options, &perf, Box::new(Keep(Arc::clone(&got))))
        .expect("attach");
    let attach_took = t.elapsed();
    // What the old workers had run when sampling began (within the
    // microseconds the window took to open).
    let base: HashMap<u32, u64> = [(pid, t1), (pid, t2), (old_child, old_child)]
        .into_iter()
        .map(|(p, t)| (t, thread_cpu_ns(p, t)))
        .collect();
    assert_eq!(c.pid(), pid);
    assert_eq!(c.call_stacks(), CallStacks::Dwarf);
    job.go();
    wait_end(&mut c);
    c.pause().expect("pause");
    let window = c.window_figures().expect("windows");
    let report = c.finish().expect("finish");

    // name -> (pid, tid, CPU ns since sampling began)
    let mut workers: HashMap<String, (u32, u32, u64)> = HashMap::new();
    loop {
        let line = job.line();
        if line == "end" {
            break;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, name, p, t, ns] = f[..] else {
            panic!("{line}");
        };
        let (p, t, ns): (u32, u32, u64) = (
            p.parse().expect("pid"),
            t.parse().expect("tid"),
            ns.parse().expect("ns"),
        );
        let ran = ns - base.get(&t).copied().unwrap_or(0);
        workers.insert(name.to_string(), (p, t, ran));
    }
    assert_eq!(workers.len(), 5, "{workers:?}");
    assert_eq!(
        (workers["old_thread1"].1, workers["old_thread2"].1),
        (t1, t2)
    );
    assert_eq!(workers["old_child"].0, old_child);
    assert_eq!(workers["new_thread"].0, pid);
    assert!(![pid, old_child].contains(&workers["new_child"].0));

    let got = got.lock().expect("lock");
    let period_ns = 1e9 / report.frequency_hz as f64;
    let mut lines = Vec::new();
    for (name, &(p, t, ran)) in &workers {
        let mine: Vec<&(Sample, u32)> = got
            .samples
            .iter()
            .filter(|(s, _)| s.tid == t && s.pid == p)
            .collect();
        let n = mine.len();
        let expected = ran as f64 / period_ns;
        let unknown = mine
            .iter()
            .filter(|(s, _)| got.name(s.symbol).starts_with("[unknown]"))
            .count();
        let python_code = mine
            .iter()
            .filter(|(s, _)| {
                got.symbols
                    .get(&s.symbol)
                    .is_some_and(|sym| sym.module.contains("python"))
            })
            .count();
        let deep = mine.iter().filter(|(_, st)| got.depth(*st) > 1).count();
        let mut top: HashMap<String, usize> = HashMap::new();
        for (s, _) in &mine {
            *top.entry(got.name(s.symbol)).or_default() += 1;
        }
        let mut top: Vec<_> = top.into_iter().collect();
        top.sort_by_key(|b| std::cmp::Reverse(b.1));
        top.truncate(4);
        lines.push((
            name.clone(),
            n,
            expected,
            unknown,
            python_code,
            deep,
            format!("{top:?}"),
        ));
    }
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let table: String = lines
        .iter()
        .map(|(name, n, expected, unknown, py, deep, top)| {
            format!(
                "{name:<12} {n:>5} samples for {:>7.3} s CPU ({expected:>6.0} expected, {:>5.1}%), \
                 unknown {unknown}, in python {py}, deeper than 1 frame {deep}; {top}\n",
                expected * period_ns / 1e9,
                100.0 * *n as f64 / expected
            )
        })
        .collect();
    let summary = format!(
        "attach took {attach_took:?}; {} samples in all, lost {}, stream {:?}\nwindow \
         {window:?}\ncoverage {:?}\nnotes {:#?}\n{table}",
        got.samples.len(),
        report.total.lost,
        report.stream,
        report.coverage,
        report.notes
    );
    eprintln!("{summary}");
    for (name, n, expected, unknown, py, deep, _) in &lines {
        let n = *n as f64;
        // The samples stand for the CPU time each worker ran, as its own
        // clock says (never wall time: the machine is shared).
        assert!(
            n >= 0.85 * expected - 3.0 && n <= 1.1 * expected + 3.0,
            "{name}: {n} samples for {expected:.0} periods of CPU\n{summary}"
        );
        // Code loaded before the attach (the interpreter, libpython) is
        // named, for the old workers and the new alike, and unwound.
        assert!(
            (*unknown as f64) <= 0.05 * n,
            "{name}: {unknown} of {n} unknown\n{summary}"
        );
        assert!(
            (*py as f64) >= 0.5 * n,
            "{name}: {py} of {n} in python\n{summary}"
        );
        assert!(
            (*deep as f64) >= 0.9 * n,
            "{name}: {deep} of {n} deeper than 1 frame\n{summary}"
        );
    }
    // Every process has its samples and CPU figures, the new child too.
    for p in [pid, old_child, workers["new_child"].0] {
        let cov = report.coverage.process(p).expect("covered");
        assert!(cov.samples > 0 && cov.cpu_ns > 0, "{p}: {cov:?}\n{summary}");
    }
    // The job's own threads' CPU against the samplers' count of it: the
    // old workers' from their processes' samplers, the new ones' from
    // their counts at their exits.
    let ran: u64 = workers.values().map(|w| w.2).sum();
    let counted = report.coverage.cpu_ns.expect("counted");
    assert!(
        counted as f64 >= 0.95 * ran as f64,
        "the samplers counted {counted} ns, the workers ran {ran}\n{summary}"
    );
    // The window's task-clock: every thread of the tree, the main one
    // (which mostly sleeps) too.
    let task_clock = window[0].task_clock_ns as f64;
    assert!(
        task_clock >= 0.98 * ran as f64 && task_clock <= ran as f64 + 0.3e9,
        "task-clock {task_clock} ns, the workers ran {ran}\n{summary}"
    );
    let child_counted = report
        .coverage
        .process(old_child)
        .expect("old child")
        .cpu_ns;
    let child_ran = workers["old_child"].2;
    assert!(
        (child_counted as f64 - child_ran as f64).abs() <= 0.05 * child_ran as f64 + 5e6,
        "old child: counted {child_counted} ns, ran {child_ran} ns\n{summary}"
    );
    assert_eq!(job.child.wait().expect("wait").code(), Some(0));
}

/// A pid that names no process: refused with its number, through the
/// core's trait as the runner calls it.
#[test]
fn attaching_to_a_missing_pid_names_it() {
    let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_194_304);
    let missing = pid_max + 7;
    let backend = lotus_core::backend("perf").expect("perf");
    let streaming = backend.streaming().expect("streams");
    let err = match streaming.attach_streaming(
        missing,
        &CollectOptions::default(),
        &StreamOptions::default(),
        Box::new(Keep(Arc::default())),
    ) {
        Err(e) => e,
        Ok(_) => panic!("attached to a missing pid"),
    };
    let text = err.to_string();
    assert!(text.contains(&format!("no process {missing}")), "{text}");
    assert!(matches!(err, CoreError::Other { .. }), "{err:?}");
}

/// Stopping an attached collection stops sampling, never the job.
#[test]
fn kill_stops_sampling_and_leaves_the_job_running() {
    let _serial = serial();
    let mut job = Job::start("sh", &["-c", "read line; sleep 0.2 & wait"]);
    let pid = job.child.id();
    let backend = lotus_core::backend("perf").expect("perf");
    let streaming = backend.streaming().expect("streams");
    let mut c = streaming
        .attach_streaming(
            pid,
            &CollectOptions::default(),
            &StreamOptions::default(),
            Box::new(Keep(Arc::default())),
        )
        .expect("attach");
    assert_eq!(c.pid(), pid);
    assert!(c.try_wait().expect("try_wait").is_none());
    c.kill().expect("kill");
    c.kill().expect("a second kill is a no-op");
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| Some(s[s.rfind(')')? + 2..].chars().next()? != 'Z'))
            .unwrap_or(false)
    };
    assert!(alive(pid), "the job was ended by kill");
    let report = c.finish_stream().expect("finish");
    assert!(alive(pid), "the job was ended by finish");
    assert_eq!(job.child.try_wait().expect("try_wait"), None);
    eprintln!("{:?}", report.notes);
    // It runs on: told to go on, it ends by itself, with its own status.
    job.go();
    let status = job.child.wait().expect("wait");
    assert!(status.success(), "{status}");
}

/// Another user's process: refused, naming the pid and what lets lotus
/// attach. (This thread alone becomes `nobody`: the raw system call
/// changes the calling thread's credentials only.)
#[test]
fn attaching_to_another_users_process_is_refused_with_what_to_do() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: no other user's process to try; skipped");
        return;
    }
    let job = Job::start("sleep", &["30"]);
    let pid = job.child.id();
    let result = std::thread::spawn(move || {
        // SAFETY: setresuid with plain ids, on this thread only.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
        assert_eq!(r, 0, "setresuid: {}", io::Error::last_os_error());
        LinuxPerf::default()
            .attach_streaming(
                pid,
                &CollectOptions::default(),
                &PerfOptions::default(),
                Box::new(Keep(Arc::default())),
            )
            .err()
    })
    .join()
    .expect("thread");
    let err = result.expect("refused");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, CoreError::Permission { .. }), "{err:?}");
    assert!(text.contains(&format!("attaching to pid {pid}")), "{text}");
    assert!(text.contains("run lotus as root"), "{text}");
    assert!(text.contains("perf_event_paranoid"), "{text}");
    drop(job);
}

/// A process that starts threads all the time while lotus attaches to its
/// hundreds (see tests/data/spawner.c): every child thread, which burns
/// its CPU after the attach, is sampled once for it, whether it carries
/// copies of its creator's events (started by an attached thread) or was
/// found by walking the tree again (started by one not attached yet); none
/// is missed, none sampled twice.
#[test]
fn threads_started_while_attaching_are_sampled_once() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("spawner");
    let out = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/spawner.c"))
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut job = Job::start(exe.to_str().expect("path"), &["4", "300", "20"]);
    assert_eq!(job.line(), "ready");
    // Some children there before the attach (a spawner starts one every
    // 10 ms), more while it goes on.
    std::thread::sleep(Duration::from_millis(100));
    let pid = job.child.id();
    let got = Arc::new(Mutex::new(Got::default()));
    let hz = 1000;
    let mut options = CollectOptions::default();
    options.frequency_hz = Some(hz);
    let t = Instant::now();
    let mut c = LinuxPerf::default()
        .attach_streaming(
            pid,
            &options,
            &PerfOptions::default(),
            Box::new(Keep(Arc::clone(&got))),
        )
        .expect("attach");
    let took = t.elapsed();
    job.go();
    wait_end(&mut c);
    let report = c.finish().expect("finish");
    let mut children = Vec::new();
    loop {
        let line = job.line();
        if line == "end" {
            break;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, tid, ns] = f[..] else {
            panic!("{line}");
        };
        children.push((
            tid.parse::<u32>().expect("tid"),
            ns.parse::<u64>().expect("ns"),
        ));
    }
    let got = got.lock().expect("lock");
    let mut by_tid: HashMap<u32, u64> = HashMap::new();
    for (s, _) in &got.samples {
        *by_tid.entry(s.tid).or_default() += 1;
    }
    let period = 1e9 / report.frequency_hz as f64;
    let mut bad = Vec::new();
    let (mut checked, mut expected_all, mut sampled_all) = (0, 0.0, 0);
    for &(tid, ns) in &children {
        let expected = ns as f64 / period;
        let n = by_tid.get(&tid).copied().unwrap_or(0);
        if expected < 15.0 {
            continue;
        }
        checked += 1;
        expected_all += expected;
        sampled_all += n;
        let n = n as f64;
        if n < 0.75 * expected - 3.0 || n > 1.25 * expected + 3.0 {
            bad.push(format!(
                "thread {tid}: {n} samples for {expected:.0} periods"
            ));
        }
    }
    let summary = format!(
        "attach took {took:?}; {} children ran after it, {checked} checked: {sampled_all} \
         samples for {expected_all:.0} periods; lost {}; notes {:#?}",
        children.len(),
        report.total.lost,
        report.notes
    );
    eprintln!("{summary}");
    assert!(checked >= 20, "{summary}");
    assert!(bad.is_empty(), "{}\n{summary}", bad.join("\n"));
    assert_eq!(job.child.wait().expect("wait").code(), Some(0));
}
