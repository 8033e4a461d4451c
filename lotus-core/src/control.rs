//! The control protocol between a profiled process and the lotus process.
//!
//! A profiled process opens and closes measurement windows through the
//! control library (`lotus_resume`, `lotus_pause`). Where the window is
//! kept by the lotus process (the perf backend), the library sends a
//! [`Request`] over the control channel and waits for the [`Reply`] before
//! the op runs. The perf backend's samplers and counters run from exec on:
//! on `resume` the lotus process notes the time (`CLOCK_MONOTONIC`) and
//! replies, on `pause` it notes the end; samples are kept when their
//! kernel timestamp falls inside a window, and the counters are read at
//! both ends. (Switching the events by ioctl is the backend's other mode,
//! `WindowSwitch::Ioctl` in `lotus-backend-perf`, not the default: an ioctl
//! interrupts every CPU the target ran on.) Either way the window is open
//! when `Reply::Ok` to a resume arrives. The channel is a pair of pipes
//! whose descriptors are given in [`ENV_CONTROL_FDS`]; the active backend's
//! name is in [`ENV_BACKEND`].
//!
//! Each message is one line of text.

/// Names the active backend (`perf`, `vtune`, `uprof`) for the control
/// library.
pub const ENV_BACKEND: &str = "LOTUS_BACKEND";
/// `"<read_fd>,<write_fd>"`: the profiled process reads replies from the
/// first and writes requests to the second.
pub const ENV_CONTROL_FDS: &str = "LOTUS_CONTROL_FDS";

/// A profiled process's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Open a window for the named op.
    Resume {
        /// The op the window belongs to; empty when not said.
        op: String,
    },
    /// Close the open window.
    Pause,
    /// The process is done with profiling; no window will open again.
    Detach,
}

/// The lotus process's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done: the window is open (or closed).
    Ok,
    /// Refused, with the reason.
    Error(String),
}

/// A line that is not a message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a lotus control message: {0:?}")]
pub struct BadMessage(pub String);

impl Request {
    /// The message as one line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Request::Resume { op } => format!("resume {}\n", one_line(op)),
            Request::Pause => "pause\n".to_string(),
            Request::Detach => "detach\n".to_string(),
        }
    }

    /// Parses one line (with or without its newline).
    pub fn decode(line: &str) -> Result<Self, BadMessage> {
        let line = line.trim_end_matches(['\n', '\r']);
        match line.split_once(' ') {
            Some(("resume", op)) => Ok(Request::Resume { op: op.to_string() }),
            None if line == "resume" => Ok(Request::Resume { op: String::new() }),
            None if line == "pause" => Ok(Request::Pause),
            None if line == "detach" => Ok(Request::Detach),
            _ => Err(BadMessage(line.to_string())),
        }
    }
}

impl Reply {
    /// The message as one line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Reply::Ok => "ok\n".to_string(),
            Reply::Error(why) => format!("error {}\n", one_line(why)),
        }
    }

    /// Parses one line (with or without its newline).
    pub fn decode(line: &str) -> Result<Self, BadMessage> {
        let line = line.trim_end_matches(['\n', '\r']);
        if line == "ok" {
            return Ok(Reply::Ok);
        }
        match line.split_once(' ') {
            Some(("error", why)) => Ok(Reply::Error(why.to_string())),
            _ => Err(BadMessage(line.to_string())),
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for req in [
            Request::Resume {
                op: "RandomResizedCrop".into(),
            },
            Request::Resume { op: String::new() },
            Request::Pause,
            Request::Detach,
        ] {
            assert_eq!(Request::decode(&req.encode()), Ok(req));
        }
    }

    #[test]
    fn newlines_in_op_names_cannot_split_a_message() {
        let req = Request::Resume { op: "a\nb".into() };
        assert_eq!(req.encode().matches('\n').count(), 1);
    }

    #[test]
    fn replies_round_trip_and_garbage_is_refused() {
        for rep in [Reply::Ok, Reply::Error("no window".into())] {
            assert_eq!(Reply::decode(&rep.encode()), Ok(rep));
        }
        assert!(Request::decode("open sesame").is_err());
        assert!(Reply::decode("maybe").is_err());
    }
}
