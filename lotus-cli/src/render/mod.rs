//! Renderers: tables, the report's HTML page, SVG plots, verdict text.

pub mod html;
pub mod svg;
pub mod table;
pub mod verdict;
