//! The end-to-end tests of lotus: the `lotus` binary (and its control
//! library, the Python tracer and harness) run as users run them. One test
//! binary, one module per subject; `common` holds the helpers they share,
//! `snapshots/` the outputs users see (insta: `cargo insta review`, or
//! `INSTA_UPDATE=always`, after a deliberate change).
//!
//! Run one module or test: `cargo test -p lotus-cli --test e2e -- report::`.
//! The tests run in parallel threads of this one process: a test that
//! changes what is process-wide runs alone in a fresh process
//! (`lotus_testkit::alone`).

mod common;

/// The op harness's arguments and result file, as `lotus map` writes and
/// reads them: public in lotus-map only with its `harness-protocol`
/// feature, which these tests turn on (not its stable API).
use lotus_map::harness as map_harness;

mod architecture;
mod attribute;
mod attribute_hooks;
mod attribute_live;
mod attribute_nested;
mod attribute_torch;
mod bad_input;
mod cli_basics;
mod cli_conventions;
mod compare;
mod control_lib;
mod docs;
mod export_pprof;
mod faults_process;
mod firefox;
mod harness;
mod hostile_text;
mod installed_binary;
mod itt;
mod itt_tasks;
mod library_consumer;
mod map_from_reports;
mod map_from_trace;
mod map_live;
mod map_memory;
mod map_scripts;
mod map_torch;
mod native_ops;
mod one_writer;
mod outputs;
mod perf_notes;
mod predict;
mod predict_fixtures;
mod read_once;
mod received_folder;
mod report;
mod report_page;
mod sampling_bounds;
mod security;
mod stacks;
mod stress_faults;
mod study_scripts;
mod table_names;
mod tables_fit;
mod trace_attach;
mod trace_counters;
mod trace_grammar;
mod trace_hosts;
mod trace_insitu;
mod trace_interop;
mod trace_pipelines;
mod trace_predict_inputs;
mod trace_python;
mod trace_ray;
mod trace_run_faults;
mod trace_run_killed;
mod trace_startup;
mod trace_study;
mod trace_top;
mod trace_torch;
mod trace_view;
mod tracer_bounds;
mod uprof_control;
mod verdict;
mod wheel;
