//! Sampling real processes: known functions, windows, inheritance.

use crate::common::*;
use lotus_backend_perf::WindowSwitch;
use lotus_core::{Collection, SamplingControl};

#[test]
fn hot_functions_are_the_top_rows_with_thousands_of_samples() {
    for switch in [WindowSwitch::Timestamps, WindowSwitch::Ioctl] {
        hot_functions(switch);
    }
}

fn hot_functions(switch: WindowSwitch) {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let report = profile_window_with(&exe, "both", 1.0, switch);
    eprintln!("{}", top(&report, 8));
    let rows = &report.report.rows;
    let mut top2: Vec<&str> = rows.iter().take(2).map(|r| r.function.as_str()).collect();
    top2.sort();
    assert_eq!(top2, ["spin_alpha", "spin_beta"], "{}", top(&report, 8));
    for f in ["spin_alpha", "spin_beta"] {
        let row = rows.iter().find(|r| r.function == f).expect("row");
        assert_eq!(row.module, "burn");
        assert_eq!(row.module_path.as_deref(), exe.to_str());
        assert!(row.value >= 1000.0, "{f}: {} samples", row.value);
    }
    // One window, its samples are the rows' samples.
    assert_eq!(report.windows.len(), 1);
    let w = &report.windows[0];
    assert_eq!(w.samples as f64, report.report.total());
    assert_eq!(w.lost, 0);
    // The sample count agrees with the CPU time counted (4 kHz).
    let expected = w.task_clock_ns as f64 * report.frequency_hz as f64 / 1e9;
    let ratio = w.samples as f64 / expected;
    assert!(
        (0.8..1.2).contains(&ratio),
        "{} samples for {} ns",
        w.samples,
        w.task_clock_ns
    );
    assert!(w.duration.as_secs_f64() >= 1.0, "{:?}", w.duration);
}

/// The burn program (built in `dir`) in its "phases" mode under perf,
/// once its phase A (0.5 s of CPU, no window open) has run.
fn after_phase_a(
    dir: &std::path::Path,
    switch: WindowSwitch,
) -> (Channel, lotus_backend_perf::PerfCollection) {
    let exe = build_burn(dir);
    let mut ch = Channel::new();
    let target = ch.target(&exe, "phases", 0.5);
    let c = start_with(&mut ch, &target, switch);
    ch.expect(b'a');
    (ch, c)
}

#[test]
fn only_the_open_window_is_sampled() {
    for switch in [WindowSwitch::Timestamps, WindowSwitch::Ioctl] {
        only_the_window(switch);
    }
}

fn only_the_window(switch: WindowSwitch) {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut ch, mut c) = after_phase_a(dir.path(), switch); // phase A ran, unprofiled
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'b'); // phase B ran in the window
    c.pause().expect("pause");
    let windows = c.window_figures().expect("windows");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    eprintln!("{}", top(&report, 8));
    assert_eq!(
        samples_of(&report, "spin_alpha", "burn"),
        0.0,
        "{}",
        top(&report, 8)
    );
    assert!(
        samples_of(&report, "spin_beta", "burn") >= 1000.0,
        "{}",
        top(&report, 8)
    );
    // windows() after pause already counted every sample of the window.
    assert_eq!(windows.len(), 1);
    assert_eq!(windows[0].samples, report.windows[0].samples);
    // Phase A burned as much CPU as B, yet the window's task-clock is B's.
    let w = &report.windows[0];
    assert!(
        (400_000_000..800_000_000).contains(&w.task_clock_ns),
        "{w:?}"
    );
    // With samplers running all along, phase A's samples were taken and
    // dropped; switched by ioctl, none were taken.
    match switch {
        WindowSwitch::Timestamps => assert!(
            report.samples_outside_windows >= 1000,
            "{}",
            report.samples_outside_windows
        ),
        _ => assert!(report.samples_outside_windows < 5),
    }
}

