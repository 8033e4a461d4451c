//! `lotus map` on torch and torchvision ops (fixtures/torch_ops/): the
//! worker thread context (one thread by default, `--threads N`, the
//! user's `OMP_NUM_THREADS`), the warning for an op that mostly spins in
//! a thread pool, and what each torchvision op maps to.
//!
//! Torch: see tests/common/torch.rs (skipped by name without torch, a
//! failure with LOTUS_REQUIRE_TORCH=1). Each lotus run starts a fresh
//! Python that imports torch (about 5 s), so runs are few and short.

use std::ffi::OsStr;
use std::path::Path;

use crate::common::mapping::op;
use crate::common::torch::torch_python;
use crate::common::{fixture, lotus_env};
use serde_json::Value;

/// One map at a time: three torch maps at once on two CPUs measured their
/// contention (the loader's share in memmove went from 5% to 31%).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The sampling frequency of these tests (Hz): a period of 1 ms, at
/// which a sample's cost stays a few percent of a thread's CPU.
const FREQUENCY: &str = "1000";

/// Maps `ops` (fixture paths) with one run of `min_samples` at
/// [`FREQUENCY`], no floor, `extra` arguments and environment; returns the
/// mapping and stderr.
///
/// The run is bounded by work, not by the machine's load: the harness
/// ends the window on the op process's CPU clock once the samples asked
/// for are due, and at 1 kHz a sample costs little against its period.
/// At lotus's default here (7.5-8 kHz: the period 125-133 us, a sample
/// measured at 12-20 us of the sampled thread's CPU on this VM when it is
/// idle, more on a loaded host) sampling takes a share of the op's
/// threads that grows with the host's load, and one run of this file's
/// spin test (three spinning OpenMP threads on two busy CPUs) was stopped
/// at its --timeout (240 s).
fn map_torch(
    py: &Path,
    ops: &[&str],
    min_samples: u64,
    extra: &[&str],
    env: &[(&str, &OsStr)],
) -> (Value, String) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("mapping.json");
    let files: Vec<String> = ops
        .iter()
        .map(|op| fixture(op).display().to_string())
        .collect();
    let min = min_samples.to_string();
    let mut args = vec![
        "map",
        "--backend",
        "perf",
        "--frequency",
        FREQUENCY,
        "--runs",
        "1",
        "--warmup",
        "2",
        "--min-samples",
        &min,
        "--min-window-ms",
        "50",
        "--no-baseline",
        "--python",
        py.to_str().expect("utf-8 path"),
        "--out",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    args.extend(files.iter().map(String::as_str));
    let run = lotus_env(&args, env);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "lotus {args:?} failed:\n{stderr}");
    let text = std::fs::read_to_string(&out).expect("mapping written");
    (serde_json::from_str(&text).expect("mapping JSON"), stderr)
}

/// The share of `op`'s samples in functions for which `pick(function,
/// module)` holds.
fn share(op: &Value, pick: impl Fn(&str, &str) -> bool) -> f64 {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter(|f| {
            pick(
                f["function"].as_str().unwrap_or(""),
                f["module"].as_str().unwrap_or(""),
            )
        })
        .map(|f| f["share"].as_f64().unwrap_or(0.0))
        .sum()
}

