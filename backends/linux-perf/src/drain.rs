//! The drain thread: empties the ring buffers so they never overflow, and
//! replays their records in time order into the [`Model`].
//!
//! Every round it notes the time, reads every buffer dry, and replays the
//! queued records stamped before the *previous* round began: by then every
//! record of that period has been written, whichever CPU's buffer it went
//! to. A flush (asked for by the control thread after a window closed)
//! replays up to the current round's start instead. The thread wakes when a
//! buffer is a quarter full, when asked, and at least every 25 ms.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lotus_core::Error as CoreError;
use lotus_samples::{CounterValues, MAX_COUNTERS};
use perf_event::Sampler;

use crate::coverage::Tally;
use crate::events::monotonic_ns;
use crate::model::{Event, Location, Model, WindowCounts};
use crate::records::{self, ReadKind};
use crate::sample_read::DeltaTracker;
use crate::stream::{Change, Placed, Stream, StreamSummary, UserCopy};
use crate::BACKEND;
use lotus_samples::SharedFolds;

const ROUND: Duration = Duration::from_millis(25);

#[derive(Debug, Default)]
struct State {
    /// (start, end) times (CLOCK_MONOTONIC ns) of the windows so far; the
    /// last one has no end while it is open.
    windows: Vec<(u64, Option<u64>)>,
    /// Where the profiled process stamps its own window edges: records are
    /// replayed no further than the last edge heard of, since an edge
    /// stamped later may still be on its way (`None`: no limit, lotus
    /// stamps the edges itself before the records are replayed).
    horizon: Option<u64>,
    flush_requested: u64,
    flush_done: u64,
    stop: bool,
    /// Set when the thread ends, normally or not.
    finished: bool,
    /// Per-window counts as of the last replay.
    published: Vec<WindowCounts>,
    /// Count every window's samples as window 0's (see
    /// [`Drain::sum_windows`]).
    summed: bool,
    /// Records the parser could not read (never expected).
    malformed: u64,
    /// Side-band records (mappings, forks, execs) the kernel dropped.
    sideband_lost: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running drain thread.
pub(crate) struct Drain {
    shared: Arc<Shared>,
    wake: Arc<OwnedFd>,
    handle: Option<JoinHandle<(Model, Tally)>>,
    /// The sample writer, when samples are streamed.
    writer: Option<JoinHandle<StreamSummary>>,
}

/// What the drain thread leaves behind.
pub(crate) struct Drained {
    /// The replayed records.
    pub model: Model,
    /// Records that could not be parsed.
    pub malformed: u64,
    /// Side-band records lost: some samples may be left unsymbolized.
    pub sideband_lost: u64,
    /// What the sample writer did, when samples were streamed.
    pub stream: Option<StreamSummary>,
    /// The samples and counted CPU time of each process.
    pub tally: Tally,
}

impl Drain {
    /// Starts the thread; it owns the ring buffers from now on. With
    /// `sink`, every sample in a window also goes to it as it comes,
    /// carrying `counters` counter deltas. The samplers take a sample
    /// every `period_ns` of CPU time, of kernel mode too when `kernel`.
    /// With `chain`, the samplers take call chains after read values of
    /// that kind, and the samples go to `sink` with their stacks; with
    /// `user_stacks` too, user registers and stack copies after the
    /// chain, unwound on the writer thread. With `prelude` (an attached
    /// tree), its records are replayed before any read from the buffers.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        samplers: Vec<Sampler>,
        sideband: Vec<Sampler>,
        sink: Option<Box<dyn lotus_samples::SampleSink>>,
        counters: usize,
        stamped: bool,
        period_ns: u64,
        kernel: bool,
        chain: Option<ReadKind>,
        user_stacks: bool,
        folds: Option<SharedFolds>,
        layer: Option<lotus_core::StackLayer>,
        symbols: Arc<lotus_symbols::SymbolCache>,
        prelude: Option<Prelude>,
    ) -> Result<Drain, CoreError> {
        let first_sideband = samplers.len();
        let mut streams = samplers;
        streams.extend(sideband);
        // SAFETY: eventfd has no memory preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(CoreError::Io {
                context: "creating the drain thread's eventfd".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: eventfd returned a fresh descriptor nothing else owns.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let shared = Arc::new(Shared::default());
        if stamped {
            shared.lock().horizon = Some(0);
        }
        // Stacks rewritten on their way (`layer`): the layer's output is
        // folded, each sample under the window its time falls in (the
        // windows the drain keeps), in place of the sink given (no sink:
        // the folds are the collection's output); the writer folds none.
        let (sink, folds) = match (sink, layer, folds) {
            (Some(_), Some(layer), Some(folds)) => {
                let windows = Arc::clone(&shared);
                let window: lotus_samples::WindowOf = Box::new(move |t| {
                    let st = windows.lock();
                    window_of(&st.windows, t).map(|i| if st.summed { 0 } else { i })
                });
                let folding = Box::new(lotus_samples::FoldSink::new(folds, window));
                (Some(layer.wrap(folding)), None)
            }
            (sink, _, folds) => (sink, folds),
        };
        let (stream, writer) = match sink {
            Some(sink) => {
                let (stream, writer) =
                    Stream::start(sink, counters, chain.is_some(), folds, symbols)?;
                (Some(stream), Some(writer))
            }
            None => (None, None),
        };
        let (s, w) = (Arc::clone(&shared), Arc::clone(&wake));
        let handle = std::thread::Builder::new()
            .name("lotus-perf-drain".into())
            .spawn(move || {
                // Ahead of ordinary threads: a ring buffer holds a
                // fraction of a second of samples (with user stack copies,
                // 2 MiB is about 250 samples a CPU: 50 ms at 5 kHz), and on
                // a busy machine an ordinary thread can wait longer than
                // that for a CPU: the kernel then drops the samples.
                lotus_sys::process::raise_thread_priority();
                let ends = Ends {
                    first_sideband,
                    counters,
                    period_ns,
                    kernel,
                    chain,
                    user_stacks,
                };
                run(streams, ends, &s, &w, stream, prelude)
            })
            .map_err(|source| CoreError::Io {
                context: "starting the drain thread".into(),
                source,
            })?;
        Ok(Drain {
            shared,
            wake,
            handle: Some(handle),
            writer,
        })
    }

