//! A Python target whose worker process runs native code and exits before
//! the report: the case lotus exists for.

use std::path::Path;
use std::process::Command;

use crate::common::*;

#[test]
fn python_worker_native_code_is_found_after_the_worker_exits() {
    python_worker("fork");
}

/// A `spawn` worker is a new interpreter (fork, then exec): its mappings
/// are the ones recorded after its exec.
#[test]
fn python_spawned_worker_is_found_too() {
    python_worker("spawn");
}

fn python_worker(method: &str) {
    let _serial = serial();
    let Ok(python) = which_python() else {
        eprintln!("python3 not found; skipped");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/worker.py");
    let mut ch = Channel::new();
    let mut target = ch.target(&python, "", 0.0);
    // python3 worker.py OUT IN SECS
    let (out, inp) = (target.args[0].clone(), target.args[1].clone());
    target.args = vec![
        script.into_os_string(),
        out,
        inp,
        "1.0".into(),
        method.into(),
    ];
    let mut c = start(&mut ch, &target);
    ch.expect(b'r');
    lotus_core::Collection::resume(&mut c).expect("resume");
    ch.go();
    ch.expect(b'd');
    lotus_core::Collection::pause(&mut c).expect("pause");
    ch.go();
    wait_exit(&mut c);
    let report = c.finish().expect("finish");
    eprintln!("{:?}\n{}", report.symbolize, top(&report, 15));
    let zlib: f64 = report
        .report
        .rows
        .iter()
        .filter(|r| r.module.starts_with("libz.so"))
        .map(|r| r.value)
        .sum();
    // The worker spent its second compressing.
    assert!(zlib >= 0.5 * report.report.total(), "{}", top(&report, 15));
    assert!(report.report.total() >= 2000.0, "{}", top(&report, 15));
    // Rows in libz are functions (named or func@), grouped per function,
    // not per address. A stray sample in code no symbol or unwind entry
    // covers (the `.init` section runs when the spawned worker loads libz)
    // is `[unknown]`, and rare.
    let libz_rows: Vec<_> = report
        .report
        .rows
        .iter()
        .filter(|r| r.module.starts_with("libz.so"))
        .collect();
    let unknown: f64 = libz_rows
        .iter()
        .filter(|r| r.function == "[unknown]")
        .map(|r| r.value)
        .sum();
    assert!(
        unknown <= 0.01 * zlib,
        "{:?}\n{:#?}",
        report.notes,
        libz_rows
    );
    assert!(libz_rows.len() < 30, "{}", top(&report, 40));
}

fn which_python() -> Result<std::path::PathBuf, ()> {
    let out = Command::new("sh")
        .args(["-c", "command -v python3"])
        .output()
        .map_err(|_| ())?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && !path.is_empty() {
        Ok(path.into())
    } else {
        Err(())
    }
}
