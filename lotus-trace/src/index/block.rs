//! [`TraceIndex::load`]'s work per event, done on the parsing threads: each
//! block of lines is summed up there as it is parsed ([`BlockSummary`]: events per
//! kind, first start and last end, count, total and durations per op name
//! and per kind, and the few events that are kept one by one: batches,
//! waits, consumptions, the workers' starts and stops), and the index adds the summary
//! ([`TraceIndex::add_block`]). The result is the one [`TraceIndex::add`]
//! gives event by event (keys, ordinals and processes in the same order);
//! the single thread that gathers the index only does work per block and
//! per duration. Profiling `trace stats` at 10 million events showed that
//! thread, taking each event from the parsers (and dropping it there,
//! shared names and all), to be the bottleneck.

use std::sync::Arc;

use super::{DurationKey, TraceIndex};
use crate::event::{BlockReader, Event, Kind};
use crate::parse::{BadLine, Entry, EntrySink, LineEvent, LineParser, Names};
use lotus_sort::SpillError;

/// Count, total, CPU (`cpu=`) and (when kept) the durations of one key
/// within a block.
#[derive(Debug, Default)]
struct Sums {
    count: u64,
    total_ns: i128,
    cpu_count: u64,
    cpu_ns: u128,
    durations: Vec<i64>,
}

impl Sums {
    fn add(&mut self, dur: i64, cpu: Option<u64>, keep: bool) {
        self.count += 1;
        self.total_ns += i128::from(dur);
        if let Some(c) = cpu {
            self.cpu_count += 1;
            self.cpu_ns += u128::from(c);
        }
        if keep {
            self.durations.push(dur);
        }
    }
}

/// What one block of lines adds to the index: its events summed up as
/// they are parsed (it is the parser's [`EntrySink`]), one segment per
/// process (a log's block has one).
#[derive(Debug)]
pub(crate) struct BlockSummary<R = ()> {
    keep_durations: bool,
    segments: Vec<Segment>,
    /// The kinds a reader of the same pass wants
    /// ([`super::TraceIndex::load_with`]).
    want: Option<fn(Kind) -> bool>,
    /// That reader's part for this block, fed those events in line order.
    pub(crate) reader: R,
}

/// The events of one process in a block, summed up.
#[derive(Debug, Default)]
struct Segment {
    /// The first event: its process.
    first: Option<Event>,
    events: u64,
    per_kind: [u64; Kind::ALL.len()],
    min_start_ns: Option<u64>,
    max_end_ns: Option<u64>,
    /// Batches, waits and consumptions, with their place among the
    /// segment's events.
    kept: Vec<(u64, Event)>,
    /// Per kind other than op, in [`Kind::ALL`]'s order.
    kinds: [Sums; Kind::ALL.len()],
    /// Per op name, in the order met.
    ops: Vec<(Arc<str>, Sums)>,
    /// The op of the last event: a block cycles through a few names.
    last_op: usize,
    /// The bad lines, in order.
    bad: Vec<BadLine>,
}

/// Whether two hosts are the same: the one shared name of a log's
/// process (compared by address), or equal names.
fn same_host(a: &Option<Arc<str>>, b: &Option<Arc<str>>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y) || x == y,
        (None, None) => true,
        _ => false,
    }
}

fn same_process(a: &Event, b: &Event) -> bool {
    a.pid == b.pid && a.role == b.role && a.rank == b.rank && same_host(&a.host, &b.host)
}

impl BlockSummary {
    /// An empty summary (`keep_durations`: each event's duration is kept,
    /// for statistics).
    #[cfg(test)]
    pub(crate) fn new(keep_durations: bool) -> BlockSummary {
        BlockSummary::wanting(keep_durations, |_| false, ())
    }
}

