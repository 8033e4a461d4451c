//! Rendering an attribution: JSON, CSV, terminal tables and Markdown.

use crate::render::table;
use crate::render::table::md_escape;
use lotus_sys::text::{csv_number, csv_record, figure, one_line, printable};
use std::collections::BTreeSet;

use anyhow::{Context, Result};
use lotus_attribute::Attribution;
use lotus_core::Unit;

use crate::attribution_inputs::LoadedProfile;

/// The attribution of every profile, ready to render.
pub(super) struct View<'a> {
    /// The mapping file, as given.
    pub(super) mapping: &'a str,
    /// Ops in the mapping.
    pub(super) op_count: usize,
    /// The profiles, in the order given.
    pub(super) profiles: &'a [LoadedProfile],
    /// Their attributions, in the same order.
    pub(super) results: &'a [Attribution],
    /// `--wide`: names in tables in full.
    pub(super) wide: bool,
}

/// A value in the profile's own terms: `12.345 s` or `1234 samples`.
/// Bounded in width whatever the profile holds.
pub(super) fn amount(p: &LoadedProfile, v: f64) -> String {
    match p.seconds_per_unit() {
        Some(k) => format!("{} s", figure(v * k, 3)),
        None if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0} samples"),
        None => format!("{} samples", figure(v, 1)),
    }
}

