//! The VTune backend's integration tests, one binary: against a stand-in
//! `vtune` (`collect`), the CSV reader's properties (`prop_hotspots`), and
//! without VTune (`unavailable`, alone in its own process).

mod collect;
mod prop_hotspots;
mod unavailable;
