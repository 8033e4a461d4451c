//! A sampled trace folder read and ready to credit, and the rule that
//! credits each sample to a row ([`SampledTrace::credit`]).

use super::*;
use lotus_sys::input::Dir;

/// A pool thread's tasks not yet passed: (start, end, cause), by start.
type TaskWindows = VecDeque<(u64, u64, cause::Cause)>;

/// Where the rule credits a sample: a row of the attribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// The op path of this id (its place in the sweep's tree).
    Op(u32),
    Outside(Role),
    /// A main process's samples outside every op, by phase (only
    /// `attribute` splits them; the rule credits them `Outside`).
    Main(MainPhase),
    /// A worker's samples outside every op before its first batch or
    /// after its last (`phases`; the rule credits them `Outside`).
    Worker(WorkerPhase),
    /// The DataLoader's own threads (`kind=thread`; the rule credits
    /// them `Independent`).
    Threads(Role),
    Independent(Role),
    /// A pool's spin after the op of this path returned: the runtime's
    /// threads waiting for more work from it.
    Spin(u32),
    Untraced,
}

/// One sample as the rule credits it: its row and, for an op, the span
/// (its id: its place in reading order among the folder's events).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Credit<'a> {
    pub(crate) sample: &'a Sample,
    pub(crate) target: Target,
    pub(crate) span: Option<u64>,
    /// Whether the sample is a pool thread's, credited to the op its
    /// process's main thread was in.
    pub(crate) pool: bool,
    /// The role of its process, where it wrote a log.
    pub(crate) role: Option<Role>,
    /// Its stack id in the folder's stack table (0: none).
    pub(crate) stack: u32,
}

pub(super) fn samples_of(
    files: &SampleFiles,
) -> Result<lotus_samples::SampleReader<BufReader<lotus_sys::input::SizedFile>>, Error> {
    files.samples().map_err(|e| Error::Io(e.to_string()))
}

/// A sampled trace folder read and ready to credit: its sampling
/// description and symbols, its op spans sorted, its helper threads told
/// apart (pools or independent). [`SampledTrace::credit`] is the one place
/// the rule is applied: `lotus attribute DIR` sums what it credits per
/// row, `lotus trace view` per span.
pub(crate) struct SampledTrace {
    /// The folder's samples files, as [`Sampling::read`] read them; their
    /// notes are moved into the trace's own on opening (so its `notes`
    /// are empty).
    pub(crate) sampling: Sampling,
    pub(super) logs: Logs,
    /// The op tree of the spans, once [`SampledTrace::credit`] swept them.
    pub(super) tree: Tree,
    pub(super) pools: HashSet<(u32, u32)>,
    pub(super) pool_threads: Vec<String>,
    pub(super) independent_threads: Vec<String>,
    pub(super) notes: Vec<String>,
    /// Bytes of a cut last record, once the samples are read.
    pub(super) cut_bytes: usize,
    /// How helper threads are credited.
    pub(super) rule: HelperRule,
    /// The stacks file, read once (why not, where it could not be).
    pub(super) stacks: Result<std::rc::Rc<lotus_samples::StackTable>, String>,
    /// The samples' frames, read for what they say of helper threads.
    pub(super) frames: cause::Frames,
    /// Helper threads their frames show a parallel runtime's pool.
    pub(super) runtime_pools: HashMap<(u32, u32), cause::Runtime>,
}