/// `op`'s hottest functions, one a line, for failure messages.
fn top(op: &Value) -> String {
    op["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .take(10)
        .map(|f| {
            format!(
                "  {:.3} {} | {}\n",
                f["share"].as_f64().unwrap_or(0.0),
                f["function"],
                f["module"]
            )
        })
        .collect()
}

fn in_openmp(_: &str, module: &str) -> bool {
    module.starts_with("libgomp") || module.starts_with("libiomp") || module.starts_with("libomp")
}

/// How many threads can spin at full speed here: libgomp shortens its
/// spinning to almost nothing when it has more threads than CPUs, so a
/// pool that spins has at most as many threads as the process has CPUs.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn torch_threads_from_the_flag_or_the_environment_spin_and_are_warned() {
    let Some(py) =
        torch_python("torch_threads_from_the_flag_or_the_environment_spin_and_are_warned")
    else {
        return;
    };
    let n = cpus();
    if n < 2 {
        eprintln!("skipped: one CPU: an OpenMP pool has nothing to spin on");
        return;
    }
    let threads = n.to_string();
    // --threads N: every runtime gets N, torch too, and the idle pool
    // threads spin while the op does its single-threaded part. Normalize,
    // not ToTensor: at two threads on two CPUs ToTensor's pool spun for
    // 29-31% of its samples (its parallel part keeps the pool busy), at
    // the warning's 30% threshold; Normalize's 39-43%.
    // GOMP_SPINCOUNT=20000000: the idle threads spin through every gap
    // of the op (tens of ms of spinning; by default libgomp spins a while,
    // then sleeps, and on a loaded machine the spinners get little CPU):
    // what is tested is the warning on a pool that spins, not libgomp's
    // spin-count heuristics. Not OMP_WAIT_POLICY=ACTIVE, which spins for
    // ever: on two CPUs shared with other tests, a thread at a barrier
    // then burns its whole time slice while the thread it waits for waits
    // for a CPU, and the op ran past lotus's 240 s --timeout in a busy
    // suite run; a bounded spin gives the CPU back.
    let (mapping, stderr) = map_torch(
        &py,
        &["torch_ops/Normalize.py"],
        400,
        &["--threads", &threads],
        &[
            ("OMP_NUM_THREADS", OsStr::new("1")),
            ("GOMP_SPINCOUNT", OsStr::new("20000000")),
        ],
    );
    let env = &mapping["environment"];
    assert_eq!(env["threads"], format!("{n} (--threads)"), "{env}");
    for var in ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"] {
        assert_eq!(
            env[var], threads,
            "--threads wins over the environment: {env}"
        );
    }
    let spin = share(op(&mapping, "Normalize"), in_openmp);
    assert!(
        spin > 0.30,
        "with {n} threads the pool should spin: {spin:.2} in libgomp\n{stderr}"
    );
    assert!(
        stderr.contains("thread pool's spin or wait loop") && stderr.contains("--threads"),
        "no spin warning at {spin:.2} in libgomp:\n{stderr}"
    );

    // The user's OMP_NUM_THREADS is kept (and torch follows it), recorded
    // as theirs; lotus sets no other runtime's (torch would take
    // MKL_NUM_THREADS=1 over it).
    let (mapping, stderr) = map_torch(
        &py,
        &["torch_ops/Normalize.py"],
        400,
        &[],
        &[("OMP_NUM_THREADS", OsStr::new(&threads))],
    );
    let env = &mapping["environment"];
    assert_eq!(
        env["OMP_NUM_THREADS"],
        format!("{n} (from the environment)"),
        "{env}"
    );
    assert_eq!(env.get("MKL_NUM_THREADS"), None, "{env}");
    assert!(
        env["threads"]
            .as_str()
            .is_some_and(|t| t.starts_with("from the environment")),
        "{env}"
    );
    let spin = share(op(&mapping, "Normalize"), in_openmp);
    assert!(
        spin > 0.30,
        "OMP_NUM_THREADS={n}: {spin:.2} in libgomp\n{stderr}"
    );
    assert!(
        stderr.contains("thread pool's spin or wait loop"),
        "no spin warning at {spin:.2} in libgomp:\n{stderr}"
    );
}

/// An ATen kernel (`at::native::...` in libtorch_cpu) or the C library's
/// memcpy/memmove: where torch's tensor ops should spend their time.
fn aten_or_memcpy(function: &str, module: &str) -> bool {
    (module.starts_with("libtorch_cpu") && function.contains("at::native::"))
        || (module.starts_with("libc.so")
            && (function.contains("memmove") || function.contains("memcpy")))
}

