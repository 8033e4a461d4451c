//! What a traced job can make `lotus trace run --sample` hold (issue 33):
//! lotus's own peak resident size, measured by `wait4` on the lotus
//! process (its rusage, with the job's folded in: the job's is small),
//! against the same job holding nothing.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{any_python, s};

/// A job that holds `argv[1]` one-page executable mappings of a file (each
/// its own mapping: the same file offset every time, so the kernel merges
/// none), then maps and unmaps one more page in a loop for `argv[2]`
/// seconds of its own CPU time. Through ctypes: Python's `mmap` module
/// keeps a descriptor per mapping.
const MAPPINGS_JOB: &str = r#"
import ctypes, mmap, os, sys, tempfile, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
held, secs = int(sys.argv[1]), float(sys.argv[2])
P = mmap.PAGESIZE
with tempfile.NamedTemporaryFile(dir=sys.argv[3]) as f:
    f.write(b"\xc3" * P)
    f.flush()
    fd = os.open(f.name, os.O_RDONLY)
    def one():
        a = libc.mmap(None, P, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, 0)
        if a is None or a == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "mmap")
        return a
    keep = [one() for _ in range(held)]
    t0, loops = time.thread_time(), 0
    while time.thread_time() - t0 < secs:
        libc.munmap(one(), P)
        loops += 1
    print("loops", loops)
"#;

