//! The normalized whole-program profile, `lotus.profile/1` (JSON): what
//! `lotus profile` writes and `lotus attribute` reads.
//!
//! ```json
//! {
//!   "schema": "lotus.profile/1",
//!   "backend": "perf",
//!   "unit": "samples",
//!   "sample_interval_s": 0.00025,
//!   "rows": [
//!     {"function": "decode_mcu", "module": "libjpeg.so.9", "value": 1868,
//!      "counters": {"cycles": 6.2e9, "instructions": 1.1e10}}
//!   ]
//! }
//! ```
//!
//! `unit` says what each row's `value` counts (`samples` or `seconds` of
//! CPU time); `sample_interval_s`, where known, turns samples into seconds.
//! A profile of a run that was stopped early (Ctrl-C, `--timeout`) holds
//! what was sampled until then and says so: `"partial": {"reason":
//! "interrupted" | "timeout", "message": "..."}` ([`Partial`]).
//! Rows are [`Row`]s as serde writes them. Fields may be added; none may
//! be renamed. A bare serialized [`Report`] (`{"unit": ..., "rows": [...]}`,
//! no `schema`) reads as a profile of backend `unknown`.
//!
//! ```
//! use lotus_core::Profile;
//! use lotus_core::{Report, Row, Unit};
//!
//! let report = Report::new(Unit::Seconds, vec![Row::new("memcpy", "libc.so.6", 1.5)]);
//! let text = Profile::new("vtune", report).to_json();
//! let back = Profile::read_json(&mut text.as_bytes(), "p.json").unwrap();
//! assert_eq!(back.backend, "vtune");
//! assert_eq!(back.report().total(), 1.5);
//! ```

use crate::Error;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::report_error::quote_cut;
use crate::row::{Report, Row, Unit};

/// The most characters of a parser's message kept in an error: serde
/// quotes the value it did not expect, which may be huge.
const MESSAGE_CHARS: usize = 300;

/// The schema tag of lotus profiles.
pub const PROFILE_SCHEMA: &str = "lotus.profile/1";

/// A whole-program profile: one row per native function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Profile {
    /// Always [`PROFILE_SCHEMA`].
    pub schema: String,
    /// The backend that measured it (`perf`, `vtune`, `uprof`).
    pub backend: String,
    /// What each row's value counts.
    pub unit: Unit,
    /// Seconds per sample, where the profile counts samples at a known
    /// fixed interval (uProf's timer, perf's task-clock period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_interval_s: Option<f64>,
    /// The profiled command line, where known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Where and with what it was measured (host, versions...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Set when the run was stopped before it ended: the rows cover only
    /// the part that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
    /// One row per function.
    pub rows: Vec<Row>,
}

/// Why a profile covers only part of its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partial {
    /// [`Partial::INTERRUPTED`] or [`Partial::TIMEOUT`] (readers accept
    /// any other word).
    pub reason: String,
    /// What happened, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Partial {
    /// Stopped by Ctrl-C or SIGTERM.
    pub const INTERRUPTED: &'static str = "interrupted";
    /// Stopped at its time limit.
    pub const TIMEOUT: &'static str = "timeout";
}

impl Profile {
    /// A profile of `report`'s rows as measured by `backend`.
    pub fn new(backend: &str, report: Report) -> Self {
        Profile {
            schema: PROFILE_SCHEMA.to_string(),
            backend: backend.to_string(),
            unit: report.unit,
            sample_interval_s: None,
            command: Vec::new(),
            environment: BTreeMap::new(),
            partial: None,
            rows: report.rows,
        }
    }

    /// The rows as a [`Report`] (a copy).
    pub fn report(&self) -> Report {
        Report {
            stacks: Vec::new(),
            unit: self.unit,
            rows: self.rows.clone(),
        }
    }

