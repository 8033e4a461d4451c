//! PyTorch profiler traces (Kineto's Chrome trace JSON,
//! `*.pt.trace.json`), streamed: the top-level object is read key by key
//! and `traceEvents` one event at a time, so a large trace is never held
//! whole.
//!
//! # Time alignment
//!
//! Kineto writes `ts` in microseconds relative to `baseTimeNanoseconds`
//! (ns since the Unix epoch, a top-level key, often after the events), so
//! an event's wall-clock time is `baseTimeNanoseconds + ts * 1000` ns: the
//! same clock as the lotus logs. Where the key is absent:
//!
//! - `ts` values over 10^15 µs (after September 2001) are taken as
//!   microseconds since the Unix epoch, as older profilers wrote them;
//! - smaller values have an unknown epoch: the profiler trace's first
//!   event is aligned with the lotus trace's first event, and the view says
//!   so ([`Alignment::note`]).

use std::io::{self, BufReader, Read};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::TraceError;

/// `ts` values above this (µs) are absolute when there is no base.
pub const ABSOLUTE_TS_US: f64 = 1e15;

/// What a first pass over a profiler trace finds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct TorchScan {
    /// `baseTimeNanoseconds`, where present.
    pub base_ns: Option<u64>,
    /// The smallest `ts` of an event other than metadata (`ph: M`), µs.
    pub min_ts_us: Option<f64>,
    /// Events in `traceEvents`.
    pub events: u64,
}

/// How a profiler trace's `ts` maps to wall-clock ns.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Alignment {
    /// `ts` is µs since `baseTimeNanoseconds`.
    Base(u64),
    /// `ts` is µs since the Unix epoch.
    Absolute,
    /// No base and relative times: `ts = min_ts_us` is placed at
    /// `at_ns`, the lotus trace's first event.
    Shifted {
        /// The profiler trace's first `ts`, µs.
        min_ts_us: f64,
        /// Where it is placed, ns since the epoch.
        at_ns: u64,
    },
}

impl Alignment {
    /// How the trace of `scan` aligns; `lotus_start_ns` is the lotus
    /// trace's first event.
    pub fn of(scan: &TorchScan, lotus_start_ns: Option<u64>) -> Alignment {
        match (scan.base_ns, scan.min_ts_us) {
            (Some(b), _) => Alignment::Base(b),
            (None, Some(m)) if m > ABSOLUTE_TS_US => Alignment::Absolute,
            (None, Some(m)) => Alignment::Shifted {
                min_ts_us: m,
                at_ns: lotus_start_ns.unwrap_or(0),
            },
            (None, None) => Alignment::Absolute,
        }
    }

    /// The wall-clock ns of `ts = 0`.
    pub fn zero_ns(&self) -> f64 {
        match *self {
            Alignment::Base(b) => b as f64,
            Alignment::Absolute => 0.0,
            Alignment::Shifted { min_ts_us, at_ns } => at_ns as f64 - min_ts_us * 1000.0,
        }
    }

    /// The wall-clock ns of `ts_us` (integer where the zero is, so a base
    /// of decades keeps its nanoseconds).
    pub fn ns_of(&self, ts_us: f64) -> i128 {
        match *self {
            Alignment::Base(b) => i128::from(b) + (ts_us * 1000.0).round() as i128,
            Alignment::Absolute => (ts_us * 1000.0).round() as i128,
            Alignment::Shifted { min_ts_us, at_ns } => {
                i128::from(at_ns) + ((ts_us - min_ts_us) * 1000.0).round() as i128
            }
        }
    }

    /// What to add to the trace's `ts` to count from `base_ns` instead,
    /// µs. Integer arithmetic where the zero is an integer, so offsets of
    /// decades keep their nanoseconds.
    pub fn offset_us(&self, base_ns: u64) -> f64 {
        match *self {
            Alignment::Base(b) => (i128::from(b) - i128::from(base_ns)) as f64 / 1000.0,
            _ => (self.zero_ns() - base_ns as f64) / 1000.0,
        }
    }

    /// A note for the user where the alignment is a guess.
    pub fn note(&self) -> Option<&'static str> {
        match self {
            Alignment::Shifted { .. } => Some(
                "has no baseTimeNanoseconds and relative timestamps: its first event is aligned with the trace's first event",
            ),
            _ => None,
        }
    }
}

/// The first pass: base, first `ts`, event count.
pub fn scan_torch_trace(input: impl Read, path: &str) -> Result<TorchScan, TraceError> {
    let mut s = TorchScan::default();
    let base = read(input, path, &mut |ev: Value| {
        s.events += 1;
        if ev.get("ph").and_then(Value::as_str) != Some("M") {
            if let Some(ts) = ev.get("ts").and_then(Value::as_f64) {
                s.min_ts_us = Some(s.min_ts_us.map_or(ts, |m| m.min(ts)));
            }
        }
        Ok(())
    })?;
    s.base_ns = base;
    Ok(s)
}

