//! Process handling, counters and the probe, on real processes.

use std::time::{Duration, Instant};

use crate::common::*;
use lotus_backend_perf::{CounterKind, LinuxPerf};
use lotus_core::{CollectOptions, Collection, Error as CoreError, Profiler, Target};
use perf_event::events::Hardware;
use perf_event::Builder;

/// Whether this machine can count cycles, asked of the kernel directly.
fn cycles_work_here() -> bool {
    Builder::new(Hardware::CPU_CYCLES)
        .observe_self()
        .any_cpu()
        .exclude_kernel(true)
        .build()
        .is_ok()
}

#[test]
fn hardware_counters_are_reported_as_the_kernel_allows() {
    let _serial = serial();
    let hw = cycles_work_here();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let mut ch = Channel::new();
    let target = ch.target(&exe, "both", 0.3);
    let mut c = start(&mut ch, &target);
    let status = c.counter_status();
    let cycles = status
        .iter()
        .find(|s| s.kind == CounterKind::Cycles)
        .expect("cycles");
    assert_eq!(cycles.available, hw, "{cycles:?}");
    assert_eq!(cycles.reason.is_none(), hw, "{cycles:?}");
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");

    // The trait's form: measured counters, and unsupported ones with why.
    let core = c.windows();
    assert_eq!(core.len(), 1);
    assert_eq!(core[0].counters.contains_key("cycles"), hw, "{core:?}");
    assert_eq!(core[0].unsupported.contains_key("cycles"), !hw, "{core:?}");
    assert_eq!(
        core[0].unsupported.contains_key("instructions"),
        !hw,
        "{core:?}"
    );
    assert!(core[0].counters["task-clock-ns"] > 1e8, "{core:?}");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    let w = &report.windows[0];
    assert_eq!(w.cycles.is_some(), hw, "{w:?}");
    assert_eq!(w.instructions.is_some(), hw, "{w:?}");
    if let Some(cycles) = w.cycles {
        assert!(cycles > 0);
    }
    assert!(w.page_faults.is_some());
    // 0.3 s of burning at least.
    assert!(w.task_clock_ns > 250_000_000, "{w:?}");
    assert_eq!(
        report.notes.iter().any(|n| n.starts_with("cycles:")),
        !hw,
        "{:?}",
        report.notes
    );
}

#[test]
fn probe_opens_events_and_says_whether_there_is_a_pmu() {
    let p = LinuxPerf::default().probe();
    assert!(p.available, "{p:?}");
    assert!(p
        .version
        .as_deref()
        .is_some_and(|v| v.starts_with("Linux ")));
    let hw_note = p
        .notes
        .iter()
        .find(|n| n.starts_with("hardware counters:"))
        .expect("hardware note");
    assert_eq!(
        hw_note.contains("not supported"),
        !cycles_work_here(),
        "{hw_note}"
    );
}

#[test]
fn kill_stops_the_whole_group_and_leaves_no_zombies() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let mut ch = Channel::new();
    let target = ch.target(&exe, "sleepers", 0.0);
    let mut c = start(&mut ch, &target);
    ch.expect(b'r');
    let pgid = c.pid() as libc::pid_t;
    // The target leads its own group, with its two children in it.
    // SAFETY: getpgid on a pid.
    assert_eq!(unsafe { libc::getpgid(pgid) }, pgid);
    let t0 = Instant::now();
    c.kill().expect("kill");
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(c.try_wait().expect("try_wait").is_some());
    // Nothing is left in the group, not even a zombie.
    // SAFETY: signal 0 only checks.
    let r = unsafe { libc::kill(-pgid, 0) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ESRCH)
    );
    let report = c.finish().expect("finish after kill");
    assert!(report.exit_status.is_none());
}

#[test]
fn a_missing_program_is_a_spawn_error() {
    let target = Target::new("/nonexistent/lotus-test-program");
    match LinuxPerf::default().collect(&target, &CollectOptions::default()) {
        Err(CoreError::Spawn { program, source }) => {
            assert!(program.contains("lotus-test-program"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        Err(e) => panic!("expected a spawn error, got {e}"),
        Ok(_) => panic!("a missing program started"),
    }
}

#[test]
fn a_bad_inherited_descriptor_is_a_spawn_error() {
    let mut target = Target::new("/bin/true");
    target.keep_fds = vec![987_654];
    match LinuxPerf::default().collect(&target, &CollectOptions::default()) {
        Err(CoreError::Spawn { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EBADF), "{source}");
        }
        Err(e) => panic!("expected a spawn error, got {e}"),
        Ok(_) => panic!("started with a bad descriptor"),
    }
}

#[test]
fn dropping_a_collection_kills_the_target() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let mut ch = Channel::new();
    let target = ch.target(&exe, "sleepers", 0.0);
    let c = start(&mut ch, &target);
    ch.expect(b'r');
    let pgid = c.pid() as libc::pid_t;
    drop(c);
    // SAFETY: signal 0 only checks.
    assert_eq!(unsafe { libc::kill(-pgid, 0) }, -1);
}

#[test]
fn report_through_the_trait_object() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = build_burn(dir.path());
    let mut ch = Channel::new();
    let target = ch.target(&exe, "both", 0.3);
    let mut c = LinuxPerf::default()
        .collect(&target, &CollectOptions::default())
        .expect("collect");
    ch.spawned();
    ch.expect(b'r');
    c.resume().expect("resume");
    ch.go();
    ch.expect(b'd');
    c.pause().expect("pause");
    ch.go();
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = c.report().expect("report");
    assert_eq!(report.unit, lotus_core::Unit::Samples);
    let names: Vec<&str> = report
        .rows
        .iter()
        .take(2)
        .map(|r| r.function.as_str())
        .collect();
    assert!(
        names.contains(&"spin_alpha") && names.contains(&"spin_beta"),
        "{names:?}"
    );
}
