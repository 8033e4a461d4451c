//! Writing the Chrome trace event format (JSON object form), which
//! Perfetto and `chrome://tracing` open, one event at a time to any
//! `Write`.
//!
//! ```json
//! {"lotusTrace": "lotus.trace-view/1", "baseTimeNanoseconds": 1700000000000000000,
//!  "displayTimeUnit": "ms", "otherData": {...},
//!  "traceEvents": [
//!   {"name": "process_name", "ph": "M", "ts": 0, "pid": 42, "tid": 42, "args": {"name": "main 42"}},
//!   {"name": "Batch", "cat": "batch", "ph": "X", "ts": 1.5, "dur": 95000.25, "pid": 43, "tid": 43, "args": {"batch": 3}},
//!   {"name": "batch", "cat": "lotus.flow", "ph": "s", "id": -1, "ts": 95001.749, "pid": 43, "tid": 43, "args": {"batch": 3}},
//!   {"name": "batch", "cat": "lotus.flow", "ph": "f", "bp": "e", "id": -1, "ts": 99000.0, "pid": 42, "tid": 42, "args": {"batch": 3}}]}
//! ```
//!
//! - `ts` and `dur` are microseconds as floats, `ts` counted from
//!   `baseTimeNanoseconds` (as PyTorch profiler traces do): nanoseconds
//!   since the Unix epoch do not fit a float's 53 bits, offsets from the
//!   trace's start do, so every time keeps its nanoseconds.
//! - One process track per process, `tid` = `pid` (a span the log says
//!   ran on another thread, `tid=`, goes on that thread's track);
//!   `process_name` says main or worker, pid, host and rank;
//!   `process_sort_index` puts main processes first.
//! - A flow starts (`s`) 1 ns before the end of a batch's preprocessing,
//!   inside its span (viewers bind `s` to the slice open at its time, and a
//!   slice is closed at its end time), and ends (`f`, `bp: "e"`) at the
//!   batch's consumption; each is written right after the span it binds
//!   to. Flow ids are negative (the original tool's choice) in category
//!   `lotus.flow`, apart from the profiler's own flows.

use std::io::{self, Write};

use serde::Serialize;

use super::event::{Event, Kind};
use super::index::TraceIndex;
use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Record, Sorted, Sorter, SpillError};

/// The value of the `lotusTrace` key that starts every view.
pub const VIEW_SCHEMA: &str = "lotus.trace-view/1";

/// The category of flow events.
pub const FLOW_CATEGORY: &str = "lotus.flow";

#[derive(Serialize)]
struct Args {
    #[serde(skip_serializing_if = "Option::is_none")]
    batch: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sample: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ready: Option<bool>,
}

/// A span's arguments: the event's own, and what the caller may add (a
/// sampled trace's per-span samples). Untagged: either is written as the
/// one object it holds (`flatten`, slower, only where something is
/// added).
#[derive(Serialize)]
#[serde(untagged)]
enum SpanArgs<'a, T: Serialize> {
    Own(Args),
    With {
        #[serde(flatten)]
        own: Args,
        #[serde(flatten)]
        more: &'a T,
    },
}

#[derive(Serialize)]
struct Complete<'a, T: Serialize> {
    name: &'a str,
    cat: &'a str,
    ph: &'static str,
    ts: f64,
    dur: f64,
    pid: u64,
    tid: u64,
    args: SpanArgs<'a, T>,
}

#[derive(Serialize)]
struct Flow {
    name: &'static str,
    cat: &'static str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    id: i64,
    ts: f64,
    pid: u64,
    tid: u64,
    args: Args,
}

#[derive(Serialize)]
struct Metadata<'a, T: Serialize> {
    name: &'static str,
    ph: &'static str,
    ts: f64,
    pid: u64,
    tid: u64,
    args: MetaArgs<'a, T>,
}

#[derive(Serialize)]
struct MetaArgs<'a, T: Serialize> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sort_index: Option<T>,
}