/// The second pass: each event with `offset_us` added to its `ts`, to
/// `on_event`.
pub fn for_each_torch_event_shifted(
    input: impl Read,
    path: &str,
    offset_us: f64,
    on_event: &mut dyn FnMut(&Value) -> io::Result<()>,
) -> Result<(), TraceError> {
    read(input, path, &mut |mut ev: Value| {
        if let Some(ts) = ev.get("ts").and_then(Value::as_f64) {
            if let Some(obj) = ev.as_object_mut() {
                obj.insert("ts".into(), Value::from(ts + offset_us));
            }
        }
        on_event(&ev)
    })
    .map(|_| ())
}

/// Reads the top-level object, handing each event to `on_event`; returns
/// `baseTimeNanoseconds`.
fn read(
    input: impl Read,
    path: &str,
    on_event: &mut dyn FnMut(Value) -> io::Result<()>,
) -> Result<Option<u64>, TraceError> {
    let mut failure: Option<io::Error> = None;
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(256 * 1024, input));
    let result = de::Deserializer::deserialize_map(
        &mut de,
        Top {
            on_event,
            failure: &mut failure,
        },
    )
    .and_then(|r| de.end().map(|_| r));
    if let Some(e) = failure {
        return Err(TraceError::io(path, &e));
    }
    let (base, saw_events) = result.map_err(|e| TraceError::Torch {
        path: path.to_string(),
        message: e.to_string(),
    })?;
    if !saw_events {
        return Err(TraceError::Torch {
            path: path.to_string(),
            message: "no traceEvents".into(),
        });
    }
    Ok(base)
}

struct Top<'a> {
    on_event: &'a mut dyn FnMut(Value) -> io::Result<()>,
    failure: &'a mut Option<io::Error>,
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = (Option<u64>, bool);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object with traceEvents")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut base = None;
        let mut saw = false;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => {
                    map.next_value_seed(Events {
                        on_event: &mut *self.on_event,
                        failure: &mut *self.failure,
                    })?;
                    saw = true;
                }
                "baseTimeNanoseconds" => {
                    let v: Value = map.next_value()?;
                    base = v
                        .as_u64()
                        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
                        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((base, saw))
    }
}

struct Events<'a> {
    on_event: &'a mut dyn FnMut(Value) -> io::Result<()>,
    failure: &'a mut Option<io::Error>,
}

impl<'de> DeserializeSeed<'de> for Events<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Events<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(ev) = seq.next_element::<Value>()? {
            if let Err(e) = (self.on_event)(ev) {
                let msg = e.to_string();
                *self.failure = Some(e);
                return Err(de::Error::custom(msg));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_after_the_events_and_shifting() {
        let text = r#"{"schemaVersion": 1, "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "ts": 0, "args": {"name": "python"}},
            {"ph": "X", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10.5, "dur": 2},
            {"ph": "X", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 3.25, "dur": 1}],
            "traceName": "x", "baseTimeNanoseconds": 1700000000000000000}"#;
        let s = scan_torch_trace(text.as_bytes(), "t.json").expect("scan");
        assert_eq!(s.base_ns, Some(1_700_000_000_000_000_000));
        assert_eq!((s.min_ts_us, s.events), (Some(3.25), 3));
        let a = Alignment::of(&s, None);
        let offset = a.offset_us(1_700_000_000_000_001_000);
        assert_eq!(offset, -1.0);
        let mut seen = Vec::new();
        for_each_torch_event_shifted(text.as_bytes(), "t.json", offset, &mut |e| {
            seen.push(e["ts"].as_f64().expect("ts"));
            Ok(())
        })
        .expect("read");
        assert_eq!(seen, vec![-1.0, 9.5, 2.25]);
    }

    #[test]
    fn alignment_without_base() {
        let abs = TorchScan {
            base_ns: None,
            min_ts_us: Some(1.7e15),
            events: 1,
        };
        assert_eq!(Alignment::of(&abs, Some(5)), Alignment::Absolute);
        let rel = TorchScan {
            base_ns: None,
            min_ts_us: Some(100.0),
            events: 1,
        };
        let a = Alignment::of(&rel, Some(1_000_000));
        assert_eq!(a.zero_ns(), 900_000.0);
        assert_eq!(a.ns_of(100.5), 1_000_500);
        assert_eq!(
            Alignment::Base(1_700_000_000_000_000_001).ns_of(0.25),
            1_700_000_000_000_000_251
        );
        assert!(a.note().is_some());
        assert_eq!(a.offset_us(1_000_000), -100.0);
    }

    #[test]
    fn bad_traces_are_errors() {
        for (text, want) in [
            ("{\"traceEvents\": [1, ", "EOF"),
            ("{\"other\": 1}", "no traceEvents"),
            ("[1, 2]", "a JSON object with traceEvents"),
        ] {
            let e = scan_torch_trace(text.as_bytes(), "t.json")
                .expect_err(text)
                .to_string();
            assert!(
                e.starts_with("t.json: not a readable PyTorch profiler trace") && e.contains(want),
                "{e}"
            );
        }
    }
}
