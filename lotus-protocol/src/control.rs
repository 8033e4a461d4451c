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
//! Where the backend's windows are time ranges on the samples' clock
//! (perf), the library may instead stamp each edge itself and send it
//! without waiting ([`ENV_WINDOW_STAMPS`], [`Request::OpenedAt`],
//! [`Request::ClosedAt`]).
//!
//! Each message is one line of text.

/// Names the active backend (`perf`, `vtune`, `uprof`) for the control
/// library.
pub const ENV_BACKEND: &str = "LOTUS_BACKEND";
/// `"<read_fd>,<write_fd>"`: the profiled process reads replies from the
/// first and writes requests to the second.
pub const ENV_CONTROL_FDS: &str = "LOTUS_CONTROL_FDS";

/// Set (to `1`) where the lotus process takes window edges the profiled
/// process stamps itself ([`Request::OpenedAt`], [`Request::ClosedAt`]):
/// the control library then sends each edge and goes on without waiting
/// for a reply. Only backends whose windows are time ranges on the
/// samples' clock (perf) can take them.
pub const ENV_WINDOW_STAMPS: &str = "LOTUS_WINDOW_STAMPS";

/// What a profiled process reads of itself at a window edge, without
/// waiting: its CPU time (`CLOCK_PROCESS_CPUTIME_ID`) and `getrusage`'s
/// page faults and context switches. They cover the process's own threads,
/// not the processes it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OwnCounters {
    /// CPU time of the process's threads, nanoseconds.
    pub cpu_ns: u64,
    /// Page faults, minor and major.
    pub page_faults: u64,
    /// Context switches, voluntary and involuntary.
    pub context_switches: u64,
}

/// One window edge the profiled process stamped itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Edge {
    /// When, on `CLOCK_MONOTONIC` (the perf samples' clock), nanoseconds.
    pub at_ns: u64,
    /// The process's own counters at that moment.
    pub own: OwnCounters,
}

/// A profiled process's request. New requests come with new versions
/// (`Sampling` did): a lotus side answers one it does not know with an
/// error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// A window for the named op opened at the edge's time (stamped by
    /// the profiled process, which does not wait for a reply).
    OpenedAt {
        /// The op the window belongs to; empty when not said.
        op: String,
        /// When, and the process's counters then.
        edge: Edge,
    },
    /// The open window closed at the edge's time (no reply either).
    ClosedAt {
        /// When, and the process's counters then.
        edge: Edge,
    },
    /// Stop (`on: false`) or restart (`on: true`) sampling the process
    /// while no window is open, and reply once done: in between the
    /// process times its op unsampled, the reference that says how much
    /// sampling slows the op (`lotus map`'s unsampled calls). Backends
    /// whose samplers cannot be stopped from lotus refuse.
    Sampling {
        /// Whether sampling runs again.
        on: bool,
    },
}

/// The lotus process's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Done: the window is open (or closed).
    Ok,
    /// Refused, with the reason.
    Error(String),
}

/// A line that is not a message of the protocol: this crate's one error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("not a lotus control message: {0:?}")]
pub struct BadMessage(pub String);

impl Request {
    /// The message as one line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Request::Resume { op } => format!("resume {}\n", one_line(op)),
            Request::Pause => "pause\n".to_string(),
            Request::Detach => "detach\n".to_string(),
            Request::OpenedAt { op, edge } => {
                let mut line = format!("opened {}", edge.encode());
                if !op.is_empty() {
                    line.push(' ');
                    line += &one_line(op);
                }
                line.push('\n');
                line
            }
            Request::ClosedAt { edge } => format!("closed {}\n", edge.encode()),
            Request::Sampling { on: true } => "sampling on\n".to_string(),
            Request::Sampling { on: false } => "sampling off\n".to_string(),
        }
    }

    /// Whether the sender waits for a [`Reply`]: not for stamped edges.
    pub fn wants_reply(&self) -> bool {
        !matches!(self, Request::OpenedAt { .. } | Request::ClosedAt { .. })
    }

    /// Parses one line (with or without its newline).
    pub fn decode(line: &str) -> Result<Self, BadMessage> {
        let line = line.trim_end_matches(['\n', '\r']);
        let bad = || BadMessage(line.to_string());
        if let Some(rest) = line.strip_prefix("opened ") {
            let mut parts = rest.splitn(5, ' ');
            let edge = Edge::decode(&mut parts).ok_or_else(bad)?;
            let op = parts.next().unwrap_or("").to_string();
            return Ok(Request::OpenedAt { op, edge });
        }
        if let Some(rest) = line.strip_prefix("closed ") {
            let mut parts = rest.split(' ');
            let edge = Edge::decode(&mut parts).ok_or_else(bad)?;
            if parts.next().is_some() {
                return Err(bad());
            }
            return Ok(Request::ClosedAt { edge });
        }
        match line.split_once(' ') {
            Some(("resume", op)) => Ok(Request::Resume { op: op.to_string() }),
            None if line == "resume" => Ok(Request::Resume { op: String::new() }),
            None if line == "pause" => Ok(Request::Pause),
            None if line == "detach" => Ok(Request::Detach),
            Some(("sampling", "on")) => Ok(Request::Sampling { on: true }),
            Some(("sampling", "off")) => Ok(Request::Sampling { on: false }),
            _ => Err(BadMessage(line.to_string())),
        }
    }
}

impl Edge {
    /// `<at_ns> <cpu_ns> <page_faults> <context_switches>`.
    fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.at_ns, self.own.cpu_ns, self.own.page_faults, self.own.context_switches
        )
    }

    /// The four numbers [`Edge::encode`] writes, taken from `parts`.
    fn decode<'a>(parts: &mut impl Iterator<Item = &'a str>) -> Option<Edge> {
        let mut next = || parts.next()?.parse::<u64>().ok();
        Some(Edge {
            at_ns: next()?,
            own: OwnCounters {
                cpu_ns: next()?,
                page_faults: next()?,
                context_switches: next()?,
            },
        })
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
            Request::OpenedAt {
                op: "Flip op".into(),
                edge: Edge {
                    at_ns: 12,
                    own: OwnCounters {
                        cpu_ns: 3,
                        page_faults: 4,
                        context_switches: 5,
                    },
                },
            },
            Request::OpenedAt {
                op: String::new(),
                edge: Edge::default(),
            },
            Request::ClosedAt {
                edge: Edge {
                    at_ns: u64::MAX,
                    ..Edge::default()
                },
            },
            Request::Sampling { on: true },
            Request::Sampling { on: false },
        ] {
            assert_eq!(Request::decode(&req.encode()), Ok(req));
        }
        assert!(Request::Sampling { on: false }.wants_reply());
        assert!(Request::decode("sampling").is_err());
        assert!(Request::decode("sampling maybe").is_err());
        assert!(Request::decode("opened 1 2 3").is_err());
        assert!(Request::decode("closed 1 2 3 x").is_err());
        assert!(Request::decode("closed 1 2 3 4 5").is_err());
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
