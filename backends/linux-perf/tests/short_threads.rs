//! Sampling work done in short-lived threads and forked workers: the
//! samples must cover the CPU time those threads ran, as the job's own CPU
//! clocks measure it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use lotus_backend_perf::{LinuxPerf, PerfOptions, PerfReport, WindowSwitch};
use lotus_core::{CollectOptions, Collection};

/// Builds `short_threads` (tests/data/short_threads.c) in `dir`.
fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("short_threads");
    let out = Command::new("gcc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/short_threads.c"
        ))
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// One run of the job in a window.
struct Run {
    report: PerfReport,
    /// The burners' own CPU time (ns).
    burners_ns: u64,
    /// The whole job's CPU time in the window (ns).
    job_ns: u64,
}

impl Run {
    /// Samples in the window, as CPU time (s).
    fn sampled_s(&self) -> f64 {
        self.report.total.samples as f64 / self.report.frequency_hz as f64
    }

    fn job_s(&self) -> f64 {
        self.job_ns as f64 / 1e9
    }

    fn describe(&self, what: &str) -> String {
        format!(
            "{what}: {} samples at {} Hz = {:.3} s for {:.3} s of job CPU ({:.3} s in the \
             burners): {:.1}%; lost {}; coverage {:?}; notes {:#?}\n{}",
            self.report.total.samples,
            self.report.frequency_hz,
            self.sampled_s(),
            self.job_s(),
            self.burners_ns as f64 / 1e9,
            100.0 * self.sampled_s() / self.job_s(),
            self.report.total.lost,
            self.report.coverage,
            self.report.notes,
            top(&self.report, 6)
        )
    }
}

/// Runs `mode` with `count` burners of `burn_us` each, in one window, at
/// `hz` (the backend's default when `None`).
fn run(mode: &str, count: u32, burn_us: u32, hz: Option<u64>, switch: WindowSwitch) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build(dir.path());
    let result = dir.path().join("cpu");
    let mut ch = Channel::new();
    let mut target = ch.target(&exe, mode, 0.0);
    target.args[3] = count.to_string().into();
    target.args.push(burn_us.to_string().into());
    target.args.push(result.clone().into());
    let mut options = CollectOptions::default();
    options.frequency_hz = hz;
    let mut c = LinuxPerf
        .start_with(
            &target,
            &options,
            &PerfOptions::default().with_window_switch(switch),
        )
        .expect("start");
    ch.spawned();
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    let text = std::fs::read_to_string(&result).expect("result");
    let mut figures = text
        .split_whitespace()
        .map(|w| w.parse::<u64>().expect("ns"));
    Run {
        report,
        burners_ns: figures.next().expect("burners"),
        job_ns: figures.next().expect("job"),
    }
}

#[test]
fn explore() {
    let _serial = serial();
    for (mode, count, us, hz) in [
        ("serial", 1000, 300, Some(1000)),
        ("batch", 1000, 300, Some(1000)),
        ("fork", 1000, 300, Some(1000)),
        ("worker", 1000, 300, Some(1000)),
        ("serial", 300, 10_000, None),
        ("batch", 300, 10_000, None),
    ] {
        for switch in [WindowSwitch::Timestamps, WindowSwitch::Ioctl] {
            let r = run(mode, count, us, hz, switch);
            eprintln!(
                "{}",
                r.describe(&format!("{mode} {count}x{us}us {switch:?}"))
            );
        }
    }
}

#[test]
fn debug_worker() {
    let r = run(
        &std::env::var("MODE").unwrap(),
        1000,
        300,
        Some(1000),
        WindowSwitch::Timestamps,
    );
    eprintln!("{}", r.describe("worker"));
}