/// `set_sampling(false)` stops the samplers outside windows (the unsampled
/// calls `lotus map` times for its reference), `set_sampling(true)` and a
/// window's resume start them again; stopping inside a window is refused.
#[test]
fn sampling_stopped_outside_windows_takes_no_samples() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // Phase A ran sampled (outside any window).
    let (mut ch, mut c) = after_phase_a(dir.path(), WindowSwitch::Timestamps);
    // Asked for through the trait, as the map engine does.
    c.sampling_control()
        .expect("perf offers sampling control")
        .set_sampling(false)
        .expect("stop sampling");
    c.set_sampling(false).expect("stopping twice is no error");
    ch.go();
    ch.expect(b'b'); // phase B ran with sampling stopped
                     // A window restarts sampling, and sampling cannot stop inside it.
    c.resume().expect("resume");
    let refused = c.set_sampling(false).expect_err("stopped inside a window");
    assert!(refused.to_string().contains("window is open"), "{refused}");
    c.pause().expect("pause");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    // Each phase burned 0.5 s of CPU: A's samples alone are outside the
    // window, about half a second's worth; with B's they would be twice.
    let per_phase = report.frequency_hz as f64 * 0.5;
    let outside = report.samples_outside_windows as f64;
    assert!(
        (0.5 * per_phase..1.5 * per_phase).contains(&outside),
        "{outside} samples outside the window, {per_phase} expected for phase A alone"
    );
}

#[test]
fn switch_then_tell_keeps_samples_exact_and_counters_close() {
    // resume_then / pause_then tell the target before reading counters:
    // samples are still exactly the window's, and the task-clock misses or
    // adds only the moment between the switch and the read.
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut ch, mut c) = after_phase_a(dir.path(), WindowSwitch::Timestamps);
    let mut told = 0;
    c.resume_then(&mut || {
        told += 1;
    })
    .expect("resume");
    ch.go();
    ch.expect(b'b');
    c.pause_then(&mut || {
        told += 1;
    })
    .expect("pause");
    assert_eq!(told, 2);
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    assert_eq!(
        samples_of(&report, "spin_alpha", "burn"),
        0.0,
        "{}",
        top(&report, 8)
    );
    assert!(
        samples_of(&report, "spin_beta", "burn") >= 1000.0,
        "{}",
        top(&report, 8)
    );
    let w = &report.windows[0];
    assert!(
        (400_000_000..800_000_000).contains(&w.task_clock_ns),
        "{w:?}"
    );
}

#[test]
fn forked_children_and_threads_are_sampled_after_they_exit() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let report = profile_window(&exe, "fork", 0.5);
    eprintln!("{}", top(&report, 8));
    // The forked child exited before the window closed; its samples are
    // still symbolized from the mappings recorded while it ran.
    assert!(
        samples_of(&report, "spin_child", "burn") >= 1000.0,
        "{}",
        top(&report, 8)
    );
    assert!(
        samples_of(&report, "spin_thread", "burn") >= 1000.0,
        "{}",
        top(&report, 8)
    );
}

#[test]
fn several_windows_add_up() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let mut ch = Channel::new();
    let target = ch.target(&exe, "phases", 0.3);
    let mut c = start(&mut ch, &target);
    // Window 0 is empty (the target waits), window 1 holds phase B.
    c.resume().expect("resume");
    c.pause().expect("pause");
    ch.expect(b'a');
    c.resume().expect("resume");
    c.resume().expect("resume twice is a no-op");
    ch.go();
    ch.expect(b'b');
    c.pause().expect("pause");
    c.pause().expect("pause twice is a no-op");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    assert_eq!(report.windows.len(), 2);
    assert!(report.windows[0].samples < 5, "{:?}", report.windows[0]);
    assert!(report.windows[1].samples >= 500, "{:?}", report.windows[1]);
    assert_eq!(report.total.samples as f64, report.report.total());
    assert_eq!(report.total.index, 2);
}

#[test]
fn vdso_code_is_named() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let report = profile_window(&exe, "clock", 0.5);
    eprintln!("{}", top(&report, 8));
    let vdso: Vec<_> = report
        .report
        .rows
        .iter()
        .filter(|r| r.module == "[vdso]")
        .collect();
    let in_vdso: f64 = vdso.iter().map(|r| r.value).sum();
    assert!(in_vdso >= 200.0, "{}", top(&report, 8));
    let named: f64 = vdso
        .iter()
        .filter(|r| r.function.contains("clock_gettime"))
        .map(|r| r.value)
        .sum();
    assert!(named >= 0.9 * in_vdso, "{}", top(&report, 8));
    // The PLT stubs in front of .text are not `_init` (a size-less symbol
    // that ends where .plt begins).
    assert!(
        report.report.rows.iter().all(|r| r.function != "_init"),
        "{}",
        top(&report, 8)
    );
}
