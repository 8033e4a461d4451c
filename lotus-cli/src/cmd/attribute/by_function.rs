//! `lotus attribute --by function`: the attribution per native function of
//! the mapping ([`lotus_attribute::FunctionMapping`]), rendered as
//! JSON (`lotus.attribution-functions/1`), CSV, terminal tables and
//! Markdown.
//!
//! ```json
//! {"schema": "lotus.attribution-functions/1", "mapping": "M", "match": "auto",
//!  "split": "equal",
//!  "profiles": [
//!    {"name": "b1024_gpu4_dataloader8", "file": "...", "format": "vtune-csv",
//!     "unit": "seconds", "sample_interval_s": null, "total_cpu_time_s": 12345.6,
//!     "clockticks": "Clockticks", "instructions": "Instructions Retired",
//!     "functions": [
//!       {"function": "decode_mcu", "module": "libjpeg.so.9",
//!        "ops": [{"op": "Loader", "part": 1.0}],
//!        "cpu_time_s": 1868.6, "share": 0.15, "rows": 1,
//!        "counters": {"Clockticks": 6.3e12, "Instructions Retired": 1.1e13},
//!        "cpi": 0.57, "topdown": {"Retiring": 41.5, "Front-End Bound": 8.5}}],
//!     "unexplained": {"cpu_time_s": 4000.0, "share": 0.32, "rows": 250, ...}}]}
//! ```
//!
//! A sample-count profile also has `total_samples` and per function
//! `samples`; `cpu_time_s` is `null` where the sample interval is unknown.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use lotus_attribute::{FunctionAttribution, OpShare};
use lotus_core::Unit;
use lotus_sys::text::{csv_number, csv_record, one_line, printable};

use super::render::{amount, metric_text, pct, Grid};
use crate::attribution_inputs::LoadedProfile;
use crate::render::table;

/// Every profile's per-function attribution, ready to render.
pub(super) struct FunctionView<'a> {
    pub(super) mapping: &'a str,
    pub(super) match_mode: String,
    pub(super) profiles: &'a [LoadedProfile],
    pub(super) results: &'a [FunctionAttribution],
    /// `--wide`: names in tables in full.
    pub(super) wide: bool,
}

/// `A (50%), B (50%)`.
fn credits(f: &lotus_attribute::FunctionShare) -> String {
    f.ops
        .iter()
        .map(|c| format!("{} ({})", c.op, pct(c.part)))
        .collect::<Vec<_>>()
        .join(", ")
}

