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

use lotus_testkit::fuzz;
use lotus_trace::{Entry, TraceReader};
use lotus_trace::{Event, Process, Role};
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
            prop_assert_eq!(&*e.name, name.as_str());
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
            prop_assert_eq!(&*e.name, name.as_str());
            // A cut inside the last line's numbers may shorten them; every
            // earlier line is intact.
            if e.start_ns != *start {
                prop_assert!(std::ptr::eq(e, events.last().unwrap()));
            }
        }
        Ok(())
    });
}

/// A random event of any kind: few pids and batch ids (so batches repeat
/// across epochs and groups), times and durations over the whole range.
fn any_event() -> impl Strategy<Value = Event> {
    (
        prop::sample::select(lotus_trace::Kind::ALL.to_vec()),
        prop::sample::select(vec!["Loader", "Flip", "Normalize"]),
        0u32..4,
        prop_oneof![Just(None), (0u64..6).prop_map(Some)],
        prop_oneof![0u64..1_000_000, any::<u64>()],
        prop_oneof![0u64..10_000, any::<u64>()],
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(kind, name, pid, batch, start_ns, dur_ns, ready)| {
            use lotus_trace::Kind;
            let role = if matches!(
                kind,
                Kind::Wait | Kind::Consume | Kind::Queue | Kind::Start | Kind::Stop
            ) {
                Role::Main
            } else {
                Role::Worker
            };
            let name = if kind == Kind::Op {
                name
            } else {
                kind.as_str()
            };
            let pid = pid + if role == Role::Main { 100 } else { 0 };
            Event {
                batch,
                ready,
                ..Event::span(name, kind, pid, role, start_ns, dur_ns)
            }
        })
}

/// The statistics of `events` with `bytes` of memory per sort.
fn stats_of(
    events: &[Event],
    bytes: usize,
) -> Result<(lotus_trace::TraceStats, Vec<lotus_trace::PerBatch>), TestCaseError> {
    use lotus_sort::Budget;
    use lotus_trace::TraceIndex;
    use lotus_trace::TraceStats;
    let mut ix = TraceIndex::new(true, Budget::new(bytes));
    ix.begin("", "log");
    for e in events {
        ix.add(e)
            .map_err(|e| TestCaseError::fail(format!("add: {e}")))?;
    }
    let (stats, rows) =
        TraceStats::compute(&mut ix).map_err(|e| TestCaseError::fail(format!("stats: {e}")))?;
    let rows = rows
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TestCaseError::fail(format!("rows: {e}")))?;
    Ok((stats, rows))
}

#[test]
fn statistics_are_the_same_in_memory_and_spilled_to_disk() {
    use lotus_trace::percentile;
    use lotus_trace::Kind;
    let events = prop::collection::vec(any_event(), 0..300);
    fuzz::check("trace_stats_spilled", events, |events| {
        let (mem, mem_rows) = stats_of(&events, 1 << 30)?;
        // 1 byte: 16 records per buffer, every sort and spool on disk.
        let (disk, disk_rows) = stats_of(&events, 1)?;
        prop_assert_eq!(&mem, &disk);
        prop_assert_eq!(&mem_rows, &disk_rows);

        // Against the plain definitions over the list of events.
        for op in &mem.ops {
            let mut d: Vec<f64> = events
                .iter()
                .filter(|e| e.kind == Kind::Op && *e.name == *op.name)
                .map(|e| i64::try_from(e.dur_ns).unwrap_or(i64::MAX) as f64)
                .collect();
            d.sort_by(f64::total_cmp);
            prop_assert_eq!(op.summary.count, d.len() as u64);
            prop_assert_eq!(op.summary.p50_ns, percentile(&d, 50.0));
            prop_assert_eq!(op.summary.p99_ns, percentile(&d, 99.0));
        }
        let count = |k: Kind| events.iter().filter(|e| e.kind == k).count();
        prop_assert_eq!(mem_rows.len(), count(Kind::Batch));
        prop_assert!(mem_rows.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        let consumed = mem_rows.iter().filter(|r| r.consumed_ns.is_some()).count();
        prop_assert_eq!(
            consumed as u64 + mem.delay.consumed_without_batch,
            count(Kind::Consume) as u64
        );
        prop_assert_eq!(mem.delay.unconsumed as usize, count(Kind::Batch) - consumed);
        let waits: u64 = mem.wait.buckets.iter().map(|b| b.count).sum();
        prop_assert_eq!(waits, count(Kind::Wait) as u64);
        Ok(())
    });
}
