//! Serving a profiled process's control channel until it exits: each
//! request switches the collection's window (and is answered when the
//! process waits for it), stamped edges are applied as they come, and the
//! process is stopped on interruption, at its time limit, or when it
//! lingers after its work is done.

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lotus_core::Collection;
use lotus_protocol::{Reply, Request};

use crate::error::{full_message, MapError};
use lotus_control::host::ControlHost;

/// Why one run (or a served process) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Ctrl-C (or SIGTERM).
    #[error("interrupted")]
    Interrupted,
    /// Still running at the time limit (it was stopped); each command
    /// words it for what it runs.
    #[error("still running after {} s: stopped it and everything it started", .0.as_secs_f64())]
    TimedOut(Duration),
    /// Anything else, in words.
    #[error("{0}")]
    Failed(String),
}

impl RunError {
    /// The failure as a map run reports it.
    pub(crate) fn op_message(self) -> String {
        match self {
            RunError::Interrupted => "interrupted".into(),
            RunError::TimedOut(timeout) => format!(
                "still running after --timeout {} s: stopped it and everything it started (is the op stuck, or does it need a longer --timeout?)",
                timeout.as_secs_f64()
            ),
            RunError::Failed(why) => why,
        }
    }
}

impl From<MapError> for RunError {
    fn from(e: MapError) -> Self {
        RunError::Failed(full_message(&e))
    }
}

/// How long the end of a run may spend killing what it left behind.
pub const REAP_LIMIT: Duration = Duration::from_secs(5);

/// How often lotus reads the control channel while the process stamps its
/// own window edges (see [`serve_until`]).
const STAMP_POLL: Duration = Duration::from_millis(10);

/// How long the control loop keeps polling without sleeping after a
/// request.
const HOT_SPIN: Duration = Duration::from_millis(2);

/// Serves the control channel (when there is one) until the profiled
/// process exits: each request switches the window and is answered. Stops
/// the process on Ctrl-C or after `timeout`.
pub fn serve(
    collection: &mut dyn Collection,
    host: Option<&mut ControlHost>,
    timeout: Option<Duration>,
    interrupted: &AtomicBool,
) -> Result<std::process::ExitStatus, RunError> {
    serve_until(collection, host, timeout, interrupted, &|| false, false)
        .map(|served| served.status)
}

/// How long a process that has written its result may take to exit before
/// it is stopped (see [`serve_until`]).
const DONE_GRACE: Duration = Duration::from_secs(2);

/// How a served process ended.
pub(crate) struct Served {
    /// Its exit status.
    pub status: std::process::ExitStatus,
    /// It had finished (`done` held) but did not exit within
    /// [`DONE_GRACE`], and was stopped: `status` is the stop's.
    pub stopped_after_done: bool,
}