impl FunctionView<'_> {
    fn split(&self) -> String {
        self.results
            .first()
            .map(|a| a.split.to_string())
            .unwrap_or_default()
    }

    /// The `lotus.attribution-functions/1` document, as text.
    pub(super) fn json(&self) -> Result<String> {
        let out = lotus_attribute::function_attribution_document(
            self.mapping,
            &self.match_mode,
            self.profiles,
            self.results,
        );
        Ok(serde_json::to_string_pretty(&out)? + "\n")
    }

    /// One row per (profile, function), every figure a column.
    pub(super) fn csv(&self) -> Result<String> {
        let any_samples = self.profiles.iter().any(|p| p.unit == Unit::Samples);
        let mut counters = BTreeSet::new();
        let mut metrics = BTreeSet::new();
        for f in self.results.iter().flat_map(|a| &a.functions) {
            counters.extend(f.figures.counters.keys().cloned());
            metrics.extend(f.figures.metrics.keys().cloned());
        }
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut header: Vec<String> = ["profile", "function", "module", "ops", "cpu_time_s"]
            .map(String::from)
            .to_vec();
        if any_samples {
            header.push("samples".into());
        }
        header.extend(["share", "rows", "cpi"].map(String::from));
        header.extend(counters.iter().cloned());
        header.extend(metrics.iter().cloned());
        w.write_record(csv_record(&header))?;
        let num = |v: Option<f64>| v.map(csv_number).unwrap_or_default();
        for (p, a) in self.profiles.iter().zip(self.results) {
            for f in &a.functions {
                let o = &f.figures;
                let ops = f
                    .ops
                    .iter()
                    .map(|c| format!("{}={}", c.op, c.part))
                    .collect::<Vec<_>>()
                    .join(";");
                let mut rec = vec![
                    p.name.clone(),
                    f.function.clone(),
                    f.module.clone(),
                    ops,
                    num(p.seconds_per_unit().map(|k| o.value * k)),
                ];
                if any_samples {
                    rec.push(num((p.unit == Unit::Samples).then_some(o.value)));
                }
                rec.extend([csv_number(o.share), o.rows.to_string(), num(o.cpi)]);
                rec.extend(counters.iter().map(|c| num(o.counters.get(c).copied())));
                rec.extend(metrics.iter().map(|m| num(o.metrics.get(m).copied())));
                w.write_record(csv_record(&rec))?;
            }
        }
        Ok(String::from_utf8(w.into_inner().context("writing CSV")?)?)
    }

    /// One grid per profile; `metrics`: which metric columns.
    fn grids(&self, all_metrics: bool) -> Vec<(String, Grid)> {
        self.profiles
            .iter()
            .zip(self.results)
            .map(|(p, a)| {
                let present: BTreeSet<&String> = a
                    .functions
                    .iter()
                    .flat_map(|f| f.figures.metrics.keys())
                    .collect();
                let metrics: Vec<String> = if all_metrics {
                    present.into_iter().cloned().collect()
                } else {
                    crate::render::TOP_DOWN_METRICS
                        .iter()
                        .filter(|m| present.iter().any(|p| p.as_str() == **m))
                        .map(|m| m.to_string())
                        .collect()
                };
                let ck = a.clockticks.clone();
                let inst = a.instructions.clone();
                let mut header: Vec<String> = ["function", "module", "ops (part)", "time", "share"]
                    .map(String::from)
                    .to_vec();
                header.extend(ck.iter().cloned());
                header.extend(inst.iter().cloned());
                header.push("CPI".into());
                header.extend(metrics.iter().cloned());
                let count = |o: &OpShare, c: &Option<String>| {
                    c.as_ref()
                        .and_then(|c| o.counters.get(c))
                        .map_or("-".to_string(), |v| format!("{v:.4e}"))
                };
                let rows = a
                    .functions
                    .iter()
                    .map(|f| {
                        let o = &f.figures;
                        let mut row = vec![
                            f.function.clone(),
                            if self.wide {
                                table::module_name(&f.module)
                            } else {
                                table::cut_right(&table::module_name(&f.module), 24)
                            },
                            credits(f),
                            amount(p, o.value),
                            pct(o.share),
                        ];
                        if ck.is_some() {
                            row.push(count(o, &ck));
                        }
                        if inst.is_some() {
                            row.push(count(o, &inst));
                        }
                        row.push(o.cpi.map_or("-".to_string(), metric_text));
                        row.extend(metrics.iter().map(|m| {
                            o.metrics
                                .get(m)
                                .map_or("-".to_string(), |v| metric_text(*v))
                        }));
                        row
                    })
                    .collect();
                let title = format!(
                    "{} ({}, total {}; not in the mapping: {}, {})",
                    p.name,
                    p.format,
                    amount(p, a.total),
                    amount(p, a.unexplained.value),
                    pct(a.unexplained.share)
                );
                (
                    title,
                    Grid {
                        header,
                        rows,
                        right_from: 3,
                        names: Some(0),
                    },
                )
            })
            .collect()
    }

    fn header_line(&self) -> String {
        format!(
            "mapping {}, per native function, match {}, a function's time divided among its ops: {}",
            self.mapping,
            self.match_mode,
            self.split()
        )
    }

    /// Terminal tables.
    pub(super) fn table(&self) -> String {
        let width = (!self.wide).then(table::width);
        let mut out = self.header_line() + "\n";
        for (title, g) in self.grids(false) {
            out += &format!("\n{}\n", one_line(&title));
            out += &g.terminal(width);
        }
        // Names and paths from the files: control characters escaped;
        // lines wrapped to the width (the tables fit it already).
        let out = printable(&out).into_owned();
        match width {
            Some(w) => table::wrap_lines(&out, w),
            None => out,
        }
    }

    /// Markdown tables (every metric).
    pub(super) fn markdown(&self) -> String {
        let mut out = format!("{}\n", self.header_line());
        for (title, g) in self.grids(true) {
            out += &format!("\n### {}\n\n", one_line(&title));
            out += &g.markdown();
        }
        printable(&out).into_owned()
    }
}
