//! Time the kernel spends on the target's behalf: sampled (as `[kernel]`
//! rows named from kallsyms) where the kernel allows it, a note where not.
//!
//! The target (`burn kernel`) maps 1 MiB of fresh memory, writes every page
//! and unmaps it, in a loop: most of its CPU time is page faults and unmap
//! work in the kernel.

use std::collections::HashSet;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::common::*;
use lotus_backend_perf::{KernelSampling, LinuxPerf, PerfOptions, PerfReport};
use lotus_core::Profiler;

const WINDOW_SECS: f64 = 0.5;

/// Whether this process may sample kernel mode, decided here from the
/// rules the kernel applies (root, or perf_event_paranoid <= 1), not from
/// the backend.
fn kernel_sampling_allowed() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root || paranoid() <= 1
}

fn paranoid() -> i64 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// The kernel's text symbol names, read here independently of the backend;
/// `None` when this user sees zeroed addresses or cannot read the file.
fn kernel_text_symbols() -> Option<HashSet<String>> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let mut names = HashSet::new();
    let mut visible = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 3 && matches!(f[1], "t" | "T" | "w" | "W") {
            visible |= u64::from_str_radix(f[0], 16).is_ok_and(|a| a != 0);
            names.insert(f[2].to_string());
        }
    }
    visible.then_some(names)
}

fn kernel_rows(report: &PerfReport) -> Vec<&lotus_core::Row> {
    report
        .report
        .rows
        .iter()
        .filter(|r| r.module == "[kernel]")
        .collect()
}

/// Samples over CPU time × frequency in the window.
fn sample_ratio(report: &PerfReport) -> f64 {
    let w = &report.windows[0];
    let expected = w.task_clock_ns as f64 * report.frequency_hz as f64 / 1e9;
    eprintln!(
        "window: {} samples, task-clock {:.1} ms, × {} Hz = {:.0} expected (ratio {:.2})",
        w.samples,
        w.task_clock_ns as f64 / 1e6,
        report.frequency_hz,
        expected,
        w.samples as f64 / expected
    );
    w.samples as f64 / expected
}

const REFUSED: &str = "kernel samples: not collected (perf_event_paranoid = ";

#[test]
fn kernel_time_is_sampled_where_the_kernel_allows_it() {
    let _serial = serial();
    let allowed = kernel_sampling_allowed();
    // Read by `unprivileged_users_get_a_note_instead_of_kernel_samples`.
    println!("kernel sampling allowed: {allowed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let report = profile_window(&exe, "kernel", WINDOW_SECS);
    eprintln!("{}", top(&report, 12));
    eprintln!("notes: {:?}", report.notes);
    let total = report.report.total();
    assert_eq!(report.windows.len(), 1);
    assert_eq!(report.windows[0].samples as f64, total);
    assert!(total > 0.0);
    let kernel = kernel_rows(&report);
    let in_kernel: f64 = kernel.iter().map(|r| r.value).sum();

    if !allowed {
        assert!(!report.kernel_samples);
        assert!(
            report.notes.iter().any(|n| n.starts_with(REFUSED)
                && n.contains("run as root or set kernel.perf_event_paranoid=1")),
            "{:?}",
            report.notes
        );
        assert!(kernel.is_empty(), "{}", top(&report, 12));
        return;
    }

    assert!(report.kernel_samples);
    assert!(
        !report
            .notes
            .iter()
            .any(|n| n.starts_with("kernel samples: not collected")),
        "{:?}",
        report.notes
    );
    // Most of the time is the kernel's, and it is sampled.
    assert!(
        in_kernel > 0.3 * total,
        "{in_kernel} of {total} samples in the kernel:\n{}",
        top(&report, 12)
    );
    // Every CPU cycle of the window is sampled, kernel or user.
    let ratio = sample_ratio(&report);
    assert!((0.7..1.3).contains(&ratio), "ratio {ratio}");
    // The user side is still there, named.
    assert!(
        samples_of(&report, "fault_pages", "burn") > 0.0,
        "{}",
        top(&report, 12)
    );
    // Kernel rows carry no path, and their functions are kernel symbols.
    for r in &kernel {
        assert_eq!(r.module_path, None, "{r:?}");
    }
    match kernel_text_symbols() {
        Some(symbols) => {
            let named: f64 = kernel
                .iter()
                .filter(|r| symbols.contains(&r.function))
                .map(|r| r.value)
                .sum();
            assert!(
                named >= 0.9 * in_kernel,
                "{named} of {in_kernel} kernel samples named from kallsyms:\n{}",
                top(&report, 12)
            );
            assert!(report.symbolize.kernel_named > 0);
        }
        None => {
            // Addresses hidden from this user: one unnamed row, and a note.
            assert!(kernel.iter().all(|r| r.function == "[kernel]"));
            assert!(
                report
                    .notes
                    .iter()
                    .any(|n| n.starts_with("kernel functions: unnamed")),
                "{:?}",
                report.notes
            );
        }
    }
}

#[test]
fn probe_says_whether_kernel_time_is_sampled_where_the_kernel_allows_it() {
    let p = LinuxPerf::default().probe();
    assert!(p.available, "{p:?}");
    let note = p
        .notes
        .iter()
        .find(|n| n.starts_with("kernel samples:"))
        .expect("a kernel samples note");
    if kernel_sampling_allowed() {
        assert!(note.starts_with("kernel samples: collected"), "{note}");
        // Named, or unnamed for a reason the note gives.
        let named = kernel_text_symbols().is_some();
        assert_eq!(note.contains("unnamed"), !named, "{note}");
    } else {
        assert!(note.starts_with(REFUSED), "{note}");
        assert!(note.contains(&format!("= {};", paranoid())), "{note}");
    }
}

#[test]
fn kernel_sampling_can_be_turned_off() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let options = PerfOptions::default().with_kernel(KernelSampling::Off);
    let report = profile_window_options(&exe, "kernel", WINDOW_SECS, &options);
    eprintln!("{}", top(&report, 12));
    assert!(!report.kernel_samples);
    assert!(kernel_rows(&report).is_empty(), "{}", top(&report, 12));
    assert!(
        report
            .notes
            .iter()
            .any(|n| n == "kernel samples: not collected (user space only, as asked)"),
        "{:?}",
        report.notes
    );
    assert!(samples_of(&report, "fault_pages", "burn") > 0.0);
    // User space only misses most of this target's CPU time: what the
    // kernel samples add.
    let ratio = sample_ratio(&report);
    assert!(ratio < 0.7, "ratio {ratio}: is the target kernel-heavy?");
}

#[test]
fn unprivileged_users_get_a_note_instead_of_kernel_samples() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // `kernel_time_is_sampled_where_the_kernel_allows_it` runs as this
        // user already.
        eprintln!("not root: nothing more to check here");
        return;
    }
    let _serial = serial();
    // This test binary again, as `nobody`, running the two tests above.
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(&exe)
        .args([
            "where_the_kernel_allows_it",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TMPDIR", std::env::temp_dir())
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run the test as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "as nobody: {}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 2 passed"),
        "as nobody, the two tests above ran: {stdout}"
    );
    // The kernel's rule for a user without capabilities.
    let expected = paranoid() <= 1;
    assert!(
        stdout.contains(&format!("kernel sampling allowed: {expected}")),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("2 passed"), "{stdout}\n{stderr}");
}
