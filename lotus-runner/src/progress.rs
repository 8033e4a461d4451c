//! How a traced run tells its caller what it is doing. The runner prints
//! nothing: the `lotus` binary prints each message on stderr (`lotus: `
//! and the text), a tool linking the library does what it likes, or
//! nothing ([`NoProgress`]).

/// What kind of message [`Progress::message`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageKind {
    /// Something the user should see even when asked for quiet: a warning
    /// (the text starts `warning: `), samples missing and why, a process
    /// of the job that died, what the samples came to.
    Warning,
    /// A detail a quiet caller may drop: what was removed or ended, a
    /// setting left in place.
    Note,
    /// An error the run met and went on past (the text is the error with
    /// its causes), to print as it is.
    Error,
}

/// Receives what a traced run ([`crate::run_traced`]) has to say, as it
/// happens. Texts are single lines, without a `lotus: ` prefix; names and
/// paths in them come from the job and the file system (escape control
/// characters before printing them to a terminal).
pub trait Progress {
    /// A warning, note or error about the run.
    fn message(&mut self, kind: MessageKind, text: &str) {
        let _ = (kind, text);
    }
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
