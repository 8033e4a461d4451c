//! Normalized report rows: what every backend's report becomes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::demangle::demangle;

/// What a row's [`Row::value`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Sample counts (perf, uProf time-based sampling).
    #[default]
    Samples,
    /// CPU time in seconds (VTune's `CPU Time`).
    Seconds,
}

impl Unit {
    /// A short label for tables and headers.
    pub fn label(self) -> &'static str {
        match self {
            Unit::Samples => "samples",
            Unit::Seconds => "cpu time (s)",
        }
    }
}

/// One native function as a profiler saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Demangled function name, or `func@0x<start>` for unsymbolized code.
    pub function: String,
    /// The module's file name (`libjpeg.so.9`), or `[Unknown]`.
    pub module: String,
    /// The module's full path where the profiler gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_path: Option<String>,
    /// Samples or seconds, as the report's [`Unit`] says.
    pub value: f64,
    /// Further per-function figures by column name (`Clockticks`,
    /// `CPI Rate`, `CPU Time:Spin Time`...). Percentages are kept as
    /// percent values (41.5 for `41.5%`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, f64>,
    /// The full signature where the profiler gave one (`Function (Full)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_name: Option<String>,
    /// Source file, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_file: Option<String>,
    /// The function's start address inside its module, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_address: Option<u64>,
}

/// The module name used when a profiler does not know the module.
pub const UNKNOWN_MODULE: &str = "[Unknown]";

/// Whether a module name says the module is unknown: empty, VTune's
/// [`UNKNOWN_MODULE`] or perf's `[unknown]` (one test for every reader;
/// the spellings are the tools' own, kept as they wrote them).
///
/// ```
/// use lotus_core::is_unknown_module;
/// assert!(is_unknown_module("[Unknown]") && is_unknown_module("[unknown]"));
/// assert!(is_unknown_module(" ") && !is_unknown_module("/usr/lib/libc.so.6"));
/// ```
pub fn is_unknown_module(module: &str) -> bool {
    let m = module.trim();
    m.is_empty() || m.eq_ignore_ascii_case(UNKNOWN_MODULE)
}

impl Row {
    /// A row for `function` in the module at `module_path` (a path or a bare
    /// file name), with the name demangled and the module reduced to its
    /// file name.
    pub fn new(function: &str, module_path: &str, value: f64) -> Self {
        let module_path = module_path.trim();
        let module = module_basename(module_path);
        let keep_path = module_path.contains('/') || module_path.contains('\\');
        Row {
            function: demangle(function.trim()),
            module: module.to_string(),
            module_path: keep_path.then(|| module_path.to_string()),
            value,
            counters: BTreeMap::new(),
            full_name: None,
            source_file: None,
            start_address: None,
        }
    }

    /// The `function|module` key the original tool's mappings use.
    pub fn key(&self) -> String {
        function_key(&self.function, &self.module)
    }
}

/// The file name of a module path; `[Unknown]` for an empty one.
///
/// ```
/// use lotus_core::module_basename;
/// assert_eq!(module_basename("/usr/lib/x86_64-linux-gnu/libc-2.31.so"), "libc-2.31.so");
/// assert_eq!(module_basename("libjpeg.so.9"), "libjpeg.so.9");
/// assert_eq!(module_basename(""), "[Unknown]");
/// ```
pub fn module_basename(path: &str) -> &str {
    let path = path.trim();
    if path.is_empty() {
        return UNKNOWN_MODULE;
    }
    // A bracketed pseudo-module (`[Unknown]`, `[vdso]`) is a name, not a path.
    if path.starts_with('[') {
        return path;
    }
    let base = path.rsplit(['/', '\\']).next().unwrap_or(path);
    if base.is_empty() {
        path
    } else {
        base
    }
}

/// The `function|module` key of the original tool's schema.
pub fn function_key(function: &str, module: &str) -> String {
    format!("{function}|{module}")
}

