//! The one error of the runner.

use std::error::Error;
use std::io;

/// What went wrong running a traced job, reading or writing its record.
///
/// Each variant's text is the message lotus prints; a [`Context`] carries
/// the error below it as its [`source`](Error::source), so that a caller
/// printing the chain (`anyhow`'s `{:#}`) prints `context: cause`.
///
/// [`Context`]: RunnerError::Context
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// Refused before or instead of running (a descriptor limit too low, a
    /// trace folder others can write, samples of an earlier run in the
    /// folder, a record that is not one): the text says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// The program to run is not there ([`crate::find_program`]): the text
    /// says where it was looked for.
    #[error("{0}")]
    ProgramMissing(String),
    /// The program is there but cannot be run: the text says why and what
    /// to do.
    #[error("{0}")]
    ProgramUnusable(String),
    /// An operation failed, said in `context`, for the reason in `source`.
    #[error("{context}")]
    Context {
        /// What was being done (`cannot create the trace folder DIR`).
        context: String,
        /// Why it failed.
        #[source]
        source: Box<dyn Error + Send + Sync + 'static>,
    },
    /// A system call on the job or its files failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The sampling backend failed.
    #[error(transparent)]
    Backend(#[from] lotus_core::Error),
}

impl RunnerError {
    /// Whether this error comes from running out of file descriptors
    /// (EMFILE, ENFILE), anywhere in its chain.
    pub fn is_out_of_descriptors(&self) -> bool {
        let mut next: Option<&(dyn Error + 'static)> = Some(self);
        while let Some(e) = next {
            let io = e
                .downcast_ref::<io::Error>()
                .or(match e.downcast_ref::<RunnerError>() {
                    Some(RunnerError::Io(io)) => Some(io),
                    _ => None,
                });
            if io
                .and_then(io::Error::raw_os_error)
                .is_some_and(|c| c == libc::EMFILE || c == libc::ENFILE)
            {
                return true;
            }
            next = e.source();
        }
        false
    }

    /// Where this error comes from running out of file descriptors: what
    /// to say above it (the limit, `ulimit -n`, and its fix).
    pub fn descriptor_hint(&self) -> Option<String> {
        self.is_out_of_descriptors()
            .then(crate::limits::out_of_descriptors_hint)
    }
}

/// `e` and its causes, each after a `: ` (as `anyhow` prints an error
/// with `{:#}`).
pub(crate) fn with_causes(e: &(dyn Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

/// `context` put on an error, as a [`RunnerError::Context`].
pub(crate) trait Context<T> {
    /// The error, said to have happened while doing `context()`.
    fn context_with(self, context: impl FnOnce() -> String) -> Result<T, RunnerError>;
}

impl<T, E: Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context_with(self, context: impl FnOnce() -> String) -> Result<T, RunnerError> {
        self.map_err(|e| RunnerError::Context {
            context: context(),
            source: Box::new(e),
        })
    }
}

/// The runner's results.
pub type Result<T, E = RunnerError> = std::result::Result<T, E>;
