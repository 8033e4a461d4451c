//! Renderers: tables, the report's HTML page, SVG plots, verdict text.

pub mod flame;
pub mod html;
pub mod in_pipeline;
pub mod mapping;
pub mod svg;
pub mod table;
pub mod verdict;

/// The top-down metrics shown in tables where the profile has them: the
/// terminal table of `--by function` and the HTML report (every metric is
/// in the JSON, CSV and Markdown).
pub(crate) const TOP_DOWN_METRICS: &[&str] = &[
    "Retiring",
    "Front-End Bound",
    "Bad Speculation",
    "Back-End Bound",
    "Memory Bound",
    "Core Bound",
];