    /// Counts the samples of every window together, as window 0's: the
    /// per-window counts (and the counts by window and location) then stay
    /// one window's size however many windows there are. For a collection
    /// whose caller asked for the totals only; called before any window
    /// opens.
    pub(crate) fn sum_windows(&self) {
        self.shared.lock().summed = true;
    }

    /// Opens a window now. The clock is read under the lock the drain
    /// thread takes to see the windows, so it never replays a record
    /// stamped after this instant without knowing of the window.
    pub(crate) fn open_window(&self) {
        let mut st = self.shared.lock();
        st.windows.push((monotonic_ns(), None));
    }

    /// Closes the open window now (same locking as [`Self::open_window`]).
    pub(crate) fn close_window(&self) {
        let mut st = self.shared.lock();
        let now = monotonic_ns();
        if let Some(last) = st.windows.last_mut() {
            last.1.get_or_insert(now);
        }
    }

    /// Opens a window at `at` (CLOCK_MONOTONIC ns), an edge the profiled
    /// process stamped, and moves the horizon there. An edge earlier than
    /// the last window's end (two processes stamping at once) is taken at
    /// that end, so windows stay ordered and disjoint.
    pub(crate) fn open_window_at(&self, at: u64) {
        let mut st = self.shared.lock();
        let after = st.windows.last().map_or(0, |w| w.1.unwrap_or(w.0));
        let at = at.max(after);
        st.windows.push((at, None));
        st.horizon = st.horizon.map(|h| h.max(at));
    }

