//! The uProf backend's integration tests, one binary: against the
//! stand-in `AMDuProfCLI` and control libraries (`collect`), and the CSV
//! reader's properties (`prop_report`).

mod collect;
mod prop_report;