/// One end of a flow arrow, on the event at `ordinal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FlowEnd {
    ordinal: u64,
    id: i64,
    start: bool,
}

impl Record for FlowEnd {
    const SIZE: usize = 17;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out)
            .u64(self.ordinal)
            .i64(self.id)
            .u8(u8::from(self.start));
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        FlowEnd {
            ordinal: g.u64(),
            id: g.i64(),
            start: g.u8() != 0,
        }
    }
}

/// Which flow arrow starts or ends on which event: one arrow per batch
/// matched with its consumption (as [`TraceIndex`](crate::TraceIndex) matches
/// them), its ends keyed by
/// the events' places in reading order, so a second pass over the logs
/// meets them in order and nothing is looked up (memory stays within the
/// index's budget).
#[derive(Debug)]
#[non_exhaustive]
pub struct Flows {
    ends: Sorted<FlowEnd>,
    next: Option<FlowEnd>,
    /// How many arrows.
    pub count: u64,
    /// Ends that did not fall on an event of their kind (the logs changed
    /// between the two passes): left out.
    pub mismatched: u64,
}

/// What an event carries of a flow: the arrow's id and whether it starts
/// there (a batch) or ends there (a consumption).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlowAt {
    /// The arrow's id (negative).
    pub id: i64,
    /// Whether it starts here.
    pub start: bool,
}

impl Flows {
    /// The arrows of `index` (ids -1, -2, ...).
    pub fn plan(index: &mut TraceIndex) -> Result<Flows, SpillError> {
        let mut ends = Sorter::new(index.budget());
        let mut count = 0u64;
        index.join(|row| {
            let Some(c) = row.consume else {
                return Ok(());
            };
            count += 1;
            let id = -(count as i64);
            ends.push(FlowEnd {
                ordinal: row.preprocessing.ordinal,
                id,
                start: true,
            })?;
            ends.push(FlowEnd {
                ordinal: c.ordinal,
                id,
                start: false,
            })
        })?;
        let mut ends = ends.finish()?;
        let next = ends.next().transpose()?;
        Ok(Flows {
            ends,
            next,
            count,
            mismatched: 0,
        })
    }

    /// The flow end on `e`, the event at `ordinal` (asked in increasing
    /// order).
    pub fn at(&mut self, ordinal: u64, e: &Event) -> Result<Option<FlowAt>, SpillError> {
        while let Some(end) = self.next {
            if end.ordinal > ordinal {
                return Ok(None);
            }
            self.next = self.ends.next().transpose()?;
            if end.ordinal < ordinal {
                self.mismatched += 1;
                continue;
            }
            let kind = if end.start {
                Kind::Batch
            } else {
                Kind::Consume
            };
            if e.kind != kind || e.batch.is_none() {
                self.mismatched += 1;
                return Ok(None);
            }
            return Ok(Some(FlowAt {
                id: end.id,
                start: end.start,
            }));
        }
        Ok(None)
    }
}

/// Writes a Chrome trace, event by event.
#[non_exhaustive]
pub struct ChromeWriter<W: Write> {
    out: W,
    base_ns: u64,
    first: bool,
    /// `X` events written.
    pub spans: u64,
    /// Flow pairs written (counted at their `f`).
    pub flows: u64,
    /// Other events written (metadata, profiler events).
    pub others: u64,
}

impl<W: Write> ChromeWriter<W> {
    /// Starts the JSON: times are counted from `base_ns`; `other` goes to
    /// `otherData`.
    pub fn begin(mut out: W, base_ns: u64, other: &serde_json::Value) -> io::Result<Self> {
        write!(
            out,
            "{{\"lotusTrace\":\"{VIEW_SCHEMA}\",\"baseTimeNanoseconds\":{base_ns},\"displayTimeUnit\":\"ms\",\"otherData\":"
        )?;
        serde_json::to_writer(&mut out, other)?;
        out.write_all(b",\"traceEvents\":[\n")?;
        Ok(ChromeWriter {
            out,
            base_ns,
            first: true,
            spans: 0,
            flows: 0,
            others: 0,
        })
    }