    /// Closes the open window at `at`, a stamped edge (see
    /// [`Self::open_window_at`]); returns the window's start.
    pub(crate) fn close_window_at(&self, at: u64) -> Option<u64> {
        let mut st = self.shared.lock();
        let (start, end) = st.windows.last_mut()?;
        if end.is_some() {
            return None;
        }
        let at = at.max(*start);
        *end = Some(at);
        let start = *start;
        st.horizon = st.horizon.map(|h| h.max(at));
        Some(start)
    }

    /// No more stamped edges will come: every record can be replayed.
    pub(crate) fn lift_horizon(&self) {
        self.shared.lock().horizon = None;
        self.poke();
    }

    /// Waits until every record stamped before now has been replayed, and
    /// returns the per-window counts.
    pub(crate) fn flush(&self) -> Result<Vec<WindowCounts>, CoreError> {
        let seq = {
            let mut st = self.shared.lock();
            st.flush_requested += 1;
            st.flush_requested
        };
        self.poke();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut st = self.shared.lock();
        while st.flush_done < seq {
            if st.finished {
                return Err(stopped());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CoreError::Other {
                    backend: BACKEND.into(),
                    message: "the sample drain thread did not answer within 10 s".into(),
                });
            }
            st = match self.shared.changed.wait_timeout(st, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        Ok(st.published.clone())
    }

    /// The per-window counts as of the last replay, without waiting.
    pub(crate) fn published(&self) -> Vec<WindowCounts> {
        self.shared.lock().published.clone()
    }

    /// Stops the thread after a last full round and returns what it built.
    pub(crate) fn finish(mut self) -> Result<Drained, CoreError> {
        self.shared.lock().stop = true;
        self.poke();
        let handle = self.handle.take().ok_or_else(stopped)?;
        let (model, tally) = handle.join().map_err(|_| stopped())?;
        // The drain thread has dropped its end: the writer finishes.
        let stream = match self.writer.take() {
            Some(w) => Some(w.join().map_err(|_| CoreError::Other {
                backend: BACKEND.into(),
                message: "the sample writer thread stopped unexpectedly".into(),
            })?),
            None => None,
        };
        let st = self.shared.lock();
        Ok(Drained {
            model,
            malformed: st.malformed,
            sideband_lost: st.sideband_lost,
            stream,
            tally,
        })
    }

    fn poke(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid local to our eventfd. A full
        // counter (EAGAIN) already means "wake up".
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.shared.lock().stop = true;
            self.poke();
            let _ = handle.join();
        }
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn stopped() -> CoreError {
    CoreError::Other {
        backend: BACKEND.into(),
        message: "the sample drain thread stopped unexpectedly".into(),
    }
}

/// Marks the state finished however the thread ends.
struct FinishGuard<'a>(&'a Shared);

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        self.0.lock().finished = true;
        self.0.changed.notify_all();
    }
}

/// What the drain thread knows of its buffers and samples.
struct Ends {
    /// The index of the first side-band buffer (the samplers' come first).
    first_sideband: usize,
    /// Counters each sample carries.
    counters: usize,
    /// One sampling period (ns).
    period_ns: u64,
    /// Kernel mode is sampled.
    kernel: bool,
    /// The samplers take call chains, after read values of this kind.
    chain: Option<ReadKind>,
    /// And user registers and stack copies after them.
    user_stacks: bool,
}

/// What an attached tree's collection replays before the records read
/// from its buffers (see `crate::attach`).
pub(crate) struct Prelude {
    /// When the attach began: every record of it is stamped at this time,
    /// before the first one the kernel wrote.
    pub since: u64,
    /// The processes whose threads the samplers were opened on.
    pub roots: Vec<u32>,
    /// Its records, each with the index of the buffer it is as if read
    /// from: the tree's processes, threads and executable mappings as
    /// they stood, and what the side band said while the tree was
    /// attached.
    pub records: Vec<(usize, crate::attach::Known)>,
}

