//! What `lotus attribute DIR` writes of an in-pipeline attribution
//! besides its tables: its JSON (`lotus.in-pipeline/1`, with the
//! verdict), its CSV, and the counter columns every format shows; and of
//! a function's callers (`--by caller`): its JSON (`lotus.callers/1`)
//! and CSV; and of two mappings compared (`lotus show MAPPING --against
//! OTHER`): its JSON (`lotus.mapping-comparison/1`) and CSV.

use serde_json::json;

use crate::{AttributedRow, CallerNode, Callers, Error, FunctionCallers, InPipelineAttribution};
use crate::{MappingComparison, Verdict};

/// The schema of `lotus attribute DIR --by caller --format json`
/// ([`callers_document`]).
pub const CALLERS_SCHEMA: &str = "lotus.callers/1";

/// The schema of `lotus attribute DIR --format json`
/// ([`in_pipeline_document`]).
pub const IN_PIPELINE_SCHEMA: &str = "lotus.in-pipeline/1";

/// The `lotus.in-pipeline/1` document: the attribution `a`, its schema
/// and its `verdict`.
pub fn in_pipeline_document(a: &InPipelineAttribution, verdict: &Verdict) -> serde_json::Value {
    let mut v = serde_json::to_value(a).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("schema".into(), json!(IN_PIPELINE_SCHEMA));
        o.insert(
            "verdict".into(),
            serde_json::to_value(verdict).unwrap_or_default(),
        );
    }
    v
}

impl InPipelineAttribution {
    /// Whether the rows have a CPI column: cycles and instructions both
    /// read.
    fn has_cpi(&self) -> bool {
        ["cycles", "instructions"]
            .iter()
            .all(|c| self.counters.iter().any(|n| n == c))
    }

    /// The counter columns' headers: the counters in the samples file's
    /// order, then CPI where cycles and instructions are both read.
    pub fn counter_headers(&self) -> Vec<String> {
        let mut h = self.counters.clone();
        if self.has_cpi() {
            h.push("CPI".into());
        }
        h
    }

    /// Row `r`'s counter columns ([`InPipelineAttribution::counter_headers`]).
    pub fn counter_cells(&self, r: &AttributedRow) -> Vec<String> {
        let mut cells: Vec<String> = self
            .counters
            .iter()
            .map(|c| r.counters.get(c).copied().unwrap_or(0).to_string())
            .collect();
        if self.has_cpi() {
            cells.push(r.cpi.map_or(String::new(), |c| format!("{c:.2}")));
        }
        cells
    }
}

/// `lotus attribute DIR --format csv`: a row per row of `a`, its figures
/// in ns, its top function and its counters.
pub fn in_pipeline_csv(a: &InPipelineAttribution) -> Result<String, Error> {
    let csv_error = |e: csv::Error| Error::Io(format!("writing CSV: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "row",
        "kind",
        "samples",
        "cpu_ns",
        "share",
        "calls",
        "cpu_per_call_ns",
        "path",
        "parent",
        "depth",
        "inclusive_samples",
        "pool_samples",
        "inclusive_cpu_ns",
        "cpu_source",
        "uncertainty_ns",
        "inclusive_uncertainty_ns",
        "wall_ns",
        "exclusive_wall_ns",
        "top_function",
        "top_module",
    ]
    .map(String::from)
    .to_vec();
    header.extend(a.counter_headers().into_iter().map(|h| h.to_lowercase()));
    w.write_record(lotus_sys::text::csv_record(&header))
        .map_err(csv_error)?;
    for r in &a.rows {
        let top = r.top_functions.first();
        let mut cells = vec![
            r.name.clone(),
            // The name JSON gives it (`pool_spin`), one name in every format.
            serde_name(&r.kind),
            r.samples.to_string(),
            r.cpu_ns.to_string(),
            format!("{:.6}", r.share),
            r.calls.map_or(String::new(), |c| c.to_string()),
            r.cpu_per_call_ns.map_or(String::new(), |c| c.to_string()),
            r.path.clone(),
            r.parent.clone().unwrap_or_default(),
            r.depth.to_string(),
            r.inclusive_samples.to_string(),
            r.pool_samples.to_string(),
            r.inclusive_cpu_ns.to_string(),
            serde_name(&r.cpu_source),
            r.uncertainty_ns.to_string(),
            r.inclusive_uncertainty_ns.to_string(),
            r.wall_ns.map_or(String::new(), |w| w.to_string()),
            r.exclusive_wall_ns.map_or(String::new(), |w| w.to_string()),
            top.map_or(String::new(), |f| f.function.clone()),
            top.map_or(String::new(), |f| f.module.clone()),
        ];
        cells.extend(a.counter_cells(r));
        w.write_record(lotus_sys::text::csv_record(&cells))
            .map_err(csv_error)?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| Error::Io(format!("writing CSV: {e}")))?;
    String::from_utf8(bytes).map_err(|e| Error::Io(format!("writing CSV: {e}")))
}

/// `records` written as CSV, each cell made safe for a spreadsheet
/// ([`lotus_sys::text::csv_record`]).
pub(crate) fn csv_text<R, S>(records: impl IntoIterator<Item = R>) -> Result<String, Error>
where
    R: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let csv_error = |e: &dyn std::fmt::Display| Error::Io(format!("writing CSV: {e}"));
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in records {
        w.write_record(lotus_sys::text::csv_record(r))
            .map_err(|e| csv_error(&e))?;
    }
    let bytes = w.into_inner().map_err(|e| csv_error(&e))?;
    String::from_utf8(bytes).map_err(|e| csv_error(&e))
}

