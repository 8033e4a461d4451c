//! `--plot`: a stacked bar chart of op time per profile, as SVG.

use anyhow::Result;
use lotus_attribute::UNEXPLAINED;
use lotus_core::{cut_right, Unit};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::render::View;

impl View<'_> {
    /// A stacked bar chart: one bar per profile, one colour per op.
    pub(in crate::cmd::attribute) fn svg(&self) -> Result<String> {
        let n = self.profiles.len();
        let ops: Vec<&str> = self.results[0].ops.iter().map(|o| o.op.as_str()).collect();
        // One unit for every bar: seconds where every profile converts,
        // else samples where every profile counts them, else shares.
        let all_seconds = self.profiles.iter().all(|p| p.seconds_per_unit().is_some());
        let all_samples = self.profiles.iter().all(|p| p.unit == Unit::Samples);
        let (y_desc, values): (&str, Vec<Vec<f64>>) = if all_seconds {
            (
                "CPU time (s)",
                self.profiles
                    .iter()
                    .zip(self.results)
                    .map(|(p, a)| {
                        let k = p.seconds_per_unit().unwrap_or(1.0);
                        a.ops.iter().map(|o| o.value * k).collect()
                    })
                    .collect(),
            )
        } else if all_samples {
            (
                "samples",
                self.results
                    .iter()
                    .map(|a| a.ops.iter().map(|o| o.value).collect())
                    .collect(),
            )
        } else {
            (
                "share of the profile (%)",
                self.results
                    .iter()
                    .map(|a| a.ops.iter().map(|o| 100.0 * o.share).collect())
                    .collect(),
            )
        };
        let top = values
            .iter()
            .map(|v| v.iter().sum::<f64>())
            .fold(0.0, f64::max);
        let y_max = if top > 0.0 { top * 1.05 } else { 1.0 };
        let names: Vec<String> = self.profiles.iter().map(|p| p.name.clone()).collect();
        let longest_name = names.iter().map(|s| s.chars().count()).max().unwrap_or(0);
        let bar_slot = (longest_name as u32 * 7 + 30).max(110);
        let longest_op = ops.iter().map(|s| s.chars().count()).max().unwrap_or(0);
        let legend_w = (longest_op as u32 * 8 + 60).min(420);
        let chart_w = (bar_slot * n as u32 + 110).max(420);
        let height = 520u32.max(ops.len() as u32 * 22 + 80);
        let width = chart_w + legend_w;

        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
            root.fill(&WHITE)?;
            // The title over the whole image, cut in the middle to fit it
            // (centred on the chart alone, a long one was cut at the edge).
            crate::render::svg::title(
                &root,
                &format!("CPU time per op (split: {})", self.split()),
            )?;
            let (left, right) = root.margin(36, 0, 0, 0).split_horizontally(chart_w);
            let mut chart = crate::render::svg::bar_chart(&left, n, y_max, 40, 1, y_desc)?;
            let colour = |k: usize| -> RGBAColor {
                if ops[k] == UNEXPLAINED {
                    RGBAColor(170, 170, 170, 1.0)
                } else {
                    Palette99::pick(k).to_rgba()
                }
            };
            for k in 0..ops.len() {
                let c = colour(k);
                chart.draw_series((0..n).map(|i| {
                    let base: f64 = values[i][..k].iter().sum();
                    let x = i as f64;
                    Rectangle::new(
                        [(x - 0.33, base), (x + 0.33, base + values[i][k])],
                        c.filled(),
                    )
                }))?;
            }
            // Profile names under their bars (the mesh's own labels would
            // fall on round numbers, not on the bars).
            let style = ("sans-serif", 13)
                .into_font()
                .into_text_style(&root)
                .pos(Pos::new(HPos::Center, VPos::Top));
            for (i, name) in names.iter().enumerate() {
                let (x, y) = chart.backend_coord(&(i as f64, 0.0));
                root.draw(&Text::new(name.clone(), (x, y + 8), style.clone()))?;
            }
            // The legend lists ops top of the stack first, as the bars
            // read from top to bottom.
            for (row, k) in (0..ops.len()).rev().enumerate() {
                let y = 50 + 22 * row as i32;
                right.draw(&Rectangle::new([(8, y), (24, y + 14)], colour(k).filled()))?;
                right.draw(&Text::new(
                    cut_right(ops[k], 48),
                    (32, y + 1),
                    ("sans-serif", 14).into_font(),
                ))?;
            }
            root.present()?;
        }
        Ok(svg)
    }
}