fn run(
    mut streams: Vec<Sampler>,
    ends: Ends,
    shared: &Shared,
    wake: &OwnedFd,
    mut stream: Option<Stream>,
    prelude: Option<Prelude>,
) -> (Model, Tally) {
    let _guard = FinishGuard(shared);
    let first_sideband = ends.first_sideband;
    let mut model = Model::default();
    let mut tally = Tally::new(ends.period_ns, first_sideband, ends.kernel);
    // An added sample carries no counter deltas (nothing was read for it).
    let no_counters = CounterValues::new(&[0; MAX_COUNTERS][..ends.counters.min(MAX_COUNTERS)])
        .unwrap_or_default();
    // Each event with its sample's raw call chain (empty: none), which
    // is placed in its modules when the sample is replayed, in time order
    // with the mappings, and its user stack copy, unwound by the writer
    // with the mappings of that instant.
    let mut pending: Vec<(u64, Event, Raw)> = Vec::new();
    let mut hung_up = vec![false; streams.len()];
    let mut prev_round = 0u64;
    let mut flushed = 0u64;
    let mut deltas = DeltaTracker::default();
    if let Some(prelude) = prelude {
        tally.attached(prelude.since, &prelude.roots);
        let mut lost = 0;
        for (i, known) in &prelude.records {
            match known.record() {
                Some(records::Record::Lost { count, .. }) => lost += count,
                Some(r) => {
                    if let Some((t, ev)) = model.event(&r) {
                        pending.push((t, ev.on_stream(*i as u32), Raw::default()));
                    }
                }
                None => shared.lock().malformed += 1,
            }
        }
        shared.lock().sideband_lost += lost;
    }
    loop {
        wait(&streams, &mut hung_up, wake);
        let (stop, flush) = {
            let st = shared.lock();
            (st.stop, st.flush_requested)
        };
        let round = monotonic_ns();
        let (mut malformed, mut sideband_lost) = (0, 0);
        for (i, s) in streams.iter_mut().enumerate() {
            while let Some(rec) = s.next_record() {
                let bytes = rec.to_contiguous();
                let layout = if i < first_sideband { ends.chain } else { None };
                let user = ends.user_stacks && i < first_sideband;
                match records::parse_with(rec.ty(), rec.misc(), &bytes, layout, user) {
                    Some(records::Record::Lost { count, .. }) if i >= first_sideband => {
                        sideband_lost += count;
                    }
                    Some(r) => {
                        let chain = match &r {
                            records::Record::Sample { chain, user, .. } if stream.is_some() => {
                                Raw {
                                    chain: records::chain_addresses(chain).collect(),
                                    user: user.map(|u| {
                                        Box::new(UserCopy {
                                            ip: u.ip,
                                            sp: u.sp,
                                            bp: u.bp,
                                            stack: u.stack.to_vec(),
                                        })
                                    }),
                                }
                            }
                            _ => Raw::default(),
                        };
                        if let Some((t, ev)) = model.event(&r) {
                            pending.push((t, ev.on_stream(i as u32), chain));
                        }
                    }
                    None => malformed += 1,
                }
            }
        }
        // The windows and the horizon are read together: every edge
        // stamped before the horizon is among these windows.
        let (windows, horizon, summed) = {
            let st = shared.lock();
            (st.windows.clone(), st.horizon, st.summed)
        };
        let limit = replay_limit(stop, flush > flushed, round, prev_round, horizon);
        pending.sort_by_key(|(t, ev, _)| (*t, ev.rank()));
        let ready = pending.partition_point(|(t, _, _)| *t <= limit);
        let window = |t: u64| window_of(&windows, t).map(|i| if summed { 0 } else { i });
        for (t, ev, chain) in pending.drain(..ready) {
            match ev {
                Event::Sample {
                    pid,
                    tid,
                    ip,
                    kernel,
                    stream: from,
                    counters,
                } => {
                    tally.sample(t, from, pid, tid, ip, kernel);
                    // Every sample moves its thread's totals, in a window
                    // or not, so a delta covers only its own interval.
                    let counters = deltas.delta(from, tid, counters);
                    if let (Some(stream), Some(w)) = (stream.as_mut(), window(t)) {
                        stream.push(Placed {
                            time: t,
                            window: w,
                            pid,
                            tid,
                            loc: model.locate(pid, ip, kernel),
                            kernel,
                            counters,
                            frames: chain_frames(&model, pid, &chain.chain),
                            user: chain.user,
                        });
                    }
                }
                Event::Exit { tid, .. } => deltas.exit(tid),
                Event::Lost { .. } | Event::Throttle => tally.dropped(),
                Event::ThreadCpu {
                    pid,
                    tid,
                    ns,
                    stream: from,
                } => {
                    // The thread's unsampled tails, a period's worth: one
                    // sample at its exit (see `crate::coverage`).
                    for added in tally.thread_cpu(t, from, pid, tid, ns) {
                        let (ip, kernel) = added.last.map_or((0, false), |l| (l.ip, l.kernel));
                        if let (Some(stream), Some(w)) = (stream.as_mut(), window(t)) {
                            stream.push(Placed {
                                time: t,
                                window: w,
                                pid,
                                tid,
                                loc: model.locate(pid, ip, kernel),
                                kernel,
                                counters: no_counters,
                                frames: Vec::new(),
                                user: None,
                            });
                        }
                        let sample = Event::Sample {
                            pid,
                            tid,
                            ip,
                            kernel,
                            stream: from,
                            counters: no_counters,
                        };
                        model.apply(t, sample, window);
                    }
                }
                // The writer replays the mappings to unwind user stacks.
                Event::Fork { pid, ppid, .. } if pid != ppid => {
                    tally.fork(t, pid, ppid);
                    if let Some(stream) = stream.as_mut() {
                        stream.change(Change::Fork { pid, ppid });
                    }
                }
                Event::Exec { pid } if ends.user_stacks => {
                    if let Some(stream) = stream.as_mut() {
                        stream.change(Change::Exec { pid });
                    }
                }
                Event::Mmap {
                    pid,
                    start,
                    len,
                    pgoff,
                    module,
                } if ends.user_stacks => {
                    if let Some(stream) = stream.as_mut() {
                        let mapping = model.mapping(start, len, pgoff, module);
                        stream.change(Change::Map { pid, mapping });
                    }
                }
                _ => {}
            }
            model.apply(t, ev, window);
        }
        // A second after its exit, nothing of a process is still to come.
        for pid in model.drop_exited(limit.saturating_sub(1_000_000_000)) {
            if let Some(stream) = stream.as_mut().filter(|_| ends.user_stacks) {
                stream.change(Change::Gone { pid });
            }
        }
        if let Some(stream) = stream.as_mut() {
            stream.end_round(&model.modules);
        }
        prev_round = round;
        flushed = flush;
        {
            let mut st = shared.lock();
            st.malformed += malformed;
            st.sideband_lost += sideband_lost;
            st.published = model.windows.clone();
            st.flush_done = flush;
        }
        shared.changed.notify_all();
        if stop {
            return (model, tally);
        }
    }
}

