//! Property tests of the trace log reader ([`TraceReader`]): arbitrary
//! bytes, valid logs with random damage, and valid logs cut at any byte.
//!
//! Properties: no panic and no I/O error on in-memory input; every line is
//! either an event or a bad line naming the file and its line number; a
//! valid log reads back exactly; damaging one line costs at most that line;
//! a cut log gives a prefix of the events (the cut line at most reported
//! bad).
//!
//! `PROPTEST_CASES` sets the cases per property (256);
//! `LOTUS_FUZZ_SECONDS=N` fuzzes each property for N seconds instead.
#![allow(clippy::unwrap_used)]

mod fuzz;

use lotus_core::trace::parse::{Entry, TraceReader};
use lotus_core::trace::{Event, Process, Role};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const FILE: &str = "fuzz/lotus_worker_pid_7";

/// The events of a log, and its bad lines as (line, message).
type Read = (Vec<Event>, Vec<(u64, String)>);

fn read(bytes: &[u8]) -> Result<Read, TestCaseError> {
    let reader = TraceReader::new(bytes, FILE, Process::new(Role::Worker, 7));
    let mut events = Vec::new();
    let mut bad = Vec::new();
    for entry in reader {
        match entry {
            Ok(Entry::Event(e)) => events.push(e),
            Ok(Entry::Bad(b)) => {
                prop_assert_eq!(&b.file, FILE);
                prop_assert!(b.line >= 1, "line numbers start at 1");
                prop_assert!(
                    b.message.len() < 4096,
                    "message of {} bytes",
                    b.message.len()
                );
                bad.push((b.line, b.message));
            }
            Err(e) => prop_assert!(false, "in-memory input gave an I/O error: {}", e),
        }
    }
    Ok((events, bad))
}

/// One valid event line and the event it describes.
/// A log line, and the name, start, duration and batch it holds.
type Line = (String, String, u64, u64, Option<u64>);

fn event_line() -> impl Strategy<Value = Line> {
    (
        prop::sample::select(vec![
            "RandomResizedCrop",
            "ToTensor",
            "Loader",
            "Collation",
            "Normalize",
        ]),
        0u64..4_000_000_000_000_000_000,
        0u64..10_000_000_000,
        prop::option::of(0u64..100_000),
    )
        .prop_map(|(name, start, dur, batch)| {
            let line = match batch {
                Some(b) => format!("S{name},{start},{dur},kind=op,batch={b}"),
                None => format!("S{name},{start},{dur}"),
            };
            (line, name.to_string(), start, dur, batch)
        })
}

fn log() -> impl Strategy<Value = Vec<Line>> {
    prop::collection::vec(event_line(), 1..40)
}

fn text_of(lines: &[Line]) -> String {
    let mut t = String::from("#lotus-trace v1 role=worker pid=7 host=h rank=-\n");
    for l in lines {
        t += &l.0;
        t.push('\n');
    }
    t
}

#[test]
fn arbitrary_bytes_never_panic() {
    fuzz::check(
        "trace_arbitrary_bytes",
        prop::collection::vec(any::<u8>(), 0..2048),
        |bytes| read(&bytes).map(drop),
    );
}

#[test]
fn valid_logs_read_back_exactly() {
    fuzz::check("trace_valid_logs", log(), |lines| {
        let (events, bad) = read(text_of(&lines).as_bytes())?;
        prop_assert!(bad.is_empty(), "{:?}", bad);
        prop_assert_eq!(events.len(), lines.len());
        for (e, (_, name, start, dur, batch)) in events.iter().zip(&lines) {
            prop_assert_eq!(&e.name, name);
            prop_assert_eq!(
                (e.start_ns, e.dur_ns, e.batch, e.pid),
                (*start, *dur, *batch, 7)
            );
        }
        Ok(())
    });
}

#[test]
fn a_damaged_line_costs_at_most_that_line() {
    let damage = (
        log(),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        any::<u8>(),
    );
    fuzz::check("trace_damaged_line", damage, |(lines, which, at, byte)| {
        let victim = which.index(lines.len());
        let mut text = text_of(&lines).into_bytes();
        // The victim's line starts after the header and the lines before it.
        let header = text.iter().position(|b| *b == b'\n').unwrap() + 1;
        let start = header + lines[..victim].iter().map(|l| l.0.len() + 1).sum::<usize>();
        let pos = start + at.index(lines[victim].0.len());
        let byte = if byte == b'\n' { b'#' } else { byte };
        text[pos] = byte;
        let (events, bad) = read(&text)?;
        // Line numbers: the header is line 1, the victim line victim + 2.
        prop_assert!(
            bad.iter().all(|(line, _)| *line == victim as u64 + 2),
            "{:?}",
            bad
        );
        prop_assert!(events.len() + 1 >= lines.len() && events.len() <= lines.len());
        Ok(())
    });
}

#[test]
fn a_cut_log_gives_a_prefix() {
    fuzz::check("trace_cut_log", (log(), 0.0f64..1.0), |(lines, at)| {
        let text = text_of(&lines);
        let cut = fuzz::cut(text.as_bytes(), at);
        let (events, bad) = read(cut)?;
        prop_assert!(bad.len() <= 1, "{:?}", bad);
        prop_assert!(events.len() <= lines.len());
        for (e, (_, name, start, _, _)) in events.iter().zip(&lines) {
            prop_assert_eq!(&e.name, name);
            // A cut inside the last line's numbers may shorten them; every
            // earlier line is intact.
            if e.start_ns != *start {
                prop_assert!(std::ptr::eq(e, events.last().unwrap()));
            }
        }
        Ok(())
    });
}