/// [`serve`], where `done` says the process has finished its work (its
/// result is written): from then on it gets [`DONE_GRACE`] to exit, and is
/// then stopped with everything it started, instead of keeping the run
/// going until `timeout` (a thread or process the op left behind).
///
/// With `stamped` (the process stamps its window edges and waits for no
/// reply), lotus does not wait on the channel: it reads what is there every
/// [`STAMP_POLL`]. A writer then wakes nobody, which on a busy machine
/// would cost it the CPU (the woken lotus preempts it); the few requests
/// that still wait for a reply (detach) wait up to that long.
pub(crate) fn serve_until(
    collection: &mut dyn Collection,
    mut host: Option<&mut ControlHost>,
    timeout: Option<Duration>,
    interrupted: &AtomicBool,
    done: &dyn Fn() -> bool,
    stamped: bool,
) -> Result<Served, RunError> {
    let mut done_at: Option<Instant> = None;
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut channel_open = host.is_some();
    let mut last_request = Instant::now();
    // The channel had nothing to read last time.
    let mut idle = false;
    let status = loop {
        if let (true, Some(host)) = (channel_open, host.as_mut()) {
            // Right after a request, poll without sleeping for a moment: the
            // next one (a pause after a resume) often follows at once, and
            // waking an idle CPU costs more than the round trip itself.
            let wait = if last_request.elapsed() < HOT_SPIN {
                Duration::ZERO
            } else if stamped {
                if idle {
                    std::thread::sleep(STAMP_POLL);
                }
                Duration::ZERO
            } else {
                Duration::from_millis(20)
            };
            idle = false;
            match host.recv_line(Some(wait)) {
                Ok(Some(line)) => {
                    // A child that died mid-request cannot read a reply;
                    // its exit is seen below, so reply errors are ignored.
                    let request = match Request::decode(&line) {
                        Ok(r) => r,
                        Err(e) => {
                            last_request = Instant::now();
                            let _ = host.reply(&Reply::Error(e.to_string()));
                            continue;
                        }
                    };
                    if !request.wants_reply() {
                        // A window edge the process stamped itself: nobody
                        // waits, so no hot polling either.
                        if let Err(e) = apply_stamp(collection, &request) {
                            let _ = collection.kill();
                            return Err(RunError::Failed(e.to_string()));
                        }
                        continue;
                    }
                    last_request = Instant::now();
                    // The reply goes out as soon as the window is
                    // switched; the backend's slower bookkeeping follows
                    // while the op runs.
                    let mut replied = false;
                    let mut tell = || {
                        let _ = host.reply(&Reply::Ok);
                        replied = true;
                    };
                    let outcome = match request {
                        Request::Resume { .. } => collection.resume_then(&mut tell),
                        Request::Pause => collection.pause_then(&mut tell),
                        Request::Detach => Ok(()),
                        Request::Sampling { on } => set_sampling(collection, on),
                        Request::OpenedAt { .. } | Request::ClosedAt { .. } => Ok(()),
                        // Whatever a newer control library may ask.
                        _ => Err(lotus_core::Error::Other {
                            backend: "lotus".into(),
                            message: "a control request this lotus does not know (is the \
                                      control library from another version?)"
                                .into(),
                        }),
                    };
                    match outcome {
                        Ok(()) if !replied => {
                            let _ = host.reply(&Reply::Ok);
                        }
                        Ok(()) => {}
                        Err(e) if !replied => {
                            let _ = host.reply(&Reply::Error(e.to_string()));
                        }
                        Err(e) => {
                            // The target was told the window switched, but
                            // the backend failed after: the run is not valid.
                            let _ = collection.kill();
                            return Err(RunError::Failed(e.to_string()));
                        }
                    }
                    continue;
                }
                Ok(None) => {
                    channel_open = false;
                    stamps_done(collection);
                }
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => idle = true,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    // An over-long request: its writer waits for a reply.
                    last_request = Instant::now();
                    let _ = host.reply(&Reply::Error(e.to_string()));
                    continue;
                }
                Err(_) => channel_open = false,
            }
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
        if interrupted.load(Ordering::SeqCst) {
            let _ = collection.kill();
            return Err(RunError::Interrupted);
        }
        match collection.try_wait() {
            Ok(Some(status)) => {
                last_stamps(collection, host.as_deref_mut());
                break status;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = collection.kill();
                return Err(RunError::Failed(e.to_string()));
            }
        }
        match done_at {
            None if done() => done_at = Some(Instant::now()),
            Some(at) if at.elapsed() >= DONE_GRACE => {
                last_stamps(collection, host.as_deref_mut());
                collection
                    .kill()
                    .map_err(|e| RunError::Failed(e.to_string()))?;
                let status = collection
                    .try_wait()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| std::process::ExitStatus::from_raw(libc::SIGKILL));
                return Ok(Served {
                    status,
                    stopped_after_done: true,
                });
            }
            _ => {}
        }
        if let (Some(deadline), Some(timeout)) = (deadline, timeout) {
            if Instant::now() >= deadline {
                let _ = collection.kill();
                return Err(RunError::TimedOut(timeout));
            }
        }
    };
    Ok(Served {
        status,
        stopped_after_done: false,
    })
}

/// Applies a window edge the profiled process stamped itself.
fn apply_stamp(
    collection: &mut dyn Collection,
    request: &Request,
) -> Result<(), lotus_core::Error> {
    let edge = match request {
        Request::OpenedAt { edge, .. } | Request::ClosedAt { edge } => edge,
        _ => return Ok(()),
    };
    let Some(stamped) = collection.stamped_windows() else {
        return Err(lotus_core::Error::Other {
            backend: "lotus".into(),
            message: "this backend cannot take window edges stamped by the profiled process".into(),
        });
    };
    match request {
        Request::OpenedAt { .. } => stamped.resume_at(edge),
        _ => stamped.pause_at(edge),
    }
}

/// Stops or restarts sampling outside windows, where the collection can
/// ([`Collection::sampling_control`]); refused with why where it cannot.
fn set_sampling(collection: &mut dyn Collection, on: bool) -> Result<(), lotus_core::Error> {
    match collection.sampling_control() {
        Some(control) => control.set_sampling(on),
        None => Err(lotus_core::Error::Other {
            backend: "lotus".into(),
            message: "this backend cannot stop sampling outside a window".into(),
        }),
    }
}

/// Tells a collection that takes stamped edges that no more will come.
fn stamps_done(collection: &mut dyn Collection) {
    if let Some(stamped) = collection.stamped_windows() {
        stamped.stamps_done();
    }
}