    /// The rows as a [`Report`], without copying.
    pub fn into_report(self) -> Report {
        Report {
            stacks: Vec::new(),
            unit: self.unit,
            rows: self.rows,
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        // Strings, numbers, lists and maps with string keys: always
        // serializes (a non-finite value becomes null).
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes pretty JSON to `out`, row by row (no whole-text buffer).
    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self).map_err(std::io::Error::from)?;
        out.write_all(b"\n")
    }

    /// Reads a profile from JSON, streaming. `file` names the input in
    /// errors. A lotus mapping (either schema) is refused with a message
    /// that says so.
    pub fn read_json(input: &mut dyn BufRead, file: &str) -> Result<Profile, Error> {
        let raw: RawProfile = serde_json::from_reader(input).map_err(|e| {
            if e.is_data() {
                Error::InvalidProfile {
                    file: file.to_string(),
                    message: quote_cut(&e.to_string(), MESSAGE_CHARS),
                }
            } else {
                Error::Json {
                    file: file.to_string(),
                    line: e.line(),
                    column: e.column(),
                    message: quote_cut(&e.to_string(), MESSAGE_CHARS),
                }
            }
        })?;
        let not_a_profile = |what: &str| Error::NotAProfile {
            file: file.to_string(),
            what: what.to_string(),
        };
        match raw.schema.as_deref() {
            Some(PROFILE_SCHEMA) | None => {}
            Some(s) if s.starts_with("lotus.mapping/") => {
                return Err(not_a_profile(&format!(
                    "it is a lotus mapping ({s}): pass it as --mapping"
                )))
            }
            Some(s) => {
                return Err(Error::UnknownProfileSchema {
                    file: file.to_string(),
                    found: quote_cut(s, 80),
                })
            }
        }
        if raw.op_to_func.is_some() {
            return Err(not_a_profile(
                "it is a mapping in the original tool's schema (op_to_func): pass it as --mapping",
            ));
        }
        let (Some(unit), Some(rows)) = (raw.unit, raw.rows) else {
            return Err(not_a_profile(
                "expected a \"schema\": \"lotus.profile/1\" object with \"unit\" and \"rows\"",
            ));
        };
        let invalid = |message: String| Error::InvalidProfile {
            file: file.to_string(),
            message,
        };
        let mut total = 0.0f64;
        for (i, row) in rows.iter().enumerate() {
            if !(row.value.is_finite() && row.value >= 0.0) {
                return Err(invalid(format!(
                    "row {} ('{}'): value {} must be a number of 0 or more",
                    i + 1,
                    quote_cut(&row.function, 80),
                    row.value
                )));
            }
            // The rows' sum is the profile's total: it must be finite too.
            total += row.value;
            if !total.is_finite() {
                return Err(invalid(format!(
                    "row {} ('{}'): the values up to this row add up to more than a number can hold",
                    i + 1,
                    quote_cut(&row.function, 80)
                )));
            }
        }
        if let Some(dt) = raw.sample_interval_s {
            if !(dt.is_finite() && dt > 0.0) {
                return Err(invalid(format!(
                    "sample_interval_s {dt} must be a number above 0"
                )));
            }
        }
        Ok(Profile {
            schema: PROFILE_SCHEMA.to_string(),
            backend: raw.backend.unwrap_or_else(|| "unknown".to_string()),
            unit,
            sample_interval_s: raw.sample_interval_s,
            command: raw.command,
            environment: raw.environment,
            partial: raw.partial,
            rows,
        })
    }
}

/// What a profile file may hold, read leniently so that a mapping or a
/// foreign JSON file gets a message that says what it is.
#[derive(Deserialize)]
struct RawProfile {
    schema: Option<String>,
    backend: Option<String>,
    unit: Option<Unit>,
    sample_interval_s: Option<f64>,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    #[serde(default)]
    partial: Option<Partial>,
    rows: Option<Vec<Row>>,
    op_to_func: Option<IgnoredAny>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Profile, Error> {
        Profile::read_json(&mut text.as_bytes(), "p.json")
    }