/// The `lotus.callers/1` document: `c` as it is, with its schema.
pub fn callers_document(c: &Callers) -> serde_json::Value {
    let mut v = serde_json::to_value(c).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("schema".into(), json!(CALLERS_SCHEMA));
    }
    v
}

impl FunctionCallers {
    /// One line per caller, depth first: its depth (1: the nearest), the
    /// callers from the function to it (`;`-separated), the caller.
    pub fn lines(&self) -> Vec<(usize, String, &CallerNode)> {
        fn walk<'a>(
            nodes: &'a [CallerNode],
            depth: usize,
            path: &mut Vec<&'a str>,
            out: &mut Vec<(usize, String, &'a CallerNode)>,
        ) {
            for n in nodes {
                path.push(&n.frame);
                out.push((depth, path.join(";"), n));
                walk(&n.callers, depth + 1, path, out);
                path.pop();
            }
        }
        let mut out = Vec::new();
        walk(&self.callers, 1, &mut Vec::new(), &mut out);
        out
    }
}

/// `lotus attribute DIR --by caller --format csv`: one line per caller
/// ([`FunctionCallers::lines`]), its `path` the callers from the function
/// outwards.
pub fn callers_csv(c: &Callers) -> Result<String, Error> {
    let header = [
        "row",
        "row_samples",
        "function",
        "function_samples",
        "depth",
        "caller",
        "module",
        "samples",
        "share",
        "path",
    ]
    .map(String::from);
    let lines = c.rows.iter().flat_map(|r| {
        r.lines().into_iter().map(move |(depth, path, n)| {
            [
                r.row.clone(),
                r.row_samples.to_string(),
                c.function.clone(),
                r.samples.to_string(),
                depth.to_string(),
                n.frame.clone(),
                n.module.clone(),
                n.samples.to_string(),
                format!("{:.6}", n.share),
                path,
            ]
        })
    });
    csv_text(std::iter::once(header).chain(lines))
}

/// The schema of `lotus show MAPPING --against OTHER --format json`
/// ([`comparison_document`]).
pub const COMPARISON_SCHEMA: &str = "lotus.mapping-comparison/1";

/// The `lotus.mapping-comparison/1` document: `c`, the comparison of the
/// mapping named `mapping` against the one named `against`.
pub fn comparison_document(
    c: &MappingComparison,
    mapping: &str,
    against: &str,
) -> serde_json::Value {
    let mut v = serde_json::to_value(c).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("schema".into(), json!(COMPARISON_SCHEMA));
        o.insert("mapping".into(), json!(mapping));
        o.insert("against".into(), json!(against));
    }
    v
}

/// `lotus show MAPPING --against OTHER --format csv`: one row per op and
/// function listed: `kind` is `coverage` (the op's own row), `missed` or
/// `not_run`.
pub fn comparison_csv(c: &MappingComparison) -> Result<String, Error> {
    let header = [
        "op",
        "kind",
        "coverage",
        "listed",
        "other_samples",
        "function",
        "module",
        "samples",
        "share",
    ]
    .map(String::from);
    let mut records = vec![header];
    for o in &c.ops {
        records.push([
            o.op.clone(),
            "coverage".into(),
            o.coverage.map_or(String::new(), |x| format!("{x:.6}")),
            o.listed.to_string(),
            o.other_samples.to_string(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ]);
        for (kind, fs) in [("missed", &o.missed), ("not_run", &o.not_run)] {
            for f in fs {
                records.push([
                    o.op.clone(),
                    kind.into(),
                    String::new(),
                    String::new(),
                    String::new(),
                    f.function.clone(),
                    f.module.clone(),
                    f.samples.to_string(),
                    format!("{:.6}", f.share),
                ]);
            }
        }
    }
    csv_text(records)
}

/// The name serde gives a unit variant (as JSON writes it).
fn serde_name(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}
