//! Profiles a child process through the perf backend, opens one window
//! around part of its work, and prints the functions that ran in it.
//!
//! ```text
//! cargo run -p lotus-backend-perf --example top_functions -- PROGRAM [ARGS...]
//! ```
//!
//! The window opens `LOTUS_EXAMPLE_SKIP_MS` (default 100) after the
//! program starts and closes `LOTUS_EXAMPLE_WINDOW_MS` (default 1000)
//! later; the program is then given 5 s to end on its own and killed
//! otherwise. Output: one line for the window (samples, CPU time), then up
//! to ten lines `samples  share  function  (module)`, most samples first.

use std::process::ExitCode;
use std::time::Duration;

use lotus_backend_perf::LinuxPerf;
use lotus_core::{CollectOptions, Collection, Target};

fn millis_from_env(name: &str, default: u64) -> Result<Duration, String> {
    match std::env::var(name) {
        Err(_) => Ok(Duration::from_millis(default)),
        Ok(v) => v
            .parse()
            .map(Duration::from_millis)
            .map_err(|_| format!("{name}={v:?} is not a whole number of milliseconds")),
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let program = args
        .next()
        .ok_or("usage: top_functions PROGRAM [ARGS...]: give the program to profile")?;
    let skip = millis_from_env("LOTUS_EXAMPLE_SKIP_MS", 100)?;
    let window = millis_from_env("LOTUS_EXAMPLE_WINDOW_MS", 1000)?;

    let mut target = Target::new(program).with_args(args);
    // The profiled program's prints go to our stderr; stdout is the table.
    target.stdout_to_stderr = true;
    let mut collection = LinuxPerf::default().start(&target, &CollectOptions::default())?;

    std::thread::sleep(skip);
    collection.resume()?;
    std::thread::sleep(window);
    collection.pause()?;

    if collection.wait_timeout(Duration::from_secs(5))?.is_none() {
        collection.kill()?;
    }

    let figures = collection.finish()?;
    let w = &figures.total;
    println!(
        "window: {} samples at {} Hz, {:.3} s CPU (task-clock) in {:.3} s",
        w.samples,
        figures.frequency_hz,
        w.task_clock_ns as f64 / 1e9,
        w.duration.as_secs_f64()
    );
    let total = figures.report.total();
    let mut rows = figures.report.rows;
    rows.sort_by(|a, b| b.value.total_cmp(&a.value));
    for row in rows.iter().take(10) {
        println!(
            "{:>8} {:>6.1}%  {}  ({})",
            row.value,
            100.0 * row.value / total.max(1.0),
            row.function,
            row.module
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("top_functions: {e}");
            ExitCode::FAILURE
        }
    }
}
