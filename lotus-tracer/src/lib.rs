//! The tracer's home: the Python side of lotus as source strings.
//!
//! One folder holds every Python file lotus runs (`python/`, beside this
//! crate's `src/`): the `lotus` binary writes them from these
//! constants into a temp folder per run, and the `lotus-profiler` wheel
//! (`pyproject.toml` at the workspace root, maturin) installs from it
//! the packages `lotus` and `lotus_trace`. A crate of its own because
//! two crates embed the files (`lotus-cli`: the tracer; `lotus-map`: the
//! harness and `lotus.py`) and a packaged crate cannot `include_str!` a
//! file outside its own folder: each would need a copy, and the copies
//! would drift.
#![doc = include_str!("../README.md")]

/// The tracer package's files (`lotus_trace`), each as (path relative to
/// the folder put on `PYTHONPATH`, source). The start-up hook is
/// `lotus_trace/_boot/sitecustomize.py`.
pub const TRACER_FILES: &[(&str, &str)] = &[
    (
        "lotus_trace/__init__.py",
        include_str!("../python/lotus_trace/__init__.py"),
    ),
    (
        "lotus_trace/_core.py",
        include_str!("../python/lotus_trace/_core.py"),
    ),
    (
        "lotus_trace/_itt.py",
        include_str!("../python/lotus_trace/_itt.py"),
    ),
    (
        "lotus_trace/_torch.py",
        include_str!("../python/lotus_trace/_torch.py"),
    ),
    (
        "lotus_trace/_albumentations.py",
        include_str!("../python/lotus_trace/_albumentations.py"),
    ),
    (
        "lotus_trace/_libraries.py",
        include_str!("../python/lotus_trace/_libraries.py"),
    ),
    (
        "lotus_trace/_finer.py",
        include_str!("../python/lotus_trace/_finer.py"),
    ),
    (
        "lotus_trace/_loader.py",
        include_str!("../python/lotus_trace/_loader.py"),
    ),
    (
        "lotus_trace/_frames.py",
        include_str!("../python/lotus_trace/_frames.py"),
    ),
    (
        "lotus_trace/_ops.py",
        include_str!("../python/lotus_trace/_ops.py"),
    ),
    (
        "lotus_trace/_boot/sitecustomize.py",
        include_str!("../python/lotus_trace/_boot/sitecustomize.py"),
    ),
];

/// The variable the tracer reads the DataLoader settings to apply from
/// (`workers=N,prefetch=N,persistent=0|1,pin=0|1`, any of them; what
/// `lotus tune` sets): `lotus_trace/_loader.py`.
pub const ENV_LOADER: &str = "LOTUS_LOADER";

/// The variable naming the number of batches after which the tracer ends
/// the job (its workers shut down, its logs ended, exit status 0):
/// `lotus_trace/_loader.py`.
pub const ENV_STOP_AFTER: &str = "LOTUS_STOP_AFTER";

/// The variable that turns the tracer's `gc` spans on (`1`): each
/// collection of the oldest generation, and each younger one of 1 ms or
/// more, an op span (`lotus_trace/_core.py`). Off by default: the
/// callback slows some jobs' workers.
pub const ENV_GC: &str = "LOTUS_TRACE_GC";

/// The `lotus` Python module's source (`python/lotus/__init__.py`, a
/// package so that the wheel installs it; lotus writes it as `lotus.py`):
/// measurement windows from Python, no-ops outside a lotus run.
pub const LOTUS_PY: &str = include_str!("../python/lotus/__init__.py");

/// The op harness's source (`python/lotus_harness.py`; not in the wheel:
/// only lotus runs it), which a live
/// mapping runs each op file under.
pub const HARNESS_PY: &str = include_str!("../python/lotus_harness.py");

#[cfg(test)]
mod tests {
    use super::*;

    /// `LOTUS_TRACE_GC` is the one `_core.py` reads.
    #[test]
    fn the_tracer_reads_its_gc_switch() {
        let (_, core) = TRACER_FILES
            .iter()
            .find(|(p, _)| *p == "lotus_trace/_core.py")
            .expect("_core.py embedded");
        assert!(core.contains(&format!("os.environ.get(\"{ENV_GC}\")")));
    }

    /// The variables named here are the ones the tracer reads.
    #[test]
    fn the_tracer_reads_the_variables_named_here() {
        let (_, loader) = TRACER_FILES
            .iter()
            .find(|(p, _)| *p == "lotus_trace/_loader.py")
            .expect("_loader.py embedded");
        for name in [ENV_LOADER, ENV_STOP_AFTER] {
            assert!(
                loader.contains(&format!("os.environ.get(\"{name}\"")),
                "_loader.py reads {name}"
            );
        }
    }

    /// Every `.py` file of `python/lotus_trace` is embedded: a file added
    /// to the folder (and so to the wheel) but not to [`TRACER_FILES`]
    /// would be missing from `lotus trace run`.
    #[test]
    fn every_tracer_file_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let mut on_disk = Vec::new();
        let mut stack = vec![root.join("lotus_trace")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read python/") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "py") {
                    let rel = path.strip_prefix(&root).expect("under python/");
                    on_disk.push(rel.to_string_lossy().into_owned());
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = TRACER_FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }
}
