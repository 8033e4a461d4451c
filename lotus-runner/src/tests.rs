//! Unit tests of the runner.

use std::ffi::OsStr;
use std::path::PathBuf;

use crate::check_prefix;
use crate::logs::{is_itt_log_of, is_log_of};
use crate::tracer::{write_tracer, TRACER_FILES};

#[test]
fn log_names() {
    assert!(is_log_of("lotus_main_pid_12", "lotus"));
    assert!(is_log_of("lotus_worker_pid_7", "lotus"));
    assert!(!is_log_of("lotus_worker_pid_", "lotus"));
    assert!(!is_log_of("lotus_worker_pid_7.json", "lotus"));
    assert!(!is_log_of("other_main_pid_12", "lotus"));
    assert!(!is_log_of("lotusx_main_pid_12", "lotus"));
    assert!(is_log_of("lotus.3_main_pid_12", "lotus"));
    assert!(is_log_of("lotus.10_worker_pid_12", "lotus"));
    assert!(!is_log_of("lotus._main_pid_12", "lotus"));
    assert!(!is_log_of("lotus.x_main_pid_12", "lotus"));
}

#[test]
fn itt_log_names() {
    assert!(is_itt_log_of("lotus.itt_main_pid_12", "lotus"));
    assert!(is_itt_log_of("lotus.itt3_worker_pid_12", "lotus"));
    assert!(!is_itt_log_of("lotus.itt_main_pid_", "lotus"));
    assert!(!is_itt_log_of("lotus_main_pid_12", "lotus"));
    assert!(!is_itt_log_of("lotus.ittx_main_pid_12", "lotus"));
    assert!(!is_itt_log_of("other.itt_main_pid_12", "lotus"));
    assert!(!is_log_of("lotus.itt_main_pid_12", "lotus"));
}

#[test]
fn prefixes() {
    assert!(check_prefix("lotus").is_ok());
    assert!(check_prefix("run-1.a_b").is_ok());
    for bad in ["", "a/b", "a b", "..\u{0}"] {
        assert!(check_prefix(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_tracer_is_written_and_put_first() {
    let files = write_tracer().expect("write");
    for (rel, text) in TRACER_FILES {
        let got = std::fs::read_to_string(files.dir.path().join(rel)).expect("read");
        assert_eq!(&got, text);
    }
    assert!(files.boot.join("sitecustomize.py").is_file());
    let pp = files.pythonpath(Some(OsStr::new("/a:/b")));
    let parts: Vec<PathBuf> = std::env::split_paths(&pp).collect();
    assert_eq!(
        parts,
        [
            files.boot.clone(),
            files.dir.path().to_path_buf(),
            "/a".into(),
            "/b".into()
        ]
    );
    let alone: Vec<PathBuf> = std::env::split_paths(&files.pythonpath(None)).collect();
    assert_eq!(alone.len(), 2);
}
