//! Maps Python op files live through the perf backend with the lotus-map
//! library, as `lotus map --backend perf` does, and prints the mapping as
//! `lotus.mapping/1` JSON.
//!
//! ```text
//! cargo build -p lotus-cli      # builds liblotus_control.so into target/debug
//! cargo run -p lotus-map --example map_op -- fixtures/ops/RandomHorizontalFlip.py
//! ```
//!
//! The Python interpreter is `$LOTUS_PYTHON` (else `/usr/bin/python3`), the
//! control library `$LOTUS_CONTROL_LIB` (else `liblotus_control.so` in the
//! cargo profile folder above this example's binary). `LOTUS_EXAMPLE_RUNS`
//! (default 3) and `LOTUS_EXAMPLE_MIN_SAMPLES` (default 3000) set the runs
//! per op and the samples each window should hold. Progress goes to
//! stderr, the mapping to stdout; ops that failed are listed in it and
//! make the exit status 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

// Naming the backend crate keeps its registration in the binary.
use lotus_backend_perf as _;
use lotus_map::harness::CONTROL_LIBRARY;
use lotus_map::live::{map_live, LiveOptions};
use lotus_map::output::{render, Format, NameWidth};
use lotus_map::progress::{MessageKind, Progress};

/// Progress as lines on stderr.
struct Lines;

impl Progress for Lines {
    fn run_done(&mut self, line: &str) {
        eprintln!("map_op: {line}");
    }

    fn message(&mut self, kind: MessageKind, text: &str) {
        eprintln!("map_op: {kind:?}: {text}");
    }
}

fn number_from_env(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a whole number")),
    }
}

/// `$LOTUS_CONTROL_LIB`, else the library cargo built into the profile
/// folder this example runs from (`target/debug/examples/map_op`).
fn control_library() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("LOTUS_CONTROL_LIB") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    exe.parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join(CONTROL_LIBRARY))
        .filter(|lib| lib.is_file())
        .ok_or_else(|| {
            format!(
                "no {CONTROL_LIBRARY} beside this build: run `cargo build -p lotus-cli` first, or set LOTUS_CONTROL_LIB"
            )
        })
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let ops: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if ops.is_empty() {
        return Err("usage: map_op OP_FILE...: give the Python op files to map".into());
    }
    let python = std::env::var_os("LOTUS_PYTHON")
        .map_or_else(|| PathBuf::from("/usr/bin/python3"), PathBuf::from);
    let runs = u32::try_from(number_from_env("LOTUS_EXAMPLE_RUNS", 3)?)?;
    let min_samples = number_from_env("LOTUS_EXAMPLE_MIN_SAMPLES", 3000)?;
    let opts = LiveOptions::new(python, control_library()?)
        .with_runs(runs)
        .with_min_samples(min_samples);

    let perf = lotus_core::backend("perf")?;
    let outcome = map_live(
        perf.as_ref(),
        &ops,
        &opts,
        &mut Lines,
        &AtomicBool::new(false),
    )?;
    let failed = !outcome.failures.is_empty();
    let mapping = outcome.into_mapping();
    print!("{}", render(&mapping, Format::Json, 0, NameWidth::Full)?);
    Ok(!failed)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("map_op: error: {e}");
            ExitCode::FAILURE
        }
    }
}