/// What a sample carries past its fixed fields until it is replayed.
#[derive(Debug, Default)]
struct Raw {
    /// Its call chain, raw (markers included).
    chain: Vec<u64>,
    /// Its user registers and stack copy.
    user: Option<Box<UserCopy>>,
}

/// The frames of a sample's raw call chain, innermost first, each placed
/// in the module mapped at its address now (the chain's sample is being
/// replayed in time order with the mappings). The first address of each
/// context is the interrupted instruction; the others are return
/// addresses, placed at `address - 1` so that a call that ends its
/// function is named by its caller, not by whatever follows. Markers are
/// dropped, and so are the hypervisor's and guests' frames.
fn chain_frames(model: &Model, pid: u32, chain: &[u64]) -> Vec<Location> {
    let mut frames = Vec::with_capacity(chain.len());
    // The context of the next address, and whether it is its first.
    let (mut context, mut first) = (None, true);
    for &address in chain {
        if address >= records::PERF_CONTEXT_MAX {
            context = match address {
                records::PERF_CONTEXT_KERNEL => Some(true),
                records::PERF_CONTEXT_USER => Some(false),
                _ => None,
            };
            first = true;
            continue;
        }
        let Some(kernel) = context else {
            continue;
        };
        let at = if first {
            address
        } else {
            address.saturating_sub(1)
        };
        first = false;
        frames.push(model.locate(pid, at, kernel));
    }
    frames
}

