//! Helpers the workspace's tests share, compiled once for every test
//! binary that names them (a `publish = false` dev-dependency, in place of
//! `#[path]` includes of one crate's test files in another's tests):
//!
//! - [`fuzz`]: the driver of the readers' property tests (lotus-trace,
//!   lotus-attribute, the VTune and uProf backends);
//! - [`alone`]: a test that changes what is process-wide, run alone in
//!   a fresh process of its binary;
//! - [`cargo_artifact`]: the executable cargo built, from its JSON
//!   messages (the end-to-end tests and the perf backend's);
//! - [`uprof_standin`]: stand-ins for AMD uProf (the uProf backend's tests
//!   and the end-to-end ones);
//! - [`sampled`]: synthetic sampled trace folders (the in-pipeline
//!   attribution's tests, the CLI's and the end-to-end ones).
#![allow(clippy::unwrap_used)]

pub mod alone;
pub mod cargo_artifact;
pub mod fuzz;
pub mod sampled;
pub mod uprof_standin;
