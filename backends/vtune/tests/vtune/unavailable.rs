//! Without `vtune` (not on PATH, no `VTUNE_PROFILER_DIR`), the backend says
//! it is unavailable, why and what to do, and `collect` fails the same way;
//! `plan` still prints the commands, naming `vtune` bare.
//!
//! It empties PATH for the whole process, so it runs alone in a fresh
//! process of the test binary (`lotus_testkit::alone`).
#![allow(clippy::unwrap_used)]

use lotus_backend_vtune::VTune;
use lotus_core::{CollectOptions, Error as CoreError, Profiler, Target};

#[test]
fn without_vtune_collect_is_unavailable_and_plan_still_prints() {
    lotus_testkit::alone::run("unavailable::without_vtune_alone", &[]);
}

#[test]
fn without_vtune_alone() {
    if !lotus_testkit::alone::started("unavailable::without_vtune_alone") {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    std::env::set_var("PATH", empty.path());
    std::env::remove_var("VTUNE_PROFILER_DIR");

    let probe = VTune.probe();
    assert!(!probe.available);
    let reason = probe.reason.unwrap();
    assert!(reason.contains("not on PATH"), "{reason}");
    assert!(reason.contains("VTUNE_PROFILER_DIR"), "{reason}");
    assert!(reason.contains("vars.sh"), "{reason}");

    let target = Target::new("/bin/true");
    match VTune.collect(&target, &CollectOptions::default()) {
        Err(CoreError::Unavailable { backend, reason }) => {
            assert_eq!(backend, "vtune");
            assert!(reason.contains("install Intel VTune Profiler"), "{reason}");
        }
        Err(e) => panic!("expected Unavailable, got {e:?}"),
        Ok(_) => panic!("expected Unavailable, got a collection"),
    }

    let plan = VTune.plan(&target, &CollectOptions::default());
    assert!(plan.commands[0].starts_with("vtune -collect hotspots -start-paused -result-dir "));
    assert!(plan.commands[0].ends_with(" -- /bin/true"), "{plan:?}");
    assert!(plan.commands[1].starts_with("vtune -report hotspots -result-dir "));
    assert!(
        plan.notes.iter().any(|n| n.contains("vtune was not found")),
        "{plan:?}"
    );

    // VTUNE_PROFILER_DIR pointing at an install is found there.
    let install = tempfile::tempdir().unwrap();
    let bin64 = install.path().join("bin64");
    std::fs::create_dir(&bin64).unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/standin_vtune.sh"),
        bin64.join("vtune"),
    )
    .unwrap();
    std::env::set_var("PATH", "/usr/bin:/bin");
    std::env::set_var("VTUNE_PROFILER_DIR", install.path());
    let probe = VTune.probe();
    assert!(probe.available, "{probe:?}");
    let plan = VTune.plan(&target, &CollectOptions::default());
    assert!(
        plan.commands[0].starts_with(&bin64.join("vtune").display().to_string()),
        "{plan:?}"
    );
}
