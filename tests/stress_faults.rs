//! Faults on real processes: the profiled process killed inside its window,
//! an op that leaves worker processes behind, lotus stopped with SIGTERM,
//! the output folder read-only or full, and several lotus runs writing into
//! one folder at once. Each ends with a clear message and exit status, the
//! finished results intact, and no stray processes or temporary files
//! (lotus's TMPDIR is a test folder, checked empty afterwards).
//!
//! The read-only and full-folder cases mount a read-only bind and a 16 KiB
//! tmpfs (root only); where mounting is not allowed they say so and check
//! what they can without it.

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::faults::{assert_no_processes, marker, Scratch};
use crate::common::mapping::op_names;
use crate::common::{fixture, processes_with, python, GOOD_OP};
use serde_json::Value;

/// `lotus map --backend perf` with small windows, TMPDIR in the test
/// folder.
trait MapCommand {
    fn map(&self, out: &Path, ops: &[&Path], extra: &[&str]) -> Command;
}

impl MapCommand for Scratch {
    fn map(&self, out: &Path, ops: &[&Path], extra: &[&str]) -> Command {
        let py = python();
        let mut cmd = self.lotus(&[
            "map",
            "--backend",
            "perf",
            "--runs",
            "1",
            "--warmup",
            "1",
            "--min-samples",
            "400",
            "--no-baseline",
            "--timeout",
            "60",
        ]);
        cmd.arg("--python")
            .arg(&py)
            .arg("--out")
            .arg(out)
            .args(extra)
            .args(ops);
        cmd
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn read_json(path: &Path) -> Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("{} not written: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()))
}

/// Files whose name starts with `.lotus-` (lotus_sys::write_file's temporary files).
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(".lotus-"))
        })
        .collect()
}

fn wait_with_timeout(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { kill(pid as i32, 9) };
            panic!("lotus did not finish within {limit:?}");
        }
    }
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Polls `ready` every 5 ms until it holds; fails the test, saying `what`
/// never happened, after `limit`.
fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An op named `mark` that creates `started` on its first call, then
/// sleeps for an hour inside its window.
fn sleeping_op(s: &Scratch, mark: &str, started: &Path) -> PathBuf {
    s.op(
        mark,
        &format!(
            "import time\n\ndef op(x):\n    open({:?}, 'w').close()\n    time.sleep(3600)\n",
            started.to_str().expect("utf-8 path")
        ),
    )
}

#[test]
fn profiled_process_killed_inside_its_window() {
    let s = Scratch::new();
    let mark = marker("victim");
    let pidfile = s.path().join("victim.pid");
    // The op writes its pid on its third call (the first is the warm-up,
    // so the window is open), then stays inside the window.
    let victim = s.op(
        &mark,
        &format!(
            "import os, time\n_calls = 0\n\ndef op(x):\n    global _calls\n    _calls += 1\n    if _calls == 3:\n        with open({p:?} + '.part', 'w') as f:\n            f.write(str(os.getpid()))\n        os.rename({p:?} + '.part', {p:?})\n        time.sleep(60)\n    return sum(range(1000))\n",
            p = pidfile.to_str().expect("utf-8 path")
        ),
    );
    let good = s.op("Good", GOOD_OP);
    let out = s.path().join("m.json");
    let child = s
        .map(&out, &[&victim, &good], &[])
        .spawn()
        .expect("spawn lotus");

    wait_until("the op never ran", Duration::from_secs(30), || {
        pidfile.exists()
    });
    std::thread::sleep(Duration::from_millis(100));
    let pid: i32 = fs::read_to_string(&pidfile)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid number");
    // SAFETY: kill(2) of the op's Python process, which this test's op
    // file told us about.
    assert_eq!(unsafe { kill(pid, 9) }, 0, "kill {pid}");

    let o = wait_with_timeout(child, Duration::from_secs(60));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!("op {mark}")) && err.contains("killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("1 of 2 op(s) could not be mapped"), "{err}");
    // The op after it was mapped and written, with the failure listed.
    let m = read_json(&out);
    assert_eq!(op_names(&m), ["Good"], "{m}");
    assert_eq!(m["failures"][0]["op"], mark.as_str(), "{m}");
    assert!(
        m["failures"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("SIGKILL")),
        "{m}"
    );
    assert_no_processes(&mark);
    s.assert_tmp_empty();
    assert!(temp_files(s.path()).is_empty());
}

