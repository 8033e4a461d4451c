//! The engine's error type.

use std::path::PathBuf;

/// What can go wrong in a mapping, its writing or its inputs. Each message
/// names the file, op or tool and says what to do; a wrapped cause is the
/// error's [`source`](std::error::Error::source) (shown after a colon by
/// `anyhow`'s `{:#}`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MapError {
    /// The backend's probe says it cannot run on this machine.
    #[error("the {backend} backend cannot run here: {reason}")]
    BackendUnavailable {
        /// The backend's name.
        backend: String,
        /// Why, as its probe says.
        reason: String,
    },
    /// An op file that cannot be run: missing, or not a regular file.
    #[error("op file {shown}: {why}")]
    OpFile {
        /// The op file as given.
        path: PathBuf,
        /// The path as shown (control characters escaped).
        shown: String,
        /// What is wrong with it.
        why: String,
    },
    /// Writing a copy of the control library failed (one already there,
    /// a link, no room).
    #[error("cannot write the control library {}: {source}", path.display())]
    ControlLibraryWrite {
        /// The file that was being written.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The written copy of the control library is in a place another user
    /// can change: it is not loaded.
    #[error(
        "the control library is not loaded: {0}; set TMPDIR to a folder only you and root can write"
    )]
    ControlLibraryUntrusted(lotus_sys::trust::Untrusted),
    /// The control library named in the options is not a file.
    #[error("the control library {} is not there: {why}", path.display())]
    ControlLibrary {
        /// The path the options named.
        path: PathBuf,
        /// Why it cannot be used.
        why: String,
    },
    /// A folder given to read (`--from-reports`, `--cwd`) that is not laid
    /// out as expected.
    #[error("{0}")]
    Folder(String),
    /// The backend failed, or a vendor report cannot be read (it names
    /// the file and line).
    #[error(transparent)]
    Core(#[from] lotus_core::Error),
    /// Something failed; `what` says what was being done, `source` why.
    #[error("{what}")]
    Context {
        /// What was being done, naming the file or tool.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl MapError {
    /// A failure while doing `what`, caused by `source`.
    pub(crate) fn context(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> MapError {
        MapError::Context {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// The engine's results.
pub type Result<T, E = MapError> = std::result::Result<T, E>;

/// Adds what was being done to an error, as `anyhow::Context` does, for
/// the engine's own error type.
pub(crate) trait Context<T> {
    /// The error becomes the source of a [`MapError::Context`] saying
    /// `what`.
    fn context(self, what: impl Into<String>) -> Result<T>;
    /// [`Context::context`], with `what` made only on failure.
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E> Context<T> for std::result::Result<T, E>
where
    E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| MapError::context(what, e))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| MapError::context(what(), e))
    }
}

/// `error` and its sources, joined by `": "` (what `anyhow` prints for
/// `{:#}`): the whole message where it is stored as text (an op's failure
/// in the mapping).
pub(crate) fn full_message(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        // A wrapper that repeats its cause's text adds nothing.
        if !text.ends_with(&more) {
            text += ": ";
            text += &more;
        }
        source = cause.source();
    }
    text
}
