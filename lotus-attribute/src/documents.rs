//! The JSON documents of an attribution through a mapping, beside the
//! types they hold: `lotus.attribution/1` (per op) and
//! `lotus.attribution-functions/1` (per function of the mapping), each
//! with the profiles attributed ([`LoadedProfile`]) in the order given.

use std::collections::BTreeMap;

use lotus_core::Unit;
use serde::Serialize;

use crate::{Attribution, FunctionAttribution, LoadedProfile, OpShare};

/// The schema of the per-op document ([`attribution_document`]).
pub const ATTRIBUTION_SCHEMA: &str = "lotus.attribution/1";

/// The schema of the per-function document
/// ([`function_attribution_document`]).
pub const FUNCTION_ATTRIBUTION_SCHEMA: &str = "lotus.attribution-functions/1";

/// The `lotus.attribution/1` document: serialize it (`serde_json`).
///
/// ```json
/// {"schema": "lotus.attribution/1", "mapping": "M", "match": "auto",
///  "split": "equal",
///  "profiles": [
///    {"name": "b1024_gpu4_dataloader8", "file": "...", "format": "vtune-csv",
///     "unit": "seconds", "sample_interval_s": null,
///     "total_cpu_time_s": 12345.6, "split": "equal",
///     "rows": 327, "matched_rows": 81,
///     "clockticks": "Clockticks", "instructions": "Instructions Retired",
///     "unmatched_ops": [], "notes": [],
///     "ops": [
///       {"op": "Loader", "cpu_time_s": 4321.0, "share": 0.35,
///        "exclusive_s": 4000.0, "shared_s": 321.0, "rows": 20,
///        "counters": {"Clockticks": 1.4e13, "Instructions Retired": 2.9e13},
///        "cpi": 0.48, "topdown": {"Retiring": 55.1, "Front-End Bound": 6.0}},
///       {"op": "(unexplained)", ...}]}]}
/// ```
///
/// `*_s` fields are seconds of CPU time. A profile that counts samples
/// (`"unit": "samples"`) also has `total_samples`, and per op `samples`,
/// `exclusive_samples` and `shared_samples`; its `*_s` fields are the
/// samples times `sample_interval_s` where that is known (uProf reports
/// state it; a `lotus.profile/1` file may) and `null` where it is not.
/// `share` is of the profile's total and is always there; the entries
/// (the `(unexplained)` one included) add up to the total. `topdown`
/// holds every per-function metric (top-down percentages as percent
/// values, `Average CPU Frequency` in GHz) averaged with clockticks as
/// weights; `cpi` is summed clockticks over summed instructions; both are
/// absent (`{}`, `null`) when the profile has no clockticks counter, which
/// `notes` then says.
#[derive(Serialize)]
pub struct AttributionDocument<'a> {
    schema: &'static str,
    mapping: &'a str,
    #[serde(rename = "match")]
    match_mode: String,
    split: String,
    profiles: Vec<JsonProfile<'a>>,
}

/// The fields that open each profile in both documents: which profile,
/// and its total.
#[derive(Serialize)]
struct JsonProfileHead<'a> {
    name: &'a str,
    file: String,
    format: &'static str,
    unit: Unit,
    sample_interval_s: Option<f64>,
    total_cpu_time_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_samples: Option<f64>,
}

impl<'a> JsonProfileHead<'a> {
    /// The head of profile `p`, whose attribution totals `total` (in
    /// the profile's unit).
    fn of(p: &'a LoadedProfile, total: f64) -> Self {
        JsonProfileHead {
            name: &p.name,
            file: p.path.display().to_string(),
            format: p.format,
            unit: p.unit,
            sample_interval_s: p.sample_interval_s,
            total_cpu_time_s: p.seconds_per_unit().map(|k| total * k),
            total_samples: (p.unit == Unit::Samples).then_some(total),
        }
    }
}

#[derive(Serialize)]
struct JsonProfile<'a> {
    #[serde(flatten)]
    head: JsonProfileHead<'a>,
    split: String,
    rows: usize,
    matched_rows: usize,
    clockticks: Option<&'a str>,
    instructions: Option<&'a str>,
    unmatched_ops: &'a [String],
    notes: &'a [String],
    ops: Vec<JsonOp<'a>>,
}

#[derive(Serialize)]
struct JsonOp<'a> {
    op: &'a str,
    cpu_time_s: Option<f64>,
    share: f64,
    exclusive_s: Option<f64>,
    shared_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    samples: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exclusive_samples: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_samples: Option<f64>,
    rows: usize,
    counters: &'a BTreeMap<String, f64>,
    cpi: Option<f64>,
    topdown: &'a BTreeMap<String, f64>,
}

/// Figures of one entry of a profile's attribution in seconds (where its
/// unit converts) and samples (for sample-count profiles): value,
/// exclusive, shared. What the attribution document and `lotus
/// attribute`'s tables both show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpFigures {
    /// In seconds, where the profile's unit converts.
    pub seconds: Option<[f64; 3]>,
    /// In samples, for a sample-count profile.
    pub samples: Option<[f64; 3]>,
}