    #[test]
    fn round_trip_keeps_rows_counters_and_interval() {
        let mut row = Row::new("_ZN3foo3barEv", "/lib/libfoo.so.1", 12.0);
        row.counters.insert("cycles".into(), 3.0e9);
        let mut p = Profile::new(
            "perf",
            Report {
                stacks: Vec::new(),
                unit: Unit::Samples,
                rows: vec![row, Row::new("memcpy", "libc.so.6", 3.0)],
            },
        );
        p.sample_interval_s = Some(0.001);
        p.command = vec!["python".into(), "train.py".into()];
        p.partial = Some(Partial {
            reason: Partial::TIMEOUT.into(),
            message: "stopped after --timeout 5 s".into(),
        });
        let mut out = Vec::new();
        p.write_json(&mut out).expect("writes");
        let back = Profile::read_json(&mut &out[..], "p.json").expect("reads");
        assert_eq!(back, p);
        assert!(String::from_utf8(out)
            .expect("utf-8")
            .contains("\"schema\": \"lotus.profile/1\""));
        assert_eq!(back.into_report().total(), 15.0);
    }

    #[test]
    fn partial_marks_are_read_and_optional() {
        let p = read(
            r#"{"schema": "lotus.profile/1", "unit": "samples", "rows": [],
                "partial": {"reason": "interrupted"}}"#,
        )
        .expect("reads");
        let partial = p.partial.expect("partial");
        assert_eq!(partial.reason, Partial::INTERRUPTED);
        assert_eq!(partial.message, "");
        let whole = read(r#"{"unit": "samples", "rows": []}"#).expect("reads");
        assert_eq!(whole.partial, None);
        assert!(!whole.to_json().contains("partial"));
    }

    #[test]
    fn bare_report_reads_as_unknown_backend() {
        let p = read(
            r#"{"unit": "seconds", "rows": [{"function": "f", "module": "m", "value": 2.5}]}"#,
        )
        .expect("reads");
        assert_eq!((p.backend.as_str(), p.unit), ("unknown", Unit::Seconds));
        assert_eq!(p.rows[0].value, 2.5);
    }

    #[test]
    fn mappings_and_other_files_are_named() {
        let e = read(r#"{"schema": "lotus.mapping/1", "ops": []}"#).unwrap_err();
        assert!(e.to_string().contains("pass it as --mapping"), "{e}");
        let e = read(r#"{"op_to_func": {"A": ["f|m"]}}"#).unwrap_err();
        assert!(e.to_string().contains("original tool"), "{e}");
        let e =
            read(r#"{"schema": "lotus.profile/9", "unit": "samples", "rows": []}"#).unwrap_err();
        assert!(matches!(e, Error::UnknownProfileSchema { .. }), "{e}");
        let e = read(r#"{"hello": 1}"#).unwrap_err();
        assert!(e.to_string().starts_with("p.json: not a profile"), "{e}");
        let e = read("{\n  \"unit\": ").unwrap_err();
        assert!(e.to_string().starts_with("p.json:2:"), "{e}");
        let e =
            read(r#"{"unit": "samples", "rows": [{"function": "f", "module": "m", "value": -1}]}"#)
                .unwrap_err();
        assert!(e.to_string().contains("row 1 ('f')"), "{e}");
        let e = read(r#"{"unit": "parsecs", "rows": []}"#).unwrap_err();
        assert!(e.to_string().contains("invalid profile"), "{e}");
    }

    #[test]
    fn values_whose_sum_overflows_are_refused_with_the_row() {
        let text = r#"{"unit": "seconds", "rows": [
            {"function": "f", "module": "m", "value": 1e308},
            {"function": "g", "module": "m", "value": 1e308}]}"#;
        let e = Profile::read_json(&mut text.as_bytes(), "p.json").unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("p.json") && e.contains("row 2 ('g')"), "{e}");
    }
}