/// How far a round replays the queued records: everything when stopping;
/// up to this round's start on a flush; else up to the previous round's
/// start (every record of that period has been read by now). Where the
/// profiled process stamps its own window edges, never past the last edge
/// heard of (`horizon`): an edge stamped later may still be on its way,
/// and records after it would land outside a window that holds them.
fn replay_limit(stop: bool, flush: bool, round: u64, prev_round: u64, horizon: Option<u64>) -> u64 {
    if stop {
        return u64::MAX;
    }
    let limit = if flush { round } else { prev_round };
    horizon.map_or(limit, |h| limit.min(h))
}

/// The window holding time `t`: windows are ordered and disjoint, each
/// `[start, end)`, the last possibly still open.
fn window_of(windows: &[(u64, Option<u64>)], t: u64) -> Option<usize> {
    let i = windows
        .partition_point(|&(start, _)| start <= t)
        .checked_sub(1)?;
    match windows[i].1 {
        Some(end) if t >= end => None,
        _ => Some(i),
    }
}

/// Sleeps until a buffer has data, the control thread pokes, or a round
/// has passed. Buffers whose task has exited report POLLHUP forever; they
/// leave the poll set (and are still read every round).
fn wait(streams: &[Sampler], hung_up: &mut [bool], wake: &OwnedFd) {
    let mut fds = vec![libc::pollfd {
        fd: wake.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let mut index = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        if !hung_up[i] {
            fds.push(libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            index.push(i);
        }
    }
    let timeout = ROUND.as_millis() as libc::c_int;
    // SAFETY: fds is a valid array of pollfd of the given length.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if n <= 0 {
        return;
    }
    if fds[0].revents & libc::POLLIN != 0 {
        let mut count = 0u64;
        // SAFETY: reads the 8-byte counter into a valid local.
        unsafe { libc::read(wake.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
    for (pfd, &i) in fds[1..].iter().zip(&index) {
        if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            hung_up[i] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{replay_limit, window_of};

    #[test]
    fn records_past_the_last_stamped_edge_wait_until_the_edges_are_known() {
        // Lotus stamps the edges itself: the previous round's start, or
        // this one's on a flush.
        assert_eq!(replay_limit(false, false, 200, 100, None), 100);
        assert_eq!(replay_limit(false, true, 200, 100, None), 200);
        // Stamped by the process: no further than the last edge heard of,
        // even on a flush; before any edge, nothing is replayed.
        assert_eq!(replay_limit(false, true, 200, 100, Some(150)), 150);
        assert_eq!(replay_limit(false, false, 200, 100, Some(50)), 50);
        assert_eq!(replay_limit(false, false, 200, 100, Some(0)), 0);
        // The end (or no more edges: the horizon is lifted): everything.
        assert_eq!(replay_limit(true, false, 200, 100, Some(0)), u64::MAX);
    }

    #[test]
    fn times_fall_in_windows_or_outside() {
        let w = [(10, Some(20)), (30, Some(40)), (50, None)];
        assert_eq!(window_of(&w, 5), None);
        assert_eq!(window_of(&w, 10), Some(0));
        assert_eq!(window_of(&w, 19), Some(0));
        assert_eq!(window_of(&w, 20), None);
        assert_eq!(window_of(&w, 35), Some(1));
        assert_eq!(window_of(&w, 45), None);
        assert_eq!(window_of(&w, 1_000), Some(2));
        assert_eq!(window_of(&[], 1), None);
    }
}