/// Splits a `function|module` key. The module is after the last `|`, since
/// C++ names may contain `|` (`operator|`) and file names do not.
pub fn split_function_key(key: &str) -> Option<(&str, &str)> {
    let (function, module) = key.rsplit_once('|')?;
    if function.is_empty() || module.is_empty() {
        return None;
    }
    Some((function, module))
}

/// What one report holds: its rows and what their values count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Report {
    /// What [`Row::value`] counts.
    pub unit: Unit,
    /// One row per function, in the report's order.
    pub rows: Vec<Row>,
    /// The samples' call stacks, where the backend took them
    /// ([`crate::CollectOptions::stacks`]); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<StackCount>,
}

/// The samples of one call stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackCount {
    /// Its frames' functions, outermost first, the sampled function last.
    pub frames: Vec<String>,
    /// Samples with this stack.
    pub samples: u64,
}

impl Report {
    /// A report of `rows`, whose values count `unit`.
    pub fn new(unit: Unit, rows: Vec<Row>) -> Self {
        Report {
            unit,
            rows,
            stacks: Vec::new(),
        }
    }

    /// The sum of all rows' values.
    pub fn total(&self) -> f64 {
        self.rows.iter().map(|r| r.value).sum()
    }
}

/// Parses a figure as vendor reports print it: `2.388030`, `1868.632s`,
/// `6,275,872,000,000`, `41.5%`, `3.4 GHz`. Units and thousands separators
/// are dropped (a percentage stays a percent value); `None` for text that is
/// not a number (`N/A`, empty).
///
/// ```
/// use lotus_core::parse_figure;
/// assert_eq!(parse_figure("1868.632s"), Some(1868.632));
/// assert_eq!(parse_figure("6,275,872,000,000"), Some(6.275872e12));
/// assert_eq!(parse_figure("41.5%"), Some(41.5));
/// assert_eq!(parse_figure("3.4 GHz"), Some(3.4));
/// assert_eq!(parse_figure("N/A"), None);
/// ```
pub fn parse_figure(text: &str) -> Option<f64> {
    // Most figures are plain numbers: parse them without the clean-up.
    if let Ok(v) = text.parse::<f64>() {
        if v.is_finite() {
            return Some(v);
        }
    }
    let t = text.trim();
    let t = t
        .strip_suffix('%')
        .or_else(|| t.strip_suffix("GHz"))
        .or_else(|| t.strip_suffix("MHz"))
        .or_else(|| t.strip_suffix("ms"))
        .or_else(|| t.strip_suffix('s'))
        .unwrap_or(t)
        .trim_end();
    if t.is_empty() || !t.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let cleaned: String;
    let t = if t.contains(',') {
        cleaned = t.replace(',', "");
        cleaned.as_str()
    } else {
        t
    };
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_row_demangles_and_keeps_full_path() {
        let row = Row::new("_ZN3foo3barEv", "/opt/lib/libfoo.so.1.2", 3.0);
        assert_eq!(row.function, "foo::bar()");
        assert_eq!(row.module, "libfoo.so.1.2");
        assert_eq!(row.module_path.as_deref(), Some("/opt/lib/libfoo.so.1.2"));
        assert_eq!(row.key(), "foo::bar()|libfoo.so.1.2");
    }

    #[test]
    fn bare_module_name_has_no_path() {
        let row = Row::new("f", "libc.so.6", 1.0);
        assert_eq!(row.module_path, None);
        assert_eq!(Row::new("f", "", 1.0).module, UNKNOWN_MODULE);
    }

    #[test]
    fn key_split_takes_last_bar() {
        assert_eq!(
            split_function_key("operator|(a, b)|libx.so"),
            Some(("operator|(a, b)", "libx.so"))
        );
        assert_eq!(split_function_key("nobar"), None);
        assert_eq!(split_function_key("|libx.so"), None);
    }
}
