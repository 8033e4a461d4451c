//! The reaper kills every descendant of the test process, so it runs in a
//! test binary of its own (other tests' children would be killed too).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lotus_sys::process::{descendants, end_descendants, kill_descendants, Reaper};

/// The tests of this binary take turns: each ends every descendant of the
/// process, the other's too.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_pid(path: &Path) -> u32 {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no daemon");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::read_to_string(path)
        .expect("pid")
        .trim()
        .parse()
        .expect("number")
}

#[test]
fn a_setsid_daemon_of_a_child_is_found_killed_and_reaped() {
    let _turn = one_at_a_time();
    let reaper = Reaper::new(Duration::from_secs(5));
    let dir = tempfile::tempdir().expect("tmp");
    let spawn_daemon = |name: &str| {
        let pidfile = dir.path().join(name);
        // The child starts a daemon in a session of its own, then exits:
        // the daemon is orphaned and left its process group.
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "setsid sh -c 'echo $$ > {p}.part && mv {p}.part {p} && exec sleep 300' &",
                p = pidfile.display()
            ))
            .status()
            .expect("sh");
        assert!(status.success());
        read_pid(&pidfile)
    };
    let daemon = spawn_daemon("one");
    assert!(descendants().contains(&daemon), "orphans come to us");
    assert!(kill_descendants(Duration::from_secs(5)) >= 1);
    assert!(!descendants().contains(&daemon));
    // Reaped, not left a zombie.
    assert!(!Path::new(&format!("/proc/{daemon}")).exists());

    // The guard does the same when dropped.
    let daemon = spawn_daemon("two");
    drop(reaper);
    assert!(!Path::new(&format!("/proc/{daemon}")).exists());
}

/// `end_descendants` asks first (SIGTERM, which a worker can catch to
/// write out its last events) and reaches grandchildren: each comes to us
/// when its parent is ended.
#[test]
fn orphans_and_their_children_are_asked_to_end_then_reaped() {
    let _turn = one_at_a_time();
    let _reaper = Reaper::new(Duration::from_secs(5));
    let dir = tempfile::tempdir().expect("tmp");
    let started = dir.path().join("started");
    let termed = dir.path().join("termed");
    // A shell that leaves an orphan shell, which traps SIGTERM (saying so)
    // and has a child of its own (a grandchild of ours), then exits. The
    // orphan loops on short sleeps, so its trap runs within a fraction of a
    // second of the signal, whichever of its processes is signalled first.
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sh -c 'trap \"touch {t}; exit 0\" TERM; sleep 300 & touch {s}; while :; do sleep 0.1; done' & exit 0",
            t = termed.display(),
            s = started.display()
        ))
        .status()
        .expect("sh");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while (descendants().len() < 2 || !started.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        descendants().len() >= 2,
        "the orphan and its child came to us"
    );
    // A generous grace: on a busy machine the trap may take a while to run.
    let ended = end_descendants(Duration::from_secs(10), Duration::from_secs(20));
    assert!(ended >= 2, "ended {ended}");
    assert!(descendants().is_empty());
    assert!(termed.exists(), "the orphan got SIGTERM before SIGKILL");
}