#[test]
fn op_that_leaves_workers_behind() {
    let s = Scratch::new();
    let mark = marker("workers");
    // setup() starts workers that outlive the op: a forked child, a
    // subprocess, and a multiprocessing worker; the harness exits while
    // they still sleep.
    let body = format!(
        "import multiprocessing, os, subprocess, sys, time\n\n\
         def setup():\n\
         \x20   if os.fork() == 0:\n\
         \x20       time.sleep(120)\n\
         \x20       os._exit(0)\n\
         \x20   subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', {mark:?}])\n\
         \x20   w = multiprocessing.get_context('fork').Process(target=time.sleep, args=(120,), daemon=True)\n\
         \x20   w.start()\n\
         \x20   return list(range(2000))\n\n\
         def op(x):\n\
         \x20   return sorted(x, reverse=True)\n"
    );
    let op = s.op(&mark, &body);
    let out = s.path().join("m.json");
    let start = Instant::now();
    let child = s.map(&out, &[&op], &[]).spawn().expect("spawn lotus");
    let o = wait_with_timeout(child, Duration::from_secs(90));
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "lotus waited for the workers ({:?})",
        start.elapsed()
    );
    let m = read_json(&out);
    assert_eq!(op_names(&m), [mark.as_str()], "{m}");
    assert!(
        m["ops"][0]["window"]["samples"].as_u64().unwrap_or(0) > 0,
        "{m}"
    );
    assert_no_processes(&mark);
    s.assert_tmp_empty();
}

