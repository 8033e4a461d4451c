//! What `lotus attribute DIR` and `lotus report` both show of an
//! in-pipeline attribution: its plot.

use anyhow::Result;
use lotus_attribute::InPipelineAttribution;

use crate::render::svg::{labelled_bars, Colours, LabelledBar};

/// `--plot` (and `lotus report`'s plot of it): one bar per row (ops, then
/// the other rows, as the table lists them), its CPU time, named with its
/// top function, coloured by `colours` (the other rows grey).
pub(crate) fn svg_of(a: &InPipelineAttribution, colours: &Colours) -> Result<String> {
    // Seconds once a bar would pass 10 000 ms: the axis stays readable.
    let top_ns = a.rows.iter().map(|r| r.cpu_ns).max().unwrap_or(0);
    let (unit, per_ns, decimals) = if top_ns >= 10_000_000_000 {
        ("s", 1e9, 2)
    } else {
        ("ms", 1e6, 1)
    };
    let bars: Vec<LabelledBar> = a
        .rows
        .iter()
        .map(|r| LabelledBar {
            label: r.name.clone(),
            value: r.cpu_ns as f64 / per_ns,
            note: r.top_functions.first().map_or(String::new(), |f| {
                format!("{} ({:.0}%)", f.function, f.share * 100.0)
            }),
        })
        .collect();
    let title = format!(
        "CPU time per row in the pipeline ({} samples at {} Hz{})",
        a.total_samples,
        a.frequency_hz,
        if a.partial { ", partial" } else { "" }
    );
    labelled_bars(
        &title,
        &format!("CPU time ({unit})"),
        &bars,
        decimals,
        colours,
    )
}
