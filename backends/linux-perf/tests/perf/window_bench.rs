//! Figures for the perf backend, printed, not asserted:
//!
//! - the cost of `resume` / `pause` (ioctls on every sampler and counter),
//!   while the target burns CPU, against the 100 µs control round-trip
//!   budget of DESIGN.md;
//! - samples in a one-second window at the default frequency, and how many
//!   were lost;
//! - symbolization time for a C target and for a Python worker that runs
//!   libz;
//! - the same one-second profile through `perf record` + `perf report`
//!   (when the `perf` binary exists): sample count and time ratios.
//!
//! Run: `cargo test --release -p lotus-backend-perf --test perf --
//! --ignored --nocapture window_bench` (needs gcc; python3 and perf are
//! optional). A module of the perf tests' one binary, so that it shares
//! their helpers; ignored in the suite, as it measures rather than checks.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use lotus_backend_perf::{LinuxPerf, WindowSwitch};
use lotus_core::{CollectOptions, Collection, Target};

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

/// Times `resume` and `pause` for about a second.
fn toggle(c: &mut lotus_backend_perf::PerfCollection) -> (Vec<Duration>, Vec<Duration>) {
    let (mut resume, mut pause) = (Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_millis(1000);
    while Instant::now() < until {
        let t = Instant::now();
        c.resume().expect("resume");
        resume.push(t.elapsed());
        std::thread::sleep(Duration::from_micros(200));
        let t = Instant::now();
        c.pause().expect("pause");
        pause.push(t.elapsed());
    }
    (resume, pause)
}

fn print_costs(what: &str, (mut resume, mut pause): (Vec<Duration>, Vec<Duration>)) {
    let (r50, r99) = (percentile(&mut resume, 0.5), percentile(&mut resume, 0.99));
    let (p50, p99) = (percentile(&mut pause, 0.5), percentile(&mut pause, 0.99));
    println!(
        "  {what}, {} windows: resume median {r50:?} (p99 {r99:?}), pause median {p50:?} \
         (p99 {p99:?}); the 100 µs round-trip budget is {:.1}x the slower median",
        resume.len(),
        100e-6 / r50.max(p50).as_secs_f64()
    );
}

fn window_cost(exe: &Path, switch: WindowSwitch) {
    let mut ch = Channel::new();
    let target = ch.target(exe, "both", 1.5);
    let mut c = start_with(&mut ch, &target, switch);
    ch.expect(b'r');
    // As under the control protocol: the target waits while lotus switches.
    let waiting = toggle(&mut c);
    ch.go();
    // Worst case: the target burns CPU on another CPU meanwhile.
    let busy = toggle(&mut c);
    ch.expect(b'd');
    ch.go();
    wait_exit(&mut c);
    let c_counters = c
        .counter_status()
        .iter()
        .filter(|s| s.available)
        .map(|s| s.kind.name())
        .collect::<Vec<_>>()
        .join(", ");
    let report = c.finish().expect("finish");
    println!(
        "window switch {switch:?} ({} CPUs: one sampler each; counters: {c_counters}):",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    print_costs("target waiting", waiting);
    print_costs("target busy", busy);
    println!(
        "  {} windows reported, {} samples, {} lost",
        report.windows.len(),
        report.total.samples,
        report.total.lost
    );
}

/// Lotus: start, one window over the whole run, finish. Returns (wall,
/// finish time, all samples, samples in spin_*).
fn lotus_solo(exe: &Path, secs: f64) -> (Duration, Duration, f64, f64) {
    let t0 = Instant::now();
    let mut target = Target::new(exe);
    target.args = vec![
        "-1".into(),
        "-1".into(),
        "solo".into(),
        secs.to_string().into(),
    ];
    let mut c = LinuxPerf::default()
        .start(&target, &CollectOptions::default())
        .expect("start");
    c.resume().expect("resume");
    wait_exit(&mut c);
    c.pause().expect("pause");
    let t1 = Instant::now();
    let report = c.finish().expect("finish");
    let finish = t1.elapsed();
    let hot: f64 = report
        .report
        .rows
        .iter()
        .filter(|r| r.function.starts_with("spin_"))
        .map(|r| r.value)
        .sum();
    (t0.elapsed(), finish, report.report.total(), hot)
}

/// `perf record -F 4000 -e cpu-clock:u` then `perf report`. Returns (wall,
/// report time, samples in spin_*), or None without a working perf.
fn perf_solo(exe: &Path, secs: f64, dir: &Path) -> Option<(Duration, Duration, f64)> {
    let data = dir.join("perf.data");
    let t0 = Instant::now();
    let rec = Command::new("perf")
        .args(["record", "-q", "-F", "4000", "-e", "cpu-clock:u", "-o"])
        .arg(&data)
        .arg("--")
        .arg(exe)
        .args(["-1", "-1", "solo", &secs.to_string()])
        .output()
        .ok()?;
    if !rec.status.success() {
        return None;
    }
    let t1 = Instant::now();
    let rep = Command::new("perf")
        .args(["report", "--stdio", "-F", "overhead,sample,sym,dso", "-i"])
        .arg(&data)
        .output()
        .ok()?;
    let report_time = t1.elapsed();
    if !rep.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&rep.stdout);
    let hot: f64 = text
        .lines()
        .filter(|l| l.contains("spin_"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum();
    Some((t0.elapsed(), report_time, hot))
}

fn python_symbolization() {
    let Ok(out) = Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
    else {
        return;
    };
    let python = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if python.is_empty() {
        println!("python3: not found, skipped");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/worker.py");
    let mut ch = Channel::new();
    let mut target = ch.target(Path::new(&python), "", 0.0);
    let (o, i) = (target.args[0].clone(), target.args[1].clone());
    target.args = vec![script.into_os_string(), o, i, "1.0".into()];
    let mut c = start(&mut ch, &target);
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    let s = report.symbolize;
    println!(
        "python worker (zlib), 1 s window: {} samples, {} rows; symbolization {:?} for {} \
         addresses ({} named, {} func@, {} unknown), {:.1} µs per address",
        report.total.samples,
        report.report.rows.len(),
        s.elapsed,
        s.addresses,
        s.named,
        s.by_unwind_table,
        s.unknown,
        s.elapsed.as_secs_f64() * 1e6 / s.addresses.max(1) as f64
    );
}

#[test]
#[ignore = "a benchmark: prints figures, asserts nothing; run it with --ignored --nocapture window_bench"]
fn window_bench() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());

    window_cost(&exe, WindowSwitch::Timestamps);
    window_cost(&exe, WindowSwitch::Ioctl);

    let secs = 1.0;
    let (wall, finish, samples, hot) = lotus_solo(&exe, secs);
    println!(
        "lotus, {secs} s burn at 4 kHz: {samples} samples ({:.0}/s, {hot} in spin_*), \
         finish (drain + symbolize) {finish:?}, wall {wall:?}",
        samples / secs
    );
    match perf_solo(&exe, secs, dir.path()) {
        Some((pwall, preport, phot)) => println!(
            "perf record + perf report, same burn: {phot} samples in spin_*, report {preport:?}, \
             wall {pwall:?}; lotus/perf: samples {:.2}, post-processing {:.2}, wall {:.2}",
            hot / phot.max(1.0),
            finish.as_secs_f64() / preport.as_secs_f64(),
            wall.as_secs_f64() / pwall.as_secs_f64()
        ),
        None => println!("perf: not available, comparison skipped"),
    }

    python_symbolization();
}
