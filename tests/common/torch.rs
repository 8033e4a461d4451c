//! Torch for the tests that need it: whether the tests' Python can import
//! torch and torchvision, and what a test does when it cannot.
//!
//! With `LOTUS_REQUIRE_TORCH=1` (scripts/test.sh, so CI) a missing torch
//! fails the test. Without it the test is skipped, and says so by name
//! twice, on the test binary's real standard error (libtest captures only
//! `print!`/`eprint!`, so these lines show in `cargo test`'s output even
//! for a test that "passed"): once as it skips (`skipped: <test>: ...`),
//! and once in a closing line written when the binary exits, after
//! libtest's own result line: `skipped: N torch test(s), torch not
//! importable by PY: a, b`. libtest has no run-time skip, so a skipped
//! test still counts as passed in libtest's count; the closing line is what
//! keeps it from passing silently.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, Once, OnceLock};

use super::root;

static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();
static HAS_TORCH: OnceLock<(PathBuf, bool)> = OnceLock::new();

/// The Python of the torch tests: `$LOTUS_PYTHON`, else the repo's `.venv`.
fn torch_python_path() -> PathBuf {
    std::env::var_os("LOTUS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"))
}

fn importable(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import torch, torchvision, PIL"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Whether torch must be there (`LOTUS_REQUIRE_TORCH=1`).
pub fn torch_required() -> bool {
    std::env::var_os("LOTUS_REQUIRE_TORCH").is_some_and(|v| v == "1")
}

extern "C" fn print_skipped() {
    let names = match SKIPPED.lock() {
        Ok(n) => n.clone(),
        Err(p) => p.into_inner().clone(),
    };
    if names.is_empty() {
        return;
    }
    let py = HAS_TORCH
        .get()
        .map_or_else(String::new, |(p, _)| p.display().to_string());
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {} torch test(s), torch not importable by {py}: {} (run `bash scripts/setup.sh --torch`; LOTUS_REQUIRE_TORCH=1 makes this a failure)",
        names.len(),
        names.join(", ")
    );
}

/// The Python to run `test` with, when it can import torch and
/// torchvision; `None` when it cannot and torch is not required (the test
/// then returns at once: it is skipped, and said so by name). Panics when
/// torch is required and missing.
pub fn torch_python(test: &str) -> Option<PathBuf> {
    let (py, ok) = HAS_TORCH.get_or_init(|| {
        let py = torch_python_path();
        let ok = importable(&py);
        (py, ok)
    });
    if *ok {
        return Some(py.clone());
    }
    assert!(
        !torch_required(),
        "{test}: LOTUS_REQUIRE_TORCH=1 but {} cannot import torch and torchvision: run `bash scripts/setup.sh --torch` (or set LOTUS_PYTHON to a Python that has them)",
        py.display()
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test}: torch not importable by {}",
        py.display()
    );
    match SKIPPED.lock() {
        Ok(mut n) => n.push(test.to_string()),
        Err(p) => p.into_inner().push(test.to_string()),
    }
    AT_EXIT.call_once(|| {
        // SAFETY: print_skipped is an `extern "C" fn()` that does not
        // unwind (it only formats and writes, ignoring errors).
        unsafe {
            libc::atexit(print_skipped);
        }
    });
    None
}

/// The arguments of `attribute_torch`'s pipeline (also the verdict's and
/// the tables' tests): `fixtures/trace/torch_pipeline.py`, an ImageFolder
/// of JPEGs made in `data` (sizes 200 to 500), two workers, 16 batches of
/// 8 per epoch, `epochs` epochs; each test adds its own options after.
pub fn jpeg_pipeline_args(data: &Path, epochs: u32) -> Vec<std::ffi::OsString> {
    let mut args = vec![super::fixture("trace/torch_pipeline.py").into_os_string()];
    args.push("--data".into());
    args.push(data.as_os_str().to_owned());
    for a in [
        "--dataset",
        "jpeg",
        "--image-size",
        "200",
        "500",
        "--workers",
        "2",
        "--batches",
        "16",
        "--batch-size",
        "8",
        "--epochs",
    ] {
        args.push(a.into());
    }
    args.push(epochs.to_string().into());
    args
}