#[test]
fn torchvision_ops_map_to_their_kernels_with_one_thread_by_default() {
    let Some(py) = torch_python("torchvision_ops_map_to_their_kernels_with_one_thread_by_default")
    else {
        return;
    };
    let started = std::time::Instant::now();
    let (mapping, stderr) = map_torch(
        &py,
        &[
            "torch_ops/ToTensor.py",
            "torch_ops/Normalize.py",
            "torch_ops/Collation.py",
            "torch_ops/RandomResizedCrop.py",
            "torch_ops/RandomHorizontalFlip.py",
            "torch_ops/Loader.py",
        ],
        400,
        &[],
        &[
            ("OMP_NUM_THREADS", OsStr::new("")),
            ("MKL_NUM_THREADS", OsStr::new("")),
            ("OPENBLAS_NUM_THREADS", OsStr::new("")),
        ],
    );
    eprintln!(
        "six torchvision ops, one run each: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let env = &mapping["environment"];
    assert!(
        env["threads"]
            .as_str()
            .is_some_and(|t| t.starts_with("1 (default")),
        "{env}"
    );
    for var in ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"] {
        assert_eq!(env[var], "1", "{env}");
    }
    assert!(
        !stderr.contains("thread pool's spin or wait loop"),
        "one thread, yet a spin warning:\n{stderr}"
    );

    for name in ["ToTensor", "Normalize", "Collation"] {
        let op = op(&mapping, name);
        let gomp = share(op, in_openmp);
        assert!(
            gomp < 0.05,
            "{name}: {gomp:.3} of its samples in libgomp:\n{}",
            top(op)
        );
        // Of the user-space samples: a fresh output tensor each call
        // (ToTensor's 2.3 MB) costs page faults in the kernel, which are
        // the op's too but not the kernels asked about.
        let user = 1.0 - share(op, |_, m| m == "[kernel]");
        let kernels = share(op, aten_or_memcpy) / user.max(f64::MIN_POSITIVE);
        assert!(
            kernels >= 0.4,
            "{name}: only {kernels:.2} of its user-space samples in ATen kernels and memcpy:\n{}",
            top(op)
        );
        let hottest = op["functions"]
            .as_array()
            .expect("functions")
            .iter()
            .find(|f| f["module"] != "[kernel]")
            .expect("a user-space function");
        assert!(
            aten_or_memcpy(
                hottest["function"].as_str().unwrap_or(""),
                hottest["module"].as_str().unwrap_or("")
            ),
            "{name}: the hottest user-space function is not an ATen kernel or memcpy:\n{}",
            top(op)
        );
    }
    // The crop's resampling is the bulk of its op on any machine: 0.63-0.75
    // of the samples here, quiet or with a CPU hog per CPU.
    let crop = op(&mapping, "RandomResizedCrop");
    let resample = share(crop, |f, m| {
        m.starts_with("_imaging") && f.trim_start_matches('_').starts_with("ImagingResample")
    });
    assert!(
        resample >= 0.5,
        "RandomResizedCrop: only {resample:.2} in Pillow's resample kernels:\n{}",
        top(crop)
    );

    // The loader's hottest module is the JPEG decoder's. Its share depends
    // on the process: in some runs the C library's memmove takes 0.26-0.37
    // of the samples (the op then costs ~1,000 us a call, not ~780; the
    // decoder keeps 0.47-0.57), in the others 0.05-0.09 (the decoder
    // 0.70-0.76).
    let loader = op(&mapping, "Loader");
    let mut modules: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for f in loader["functions"].as_array().expect("functions") {
        *modules
            .entry(f["module"].as_str().unwrap_or(""))
            .or_default() += f["share"].as_f64().unwrap_or(0.0);
    }
    let (hottest_module, _) = modules
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .expect("a module");
    let jpeg = share(loader, |_, m| m.starts_with("libjpeg"));
    assert!(
        jpeg >= 0.4 && hottest_module.starts_with("libjpeg"),
        "Loader: {jpeg:.2} in the JPEG decoder's module, the hottest module is {hottest_module}:\n{}",
        top(loader)
    );

    // The flip's kernel is a fast copy under torchvision's Python wrapper
    // and a torch.rand call, so its share of the op's samples depends on
    // the machine and its load: 0.76-0.82 here on a quiet machine,
    // 0.64-0.78 with a CPU hog per CPU, 0.45 in one CI run. The reference
    // is what the op ran: the kernel takes at least the CPU time Pillow's
    // C-level transpose takes by the op's own timer, unsampled (the
    // kernel, its allocation and one C call; sampling only adds to it),
    // out of the op's CPU time per call in the sampled window (its
    // task-clock over its calls). The kernel must hold at least 0.7 of
    // that (the transpose's allocation and C call are not the kernel's,
    // and 400 samples are noisy) and be the op's hottest function.
    let flip = op(&mapping, "RandomHorizontalFlip");
    let kernel = |f: &str, m: &str| m.starts_with("_imaging") && f == "ImagingFlipLeftRight";
    let part = share(flip, kernel);
    let [core_us] = cpu_per_call(
        &py,
        &fixture("torch_ops/RandomHorizontalFlip.py"),
        ["x.im.transpose(0)"],
    );
    let window = &flip["window"];
    // The whole op unsampled, for the message: lotus timed it so.
    let unsampled = &window["unsampled"];
    let whole_us = unsampled["cpu_seconds"].as_f64().unwrap_or(f64::NAN) * 1e6
        / unsampled["calls"].as_f64().unwrap_or(f64::NAN);
    let task_clock_ns = window["counters"]["task-clock-ns"]
        .as_f64()
        .expect("the window's task-clock");
    let calls = window["iterations"].as_f64().expect("the window's calls");
    assert!(task_clock_ns > 0.0 && calls > 0.0, "{window}");
    let sampled_us = task_clock_ns / calls / 1000.0;
    let reference = (core_us / sampled_us).min(1.0);
    let hottest = &flip["functions"][0];
    assert!(
        part >= 0.7 * reference
            && kernel(
                hottest["function"].as_str().unwrap_or(""),
                hottest["module"].as_str().unwrap_or("")
            ),
        "RandomHorizontalFlip: {part:.2} of the samples in Pillow's flip kernel, against \
         {reference:.2} of the op's CPU time a call that its C-level transpose takes \
         ({core_us:.1} us unsampled, by the op's own timer, of {sampled_us:.1} us a call in \
         the sampled window; the whole op unsampled, as lotus timed it: {whole_us:.1} us):\n{}",
        top(flip)
    );
}

