//! The side effects on the calling process that the crate documents
//! ("Side effects on the calling process"): the soft open-file limit
//! raised as needed, and a child subreaper. Both are process-wide, so the
//! test runs alone in a fresh process of the test binary
//! (`lotus_testkit::alone`).

use std::time::{Duration, Instant};

use lotus_backend_perf::LinuxPerf;
use lotus_core::{CollectOptions, Collection, Target};

fn nofile() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim
}

fn is_subreaper() -> bool {
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes an int through the pointer.
    let r = unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut flag as *mut libc::c_int) };
    assert_eq!(r, 0);
    flag != 0
}

#[test]
fn starting_raises_a_low_open_file_limit_and_makes_a_subreaper() {
    lotus_testkit::alone::run("side_effects::raises_the_limit_alone", &[]);
}

#[test]
fn raises_the_limit_alone() {
    if !lotus_testkit::alone::started("side_effects::raises_the_limit_alone") {
        return;
    }
    assert!(!is_subreaper(), "the test binary starts as no subreaper");
    let before = nofile();
    let low = libc::rlimit {
        rlim_cur: 64,
        rlim_max: before.rlim_max,
    };
    // SAFETY: a valid rlimit, lowering the soft limit only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);

    let mut c = LinuxPerf::default()
        .start(&Target::new("/bin/true"), &CollectOptions::default())
        .expect("starts /bin/true");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "/bin/true did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    c.finish().expect("finishes");

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let after = nofile();
    assert!(
        after.rlim_cur >= (3 * cpus + 256).min(after.rlim_max),
        "soft limit {} after start with {cpus} CPUs",
        after.rlim_cur
    );
    assert_eq!(after.rlim_max, before.rlim_max, "the hard limit is kept");
    assert!(is_subreaper(), "the caller is a child subreaper");
}
