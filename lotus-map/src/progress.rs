//! How a live mapping tells its caller what it is doing. The engine prints
//! nothing: the `lotus` binary draws a progress bar (or prints lines), a
//! tool linking the library does what it likes, or nothing
//! ([`NoProgress`]).

/// What kind of message [`Progress::message`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageKind {
    /// An op failed (the others are still mapped).
    Error,
    /// Something the user should look at (few samples, a thread pool
    /// spinning, samples the kernel dropped).
    Warning,
    /// What the engine decided (a script's windows mapped as several ops).
    Info,
    /// A detail a quiet caller may drop (a setting of the environment the
    /// engine replaced).
    Note,
}

/// Receives the progress of a live mapping ([`crate::live::map_live`]).
/// Every method has an empty default, so an implementation picks what it
/// shows. Texts are single lines, with control characters of user-given
/// names escaped ([`crate::output::one_line`]).
pub trait Progress {
    /// More runs are to be made: called once with every run counted at the
    /// start, and again when a script turns out to open windows for
    /// several ops (each gets runs of its own).
    fn runs_added(&mut self, runs: u64) {
        let _ = runs;
    }

    /// A run (or a fork server's runs) of an op starts; `what` names the
    /// op and run (`Crop run 2/3`).
    fn run_started(&mut self, what: &str) {
        let _ = what;
    }

    /// A run finished: `line` says what it measured (samples, calls,
    /// functions).
    fn run_done(&mut self, line: &str) {
        let _ = line;
    }

    /// An error, warning or note about an op or the mapping.
    fn message(&mut self, kind: MessageKind, text: &str) {
        let _ = (kind, text);
    }

    /// The mapping is over (done, failed or interrupted).
    fn finished(&mut self) {}
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
