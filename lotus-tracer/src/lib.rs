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
        "lotus_trace/_ray.py",
        include_str!("../python/lotus_trace/_ray.py"),
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

/// The variable that names the trace folder (read by the start-up hook).
pub const ENV_TRACE_DIR: &str = "LOTUS_TRACE_DIR";

/// The variable that names the log files' prefix.
pub const ENV_TRACE_PREFIX: &str = "LOTUS_TRACE_PREFIX";

/// `0` turns the torch / torchvision hooks off.
pub const ENV_TRACE_TORCH: &str = "LOTUS_TRACE_TORCH";

/// `1` asks the tracer for Python frames in the samples' stacks: on
/// Python 3.12 and later it turns on CPython's perf trampolines
/// (`sys.activate_stack_trampoline("perf")`), whose map files
/// (`/tmp/perf-<pid>.map`, created by the tracer itself before CPython may
/// open them, and removed by lotus after the run: `perf_maps`) name them;
/// set with `--sample --stacks dwarf` (the unwinding that reaches them
/// through CPython's code).
pub const ENV_PY_FRAMES: &str = "LOTUS_PY_FRAMES";

/// The variable naming this run's id (each log's header carries it).
pub const ENV_TRACE_RUN: &str = "LOTUS_TRACE_RUN";

/// The variable naming the host's clock as the kernel keeps it when the
/// run began (`synced:<estimated error us>:<maximum error us>`, or
/// `unsynced:-:<maximum error us>`; `lotus_runner`'s `clock_state`): each
/// log's header carries it (`clock=`), so that the folders of one job's
/// hosts say how far their wall clocks can be trusted to agree.
pub const ENV_TRACE_CLOCK: &str = "LOTUS_TRACE_CLOCK";

/// The variable naming lotus's private folder where a process that could
/// not write its trace leaves `failed_pid_<pid>`.
pub const ENV_TRACE_STATUS: &str = "LOTUS_TRACE_STATUS";

/// The variable naming lotus itself, `<pid>:<start time>` (see
/// `reaper::start_time`): the tracer in every process of the job watches
/// it and ends its process (after writing what it buffered) when lotus is
/// gone, killed outright (`kill -9`, the OOM killer) before it could end
/// the job.
pub const ENV_TRACE_LOTUS: &str = "LOTUS_TRACE_LOTUS";

/// The variable naming the report pipe, `<fd>:<inode>`: a process of the
/// job that cannot write its trace writes one line, `<pid>\t<message>`,
/// to that descriptor (it inherited it), when the descriptor is that pipe
/// (the inode tells). It works where the status folder cannot: in a
/// process that dropped its privileges (`os.setuid`), which can no longer
/// create a file in lotus's private folder.
pub const ENV_TRACE_REPORT: &str = "LOTUS_TRACE_REPORT_FD";

/// The variable that tells the tracer and lotus's ITT collector what to do
/// with ITT tasks: `tasks` (a collector other than lotus's is loaded, e.g.
/// VTune's: the tracer marks each op as an ITT task for it) or `collect`
/// (lotus's collector is loaded: it writes the tasks it receives into the
/// trace folder).
pub const ENV_TRACE_ITT: &str = "LOTUS_TRACE_ITT";

/// The variable that passes `lotus trace run --op` to the tracer: one
/// `MODULE:QUALNAME` a line.
pub const ENV_TRACE_OPS: &str = "LOTUS_TRACE_OPS";

/// Every environment variable the Python side reads (the tracer, the `lotus`
/// module, the op harness), with who sets it: the one list of the
/// contract between the two sides, kept by a test that reads the Python
/// sources (a name used there and missing here, or listed and no longer
/// read, fails it).
pub const TRACER_ENV: &[(&str, &str)] = &[
    (ENV_TRACE_DIR, "lotus trace run"),
    (ENV_TRACE_PREFIX, "lotus trace run"),
    (ENV_TRACE_TORCH, "the user (0: no torch hooks)"),
    (ENV_PY_FRAMES, "lotus trace run --stacks dwarf"),
    (ENV_TRACE_RUN, "lotus trace run"),
    (ENV_TRACE_CLOCK, "lotus trace run"),
    (ENV_TRACE_STATUS, "lotus trace run"),
    (ENV_TRACE_LOTUS, "lotus trace run"),
    (ENV_TRACE_REPORT, "lotus trace run"),
    (ENV_TRACE_ITT, "lotus trace run"),
    (ENV_TRACE_OPS, "lotus trace run --op"),
    (ENV_LOADER, "lotus tune"),
    (ENV_STOP_AFTER, "lotus tune"),
    (ENV_GC, "the user"),
    ("LOTUS_TRACE_FORMAT", "lotus trace run --format"),
    (
        "LOTUS_TRACE_FINER",
        "the user (0: no spans finer than a dataset's)",
    ),
    (
        "LOTUS_TRACE_ROLE",
        "the tracer, for the processes a traced one starts",
    ),
    (
        "LOTUS_TRACE_PARENT",
        "the tracer, for the processes a traced one starts",
    ),
    (
        "LOTUS_TRACE_ITT_NOTED",
        "the tracer, once it noted a foreign ITT collector",
    ),
    (
        "LOTUS_BACKEND",
        "lotus map / profile (lotus_protocol::ENV_BACKEND)",
    ),
    (
        "LOTUS_CONTROL_FDS",
        "lotus map / profile (lotus_protocol::ENV_CONTROL_FDS)",
    ),
    (
        "LOTUS_CONTROL_LIB",
        "the user, or lotus map (the control library to load)",
    ),
    (
        "LOTUS_HARNESS_ONLY_OP",
        "lotus map's tests (the harness's protocol)",
    ),
];

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

    /// Every `LOTUS_*` name the Python sources use is in [`TRACER_ENV`],
    /// and every listed name is still used there.
    #[test]
    fn the_environment_contract_is_the_list() {
        let mut used = std::collections::BTreeSet::new();
        let sources = TRACER_FILES
            .iter()
            .map(|(_, s)| *s)
            .chain([LOTUS_PY, HARNESS_PY]);
        for text in sources {
            let b = text.as_bytes();
            let mut at = 0;
            while let Some(i) = text[at..].find("LOTUS_").map(|i| i + at) {
                let before = i.checked_sub(1).map(|j| b[j]);
                let end = text[i..]
                    .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .map_or(text.len(), |e| i + e);
                if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    used.insert(&text[i..end]);
                }
                at = end.max(i + 1);
            }
        }
        let listed: std::collections::BTreeSet<&str> = TRACER_ENV.iter().map(|(n, _)| *n).collect();
        assert_eq!(used, listed);
    }
}