#[test]
fn sigterm_stops_lotus_like_ctrl_c() {
    let s = Scratch::new();
    let mark = marker("term");
    let good = s.op("Good", GOOD_OP);
    let started = s.path().join("started");
    let slow = sleeping_op(&s, &mark, &started);
    let out = s.path().join("m.json");
    let child = s
        .map(&out, &[&good, &slow], &[])
        .spawn()
        .expect("spawn lotus");
    wait_until("slow op never ran", Duration::from_secs(30), || {
        started.exists()
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { kill(child.id() as i32, 15) };
    let o = wait_with_timeout(child, Duration::from_secs(30));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert_eq!(op_names(&read_json(&out)), ["Good"]);
    assert_no_processes(&mark);
    s.assert_tmp_empty();
    assert!(temp_files(s.path()).is_empty());
}

#[test]
fn concurrent_live_mappings_into_one_folder() {
    let s = Scratch::new();
    let a = s.op("OpA", GOOD_OP);
    let b = s.op("OpB", GOOD_OP);
    let dir = s.path().join("out");
    fs::create_dir(&dir).expect("mkdir");
    let own = dir.join("a.json");
    let same = dir.join("same.json");
    let children = vec![
        s.map(&own, &[&a], &[]).spawn().expect("spawn"),
        s.map(&same, &[&a], &[]).spawn().expect("spawn"),
        s.map(&same, &[&b], &[]).spawn().expect("spawn"),
    ];
    for child in children {
        let o = wait_with_timeout(child, Duration::from_secs(90));
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(op_names(&read_json(&own)), ["OpA"]);
    // One of the two writers won, whole.
    let names = op_names(&read_json(&same));
    assert!(names == ["OpA"] || names == ["OpB"], "{names:?}");
    assert!(temp_files(&dir).is_empty(), "{:?}", temp_files(&dir));
    s.assert_tmp_empty();
}

/// Many writers of one file and a reader: the reader only ever sees a
/// whole mapping (temporary file and rename), and nothing is left over.
#[test]
fn concurrent_writers_of_one_file_never_expose_half_a_mapping() {
    let s = Scratch::new();
    let out = s.path().join("m.json");
    let reports = fixture("reports/vtune/hotspots");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (out, stop) = (out.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(text) = fs::read_to_string(&out) {
                    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
                        panic!("read half a mapping ({e}): {} bytes", text.len())
                    });
                    assert_eq!(v["schema"], "lotus.mapping/1");
                    reads += 1;
                }
            }
            reads
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let (out, reports, tmp) = (out.clone(), reports.clone(), s.tmp.clone());
            std::thread::spawn(move || {
                for _ in 0..8 {
                    let rule = if i % 2 == 0 { "union" } else { "all" };
                    let o = Command::new(env!("CARGO_BIN_EXE_lotus"))
                        .args([
                            "map",
                            "--backend",
                            "vtune",
                            "--rule",
                            rule,
                            "--from-reports",
                        ])
                        .arg(&reports)
                        .arg("--out")
                        .arg(&out)
                        .env("TMPDIR", &tmp)
                        .output()
                        .expect("run lotus");
                    assert!(o.status.success(), "{}", stderr(&o));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let reads = reader.join().expect("reader");
    assert!(reads > 0);
    assert_eq!(read_json(&out)["ops"].as_array().map(Vec::len), Some(6));
    assert!(
        temp_files(s.path()).is_empty(),
        "{:?}",
        temp_files(s.path())
    );
    s.assert_tmp_empty();
}

/// A mount made for a test, undone when dropped.
struct Mount(PathBuf);

impl Mount {
    /// Runs `mount ARGS... TARGET`; `None`, with the reason printed, where
    /// mounting is not allowed here.
    fn new(args: &[&str], target: &Path) -> Option<Mount> {
        let o = Command::new("mount").args(args).arg(target).output();
        match o {
            Ok(o) if o.status.success() => Some(Mount(target.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "skipping the mounted case: mount {args:?} failed: {}",
                    stderr(&o).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipping the mounted case: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A small mapping in place before a failed write.
const GOOD_MAPPING: &str = "{\"op_to_func\": {\"Loader\": [\"decode_mcu|libjpeg.so.9\"]}}\n";

fn from_reports(out: &Path, tmp: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["map", "--backend", "vtune", "--from-reports"])
        .arg(fixture("reports/vtune/hotspots"))
        .arg("--out")
        .arg(out)
        .env("TMPDIR", tmp)
        .output()
        .expect("run lotus")
}

/// The failed write names the file, exits 1, and leaves what was there.
fn assert_write_refused(o: &Output, out: &Path, why: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(&format!("cannot write {}", out.display())) && err.contains(why),
        "{err}"
    );
}

#[test]
fn output_folder_not_writable() {
    let s = Scratch::new();
    // A file where a folder should be: fails for root too.
    let file = s.path().join("not-a-folder");
    fs::write(&file, GOOD_MAPPING).expect("write");
    let out = file.join("m.json");
    assert_write_refused(&from_reports(&out, &s.tmp), &out, "Not a directory");
    assert_eq!(fs::read_to_string(&file).expect("kept"), GOOD_MAPPING);

    // A read-only folder (a read-only bind mount: root ignores 0555) that
    // holds a good mapping: it stays as it was.
    let src = s.path().join("src");
    let ro = s.path().join("ro");
    fs::create_dir(&src).expect("mkdir");
    fs::create_dir(&ro).expect("mkdir");
    fs::write(src.join("m.json"), GOOD_MAPPING).expect("write");
    let Some(_mount) = Mount::new(&["--bind", "-o", "ro", src.to_str().expect("utf-8")], &ro)
    else {
        return;
    };
    let out = ro.join("m.json");
    assert_write_refused(&from_reports(&out, &s.tmp), &out, "Read-only file system");
    assert_eq!(
        fs::read_to_string(src.join("m.json")).expect("kept"),
        GOOD_MAPPING
    );
    assert!(temp_files(&src).is_empty());

    // A live mapping into it fails before any op runs.
    let good = s.op("Good", GOOD_OP);
    let o = wait_with_timeout(
        s.map(&out, &[&good], &[]).spawn().expect("spawn"),
        Duration::from_secs(60),
    );
    assert_write_refused(&o, &out, "Read-only file system");
    assert!(
        !stderr(&o).contains("run 1/1"),
        "ran the ops before finding the output folder read-only: {}",
        stderr(&o)
    );
    // (No wall-clock bound: that no op ran is what the missing "run 1/1"
    // shows, however busy the machine.)
    assert_eq!(
        fs::read_to_string(src.join("m.json")).expect("kept"),
        GOOD_MAPPING
    );
    s.assert_tmp_empty();
}

#[test]
fn output_folder_full() {
    let s = Scratch::new();
    let full = s.path().join("full");
    fs::create_dir(&full).expect("mkdir");
    let Some(_mount) = Mount::new(&["-t", "tmpfs", "-o", "size=16k", "tmpfs"], &full) else {
        return;
    };
    let out = full.join("m.json");
    fs::write(&out, GOOD_MAPPING).expect("write the good mapping");
    // The new mapping (about 19 KB) does not fit in 16 KiB.
    assert_write_refused(&from_reports(&out, &s.tmp), &out, "No space left on device");
    assert_eq!(fs::read_to_string(&out).expect("kept"), GOOD_MAPPING);
    assert!(temp_files(&full).is_empty(), "{:?}", temp_files(&full));

    // The same after a live mapping: the ops ran, the write failed, the
    // good mapping is still there. Fill the folder first so even a small
    // mapping does not fit.
    let filler = full.join("filler");
    let _ = fs::write(&filler, vec![0u8; 16 << 10]);
    let good = s.op("Good", GOOD_OP);
    let o = wait_with_timeout(
        s.map(&out, &[&good], &[]).spawn().expect("spawn"),
        Duration::from_secs(60),
    );
    assert_write_refused(&o, &out, "No space left on device");
    assert_eq!(fs::read_to_string(&out).expect("kept"), GOOD_MAPPING);
    assert!(temp_files(&full).is_empty(), "{:?}", temp_files(&full));
    s.assert_tmp_empty();
}

#[test]
fn written_mappings_have_the_usual_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let s = Scratch::new();
    let out = s.path().join("m.json");
    let o = from_reports(&out, &s.tmp);
    assert!(o.status.success(), "{}", stderr(&o));
    let mode = fs::metadata(&out).expect("written").permissions().mode() & 0o777;
    // Created like any file (0666 less the umask), not owner-only.
    let status = fs::read_to_string("/proc/self/status").expect("status");
    let umask = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
        .expect("Umask in /proc/self/status");
    assert_eq!(mode, 0o666 & !umask, "mode {mode:o}");
    // Replacing a file does not copy its mode (another user could have
    // made it setuid or writable by all): the new file gets the umask's.
    fs::set_permissions(&out, fs::Permissions::from_mode(0o640)).expect("chmod");
    let o = from_reports(&out, &s.tmp);
    assert!(o.status.success(), "{}", stderr(&o));
    let mode = fs::metadata(&out).expect("written").permissions().mode() & 0o777;
    assert_eq!(mode, 0o666 & !umask, "mode {mode:o}");
}

/// `--out` through a symbolic link writes the link's target (the link
/// stays); a device or fifo (`/dev/stdout`, `/dev/null`, a named pipe) is
/// written in place, never replaced by a file.
#[test]
fn output_through_links_fifos_and_devices() {
    use std::os::unix::fs::{symlink, FileTypeExt};
    let s = Scratch::new();
    let d = s.path();
    fs::write(d.join("real.json"), GOOD_MAPPING).expect("write");
    symlink("real.json", d.join("link.json")).expect("symlink");
    symlink("sub/new.json", d.join("dangling.json")).expect("symlink");
    fs::create_dir(d.join("sub")).expect("mkdir");
    symlink("/dev/null", d.join("null.json")).expect("symlink");
    for name in ["link.json", "dangling.json", "null.json"] {
        let o = from_reports(&d.join(name), &s.tmp);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let meta = fs::symlink_metadata(d.join(name)).expect("still there");
        assert!(
            meta.file_type().is_symlink(),
            "{name} was replaced by a file"
        );
    }
    assert_eq!(op_names(&read_json(&d.join("real.json"))).len(), 6);
    assert_eq!(op_names(&read_json(&d.join("sub/new.json"))).len(), 6);

    // A named pipe with a reader gets the whole mapping.
    let fifo = d.join("pipe.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read_to_string(fifo).expect("read the fifo"))
        };
        let o = from_reports(&fifo, &s.tmp);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = reader.join().expect("reader");
        let m: Value = serde_json::from_str(&text).expect("whole JSON through the fifo");
        assert_eq!(op_names(&m).len(), 6);
        assert!(fs::symlink_metadata(&fifo)
            .expect("fifo")
            .file_type()
            .is_fifo());
    } else {
        eprintln!("skipping the fifo case: mkfifo is not available");
    }

    // /dev/stdout: the mapping goes to standard output.
    let o = from_reports(Path::new("/dev/stdout"), &s.tmp);
    assert!(o.status.success(), "{}", stderr(&o));
    let m: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(op_names(&m).len(), 6);
    assert!(temp_files(d).is_empty(), "{:?}", temp_files(d));
    s.assert_tmp_empty();
}

#[test]
fn sigkill_of_lotus_leaves_no_harness_behind() {
    // SIGKILL cannot be caught: lotus cannot stop its children. The harness
    // watches its parent and exits (removing its temporary folder) when it
    // is gone.
    let s = Scratch::new();
    let mark = marker("kill9");
    let started = s.path().join("started");
    let slow = sleeping_op(&s, &mark, &started);
    let out = s.path().join("m.json");
    let child = s.map(&out, &[&slow], &[]).spawn().expect("spawn lotus");
    wait_until("slow op never ran", Duration::from_secs(30), || {
        started.exists()
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { kill(child.id() as i32, 9) };
    let o = wait_with_timeout(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), None, "killed by a signal");
    let start = Instant::now();
    while !processes_with(&mark).is_empty() {
        assert!(
            // A bound against waiting forever, not a speed test: the
            // harness notices its parent is gone within its poll, but
            // on a busy machine it may wait seconds for a CPU.
            start.elapsed() < Duration::from_secs(60),
            "the orphaned harness is still running {:?}",
            processes_with(&mark)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its folder goes with it (lotus's own, killed, could not remove it).
    let left: Vec<_> = fs::read_dir(&s.tmp)
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("lotus-harness-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Writes a trace of `batches` batches of 64 op events into `dir` (one
/// worker, one main process).
fn write_big_trace(dir: &Path, batches: u64) {
    use std::io::Write as _;
    fs::create_dir_all(dir).expect("mkdir");
    let mut w =
        std::io::BufWriter::new(fs::File::create(dir.join("lotus_worker_pid_20")).expect("create"));
    let mut m =
        std::io::BufWriter::new(fs::File::create(dir.join("lotus_main_pid_10")).expect("create"));
    let t0 = 1_700_000_000_000_000_000u64;
    for b in 0..batches {
        let start = t0 + b * 1_000_000;
        for i in 0..64 {
            writeln!(w, "SFlip,{},{},kind=op,batch={b}", start + i * 100, 90 + i).expect("w");
        }
        writeln!(w, "SBatch,{start},7000,kind=batch,batch={b}").expect("w");
        writeln!(m, "SConsume,{},0,kind=consume,batch={b}", start + 9000).expect("w");
    }
}

#[test]
fn sigkill_of_trace_view_leaves_the_old_view_and_no_file() {
    // The view is written into an unnamed file (O_TMPFILE) that only gets a
    // name when complete: killed at any point, lotus leaves nothing behind
    // and the previous view stands.
    let s = Scratch::new();
    let trace = s.path().join("trace");
    write_big_trace(&trace, 6000);
    let out_dir = s.path().join("out");
    fs::create_dir(&out_dir).expect("mkdir");
    let out = out_dir.join("view.json");
    fs::write(&out, "the previous view").expect("write");
    let child = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "view"])
        .arg(&trace)
        .arg("--out")
        .arg(&out)
        .env("TMPDIR", &s.tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lotus");
    // Wait until lotus holds a file in the output folder that has no name
    // (the view being written), then kill it.
    let fd_dir = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let start = Instant::now();
    let writing = loop {
        let held: Vec<String> = fs::read_dir(&fd_dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| fs::read_link(e.path()).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(f) = held
            .iter()
            .find(|p| p.starts_with(&*out_dir.to_string_lossy()) && p.contains("(deleted)"))
        {
            break f.clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "lotus never started writing the view: {held:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // SAFETY: kill(2) on our own child's pid.
    unsafe { kill(child.id() as i32, 9) };
    let o = wait_with_timeout(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), None, "killed while writing {writing}");
    let left: Vec<String> = fs::read_dir(&out_dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["view.json"], "the output folder after the kill");
    assert_eq!(fs::read_to_string(&out).expect("read"), "the previous view");
    s.assert_tmp_empty();

    // Left alone, the same view replaces the old one, readable by all.
    let o = common::lotus(&[
        "trace",
        "view",
        trace.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = read_json(&out);
    assert_eq!(v["lotusTrace"], "lotus.trace-view/1");
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(&out).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode & 0o444, 0o444, "mode {mode:o}");
    let left = fs::read_dir(&out_dir).expect("list").count();
    assert_eq!(left, 1);
}
