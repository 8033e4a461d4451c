//! The perf backend's integration tests, one binary (the C targets and
//! pipes they share are in `common`; `serial()` keeps the tests that
//! sample from running at once).

mod common;

mod attach;

mod example_top_functions;
mod hostile_files;
mod kernel;
mod process;
mod python;
mod sampling;
mod short_threads;
mod side_effects;
mod stripped;
mod symbols;
mod window_bench;
