//! A job run traced and sampled ([`run_traced`]), or attached to
//! ([`attach`]), while its trace folder is looked at every interval:
//! `lotus top`'s engine. The run stays on the calling thread (its signal
//! handling, and the parent-death signal its job gets, belong to the
//! thread that started it); the views are made on another, which reads
//! the folder as it grows: the tracer's logs are written as they are
//! recorded, the samples within a second or two. Each view may read the
//! whole folder again, so the pause after one is at least
//! [`PAUSE_FACTOR`] times what it took: the views cost at most about a
//! fifth of a CPU however long the job runs. What the runner says while
//! the views are on the screen is kept and handed back at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::{attach, run_traced, AttachOptions, MessageKind, Progress, TraceOptions};

/// The pause after a view, in times what the view took, at least.
pub const PAUSE_FACTOR: u32 = 4;

/// What [`watch`] runs.
pub enum Watched {
    /// A job started traced (and sampled, where its options say).
    Run(TraceOptions),
    /// A running job attached to.
    Attach(AttachOptions),
}

/// How a watched run ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct WatchedRun {
    /// The job's exit code as lotus passes it on (0 for a job attached
    /// to, which runs on or ended without lotus).
    pub code: u8,
    /// What the runner said, in order, kept while the views were shown.
    pub messages: Vec<(MessageKind, String)>,
}

/// Messages kept for the end.
#[derive(Default)]
struct Kept(Vec<(MessageKind, String)>);

impl Progress for Kept {
    fn message(&mut self, kind: MessageKind, text: &str) {
        self.0.push((kind, text.to_string()));
    }
}

/// Runs `what` on this thread and, every `interval` while it runs (the
/// first an interval after the start), calls `view` on another with the
/// time since the start; `view` returning false ends the views, not the
/// run. The pause after a view is at least [`PAUSE_FACTOR`] times what it
/// took.
pub fn watch(
    what: Watched,
    interval: Duration,
    view: impl FnMut(Duration) -> bool + Send,
) -> Result<WatchedRun> {
    let done = AtomicBool::new(false);
    let mut kept = Kept::default();
    let code = std::thread::scope(|scope| {
        let viewer = scope.spawn(|| views(interval, view, &done));
        let code = match &what {
            Watched::Run(options) => run_traced(options, &mut kept).map(|run| run.exit_code()),
            Watched::Attach(options) => attach(options, &mut kept).map(|_| 0),
        };
        done.store(true, Ordering::SeqCst);
        // A view that panicked ends the views; the run's result stands.
        let _ = viewer.join();
        code
    })?;
    Ok(WatchedRun {
        code,
        messages: kept.0,
    })
}

/// The views, until `done` (checked every 50 ms).
fn views(interval: Duration, mut view: impl FnMut(Duration) -> bool, done: &AtomicBool) {
    let start = Instant::now();
    let mut next = start + interval;
    while !done.load(Ordering::SeqCst) {
        if Instant::now() < next {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let began = Instant::now();
        if !view(began.duration_since(start)) {
            return;
        }
        next = Instant::now() + interval.max(began.elapsed() * PAUSE_FACTOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The views come while the run runs and stop with it; the run's
    /// failure is the result, its messages kept.
    #[test]
    fn views_come_while_the_job_runs_and_stop_with_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let options = TraceOptions::new(
            tmp.path().join("out"),
            vec!["sh".into(), "-c".into(), "sleep 1; exit 3".into()],
        );
        let mut seen = Vec::new();
        let run = watch(Watched::Run(options), Duration::from_millis(100), |at| {
            seen.push(at);
            true
        })
        .expect("run");
        assert_eq!(run.code, 3);
        assert!(seen.len() >= 3, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert!(seen.iter().all(|&t| t < Duration::from_secs(5)), "{seen:?}");
    }
}