impl<R: BlockReader> BlockSummary<R> {
    /// An empty summary (see [`BlockSummary::new`]) feeding `reader` the
    /// events of the kinds `want` takes.
    pub(crate) fn wanting(
        keep_durations: bool,
        want: fn(Kind) -> bool,
        reader: R,
    ) -> BlockSummary<R> {
        BlockSummary {
            keep_durations,
            segments: Vec::new(),
            want: Some(want),
            reader,
        }
    }
}

impl Segment {
    /// Counts one event; returns its place among the segment's events.
    fn count(
        &mut self,
        kind: Kind,
        name: &str,
        (start_ns, dur_ns, cpu): (u64, u64, Option<u64>),
        keep: bool,
    ) -> u64 {
        let ordinal = self.events;
        self.events += 1;
        self.per_kind[kind as usize] += 1;
        let end_ns = start_ns.saturating_add(dur_ns);
        self.min_start_ns = Some(self.min_start_ns.map_or(start_ns, |m| m.min(start_ns)));
        self.max_end_ns = Some(self.max_end_ns.map_or(end_ns, |m| m.max(end_ns)));
        let dur = i64::try_from(dur_ns).unwrap_or(i64::MAX);
        if kind == Kind::Op {
            let same = |(n, _): &(Arc<str>, Sums)| **n == *name;
            let i = if self.ops.get(self.last_op).is_some_and(same) {
                self.last_op
            } else if let Some(i) = self.ops.iter().position(same) {
                i
            } else {
                self.ops.push((Arc::from(name), Sums::default()));
                self.ops.len() - 1
            };
            self.last_op = i;
            self.ops[i].1.add(dur, cpu, keep);
        } else if !matches!(kind, Kind::Thread | Kind::Config) {
            // A thread's name (or a DataLoader's settings) is not a span:
            // no duration to summarise
            // (as in [`super::TraceIndex::add`]).
            self.kinds[kind as usize].add(dur, cpu, keep);
        }
        ordinal
    }

    /// Whether events of `kind` are kept one by one.
    fn kept_kind(kind: Kind) -> bool {
        matches!(
            kind,
            Kind::Batch | Kind::Wait | Kind::Consume | Kind::Start | Kind::Stop
        )
    }

    fn add(&mut self, e: Event, keep: bool) {
        let ordinal = self.count(e.kind, &e.name, (e.start_ns, e.dur_ns, e.cpu_ns), keep);
        if Self::kept_kind(e.kind) {
            self.kept.push((ordinal, e.clone()));
        }
        if self.first.is_none() {
            self.first = Some(e);
        }
    }
}

impl<R> BlockSummary<R> {
    /// Its reader's part, and the rest for the index.
    pub(crate) fn split(self) -> (R, BlockSummary) {
        let BlockSummary {
            keep_durations,
            segments,
            want,
            reader,
        } = self;
        (
            reader,
            BlockSummary {
                keep_durations,
                segments,
                want,
                reader: (),
            },
        )
    }

    /// The segment for events of `fits`'s process: the last one, or a new
    /// one.
    fn segment(&mut self, fits: impl Fn(&Event) -> bool) -> &mut Segment {
        let fits = self
            .segments
            .last()
            .is_some_and(|s| s.first.as_ref().is_none_or(fits));
        if !fits {
            self.segments.push(Segment::default());
        }
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }
}