pub(super) fn pct(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

pub(super) fn metric_text(v: f64) -> String {
    format!("{v:.2}")
}

/// A rendered table, independent of its final syntax.
pub(super) struct Grid {
    pub(super) header: Vec<String>,
    pub(super) rows: Vec<Vec<String>>,
    /// Columns aligned right (numbers).
    pub(super) right_from: usize,
    /// The column of function names, given whole: a terminal table
    /// shortens them to the room the other columns leave.
    pub(super) names: Option<usize>,
}

impl Grid {
    /// A terminal table fitted to `width` ([`crate::render::table::Grid`]); `None`:
    /// names whole (`--wide`).
    pub(super) fn terminal(&self, width: Option<usize>) -> String {
        let columns = self
            .header
            .iter()
            .enumerate()
            .map(|(i, h)| {
                if i >= self.right_from {
                    table::Column::right(&one_line(h))
                } else {
                    table::Column::left(&one_line(h))
                }
            })
            .collect();
        // A newline in an op's name would split its row.
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|c| one_line(c).into_owned()).collect())
            .collect();
        let full: Vec<String> = match self.names {
            Some(c) => rows.iter().map(|r| r[c].clone()).collect(),
            None => Vec::new(),
        };
        let mut grid = table::Grid::new(columns, rows);
        if let Some(c) = self.names {
            grid = grid.names(c, 0, table::NAME_MIN, |room| {
                let refs: Vec<&str> = full.iter().map(String::as_str).collect();
                table::short_names(&refs, room)
            });
        }
        grid.render(width)
    }

    pub(super) fn markdown(&self) -> String {
        let line = |cells: &[String]| {
            format!(
                "| {} |\n",
                cells
                    .iter()
                    .map(|c| md_escape(c))
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        };
        let mut out = line(&self.header);
        let rule: Vec<&str> = (0..self.header.len())
            .map(|i| if i >= self.right_from { "---:" } else { "---" })
            .collect();
        out += &format!("|{}|\n", rule.join("|"));
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

impl View<'_> {
    pub(super) fn split(&self) -> String {
        self.results
            .first()
            .map(|a| a.split.to_string())
            .unwrap_or_default()
    }

    fn match_mode(&self) -> String {
        self.results
            .first()
            .map(|a| a.match_mode.to_string())
            .unwrap_or_default()
    }

    /// The `lotus.attribution/1` document.
    pub(super) fn json(&self) -> lotus_attribute::AttributionDocument<'_> {
        lotus_attribute::attribution_document(self.mapping, self.profiles, self.results)
    }

    pub(super) fn csv(&self) -> Result<String> {
        let any_samples = self.profiles.iter().any(|p| p.unit == Unit::Samples);
        let mut counters = BTreeSet::new();
        let mut metrics = BTreeSet::new();
        for o in self.results.iter().flat_map(|a| &a.ops) {
            counters.extend(o.counters.keys().cloned());
            metrics.extend(o.metrics.keys().cloned());
        }
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut header: Vec<String> = [
            "profile",
            "op",
            "cpu_time_s",
            "share",
            "exclusive_s",
            "shared_s",
        ]
        .map(String::from)
        .to_vec();
        if any_samples {
            header.extend(["samples", "exclusive_samples", "shared_samples"].map(String::from));
        }
        header.extend(["rows", "cpi", "split"].map(String::from));
        header.extend(counters.iter().cloned());
        header.extend(metrics.iter().cloned());
        w.write_record(csv_record(&header))?;
        let num = |v: Option<f64>| v.map(csv_number).unwrap_or_default();
        for (p, a) in self.profiles.iter().zip(self.results) {
            for o in &a.ops {
                let f = p.figures_of(o);
                let mut rec = vec![
                    p.name.clone(),
                    o.op.clone(),
                    num(f.seconds.map(|s| s[0])),
                    csv_number(o.share),
                    num(f.seconds.map(|s| s[1])),
                    num(f.seconds.map(|s| s[2])),
                ];
                if any_samples {
                    rec.extend((0..3).map(|i| num(f.samples.map(|s| s[i]))));
                }
                rec.push(o.rows.to_string());
                rec.push(num(o.cpi));
                rec.push(a.split.to_string());
                rec.extend(counters.iter().map(|c| num(o.counters.get(c).copied())));
                rec.extend(metrics.iter().map(|m| num(o.metrics.get(m).copied())));
                w.write_record(csv_record(&rec))?;
            }
        }
        Ok(String::from_utf8(w.into_inner().context("writing CSV")?)?)
    }

    fn header_line(&self) -> String {
        format!(
            "mapping {} ({} op(s)), match {}, split: {}",
            one_line(self.mapping),
            self.op_count,
            self.match_mode(),
            self.split()
        )
    }

    fn profile_line(p: &LoadedProfile, a: &Attribution) -> String {
        format!(
            "{} ({}, {} rows of which {} explained by the mapping; total {})",
            p.path.display(),
            p.format,
            a.rows,
            a.matched_rows,
            amount(p, a.total)
        )
    }

    /// Op x profile: time and share.
    fn comparison(&self) -> Grid {
        let mut header = vec!["op".to_string()];
        header.extend(self.profiles.iter().map(|p| p.name.clone()));
        let ops = self.results.first().map_or(0, |a| a.ops.len());
        let mut rows: Vec<Vec<String>> = (0..ops)
            .map(|i| {
                let mut row = vec![self.results[0].ops[i].op.clone()];
                row.extend(self.profiles.iter().zip(self.results).map(|(p, a)| {
                    let o = &a.ops[i];
                    format!("{}  {}", amount(p, o.value), pct(o.share))
                }));
                row
            })
            .collect();
        let mut total = vec!["total".to_string()];
        total.extend(
            self.profiles
                .iter()
                .zip(self.results)
                .map(|(p, a)| format!("{}  {}", amount(p, a.total), pct(1.0))),
        );
        rows.push(total);
        Grid {
            header,
            rows,
            right_from: 1,
            names: None,
        }
    }

    /// One profile: op x (time, share, exclusive, shared, rows, CPI).
    fn detail(p: &LoadedProfile, a: &Attribution) -> Grid {
        let time = if p.seconds_per_unit().is_some() {
            "cpu time"
        } else {
            "samples"
        };
        let header = ["op", time, "share", "exclusive", "shared", "rows", "CPI"]
            .map(String::from)
            .to_vec();
        let mut rows: Vec<Vec<String>> = a
            .ops
            .iter()
            .map(|o| {
                vec![
                    o.op.clone(),
                    amount(p, o.value),
                    pct(o.share),
                    amount(p, o.exclusive),
                    amount(p, o.shared),
                    o.rows.to_string(),
                    o.cpi.map_or("-".into(), |c| format!("{c:.3}")),
                ]
            })
            .collect();
        rows.push(vec![
            "total".into(),
            amount(p, a.total),
            pct(1.0),
            String::new(),
            String::new(),
            a.rows.to_string(),
            String::new(),
        ]);
        Grid {
            header,
            rows,
            right_from: 1,
            names: None,
        }
    }

    /// One profile's metrics: metric x op.
    fn metrics(a: &Attribution, wide: bool) -> Option<Grid> {
        let names: BTreeSet<&String> = a.ops.iter().flat_map(|o| o.metrics.keys()).collect();
        if names.is_empty() {
            return None;
        }
        let mut header = vec!["metric".to_string()];
        header.extend(a.ops.iter().map(|o| {
            if wide {
                o.op.clone()
            } else {
                table::cut_right(&o.op, 24)
            }
        }));
        let rows = names
            .into_iter()
            .map(|m| {
                let mut row = vec![m.clone()];
                row.extend(
                    a.ops
                        .iter()
                        .map(|o| o.metrics.get(m).map_or("-".into(), |v| metric_text(*v))),
                );
                row
            })
            .collect();
        Some(Grid {
            header,
            rows,
            right_from: 1,
            names: None,
        })
    }

    pub(super) fn table(&self) -> String {
        let width = (!self.wide).then(table::width);
        let mut out = format!("lotus attribution: {}\n", self.header_line());
        if self.profiles.len() > 1 {
            out += "\nCPU time per op and share of each profile\n";
            out += &self.comparison().terminal(width);
        }
        for (p, a) in self.profiles.iter().zip(self.results) {
            out += &format!(
                "\n{}: {}\n",
                one_line(&p.name),
                one_line(&Self::profile_line(p, a))
            );
            out += &Self::detail(p, a).terminal(width);
            if let Some(g) = Self::metrics(a, self.wide) {
                out += &format!(
                    "metrics per op, weighted by {}\n",
                    a.clockticks.as_deref().unwrap_or("clockticks")
                );
                out += &g.terminal(width);
            }
            for note in &a.notes {
                out += &format!("note: {note}\n");
            }
        }
        // Names, paths and notes from the files: control characters
        // escaped (cells are on one line already); lines longer than the
        // width wrapped (the tables fit it already).
        let out = printable(&out).into_owned();
        match width {
            Some(w) => table::wrap_lines(&out, w),
            None => out,
        }
    }

    pub(super) fn markdown(&self) -> String {
        let mut out = format!(
            "# lotus attribution\n\n{}\n",
            md_escape(&self.header_line())
        );
        if self.profiles.len() > 1 {
            out += "\n## CPU time per op\n\n";
            out += &self.comparison().markdown();
        }
        for (p, a) in self.profiles.iter().zip(self.results) {
            out += &format!(
                "\n## {}\n\n{}\n\n",
                md_escape(&p.name),
                md_escape(&Self::profile_line(p, a))
            );
            out += &Self::detail(p, a).markdown();
            if let Some(g) = Self::metrics(a, self.wide) {
                out += &format!(
                    "\nMetrics per op, weighted by {}:\n\n",
                    a.clockticks.as_deref().unwrap_or("clockticks")
                );
                out += &g.markdown();
            }
            if !a.notes.is_empty() {
                out.push('\n');
                for note in &a.notes {
                    out += &format!("- {}\n", md_escape(note));
                }
            }
        }
        printable(&out).into_owned()
    }
}