impl SampledTrace {
    /// Reads the sampled trace folder `dir` (logs of prefix-independent
    /// names, samples of `prefix`): an error when it has no samples or its
    /// logs no clock pairs. Streams the samples once, to tell pools from
    /// independent threads.
    pub(crate) fn open<'a>(
        dir: impl Into<Dir<'a>>,
        prefix: &str,
        budget: Budget,
    ) -> Result<SampledTrace, Error> {
        let dir: Dir<'_> = dir.into();
        SampledTrace::open_by(dir, prefix, budget, HelperRule::Cause)
    }

    /// [`SampledTrace::open`], crediting helper threads by `rule`.
    pub(crate) fn open_by<'a>(
        dir: impl Into<Dir<'a>>,
        prefix: &str,
        budget: Budget,
        rule: HelperRule,
    ) -> Result<SampledTrace, Error> {
        let dir: Dir<'_> = dir.into();
        let mut sampling = Sampling::read(dir, prefix)?;
        let logs = read_logs(dir, budget)?;
        let mut notes = logs.skipped_logs.clone();
        notes.append(&mut sampling.notes);
        if logs.bad_lines > 0 {
            notes.push(format!(
                "{} log lines could not be read and were skipped",
                logs.bad_lines
            ));
        }
        // A log still being written ends in NUL bytes too: said only of
        // a run that ended.
        if logs.cut_logs > 0 && !partial(&sampling.meta, 0) {
            notes.push(format!(
                "{} log(s) end cut short (NUL bytes: their processes were killed before they closed them); their lines before are read",
                logs.cut_logs
            ));
        }
        // Read once, for the rule's frames and for `--format folded`; a
        // stacks file that cannot be read leaves each sample its own
        // function in the rule, and `--format folded` says why.
        let stacks = sampling
            .files
            .read_stacks()
            .map(std::rc::Rc::new)
            .map_err(|e| e.to_string());
        let frames = cause::Frames::new(match rule {
            HelperRule::Cause => stacks.as_ref().ok().cloned(),
            HelperRule::Timing => None,
        });
        let mut trace = SampledTrace {
            sampling,
            logs,
            tree: Tree::default(),
            pools: HashSet::new(),
            pool_threads: Vec::new(),
            independent_threads: Vec::new(),
            notes,
            cut_bytes: 0,
            rule,
            stacks,
            frames,
            runtime_pools: HashMap::new(),
        };
        trace.find_pools()?;
        Ok(trace)
    }

    /// Pass 1: each helper thread's samples inside and outside its main
    /// thread's ops, its first and last sample; the pools are the threads
    /// that run (much) more while the main thread is in an op.
    pub(super) fn find_pools(&mut self) -> Result<(), Error> {
        let logs = &mut self.logs;
        let mut helpers: HashMap<(u32, u32), HelperCounts> = HashMap::new();
        // Per process, the end of its main thread's last op: a helper is
        // judged up to there. What a thread does at the process's
        // shutdown (a pool's threads torn down, and the samples the
        // sampler adds at a thread's exit for the unsampled tail of its
        // whole life, stamped at the exit: more of them the later its
        // timer fired, so the busier the machine) says nothing of whether
        // it ran with the ops; counted, a handful of them outside the ops
        // made a pool's thread "independent" on a busy machine, and its
        // op lost its samples. Those samples are still credited by the
        // rule (a pool's outside any op go to "outside any op").
        let mut ops_end: HashMap<u32, u64> = HashMap::new();
        for s in logs.spans.iter()? {
            let s = s?;
            if s.tid == s.pid {
                let end = ops_end.entry(s.pid).or_insert(s.end);
                *end = (*end).max(s.end);
            }
        }
        {
            let mut sweep = Sweep::new(logs.spans.iter()?);
            let mut reader = samples_of(&self.sampling.files)?;
            while let Some(s) = reader.next_with_stack() {
                let (s, stack) = s.map_err(|e| Error::Io(e.to_string()))?;
                sweep.advance(s.time_ns)?;
                if s.tid == s.pid
                    || !logs.roles.contains_key(&s.pid)
                    || logs.traced_threads.contains(&(s.pid, s.tid))
                {
                    continue;
                }
                if self.rule == HelperRule::Cause
                    && !logs.machinery_threads.contains(&(s.pid, s.tid))
                {
                    if let Some(rt) = self
                        .frames
                        .read(&self.sampling.symbols, stack, s.symbol)
                        .pool
                    {
                        self.runtime_pools.insert((s.pid, s.tid), rt);
                    }
                }
                let inside = sweep.innermost(s.pid, s.pid, s.time_ns).is_some();
                let h = helpers.entry((s.pid, s.tid)).or_insert(HelperCounts {
                    inside: 0,
                    outside: 0,
                    first: s.time_ns,
                    last: s.time_ns,
                    covered_ns: 0,
                });
                if ops_end.get(&s.pid).is_some_and(|end| s.time_ns >= *end) {
                    // Listed (a thread seen only then is independent),
                    // not judged.
                    continue;
                }
                h.first = h.first.min(s.time_ns);
                h.last = h.last.max(s.time_ns);
                if inside {
                    h.inside += 1;
                } else {
                    h.outside += 1;
                }
            }
        }
        main_op_time_in_windows(&mut logs.spans, &mut helpers)?;
        let task_threads: HashSet<(u32, u32)> = logs.tasks.iter().map(|t| (t.pid, t.tid)).collect();
        let mut helper_keys: Vec<_> = helpers.keys().copied().collect();
        helper_keys.sort_unstable();
        for key in helper_keys {
            if let Some(rt) = self.runtime_pools.get(&key) {
                self.pool_threads
                    .push(format!("{}/{} ({})", key.0, key.1, rt.name()));
                continue;
            }
            if self.rule == HelperRule::Cause && task_threads.contains(&key) {
                self.pool_threads
                    .push(format!("{}/{} (Python thread pool)", key.0, key.1));
                continue;
            }
            let h = helpers[&key];
            // A thread seen only inside ops (its window all op time) is a
            // pool; one the tracer named as the DataLoader's machinery
            // never is (a queue's feeder thread runs right after each
            // batch, while the next one's ops run, and collects the
            // garbage of those ops: 120 ms credited to a dataset's row
            // in one run when it was taken for its pool).
            if !logs.machinery_threads.contains(&key) && is_pool(&h) {
                self.pools.insert(key);
                self.pool_threads.push(format!("{}/{}", key.0, key.1));
            } else {
                self.independent_threads
                    .push(format!("{}/{}", key.0, key.1));
            }
        }
        Ok(())
    }

    /// Pass 2, the rule: hands every sample, in time order, to `f` with
    /// the row (and for an op, the span) it is credited to. Returns how
    /// many samples were read; the notes then say whether the run was
    /// partial.
    pub(crate) fn credit(
        &mut self,
        mut f: impl FnMut(Credit<'_>) -> Result<(), Error>,
    ) -> Result<u64, Error> {
        let logs = &mut self.logs;
        let mut total = 0u64;
        let mut reader = samples_of(&self.sampling.files)?;
        let mut sweep = Sweep::new(logs.spans.iter()?);
        sweep.gc_op = logs
            .ops
            .iter()
            .position(|n| n == "gc")
            .and_then(|i| u32::try_from(i).ok());
        let pool_pids: HashSet<u32> = self.runtime_pools.keys().map(|k| k.0).collect();
        let interval_ns = self.sampling.interval_ns;
        let mut causes = cause::Causes::default();
        // Tasks, by when they were handed over: each one's cause is what
        // the handing thread had open then, read as the sweep passes it.
        let by_cause = self.rule == HelperRule::Cause;
        let mut next_task = 0;
        let mut task_windows: HashMap<(u32, u32), TaskWindows> = HashMap::new();
        // Samples credited to an op by timing alone (no evidence of cause).
        let mut timed = 0u64;
        while let Some(s) = reader.next_with_stack() {
            let (s, stack): (Sample, u32) = s.map_err(|e| Error::Io(e.to_string()))?;
            while let Some(t) = logs
                .tasks
                .get(next_task)
                .filter(|t| by_cause && t.at <= s.time_ns)
            {
                sweep.advance(t.at)?;
                let role = logs.roles.get(&t.pid).copied().unwrap_or(Role::Worker);
                let c = cause::Cause::of(sweep.caller(t.pid, t.by, t.at), role);
                let w = task_windows.entry((t.pid, t.tid)).or_default();
                let at = w.partition_point(|x| x.0 <= t.start);
                w.insert(at, (t.start, t.end, c));
                next_task += 1;
            }
            sweep.advance(s.time_ns)?;
            total += 1;
            let mut pool = false;
            let role = logs.roles.get(&s.pid).copied();
            let (target, span) = match role {
                None => (Target::Untraced, None),
                Some(role) => {
                    let own = sweep.innermost(s.pid, s.tid, s.time_ns);
                    let op_thread = s.tid == s.pid || logs.traced_threads.contains(&(s.pid, s.tid));
                    if op_thread && pool_pids.contains(&s.pid) {
                        // A thread inside a runtime's call hands its pool
                        // work now, for the op it is in.
                        if let Some(rt) = self
                            .frames
                            .read(&self.sampling.symbols, stack, s.symbol)
                            .hands_to
                        {
                            let caller = sweep.caller(s.pid, s.tid, s.time_ns);
                            causes.handed(s.pid, rt, s.time_ns, cause::Cause::of(caller, role));
                        }
                    }
                    // The task this thread runs now, looked up only for
                    // a sample in no op span of its own (not on the hot
                    // path of the op threads' samples).
                    let mut task_now = || {
                        let w = task_windows.get_mut(&(s.pid, s.tid))?;
                        while w.front().is_some_and(|x| x.1 <= s.time_ns) {
                            w.pop_front();
                        }
                        w.front().filter(|x| x.0 <= s.time_ns).map(|x| x.2)
                    };
                    if let Some(span) = own {
                        (Target::Op(span.path), Some(span.id))
                    } else if let Some(c) = task_now() {
                        // A pool thread running a task (outside any op
                        // span of its own, where the task calls ops): for
                        // what its handing thread had open then, however
                        // long ago.
                        let (target, span, of_op) = c.credit_task();
                        pool = of_op;
                        (target, span)
                    } else if op_thread {
                        (Target::Outside(role), None)
                    } else if let Some(&rt) = self.runtime_pools.get(&(s.pid, s.tid)) {
                        let r = self.frames.read(&self.sampling.symbols, stack, s.symbol);
                        let c = if r.waits {
                            // Waiting before any work was seen handed to
                            // it: a pool starts in its wait loop (OpenBLAS
                            // spins from its creation, at numpy's import),
                            // for what its process ran when it started.
                            causes.last(s.pid, s.tid, rt).unwrap_or_else(|| {
                                let c =
                                    cause::Cause::of(sweep.caller(s.pid, s.pid, s.time_ns), role);
                                causes.worked(s.pid, s.tid, s.time_ns, c);
                                c
                            })
                        } else {
                            // Working: for whatever its process's main
                            // thread runs now, which waits for it.
                            let open = sweep.caller(s.pid, s.pid, s.time_ns);
                            let c = cause::Cause::of(open, role);
                            // A sample stands for its thread's CPU since
                            // its previous one: where most of that lies
                            // before the call began (a pool spinning until
                            // the work came: its first working sample), it
                            // is the spin after the work before.
                            // Straddling the call's start: the spin after
                            // the thread's own last work where it came less
                            // than half an interval after the start (see
                            // `Cause::credit`); not by the caller's hand-off,
                            // often seen first (it read OpenBLAS 5% high).
                            let before = causes.own_last(s.pid, s.tid).filter(|last| {
                                let since = causes.previous(s.pid, s.tid).unwrap_or(s.time_ns);
                                open.is_some_and(|o| {
                                    o.start > since
                                        && s.time_ns.saturating_sub(o.start) < interval_ns / 2
                                        && !last.is_span(o.id)
                                })
                            });
                            causes.worked(s.pid, s.tid, s.time_ns, c);
                            before.unwrap_or(c)
                        };
                        let previous = causes.previous(s.pid, s.tid);
                        causes.sampled(s.pid, s.tid, s.time_ns);
                        let (target, span, in_call) =
                            c.credit(s.time_ns, previous, interval_ns / 2);
                        pool = in_call;
                        (target, span)
                    } else if self.pools.contains(&(s.pid, s.tid)) {
                        match sweep.innermost(s.pid, s.pid, s.time_ns) {
                            Some(span) => {
                                pool = true;
                                timed += 1;
                                (Target::Op(span.path), Some(span.id))
                            }
                            None => (Target::Outside(role), None),
                        }
                    } else {
                        (Target::Independent(role), None)
                    }
                }
            };
            f(Credit {
                sample: &s,
                target,
                span,
                pool,
                role,
                stack,
            })?;
        }
        self.tree = sweep.finish()?;
        if timed > 0 && by_cause {
            let mut timed_pools: Vec<&(u32, u32)> = self.pools.iter().collect();
            timed_pools.sort_unstable();
            let threads: Vec<String> = timed_pools
                .iter()
                .map(|(pid, tid)| format!("{pid}/{tid}"))
                .collect();
            self.notes.push(format!(
                "{timed} samples ({:.3} s) of helper threads {} went to ops by timing alone (they ran while those ops ran): no runtime's frames and no task record show what caused them, so their op is a guess; the threads' own code (a thread the job started itself) decides",
                timed.saturating_mul(self.sampling.interval_ns) as f64 / 1e9,
                threads.join(", ")
            ));
        }
        if self.tree.folded > 0 {
            self.notes.push(format!(
                "{} op spans nested deeper than {MAX_DEPTH} levels were counted in their ancestor",
                self.tree.folded
            ));
        }
        self.cut_bytes = reader.cut_bytes();
        self.note_how_it_ended();
        Ok(total)
    }

    /// Adds the notes on a cut samples file, a run that did not end
    /// normally and samples the kernel lost.
    pub(super) fn note_how_it_ended(&mut self) {
        let notes = ending_notes(&self.sampling.meta, self.cut_bytes);
        self.notes.extend(notes);
    }

    /// Whether the samples are those of a run cut short: the sampling
    /// did not end normally, or the file ends in a cut record.
    pub(crate) fn partial(&self) -> bool {
        partial(&self.sampling.meta, self.cut_bytes)
    }

    pub(super) fn lost_samples(&self) -> u64 {
        lost_samples(&self.sampling.meta)
    }

    /// The folder's stacks file, as [`SampledTrace::open`] read it.
    pub(crate) fn stacks(&self) -> Result<std::rc::Rc<lotus_samples::StackTable>, Error> {
        self.stacks.clone().map_err(Error::Io)
    }

    /// What is worth telling the user (after [`SampledTrace::credit`]).
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// A sampled folder's samples files, read and checked: its sampling
/// description, symbols and counters, and what is worth saying of them
/// (what [`SampledTrace`] and the ops from frames, `frame_ops`, share).
pub(crate) struct Sampling {
    /// The samples files' paths (the samples, symbols and stacks).
    pub(super) files: SampleFiles,
    /// The sampling description, `key=value` (notes left out).
    pub(super) meta: HashMap<String, String>,
    /// The symbols the samples name.
    pub(crate) symbols: SymbolTable,
    /// Sampling frequency, Hz.
    pub(crate) frequency_hz: u64,
    /// Sampling interval, ns: the CPU time one sample stands for.
    pub(crate) interval_ns: u64,
    /// The counters each sample carries, in record order.
    pub(crate) counters: Vec<String>,
    /// Counters asked for and refused by the kernel, with its reason.
    pub(crate) counters_unsupported: Option<CountersUnsupported>,
    /// Symbols skipped, counters refused (where asked for), a slowdown
    /// by sampling.
    pub(super) notes: Vec<String>,
}

impl Sampling {
    /// Reads the samples files of `prefix` in `dir`: an error when there
    /// are none, the sampling was unavailable, or the files disagree.
    pub(super) fn read(dir: Dir<'_>, prefix: &str) -> Result<Sampling, Error> {
        let files = SampleFiles::of(dir, prefix);
        let mut meta: HashMap<String, String> = HashMap::new();
        for (k, v) in files
            .read_sampling()
            .map_err(|e| Error::Io(e.to_string()))?
        {
            if k == "note" {
                continue;
            }
            if meta.contains_key(&k) {
                return Err(Error::Io(format!(
                    "{}: `{}=` is given twice: the file is damaged or was not written by lotus; trace again",
                    files.sampling.display(),
                    lotus_sys::input::escaped(&k)
                )));
            }
            meta.insert(k, v);
        }
        if meta.get("status").map(String::as_str) == Some("unavailable") {
            return Err(Error::NoSamples(format!(
                "{}: the trace was taken without samples: {}",
                dir.path().display(),
                lotus_sys::input::escaped(
                    meta.get("reason")
                        .map_or("perf could not run", String::as_str)
                )
            )));
        }
        let files = SampleFiles::open(dir, prefix).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NoSamples(e.to_string())
            } else {
                Error::Io(e.to_string())
            }
        })?;
        let symbols: SymbolTable = files.read_symbols().map_err(|e| Error::Io(e.to_string()))?;
        let num = |k: &str| meta.get(k).and_then(|v| v.parse::<u64>().ok());
        let frequency_hz = num("frequency_hz").unwrap_or(1000).max(1);
        let interval_ns = num("interval_ns").unwrap_or(1_000_000_000 / frequency_hz);
        let counters = counter_names(&meta, &files)?;
        // Every CPU time is samples times the interval: one that cannot
        // hold the samples the file can hold is refused here, by name,
        // rather than wrapped later.
        let most_samples = samples_of(&files)?.most_records();
        if most_samples.checked_mul(interval_ns).is_none() {
            return Err(Error::Overflow {
                path: files.sampling.display().to_string(),
                field: format!("interval_ns={interval_ns}"),
                message: format!(
                    "the samples file holds up to {most_samples} samples, and that many times this interval is past what lotus can count in ns: the file is damaged or was not written by lotus; trace again"
                ),
            });
        }
        let counters_unsupported =
            meta.get("counters_unsupported")
                .map(|names| CountersUnsupported {
                    counters: names.split(',').map(str::to_string).collect(),
                    reason: meta.get("counters_reason").cloned().unwrap_or_default(),
                });
        let mut notes: Vec<String> = symbols.skipped_note(&files.symbols).into_iter().collect();
        // Said by `trace run` when it ran; again here only where the user
        // asked for the counters (runs before `counters_asked=` say so
        // always).
        let asked = meta.get("counters_asked").map(String::as_str) != Some("default");
        if let Some(u) = counters_unsupported.as_ref().filter(|_| asked) {
            let hardware = meta.get("counters_kind").map(String::as_str) == Some("hardware");
            notes.push(lotus_samples::unsupported_note(
                hardware,
                &lotus_sys::input::escaped(&u.reason),
            ));
        }
        // Sampling slows the sampled threads; where it did so noticeably
        // (an expensive timer interrupt, as in some virtual machines), the
        // CPU times include that and the shares of interrupt-sensitive code
        // shift: say so, with the figure the collection measured.
        if let Some(pct) = meta
            .get("sampling_slowdown_pct")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|&p| p >= SLOWDOWN_NOTE_PCT)
        {
            notes.push(format!(
                "sampling at {frequency_hz} Hz slowed the job's threads by about {pct:.0}% here ({} us a sample): CPU times include it; a lower --frequency disturbs less",
                lotus_sys::input::escaped(meta.get("sampling_cost_us").map_or("?", String::as_str))
            ));
        }
        Ok(Sampling {
            files,
            meta,
            symbols,
            frequency_hz,
            interval_ns,
            counters,
            counters_unsupported,
            notes,
        })
    }
}

/// The samples the kernel lost, as the sampling description says.
pub(super) fn lost_samples(meta: &HashMap<String, String>) -> u64 {
    meta.get("lost").and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Whether the samples are those of a run cut short: the sampling did
/// not end normally, or the file ends in a cut record (`cut_bytes`).
pub(super) fn partial(meta: &HashMap<String, String>, cut_bytes: usize) -> bool {
    cut_bytes > 0 || meta.get("status").map(String::as_str) != Some("complete")
}

/// The notes on a cut samples file (`cut_bytes` dropped), a run that
/// did not end normally and samples the kernel lost.
pub(super) fn ending_notes(meta: &HashMap<String, String>, cut_bytes: usize) -> Vec<String> {
    let mut notes = Vec::new();
    if cut_bytes > 0 {
        notes.push(format!(
            "the samples file ends in a cut record ({cut_bytes} bytes dropped): the run was stopped while writing"
        ));
    }
    if meta.get("status").map(String::as_str) != Some("complete") {
        notes.push(how_it_ended(meta));
    }
    let lost = lost_samples(meta);
    if lost > 0 {
        notes.push(format!(
            "{lost} samples were lost by the kernel (ring buffer full): not in any row"
        ));
    }
    notes
}
