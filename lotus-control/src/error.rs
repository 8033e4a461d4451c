//! What a control call can fail with.

use std::io;

/// Why a control call failed. The `Display` text is what
/// `lotus_last_error()` returns to C and what the Python module raises.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The environment the lotus process set is not usable.
    #[error("lotus control: {0}")]
    Misconfigured(String),
    /// The call came from a process other than the one the channel was
    /// given to (a forked DataLoader worker); answering it would interleave
    /// its messages with the parent's.
    #[error(
        "{call} called from a forked process (pid {pid}; the lotus control channel \
         belongs to pid {owner}): open measurement windows in the process lotus started"
    )]
    Forked {
        /// The C function that was called (`lotus_resume`, ...).
        call: &'static str,
        /// This process.
        pid: u32,
        /// The process that owns the channel.
        owner: u32,
    },
    /// A window was asked for after `lotus_detach`.
    #[error("{call} called after lotus_detach: no window can open again in this process")]
    Detached {
        /// The C function that was called.
        call: &'static str,
    },
    /// Reading or writing the control channel failed.
    #[error("lotus control channel: {what}: {source}")]
    Channel {
        /// What was being done.
        what: &'static str,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// The lotus process closed its end of the channel.
    #[error("lotus control channel: the lotus process closed the channel (did it exit?)")]
    Closed,
    /// The lotus process answered something that is not a reply.
    #[error("lotus control channel: bad reply from the lotus process: {0:?}")]
    BadReply(String),
    /// The lotus process refused the request.
    #[error("lotus refused {call}: {reason}")]
    Refused {
        /// The C function that was called.
        call: &'static str,
        /// The reason the lotus process gave.
        reason: String,
    },
    /// The vendor's profile-control library could not be opened, or a call
    /// into it failed.
    #[error("lotus control ({backend}): {message}")]
    Vendor {
        /// The backend's name.
        backend: &'static str,
        /// What failed, with the library's path and its error code.
        message: String,
    },
    /// A bug in the library (a panic was caught at the C boundary).
    #[error("lotus control: internal error: {0}")]
    Internal(String),
}
