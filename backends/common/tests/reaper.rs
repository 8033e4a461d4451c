//! The reaper kills every descendant of the test process, so it runs in a
//! test binary of its own (other tests' children would be killed too).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lotus_backend_common::reaper::{descendants, kill_descendants, Reaper};

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
