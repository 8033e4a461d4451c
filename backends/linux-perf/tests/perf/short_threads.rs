//! Sampling work done in short-lived threads and forked workers: the
//! samples must cover the CPU time those threads ran, as the job's own CPU
//! clocks measure it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use lotus_backend_perf::{LinuxPerf, PerfOptions, PerfReport, ThreadTimers, WindowSwitch};
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
    run_with(
        mode,
        count,
        burn_us,
        hz,
        PerfOptions::default().with_window_switch(switch),
    )
}

/// [`run`] with `perf` options.
fn run_with(mode: &str, count: u32, burn_us: u32, hz: Option<u64>, perf: PerfOptions) -> Run {
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
    let mut c = LinuxPerf::default()
        .start_with(&target, &options, &perf)
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

/// The frequency the tests sample at: `lotus trace run --sample`'s and
/// `lotus profile`'s default, where a thread of under a millisecond of CPU
/// was never sampled.
const HZ: u64 = 1000;

/// Asserts the window's samples stand for the job's CPU time (its own
/// clocks). The bounds: sampling's own error here is a period or two per
/// process once the threads' tails are added (each process's tails are
/// carried to within one period), well under 2% of 500 samples; below, the
/// job's clocks also count what the kernel does for a thread before its
/// sampler copies start and after they end (creating and reaping it, about
/// 20 us a thread here: 2% of a 0.9 ms thread), which no per-task sampler
/// sees. Before the fix, these jobs got 5-10% of their samples.
fn assert_covers(run: &Run, what: &str) {
    let ratio = run.sampled_s() / run.job_s();
    assert!(
        (0.9..1.05).contains(&ratio),
        "{}",
        run.describe(&format!("{what}: sampled/job CPU {ratio:.3}"))
    );
    assert_eq!(run.report.total.lost, 0, "{}", run.describe(what));
}

#[test]
fn threads_shorter_than_a_period_are_sampled_for_the_cpu_they_ran() {
    let _serial = serial();
    // 600 threads of 0.9 ms: one after another, then 8 at a time.
    for mode in ["serial", "batch"] {
        for switch in [WindowSwitch::Timestamps, WindowSwitch::Ioctl] {
            let run = run(mode, 600, 900, Some(HZ), switch);
            eprintln!("{}", run.describe(mode));
            assert_covers(&run, &format!("{mode} {switch:?}"));
        }
    }
}

#[test]
fn with_shared_thread_timers_the_threads_tails_are_added_too() {
    let _serial = serial();
    // The kernel swaps the threads' timers: the starting thread's progress
    // goes with each short thread; the counts at exit still give it back.
    let run = run_with(
        "serial",
        600,
        900,
        Some(HZ),
        PerfOptions::default().with_thread_timers(ThreadTimers::Shared),
    );
    let ratio = run.sampled_s() / run.job_s();
    // Less than with separate timers: where the target's first thread holds
    // the samplers at the end, its lost progress is only counted, not added.
    assert!(
        (0.8..1.05).contains(&ratio),
        "{}",
        run.describe(&format!("shared: sampled/job CPU {ratio:.3}"))
    );
}

#[test]
fn forked_workers_and_their_short_threads_are_sampled_for_the_cpu_they_ran() {
    let _serial = serial();
    // 24 workers of 25 threads of 0.9 ms each; then 6 workers that burn
    // 100 x 0.9 ms in their one thread.
    for (mode, count) in [("fork", 600), ("worker", 600)] {
        let run = run(mode, count, 900, Some(HZ), WindowSwitch::Timestamps);
        eprintln!("{}", run.describe(mode));
        assert_covers(&run, mode);
        // Every worker that ran has its CPU time counted and covered.
        let period = run.report.coverage.period_ns;
        let workers: Vec<_> = run
            .report
            .coverage
            .processes
            .iter()
            .filter(|p| p.cpu_ns > 20_000_000)
            .collect();
        assert!(workers.len() >= 6, "{}", run.describe(mode));
        for p in workers {
            let covered = p.sampled_ns(period) as f64 / p.cpu_ns as f64;
            assert!(
                (0.93..1.07).contains(&covered),
                "process {}: {covered:.3}\n{}",
                p.pid,
                run.describe(mode)
            );
        }
    }
}

#[test]
fn the_samples_added_for_a_thread_stand_where_it_was_last_sampled() {
    let _serial = serial();
    // 400 threads of 2.5 ms: each sampled twice, its last half period
    // added where it ran (burn_short), so that function's samples match
    // the CPU the threads burned in it. Before: 2 of 2.5 periods (80%).
    let run = run("batch", 400, 2500, Some(HZ), WindowSwitch::Timestamps);
    let burned = samples_of(&run.report, "burn_short", "short_threads") / HZ as f64;
    let ratio = burned / (run.burners_ns as f64 / 1e9);
    assert!(
        (0.92..1.05).contains(&ratio),
        "{}",
        run.describe(&format!("burn_short/burners {ratio:.3}"))
    );
    assert!(
        run.report.coverage.added() > 100,
        "{}",
        run.describe("added")
    );
    // The note counts the threads whose samples fell short: most of the
    // 400 (a thread whose last period happened to close as it exited, as
    // under a busy machine's preemptions, needs none: 381 in one CI run).
    let threads = run
        .report
        .notes
        .iter()
        .filter(|n| n.contains("were added for the CPU time"))
        .find_map(|n| {
            let (_, rest) = n.split_once("for the CPU time ")?;
            rest.split_once(" threads")?.0.parse::<u32>().ok()
        });
    assert!(
        threads.is_some_and(|n| (300..=400).contains(&n)),
        "{threads:?}: {:?}",
        run.report.notes
    );
}

#[test]
fn samples_known_to_be_missing_are_reported_with_the_figure() {
    let _serial = serial();
    // User mode only, of a job that spends most of its CPU time in the
    // kernel (page faults, unmapping): the samplers count that time, the
    // samples cannot cover it, and the report says by how much.
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let options = PerfOptions::default().with_kernel(lotus_backend_perf::KernelSampling::Off);
    let mut ch = Channel::new();
    let target = ch.target(&exe, "kernel", 0.5);
    let mut c = start_options(&mut ch, &target, &options);
    let pid = c.pid();
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    let cov = &report.coverage;
    let p = *cov.process(pid).expect("the target's figures");
    let sampled = p.sampled_ns(cov.period_ns);
    // The phase burned 0.5 s of its own CPU time: the count has it all.
    assert!(p.cpu_ns >= 500_000_000, "{cov:?}");
    assert!(sampled * 2 < p.cpu_ns, "{cov:?}");
    let want = format!(
        "samples cover {:.3} s of the {:.3} s CPU process {pid} ran ({:.0}%)",
        sampled as f64 / 1e9,
        p.cpu_ns as f64 / 1e9,
        100.0 * sampled as f64 / p.cpu_ns as f64
    );
    let note = report
        .notes
        .iter()
        .find(|n| n.starts_with(&want))
        .unwrap_or_else(|| panic!("no note {want:?} in {:#?}", report.notes));
    assert!(note.contains("kernel mode is not sampled"), "{note}");
}

/// Not a check: the figures of the report (sampled CPU over the job's own
/// CPU, at 1 kHz and at the backend's default frequency), printed.
/// `cargo test -p lotus-backend-perf --test perf -- short_threads:: --ignored --nocapture`
#[test]
#[ignore]
fn measure() {
    let _serial = serial();
    for hz in [Some(HZ), None] {
        for (mode, count, us) in [
            ("serial", 300, 10_000),
            ("batch", 300, 10_000),
            ("serial", 1000, 300),
            ("batch", 1000, 300),
            ("fork", 1000, 300),
            ("worker", 1000, 300),
        ] {
            let run = run(mode, count, us, hz, WindowSwitch::Timestamps);
            println!(
                "MEASURE {:>5} Hz {mode:>6} {count:>4} x {us:>5} us: sampled {:.3} s / job {:.3} s = {:.3}",
                run.report.frequency_hz,
                run.sampled_s(),
                run.job_s(),
                run.sampled_s() / run.job_s()
            );
        }
    }
}