impl<R: BlockReader> EntrySink for BlockSummary<R> {
    /// An event line summed up from its fields: an [`Event`] is made only
    /// for the segment's first (its process) and the kept ones.
    #[inline(always)]
    fn line_event(&mut self, parser: &LineParser, names: &mut Names, p: LineEvent<'_>) {
        let keep = self.keep_durations;
        let wanted = self.want.is_some_and(|w| w(p.kind));
        let mut extra = None;
        let process = &parser.process;
        let s = self.segment(|f| {
            f.pid == process.pid
                && f.role == process.role
                && f.rank == process.rank
                && same_host(&f.host, &process.host)
        });
        let kind = p.kind;
        let ordinal = s.count(kind, p.name, (p.start_ns, p.dur_ns, p.cpu_ns), keep);
        if !Segment::kept_kind(kind) && s.first.is_some() {
            // The usual line (an op's): made an event only where the
            // reader wants it, and pushed where it is made.
            if wanted {
                match kind {
                    Kind::Op => self.reader.op(&parser.op_span(&p)),
                    _ => {
                        if let Entry::Event(e) = parser.event(names, p) {
                            self.reader.event(e);
                        }
                    }
                }
            }
            return;
        }
        if let Entry::Event(e) = parser.event(names, p) {
            if Segment::kept_kind(kind) {
                s.kept.push((ordinal, e.clone()));
            }
            // The event moves to where it is wanted last: a clone
            // only where both the reader and the segment keep it.
            if s.first.is_none() {
                if wanted {
                    extra = Some(e.clone());
                }
                s.first = Some(e);
            } else if wanted {
                extra = Some(e);
            }
        }
        if let Some(e) = extra {
            self.reader.take(e);
        }
    }

    fn push(&mut self, entry: Entry) {
        match entry {
            Entry::Bad(b) => {
                if self.segments.is_empty() {
                    self.segments.push(Segment::default());
                }
                if let Some(s) = self.segments.last_mut() {
                    s.bad.push(b);
                }
            }
            Entry::Event(e) => {
                let keep = self.keep_durations;
                if self.want.is_some_and(|w| w(e.kind)) {
                    self.reader.take(e.clone());
                }
                self.segment(|f| same_process(f, &e)).add(e, keep);
            }
        }
    }
}

impl TraceIndex {
    /// Adds a block's summary: what [`TraceIndex::add`] of each of its
    /// events would. `on_bad` sees each bad line. An error only when a
    /// temporary file cannot be written.
    pub(crate) fn add_block(
        &mut self,
        block: BlockSummary,
        on_bad: &mut impl FnMut(&BadLine),
    ) -> Result<(), SpillError> {
        for segment in block.segments {
            self.add_segment(segment, on_bad)?;
        }
        Ok(())
    }

    fn add_segment(
        &mut self,
        s: Segment,
        on_bad: &mut impl FnMut(&BadLine),
    ) -> Result<(), SpillError> {
        for b in s.bad {
            on_bad(&b);
            self.warnings.push(b);
        }
        let Some(first) = &s.first else {
            return Ok(());
        };
        let process = self.resolve(first);
        let base = self.events;
        self.events += s.events;
        self.processes[process].events += s.events;
        for (kind, n) in Kind::ALL.into_iter().zip(s.per_kind) {
            if n > 0 {
                *self.per_kind.entry(kind).or_insert(0) += n;
            }
        }
        if let (Some(lo), Some(hi)) = (s.min_start_ns, s.max_end_ns) {
            self.min_start_ns = Some(self.min_start_ns.map_or(lo, |m| m.min(lo)));
            self.max_end_ns = Some(self.max_end_ns.map_or(hi, |m| m.max(hi)));
        }
        for (ordinal, e) in &s.kept {
            self.keep(process, e, base + ordinal)?;
        }
        // Keys in the order [`TraceIndex::add`] meets them: the kinds'
        // exist from the start, op names are added in the order met.
        for (kind, sums) in Kind::ALL.into_iter().zip(s.kinds) {
            if sums.count > 0 {
                self.add_sums(kind as u32, sums)?;
            }
        }
        for (name, sums) in s.ops {
            let key = match self.op_keys.get(&*name) {
                Some(&k) => k,
                None => {
                    let k = self.keys.len() as u32;
                    self.keys.push(DurationKey {
                        kind: Kind::Op,
                        name: Some(name.to_string()),
                        count: 0,
                        total_ns: 0,
                        cpu_count: 0,
                        cpu_ns: 0,
                    });
                    self.op_keys.insert(name.to_string(), k);
                    k
                }
            };
            self.add_sums(key, sums)?;
        }
        Ok(())
    }