impl LoadedProfile {
    /// The figures of `o`, one entry of this profile's attribution.
    pub fn figures_of(&self, o: &OpShare) -> OpFigures {
        let raw = [o.value, o.exclusive, o.shared];
        OpFigures {
            seconds: self.seconds_per_unit().map(|k| raw.map(|v| v * k)),
            samples: (self.unit == Unit::Samples).then_some(raw),
        }
    }
}

/// The `lotus.attribution/1` document of `profiles` and their
/// attributions `results` (in the same order) through the mapping file
/// `mapping` (as given); its `match` and `split` are the first result's.
pub fn attribution_document<'a>(
    mapping: &'a str,
    profiles: &'a [LoadedProfile],
    results: &'a [Attribution],
) -> AttributionDocument<'a> {
    let first = results.first();
    let profiles = profiles
        .iter()
        .zip(results)
        .map(|(p, a)| JsonProfile {
            head: JsonProfileHead::of(p, a.total),
            split: a.split.to_string(),
            rows: a.rows,
            matched_rows: a.matched_rows,
            clockticks: a.clockticks.as_deref(),
            instructions: a.instructions.as_deref(),
            unmatched_ops: &a.unmatched_ops,
            notes: &a.notes,
            ops: a
                .ops
                .iter()
                .map(|o| {
                    let f = p.figures_of(o);
                    JsonOp {
                        op: &o.op,
                        cpu_time_s: f.seconds.map(|s| s[0]),
                        share: o.share,
                        exclusive_s: f.seconds.map(|s| s[1]),
                        shared_s: f.seconds.map(|s| s[2]),
                        samples: f.samples.map(|s| s[0]),
                        exclusive_samples: f.samples.map(|s| s[1]),
                        shared_samples: f.samples.map(|s| s[2]),
                        rows: o.rows,
                        counters: &o.counters,
                        cpi: o.cpi,
                        topdown: &o.metrics,
                    }
                })
                .collect(),
        })
        .collect();
    AttributionDocument {
        schema: ATTRIBUTION_SCHEMA,
        mapping,
        match_mode: first.map(|a| a.match_mode.to_string()).unwrap_or_default(),
        split: first.map(|a| a.split.to_string()).unwrap_or_default(),
        profiles,
    }
}

/// The `lotus.attribution-functions/1` document: serialize it
/// (`serde_json`).
#[derive(Serialize)]
pub struct FunctionAttributionDocument<'a> {
    schema: &'static str,
    mapping: &'a str,
    #[serde(rename = "match")]
    match_mode: &'a str,
    split: String,
    profiles: Vec<JsonFunctionProfile<'a>>,
}

#[derive(Serialize)]
struct JsonFunctionProfile<'a> {
    #[serde(flatten)]
    head: JsonProfileHead<'a>,
    clockticks: Option<&'a str>,
    instructions: Option<&'a str>,
    functions: Vec<JsonFunction<'a>>,
    unexplained: JsonFigures<'a>,
}

#[derive(Serialize)]
struct JsonCredit<'a> {
    op: &'a str,
    part: f64,
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    function: &'a str,
    module: &'a str,
    ops: Vec<JsonCredit<'a>>,
    #[serde(flatten)]
    figures: JsonFigures<'a>,
}

#[derive(Serialize)]
struct JsonFigures<'a> {
    cpu_time_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    samples: Option<f64>,
    share: f64,
    rows: usize,
    counters: &'a BTreeMap<String, f64>,
    cpi: Option<f64>,
    topdown: &'a BTreeMap<String, f64>,
}

fn json_figures<'a>(p: &LoadedProfile, o: &'a OpShare) -> JsonFigures<'a> {
    JsonFigures {
        cpu_time_s: p.seconds_per_unit().map(|k| o.value * k),
        samples: (p.unit == Unit::Samples).then_some(o.value),
        share: o.share,
        rows: o.rows,
        counters: &o.counters,
        cpi: o.cpi,
        topdown: &o.metrics,
    }
}

/// The `lotus.attribution-functions/1` document of `profiles` and their
/// per-function attributions `results` (in the same order) through the
/// mapping file `mapping`, matched by `match_mode`; its `split` is the
/// first result's.
pub fn function_attribution_document<'a>(
    mapping: &'a str,
    match_mode: &'a str,
    profiles: &'a [LoadedProfile],
    results: &'a [FunctionAttribution],
) -> FunctionAttributionDocument<'a> {
    let profiles = profiles
        .iter()
        .zip(results)
        .map(|(p, a)| JsonFunctionProfile {
            head: JsonProfileHead::of(p, a.total),
            clockticks: a.clockticks.as_deref(),
            instructions: a.instructions.as_deref(),
            functions: a
                .functions
                .iter()
                .map(|f| JsonFunction {
                    function: &f.function,
                    module: &f.module,
                    ops: f
                        .ops
                        .iter()
                        .map(|c| JsonCredit {
                            op: &c.op,
                            part: c.part,
                        })
                        .collect(),
                    figures: json_figures(p, &f.figures),
                })
                .collect(),
            unexplained: json_figures(p, &a.unexplained),
        })
        .collect();
    FunctionAttributionDocument {
        schema: FUNCTION_ATTRIBUTION_SCHEMA,
        mapping,
        match_mode,
        split: results
            .first()
            .map(|a| a.split.to_string())
            .unwrap_or_default(),
        profiles,
    }
}