/// The most lines [`last_stamps`] reads: a process that left a writer of
/// the channel behind cannot keep the run going.
const LAST_STAMPS: usize = 100_000;

/// Once the process is gone (or done): the stamped edges it wrote just
/// before, which nobody waited on, are read and applied; then the
/// collection knows no more will come.
fn last_stamps(collection: &mut dyn Collection, host: Option<&mut ControlHost>) {
    if let Some(host) = host {
        for _ in 0..LAST_STAMPS {
            match host.recv_line(Some(Duration::ZERO)) {
                Ok(Some(line)) => {
                    if let Ok(request) = Request::decode(&line) {
                        let _ = apply_stamp(collection, &request);
                    }
                }
                Ok(None) => break,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                Err(_) => break,
            }
        }
    }
    stamps_done(collection);
}

/// How long lotus lets the echo of a run's output catch up before it
/// reports on the run.
pub(crate) const ECHO_SETTLE: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_core::{Error as CoreError, Report, SamplingControl, StampedWindows};
    use lotus_protocol::Edge;
    use std::process::ExitStatus;

    /// A collection that records what reaches it; `capable`: it offers
    /// sampling control and stamped windows, else neither.
    #[derive(Default)]
    struct Fake {
        capable: bool,
        calls: Vec<String>,
    }

    impl Collection for Fake {
        fn pid(&self) -> u32 {
            1
        }
        fn resume(&mut self) -> Result<(), CoreError> {
            Ok(())
        }
        fn pause(&mut self) -> Result<(), CoreError> {
            Ok(())
        }
        fn try_wait(&mut self) -> Result<Option<ExitStatus>, CoreError> {
            Ok(None)
        }
        fn kill(&mut self) -> Result<(), CoreError> {
            Ok(())
        }
        fn finish(
            self: Box<Self>,
            _: lotus_core::Finish,
        ) -> Result<lotus_core::Finished, CoreError> {
            Ok(lotus_core::Finished::new(
                vec![Report::new(lotus_core::Unit::Samples, Vec::new())],
                Vec::new(),
            ))
        }
        fn sampling_control(&mut self) -> Option<&mut dyn SamplingControl> {
            if self.capable {
                Some(self)
            } else {
                None
            }
        }
        fn stamped_windows(&mut self) -> Option<&mut dyn StampedWindows> {
            if self.capable {
                Some(self)
            } else {
                None
            }
        }
    }

    impl SamplingControl for Fake {
        fn set_sampling(&mut self, on: bool) -> Result<(), CoreError> {
            self.calls.push(format!("sampling {on}"));
            Ok(())
        }
    }

    impl StampedWindows for Fake {
        fn resume_at(&mut self, edge: &Edge) -> Result<(), CoreError> {
            self.calls.push(format!("opened {}", edge.at_ns));
            Ok(())
        }
        fn pause_at(&mut self, edge: &Edge) -> Result<(), CoreError> {
            self.calls.push(format!("closed {}", edge.at_ns));
            Ok(())
        }
        fn stamps_done(&mut self) {
            self.calls.push("done".into());
        }
    }

    fn edge(at_ns: u64) -> Edge {
        Edge {
            at_ns,
            ..Edge::default()
        }
    }

    /// The engine asks the collection for the capability: a backend that
    /// offers it gets the requests, one that does not refuses them with
    /// why, and is told of no end of stamps.
    #[test]
    fn sampling_and_stamped_edges_go_through_the_collections_capabilities() {
        let mut capable = Fake {
            capable: true,
            ..Fake::default()
        };
        set_sampling(&mut capable, false).expect("sampling off");
        apply_stamp(
            &mut capable,
            &Request::OpenedAt {
                op: "flip".into(),
                edge: edge(5),
            },
        )
        .expect("opened");
        apply_stamp(&mut capable, &Request::ClosedAt { edge: edge(9) }).expect("closed");
        apply_stamp(&mut capable, &Request::Pause).expect("not an edge: nothing to do");
        stamps_done(&mut capable);
        assert_eq!(
            capable.calls,
            ["sampling false", "opened 5", "closed 9", "done"]
        );

        let mut plain = Fake::default();
        let refused = set_sampling(&mut plain, false).expect_err("refused");
        assert!(
            refused
                .to_string()
                .contains("cannot stop sampling outside a window"),
            "{refused}"
        );
        let refused =
            apply_stamp(&mut plain, &Request::ClosedAt { edge: edge(1) }).expect_err("refused");
        assert!(
            refused.to_string().contains("cannot take window edges"),
            "{refused}"
        );
        stamps_done(&mut plain);
        assert!(plain.calls.is_empty());
    }
}
