//! The report's timeline of one trace: a lane per process (the main
//! process first, then each worker), its batch spans (workers) or waits
//! for a batch (main process) on the lane's first row, its op spans below,
//! nested ops a row deeper, each op in its colour. Drawn as inline SVG by
//! the page's template; `templates/timeline.js` zooms (wheel) and pans
//! (drag) it, with a reset button.
//!
//! Its size is bounded: past [`MAX_SPANS`] spans, every n-th span of a
//! kind is kept (said on the page, with the numbers), and the Perfetto
//! file (`lotus trace view`) has them all. The same pass sums each op's
//! CPU time from the spans' thread CPU clock (`cpu=`), for the per-op
//! tables and the comparison of runs.

use anyhow::Result;
use lotus_trace::{Event, Kind};
use serde::Serialize;

use crate::render::html::short_name;
use crate::render::svg::Colours;
use lotus_attribute::TraceFigures;

/// A span as read: start and duration (ms from the trace's start),
/// colour, tooltip.
type Raw = (f64, f64, String, String);

/// The most spans drawn in one timeline.
pub const MAX_SPANS: u64 = 4000;
/// The drawing's width in SVG units (scaled to the page's width).
const WIDTH: f64 = 1000.0;
/// A row's height, px.
const ROW: f64 = 14.0;
/// Op rows (nesting depth) drawn per lane; deeper ops go on the last.
const OP_ROWS: usize = 3;
/// Wait colour (main process).
const WAIT: &str = "#d62728";
/// Batch colour (workers).
const BATCH: &str = "#7f9cc0";

/// One span drawn.
#[derive(Debug, Clone, Serialize)]
pub struct Span {
    /// Where it is drawn: x and width, SVG units.
    x: f64,
    w: f64,
    /// Start, ms from the trace's start.
    s: f64,
    /// Duration, ms.
    d: f64,
    /// Its row in the lane.
    row: usize,
    /// Its fill.
    fill: String,
    /// Its tooltip.
    title: String,
}

/// One lane: one process.
#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    /// `main 100`, `worker 101 (host a)`.
    label: String,
    /// Its top, px.
    y: f64,
    /// Its rows.
    rows: usize,
    /// Its spans.
    spans: Vec<Span>,
}

/// A time axis tick.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    /// Where, % of the width.
    at: f64,
    /// Its label.
    label: String,
}

/// One trace's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    /// The configuration.
    label: String,
    /// The trace folder (for the `lotus trace view` command).
    dir: String,
    /// Its span, ms.
    duration_ms: f64,
    /// Its time axis, ms: the longest span of the page's runs.
    scale_ms: f64,
    /// Drawing width (SVG units) and height (px).
    width: f64,
    height: f64,
    /// Row height, px.
    row: f64,
    /// The lanes.
    lanes: Vec<Lane>,
    /// The initial ticks (the script redraws them on zoom).
    ticks: Vec<Tick>,
    /// The ops' colours, for its legend: (short name, whole name, colour).
    legend: Vec<(String, String, String)>,
    /// Spans drawn, and spans in the trace.
    shown: u64,
    total: u64,
    /// What was left out, when something was.
    decimated: Option<String>,
    /// How its spans were estimated, where they were not measured (a
    /// folder of samples alone).
    estimated: Option<String>,
}

pub use lotus_attribute::OpCpu;

