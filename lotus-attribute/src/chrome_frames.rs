//! The Chrome trace event view of a folder of samples alone (no tracer
//! logs: `lotus trace attach`): the slices [`crate::frame_spans`]
//! estimates from its samples' Python frames, as complete events (`X`)
//! nested on their threads' tracks.
//!
//! One process track per process with a slice, named as the tracer's
//! view names it where the frames tell its role (`main PID`, `worker
//! PID`), else `process PID`; one thread track per thread with a slice
//! (its main thread named `main thread`). Each slice's arguments: its
//! samples, the CPU time they stand for (`cpu_ms`, samples times the
//! sampling interval), its op path, and `"source": "samples"`; the
//! view's `otherData` says the spans are estimated from samples, not
//! measured. Times are on the samples' clock (`CLOCK_MONOTONIC`, its ns
//! as they are, as the Firefox view has them): no log gives a wall-clock
//! time to move them to, so `baseTimeNanoseconds` is 0.

use std::collections::BTreeMap;
use std::io::{self, Write};

use lotus_trace::{ChromeWriter, Role};
use serde::Serialize;

use crate::{ChromeViewOptions, ChromeWritten, Error, FrameSpans};

/// A slice as the view writes it.
#[derive(Serialize)]
struct Complete<'a> {
    name: &'a str,
    cat: &'static str,
    ph: &'static str,
    ts: f64,
    dur: f64,
    pid: u32,
    tid: u32,
    args: SliceArgs<'a>,
}

/// A slice's arguments.
#[derive(Serialize)]
struct SliceArgs<'a> {
    samples: u64,
    cpu_ms: f64,
    path: &'a str,
    source: &'static str,
}

/// What the view's `otherData` says of spans estimated from samples.
const ESTIMATED: &str = "estimated from samples, not measured: no trace logs (a job sampled without the tracer, as `lotus trace attach` does); each span is consecutive samples of one thread under the same ops (their Python frames), from the first sample to the last plus one sampling interval; its args give its samples and the CPU time they stand for";

/// Writes the view of `spans` to `out`.
pub(crate) fn write(
    options: &ChromeViewOptions,
    spans: &FrameSpans,
    out: Box<dyn Write>,
) -> Result<ChromeWritten, Error> {
    let shown = &options.out_shown;
    let write_err = |e: io::Error| Error::Io(format!("cannot write {shown}: {e}"));
    let other = serde_json::json!({
        "source": options.dir.display().to_string(),
        "coarse": options.coarse,
        "producer": concat!("lotus ", env!("CARGO_PKG_VERSION")),
        "spans": ESTIMATED,
        "clock": "monotonic: the samples' CLOCK_MONOTONIC ns, as the Firefox view has them (no wall-clock time without trace logs)",
        "interval_ns": spans.interval_ns,
        "samples": {
            "total": spans.total_samples,
            "in_spans": spans.in_slices,
            "partial": spans.partial,
        },
    });
    let mut w = ChromeWriter::begin(out, 0, &other).map_err(write_err)?;
    let processes = tracks(&mut w, spans).map_err(write_err)?;
    let interval_ms = spans.interval_ns as f64 / 1e6;
    for t in &spans.threads {
        for s in &t.slices {
            let op = &spans.ops[s.op as usize];
            let slice = Complete {
                name: &op.name,
                cat: if op.path == crate::NEXT_ROW {
                    "wait"
                } else {
                    "op"
                },
                ph: "X",
                ts: w.ts_us(s.start_ns),
                dur: s.end_ns.saturating_sub(s.start_ns) as f64 / 1000.0,
                pid: t.pid,
                tid: t.tid,
                args: SliceArgs {
                    samples: s.samples,
                    cpu_ms: s.samples as f64 * interval_ms,
                    path: &op.path,
                    source: "samples",
                },
            };
            w.complete(&slice).map_err(write_err)?;
        }
    }
    let spans_written = w.spans;
    drop(w.finish().map_err(write_err)?);
    Ok(ChromeWritten {
        spans: spans_written,
        flows: 0,
        processes,
        samples_note: format!(
            "; estimated from {} of {} sample(s) by their Python frames, not measured",
            spans.in_slices, spans.total_samples
        ),
        torch_traces: 0,
        torch_events: 0,
    })
}

/// Names the process and thread tracks that have slices: main processes
/// first, then workers, then processes of no known role. How many
/// processes.
fn tracks(w: &mut ChromeWriter<Box<dyn Write>>, spans: &FrameSpans) -> io::Result<usize> {
    let mut processes: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for t in &spans.threads {
        processes.entry(t.pid).or_default().push(t.tid);
    }
    for (&pid, tids) in &processes {
        let (name, sort) = match spans.roles.get(&pid) {
            Some(Role::Main) => (format!("main {pid}"), 0),
            Some(Role::Worker) => (format!("worker {pid}"), 1),
            None => (format!("process {pid}"), 2),
        };
        w.process(u64::from(pid), &name, sort)?;
        if tids.contains(&pid) {
            w.thread(u64::from(pid), u64::from(pid), "main thread")?;
        }
    }
    Ok(processes.len())
}