    fn add_sums(&mut self, key: u32, sums: Sums) -> Result<(), SpillError> {
        let k = &mut self.keys[key as usize];
        k.count += sums.count;
        k.total_ns += sums.total_ns;
        k.cpu_count += sums.cpu_count;
        k.cpu_ns += sums.cpu_ns;
        if let Some(d) = &mut self.durations {
            d.add(key, &sums.durations)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BatchRec, MainRec};
    use super::*;
    use crate::event::Role;
    use lotus_sort::Budget;

    fn ev(name: &str, kind: Kind, pid: u32, start_ns: u64, dur_ns: u64, batch: u64) -> Event {
        let role = if kind == Kind::Wait || kind == Kind::Consume {
            Role::Main
        } else {
            Role::Worker
        };
        Event {
            batch: Some(batch),
            ready: (kind == Kind::Wait).then_some(batch.is_multiple_of(2)),
            host: Some(Arc::from("node1")),
            rank: Some(0),
            ..Event::span(name, kind, pid, role, start_ns, dur_ns)
        }
    }

    /// Everything the index gathered, for comparison.
    fn gathered(ix: &mut TraceIndex) -> String {
        let processes: Vec<(u32, u64, Vec<String>)> = ix
            .processes
            .iter()
            .map(|p| (p.process.pid, p.events, p.files.clone()))
            .collect();
        let batches: Vec<BatchRec> = ix
            .batches
            .iter()
            .expect("b")
            .map(|r| r.expect("b"))
            .collect();
        let waits: Vec<MainRec> = ix.waits.iter().expect("w").map(|r| r.expect("w")).collect();
        let consumes: Vec<MainRec> = ix
            .consumes
            .iter()
            .expect("c")
            .map(|r| r.expect("c"))
            .collect();
        let starts_stops: Vec<MainRec> = ix
            .starts
            .iter()
            .expect("s")
            .chain(ix.stops.iter().expect("s"))
            .map(|r| r.expect("s"))
            .collect();
        let durations: Vec<super::super::DurCount> = ix
            .take_durations()
            .expect("durations")
            .finish()
            .expect("sorted")
            .map(|r| r.expect("read"))
            .collect();
        format!(
            "{} {:?} {:?} {:?} {:?} {processes:?} {batches:?} {waits:?} {consumes:?} {starts_stops:?} {:?} {:?} {durations:?}",
            ix.events,
            ix.per_kind,
            ix.min_start_ns,
            ix.max_end_ns,
            ix.keys,
            ix.wait_buckets,
            ix.warnings.shown,
        )
    }

    /// Blocks summed up (one holding two processes' events, and bad
    /// lines) give the index that adding each event gives: keys in the
    /// order met, ordinals, processes, spools and durations alike.
    #[test]
    fn summed_blocks_give_what_each_event_gives() {
        let mut entries = Vec::new();
        for b in 0..40u64 {
            let pid = if b % 10 < 7 { 11 } else { 12 };
            for (i, op) in ["Decode", "Crop", "Decode", "Flip"].iter().enumerate() {
                let start = b * 1000 + i as u64 * 100;
                entries.push(Entry::Event(ev(
                    op,
                    Kind::Op,
                    pid,
                    start,
                    50 + (b * 7 + i as u64) % 30,
                    b,
                )));
            }
            entries.push(Entry::Event(ev(
                "Batch",
                Kind::Batch,
                pid,
                b * 1000,
                700 + b,
                b,
            )));
            if b % 13 == 5 {
                entries.push(Entry::Bad(BadLine {
                    file: "log".into(),
                    line: b,
                    message: format!("bad {b}"),
                }));
            }
            entries.push(Entry::Event(ev(
                "Wait",
                Kind::Wait,
                10,
                b * 1000 + 800,
                b % 3,
                b,
            )));
            entries.push(Entry::Event(ev(
                "Consume",
                Kind::Consume,
                10,
                b * 1000 + 900,
                0,
                b,
            )));
            if b % 10 == 0 {
                entries.push(Entry::Event(ev(
                    "WorkersStart",
                    Kind::Start,
                    10,
                    b * 1000 + 950,
                    30,
                    b,
                )));
                entries.push(Entry::Event(ev(
                    "WorkersStop",
                    Kind::Stop,
                    10,
                    b * 1000 + 990,
                    5,
                    b,
                )));
            }
        }
        let budget = Budget::new(64);
        let mut one_by_one = TraceIndex::new(true, budget);
        one_by_one.begin("", "log");
        let mut summed = TraceIndex::new(true, budget);
        summed.begin("", "log");
        let mut bad_seen = Vec::new();
        for chunk in entries.chunks(23) {
            let mut block = BlockSummary::new(true);
            for entry in chunk {
                block.push(entry.clone());
                match entry {
                    Entry::Event(e) => {
                        one_by_one.add(e).expect("add");
                    }
                    Entry::Bad(b) => one_by_one.warnings.push(b.clone()),
                }
            }
            summed
                .add_block(block, &mut |b: &BadLine| bad_seen.push(b.line))
                .expect("add block");
        }
        assert_eq!(bad_seen, [5, 18, 31]);
        assert!(summed.keys.len() > Kind::ALL.len() + 2, "op keys made");
        assert_eq!(gathered(&mut summed), gathered(&mut one_by_one));
    }

    /// Lines parsed straight into a summary (no event built but the first
    /// and the kept ones) give what their events added one by one give.
    #[test]
    fn lines_summed_as_parsed_give_what_their_events_give() {
        use crate::event::Process;
        let mut text = String::new();
        for b in 0..30u64 {
            for (i, op) in ["Decode", "Crop", "Decode"].iter().enumerate() {
                let start = b * 1000 + i as u64 * 100;
                // Some spans say their thread's CPU time (cpu=), some not.
                let cpu = if b % 2 == 0 {
                    format!(",cpu={}", 30 + b % 7)
                } else {
                    String::new()
                };
                text += &format!("S{op},{start},{},kind=op,batch={b}{cpu}\n", 40 + b % 9);
            }
            text += &format!("SBatch,{},{},kind=batch,batch={b}\n", b * 1000, 500 + b);
            if b % 11 == 3 {
                text += "not an event line\n  SSpaced , 1 , 2 \n";
            }
            text += &format!("SWait_{b},{},{}\n", b * 1000 + 600, b % 4);
        }
        let budget = Budget::new(64);
        let process = Process {
            pid: 7,
            role: Role::Worker,
            host: Some(Arc::from("node1")),
            rank: Some(1),
        };
        let parse = |sink: &mut dyn FnMut(&mut LineParser, &[u8], &mut Names)| {
            let mut parser = LineParser::new("log".into(), process.clone());
            let mut names = Names::new();
            for line in text.lines() {
                sink(&mut parser, line.as_bytes(), &mut names);
            }
        };
        let mut one_by_one = TraceIndex::new(true, budget);
        one_by_one.begin("", "log");
        let mut entries = Vec::new();
        parse(&mut |p, line, names| p.line(line, false, names, &mut entries));
        for entry in entries {
            match entry {
                Entry::Event(e) => {
                    one_by_one.add(&e).expect("add");
                }
                Entry::Bad(b) => one_by_one.warnings.push(b),
            }
        }
        let mut summed = TraceIndex::new(true, budget);
        summed.begin("", "log");
        let mut block = BlockSummary::new(true);
        parse(&mut |p, line, names| p.line(line, false, names, &mut block));
        summed.add_block(block, &mut |_| {}).expect("add block");
        assert!(one_by_one.warnings.total > 0, "bad lines read");
        let decode = &summed.keys[summed.op_keys["Decode"] as usize];
        assert_eq!(decode.cpu_count, 30);
        assert!(decode.cpu_ns > 0);
        assert_eq!(gathered(&mut summed), gathered(&mut one_by_one));
    }
}