/// `#rrggbb` of an op's colour.
pub fn hex(colours: &Colours, name: &str) -> String {
    let c = colours.of(name);
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Reads `c`'s events again ([`TraceFigures::timeline_spans`]): its
/// timeline, on a time axis of `scale_ms` (one for a page's runs: at
/// least its span), and each op's CPU time.
pub fn of(c: &mut TraceFigures, colours: &Colours, scale_ms: f64) -> Result<(Timeline, OpCpu)> {
    let mut t = c.timeline_spans(MAX_SPANS)?;
    let op_cpu = std::mem::take(&mut t.op_cpu);
    Ok((drawn(&c.label, &c.dir, t, colours, scale_ms), op_cpu))
}

/// The timeline of `t` (the trace labelled `label` in `dir`: its logs'
/// spans, or a folder of samples alone's slices estimated from their
/// Python frames), on a time axis of `scale_ms` (at least its span).
pub fn drawn(
    label: &str,
    dir: &std::path::Path,
    t: lotus_attribute::TimelineSpans,
    colours: &Colours,
    scale_ms: f64,
) -> Timeline {
    let scale_ms = scale_ms.max(t.span_ms);
    let style =
        |v: &[Event]| -> Vec<Raw> { v.iter().map(|e| styled(e, t.start_ns, colours)).collect() };
    let mut lanes = Vec::new();
    let mut y = 0.0;
    for (i, label) in &t.names {
        let (firsts, ops) = t
            .lanes
            .get(i)
            .map_or_else(Default::default, |(f, o)| (style(f), style(o)));
        let (spans, deepest) = lane_spans(firsts, ops, scale_ms);
        let rows = 1 + deepest;
        lanes.push(Lane {
            label: label.clone(),
            y,
            rows,
            spans,
        });
        y += rows as f64 * ROW + 6.0;
    }
    let legend = (t.ops.iter())
        .map(|n| {
            let tip = crate::render::html::tooltip(n);
            (short_name(n, 40), tip, hex(colours, n))
        })
        .collect();
    Timeline {
        label: label.to_string(),
        dir: dir.display().to_string(),
        duration_ms: t.span_ms,
        width: WIDTH,
        height: f64::max(y, ROW),
        row: ROW,
        lanes,
        scale_ms,
        ticks: ticks(scale_ms),
        legend,
        shown: t.shown,
        total: t.total,
        decimated: t.decimated,
        estimated: t.estimated,
    }
}

/// A span's start, duration (ms from `base`), colour and tooltip.
fn styled(e: &Event, base: u64, colours: &Colours) -> Raw {
    let s = e.start_ns.saturating_sub(base) as f64 / 1e6;
    let d = e.dur_ns as f64 / 1e6;
    let batch = e.batch.map_or(String::new(), |b| format!(", batch {b}"));
    let (fill, title) = match e.kind {
        Kind::Op => {
            let cpu = e
                .cpu_ns
                .map_or(String::new(), |c| format!(", CPU {:.3} ms", c as f64 / 1e6));
            let name = crate::render::html::tooltip(&e.name);
            (
                hex(colours, &e.name),
                format!("{name}{batch}: {d:.3} ms{cpu}"),
            )
        }
        Kind::Wait => (
            WAIT.to_string(),
            format!("waiting for data{batch}: {d:.3} ms"),
        ),
        _ => (BATCH.to_string(), format!("batch{batch}: {d:.3} ms")),
    };
    (s, d, fill, title)
}

/// A lane's spans: its batches or waits on the first row, then its ops,
/// nested ones a row deeper (by start, longest first, against the ends of
/// the spans still open); with how many op rows it needs.
fn lane_spans(firsts: Vec<Raw>, mut ops: Vec<Raw>, duration_ms: f64) -> (Vec<Span>, usize) {
    let mut spans: Vec<Span> = firsts
        .into_iter()
        .map(|(s, d, fill, title)| Span {
            x: x_of(s, duration_ms),
            w: w_of(d, duration_ms),
            s: round(s),
            d: round(d),
            row: 0,
            fill,
            title,
        })
        .collect();
    ops.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut open: Vec<f64> = Vec::new();
    let mut deepest = 0;
    for (s, d, fill, title) in ops {
        while open.last().is_some_and(|&end| end <= s) {
            open.pop();
        }
        let depth = open.len().min(OP_ROWS - 1);
        deepest = deepest.max(depth + 1);
        open.push(s + d);
        spans.push(Span {
            x: x_of(s, duration_ms),
            w: w_of(d, duration_ms),
            s: round(s),
            d: round(d),
            row: 1 + depth,
            fill,
            title,
        });
    }
    (spans, deepest)
}

/// `v` to 4 decimals (what the page carries: 0.1 µs).
fn round(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

/// Where a span starting at `s` ms is drawn at first (all of the trace
/// shown).
fn x_of(s: f64, duration_ms: f64) -> f64 {
    round(s / duration_ms * WIDTH)
}

/// How wide a span of `d` ms is drawn at first: at least a thin line.
fn w_of(d: f64, duration_ms: f64) -> f64 {
    round((d / duration_ms * WIDTH).max(0.2))
}

/// About 8 round ticks over `0..duration_ms`.
fn ticks(duration_ms: f64) -> Vec<Tick> {
    if duration_ms.is_nan() || duration_ms <= 0.0 {
        return Vec::new();
    }
    let raw = duration_ms / 8.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut out = Vec::new();
    let mut t = 0.0;
    while t <= duration_ms {
        out.push(Tick {
            at: 100.0 * t / duration_ms,
            label: if step >= 1000.0 {
                format!("{:.0} s", t / 1000.0)
            } else if step >= 1.0 {
                format!("{t:.0} ms")
            } else {
                format!("{t:.2} ms")
            },
        });
        t += step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside() {
        let t = ticks(37.0);
        assert!(t.len() >= 4 && t.len() <= 10, "{t:?}");
        assert!(t.iter().all(|x| x.at >= 0.0 && x.at <= 100.0));
        assert_eq!(t[1].label, "5 ms");
        assert!(ticks(0.0).is_empty());
    }
}