    /// `ns` (since the Unix epoch) as the trace's `ts`: microseconds since
    /// the base.
    pub fn ts_us(&self, ns: u64) -> f64 {
        (i128::from(ns) - i128::from(self.base_ns)) as f64 / 1000.0
    }

    fn next(&mut self) -> io::Result<()> {
        if self.first {
            self.first = false;
            Ok(())
        } else {
            self.out.write_all(b",\n")
        }
    }

    fn write<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        self.next()?;
        serde_json::to_writer(&mut self.out, value)?;
        Ok(())
    }

    /// Names process `pid`'s track and sets its place (lower first).
    pub fn process(&mut self, pid: u64, name: &str, sort_index: i64) -> io::Result<()> {
        self.write(&Metadata::<i64> {
            name: "process_name",
            ph: "M",
            ts: 0.0,
            pid,
            tid: pid,
            args: MetaArgs {
                name: Some(name),
                sort_index: None,
            },
        })?;
        self.write(&Metadata {
            name: "process_sort_index",
            ph: "M",
            ts: 0.0,
            pid,
            tid: pid,
            args: MetaArgs {
                name: None,
                sort_index: Some(sort_index),
            },
        })?;
        self.others += 2;
        Ok(())
    }

    /// Names thread `tid`'s track on process `pid` (a [`Kind::Thread`]
    /// event of the tracer: the DataLoader's machinery threads).
    pub fn thread(&mut self, pid: u64, tid: u64, name: &str) -> io::Result<()> {
        self.write(&Metadata::<i64> {
            name: "thread_name",
            ph: "M",
            ts: 0.0,
            pid,
            tid,
            args: MetaArgs {
                name: Some(name),
                sort_index: None,
            },
        })?;
        self.others += 1;
        Ok(())
    }

    /// One event as a complete (`X`) event on process `pid`'s track.
    pub fn span(&mut self, pid: u64, e: &Event) -> io::Result<()> {
        self.span_with::<()>(pid, e, None)
    }

    /// One event as a complete (`X`) event on process `pid`'s track, the
    /// fields of `more` (a struct) added to its arguments.
    pub fn span_with<T: Serialize>(
        &mut self,
        pid: u64,
        e: &Event,
        more: Option<&T>,
    ) -> io::Result<()> {
        let ev = Complete {
            name: &e.name,
            cat: e.kind.as_str(),
            ph: "X",
            ts: self.ts_us(e.start_ns),
            dur: e.dur_ns as f64 / 1000.0,
            pid,
            // A span of another thread (`tid=` in the log) on that
            // thread's track: spans of two threads overlap in time and
            // would not nest on one.
            tid: e.tid.map_or(pid, u64::from),
            args: {
                let own = Args {
                    batch: e.batch,
                    sample: e.sample,
                    ready: e.ready,
                };
                match more {
                    None => SpanArgs::Own(own),
                    Some(more) => SpanArgs::With { own, more },
                }
            },
        };
        self.write(&ev)?;
        self.spans += 1;
        Ok(())
    }

    /// The start of flow `id`, inside the batch span `batch_span` on
    /// process `pid`: 1 ns before its end (at its start if it lasted 0).
    pub fn flow_start(&mut self, id: i64, pid: u64, batch_span: &Event) -> io::Result<()> {
        let at = batch_span.end_ns() - batch_span.dur_ns.min(1);
        self.flow(id, "s", pid, at, batch_span.batch)
    }

    /// The end of flow `id` at the consumption `consume` on process `pid`.
    pub fn flow_end(&mut self, id: i64, pid: u64, consume: &Event) -> io::Result<()> {
        self.flow(id, "f", pid, consume.start_ns, consume.batch)?;
        self.flows += 1;
        Ok(())
    }

    fn flow(
        &mut self,
        id: i64,
        ph: &'static str,
        pid: u64,
        at_ns: u64,
        batch: Option<u64>,
    ) -> io::Result<()> {
        let ev = Flow {
            name: "batch",
            cat: FLOW_CATEGORY,
            ph,
            bp: (ph == "f").then_some("e"),
            id,
            ts: self.ts_us(at_ns),
            pid,
            tid: pid,
            args: Args {
                batch,
                sample: None,
                ready: None,
            },
        };
        self.write(&ev)
    }

    /// A complete (`X`) event the caller made whole (a span estimated
    /// from samples, with its own arguments), counted with the spans.
    pub fn complete<T: Serialize>(&mut self, event: &T) -> io::Result<()> {
        self.write(event)?;
        self.spans += 1;
        Ok(())
    }

    /// Any other event (one of a PyTorch profiler trace), as it is.
    pub fn raw(&mut self, event: &serde_json::Value) -> io::Result<()> {
        self.write(event)?;
        self.others += 1;
        Ok(())
    }

    /// Ends the JSON; returns the writer (flushed).
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, Role};

    #[test]
    fn writes_valid_json_with_ns_precision() {
        let base = 1_700_000_000_000_000_000u64;
        let batch = Event {
            batch: Some(3),
            ..Event::span(
                "Batch",
                Kind::Batch,
                7,
                Role::Worker,
                base + 1_500,
                95_000_250,
            )
        };
        let consume = Event {
            name: "Consume".into(),
            kind: Kind::Consume,
            pid: 6,
            role: Role::Main,
            start_ns: base + 99_000_001,
            dur_ns: 0,
            ..batch.clone()
        };
        let mut w =
            ChromeWriter::begin(Vec::new(), base, &serde_json::json!({"k": 1})).expect("begin");
        w.process(7, "worker 7", 1).expect("meta");
        w.span(7, &batch).expect("span");
        w.flow_start(-1, 7, &batch).expect("s");
        w.span(6, &consume).expect("span");
        w.flow_end(-1, 6, &consume).expect("f");
        assert_eq!((w.spans, w.flows, w.others), (2, 1, 2));
        let out = w.finish().expect("finish");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["lotusTrace"], VIEW_SCHEMA);
        assert_eq!(v["baseTimeNanoseconds"].as_u64(), Some(base));
        let ev = v["traceEvents"].as_array().expect("events");
        assert_eq!(ev.len(), 6);
        assert_eq!(ev[2]["ts"].as_f64(), Some(1.5));
        assert_eq!(ev[2]["dur"].as_f64(), Some(95_000.25));
        assert_eq!(ev[2]["args"]["batch"], 3);
        assert_eq!(ev[3]["ts"].as_f64(), Some(95_001.749));
        assert_eq!(ev[5]["ts"].as_f64(), Some(99_000.001));
        assert_eq!(ev[5]["bp"], "e");
        assert_eq!(ev[3]["id"], ev[5]["id"]);
    }

    #[test]
    fn added_arguments_join_the_events_own() {
        #[derive(Serialize)]
        struct More {
            cpu_samples: u64,
        }
        let op = Event {
            sample: Some(4),
            ..Event::span("Crop", Kind::Op, 7, Role::Worker, 10, 5)
        };
        let mut w = ChromeWriter::begin(Vec::new(), 0, &serde_json::json!({})).expect("begin");
        w.span_with(7, &op, Some(&More { cpu_samples: 3 }))
            .expect("with");
        w.span(7, &op).expect("plain");
        let out = w.finish().expect("finish");
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        let ev = v["traceEvents"].as_array().expect("events");
        assert_eq!(
            ev[0]["args"],
            serde_json::json!({"sample": 4, "cpu_samples": 3})
        );
        assert_eq!(ev[1]["args"], serde_json::json!({"sample": 4}));
    }
}