/// CPU time per call, in microseconds, of each of `exprs` (Python
/// expressions of `x`, setup()'s value, in the namespace of the op file
/// `op_file`), by the process's own CPU timer: one Python with one torch
/// thread, as lotus gives the op; the expressions timed in turn, seven
/// rounds of 200 calls, the fastest round of each kept.
fn cpu_per_call<const N: usize>(py: &Path, op_file: &Path, exprs: [&str; N]) -> [f64; N] {
    const TIMER: &str = r#"
import importlib.util, json, sys, time
path, exprs = sys.argv[1], sys.argv[2:]
spec = importlib.util.spec_from_file_location("lotus_timed_op", path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(1)
x = mod.setup() if hasattr(mod, "setup") else None
calls = [eval("lambda x: " + e, vars(mod)) for e in exprs]
for call in calls:
    for _ in range(20):
        call(x)
best = [float("inf")] * len(calls)
for _ in range(7):
    for i, call in enumerate(calls):
        start = time.process_time_ns()
        for _ in range(200):
            call(x)
        best[i] = min(best[i], (time.process_time_ns() - start) / 200 / 1000)
print(json.dumps(best))
"#;
    let out = std::process::Command::new(py)
        .arg("-c")
        .arg(TIMER)
        .arg(op_file)
        .args(exprs)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run the timer's Python");
    assert!(
        out.status.success(),
        "timing {exprs:?} of {} failed:\n{}",
        op_file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let times: Vec<f64> = serde_json::from_slice(&out.stdout).expect("the timer's JSON");
    let times: [f64; N] = times.try_into().expect("one time per expression");
    assert!(
        times.iter().all(|t| t.is_finite() && *t > 0.0),
        "timing {exprs:?}: {times:?}"
    );
    times
}

#[test]
fn torch_imported_in_setup_gets_the_worker_thread_count_before_the_window() {
    let Some(py) =
        torch_python("torch_imported_in_setup_gets_the_worker_thread_count_before_the_window")
    else {
        return;
    };
    // The op imports torch only in setup() and sets its own thread count
    // there: the harness must still give torch one thread before the
    // warm-up, as a DataLoader worker does once the dataset is built.
    let dir = tempfile::tempdir().expect("temp dir");
    let op_file = dir.path().join("LazyTorch.py");
    std::fs::write(
        &op_file,
        "def setup():\n    import torch\n    torch.set_num_threads(3)\n    return torch\n\n\
         def op(torch):\n    n = torch.get_num_threads()\n    if n != 1:\n        \
         raise RuntimeError(f'torch runs {n} threads in the window')\n    \
         return torch.ones(4096).sum()\n",
    )
    .expect("write op");
    let out = dir.path().join("mapping.json");
    let args = [
        "map",
        "--backend",
        "perf",
        "--runs",
        "1",
        "--warmup",
        "1",
        "--min-samples",
        "100",
        "--min-window-ms",
        "20",
        "--no-baseline",
        "--python",
        py.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
        op_file.to_str().expect("utf-8"),
    ];
    let run = lotus_env(&args, &[]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "lotus failed:\n{stderr}");
}