/// The command that runs a hostile job: as nobody (through `setpriv`)
/// where this test runs as root and a Python nobody can run is found, else
/// as this user (said).
fn as_nobody(test: &str) -> Vec<OsString> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("{test}: the job runs as this user (not root: it cannot run as nobody)");
        return vec![any_python().into()];
    }
    let setpriv = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let pythons = [
        any_python(),
        "/usr/bin/python3".into(),
        "/usr/local/bin/python3".into(),
    ];
    for py in pythons {
        let runs = Command::new(setpriv[0])
            .args(&setpriv[1..])
            .arg(&py)
            .args(["-c", "import ctypes"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if runs {
            let mut cmd: Vec<OsString> = setpriv.iter().map(OsString::from).collect();
            cmd.push(py.into());
            return cmd;
        }
    }
    eprintln!("{test}: the job runs as root (no setpriv, or no Python that nobody can run)");
    vec![any_python().into()]
}

/// Runs `lotus trace run --sample` (dwarf stacks, the default) on the
/// mappings job (run by `job_cmd`); lotus's peak resident size in KiB, and
/// its stderr. A job run as nobody cannot write its trace logs into
/// root's folder: lotus then ends with that error, the samples written.
fn traced_peak_kib(dir: &Path, job_cmd: &[OsString], held: u32) -> (i64, String) {
    let job = dir.join("mappings.py");
    std::fs::write(&job, MAPPINGS_JOB).expect("write job");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = dir.join(format!("out{held}"));
    let err = dir.join(format!("err{held}"));
    let held = held.to_string();
    // Waited for with wait4 below, for its rusage.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(["trace", "run", "--sample", "--counters", "none", "-o"])
        .arg(&out)
        .arg("--")
        .args(job_cmd)
        .args([s(&job), &held, "2", "/tmp"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("run lotus");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid buffer for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid pointers.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(r, child.id() as libc::pid_t, "wait4");
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    let sampled = std::fs::read_to_string(out.join("lotus.sampling")).unwrap_or_default();
    assert!(
        libc::WIFEXITED(status)
            && (libc::WEXITSTATUS(status) == 0 || stderr.contains("could not write their logs"))
            && sampled.contains("samples="),
        "lotus trace run failed ({status:#x}): {stderr}\n{sampled}"
    );
    (usage.ru_maxrss, stderr)
}

/// A job (nobody's, where this runs as root) that holds 20,000 one-page
/// executable mappings and then maps and unmaps a page in a loop for 2 s
/// of CPU: lotus (with `--stacks dwarf`,
/// unwinding on its writer thread) holds at most 96 MiB more than for the
/// same job holding none. Before, each sample took a copy of its
/// process's 20,000 mappings to the writer thread: 1.8 GB here (and 1.5-4
/// GB with 60,000 in the issue), side-band records lost on the way; after,
/// 33 MB, the same as with none.
#[test]
fn a_job_with_many_mappings_that_maps_in_a_loop_costs_lotus_only_what_is_live() {
    let test = "a_job_with_many_mappings_that_maps_in_a_loop_costs_lotus_only_what_is_live";
    let job = as_nobody(test);
    let tmp = tempfile::tempdir().expect("tmp");
    let (none, _) = traced_peak_kib(tmp.path(), &job, 0);
    let (many, err) = traced_peak_kib(tmp.path(), &job, 20_000);
    eprintln!("lotus's peak: {none} KiB for a job holding no mappings, {many} KiB for 20,000");
    assert!(
        many <= none + 96 * 1024,
        "lotus's peak resident size was {many} KiB with a job holding 20,000 mappings, \
         {none} KiB with none: {err}"
    );
    assert!(
        !err.contains("mmap/fork/exec records were lost"),
        "side-band records lost: {err}"
    );
}

/// A Python 3.12+ job that forks `argv[1]` children one after another,
/// each running, in a span, a function first run in the child (so that
/// its perf trampoline is in the child's own perf map) for 20 ms of its
/// CPU.
const FORKS_JOB: &str = r#"
import os, sys, time
import lotus_trace

def child_work():
    t0 = time.thread_time()
    s = 0
    while time.thread_time() - t0 < 0.02:
        for i in range(500):
            s += i * i
    return s

for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        with lotus_trace.span("Child"):
            child_work()
        sys.exit(0)
    os.waitpid(pid, 0)
"#;

/// 150 forked children of a Python 3.12+ job, each with its perf map,
/// under `ulimit -n 96` (lotus's and the job's): every child's
/// `py::child_work` is named and no map is refused, as lotus opens a map
/// only to read it. Before, each map was held open for the whole run: at
/// this limit a third of the maps were refused for want of descriptors
/// and their samples left unnamed (300 children at 256 in the issue: 81
/// maps).
#[test]
fn many_processes_perf_maps_are_read_under_a_low_descriptor_limit() {
    let test = "many_processes_perf_maps_are_read_under_a_low_descriptor_limit";
    let Some(py) = crate::common::python312(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let job = tmp.path().join("forks.py");
    std::fs::write(&job, FORKS_JOB).expect("write job");
    let out = tmp.path().join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(["trace", "run", "--sample", "--counters", "none", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .args([s(&job), "150"]);
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let lim = libc::rlimit {
                rlim_cur: 96,
                rlim_max: 96,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().expect("run lotus");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let _maps = crate::stacks::PerfMapsOf(s(&out).to_string(), s(&job).to_string());
    assert!(o.status.success(), "lotus trace run: {err}");
    assert!(!err.contains("JIT frames"), "{err}");
    let sampling = std::fs::read_to_string(out.join("lotus.sampling")).expect("sampling");
    assert!(!sampling.contains("JIT frames"), "{sampling}");
    let folded = crate::common::lotus_ok(&["attribute", s(&out), "--format", "folded"]);
    let (mut child, mut named) = (0u64, 0u64);
    for line in folded.lines() {
        let (frames, n) = line.rsplit_once(' ').expect("frames count");
        let n: u64 = n.parse().expect("count");
        if frames.starts_with("Child;") {
            child += n;
            if frames.split(';').any(|f| f == "py::child_work") {
                named += n;
            }
        }
    }
    assert!(child >= 1000, "{child} samples in Child: {folded}");
    assert!(
        named * 10 >= child * 9,
        "{named} of {child} samples in Child under py::child_work: {err}"
    );
}
