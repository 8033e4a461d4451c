//! SVG charts drawn with plotters (its SVG backend): grouped bars and box
//! plots for `lotus report`, and the helpers every chart of lotus uses so
//! that titles and labels fit ([`fit`]: cut in the middle to the width
//! they have, never at the image's edge) and an op keeps its colour from
//! chart to chart ([`Colours`]).

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Average width of a character of sans-serif text, as a share of its
/// size: a little wide, so that text measured with it fits.
const CHAR_WIDTH: f64 = 0.6;

/// `text` cut in the middle (`…`) to fit `width_px` at `font_px`.
pub fn fit(text: &str, width_px: u32, font_px: u32) -> String {
    // Control characters shown escaped (`\x1b`), as lotus prints them.
    let text = lotus_sys::text::printable(text);
    let text = text.as_ref();
    let max = ((width_px as f64) / (font_px as f64 * CHAR_WIDTH)).floor() as usize;
    let n = text.chars().count();
    if n <= max || max < 5 {
        return text.to_string();
    }
    let keep = max - 1;
    let head: String = text.chars().take(keep - keep / 2).collect();
    let tail: String = text.chars().skip(n - keep / 2).collect();
    format!("{head}…{tail}")
}

/// `svg` (plotters', `<svg width="W" height="H" viewBox=...`) for a page:
/// scaled to the page's width, never wider than drawn (`max-width: W px`),
/// and without its namespace URL (inline SVG needs none, and the page names
/// no URL).
pub fn for_page(svg: &str) -> String {
    let svg = svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
    let width = svg
        .split_once("width=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .and_then(|(w, _)| w.parse::<u32>().ok());
    match width {
        Some(w) => svg.replacen("<svg ", &format!("<svg style=\"max-width:{w}px\" "), 1),
        None => svg,
    }
}

/// The pixel width `text` takes at `font_px`.
pub fn text_width(text: &str, font_px: u32) -> u32 {
    (text.chars().count() as f64 * font_px as f64 * CHAR_WIDTH).ceil() as u32
}

/// Colours by name: the same name gets the same colour in every chart
/// that was given the same list of names.
#[derive(Debug, Clone)]
pub struct Colours {
    names: Vec<String>,
}

impl Colours {
    /// Colours for `names` (sorted and deduplicated here, so the order
    /// they come in does not matter).
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Colours {
        let mut names: Vec<String> = names.into_iter().map(str::to_string).collect();
        names.sort();
        names.dedup();
        Colours { names }
    }

    /// The colour of `name` (grey for names not given, and for lotus's
    /// `(unexplained)`).
    pub fn of(&self, name: &str) -> RGBColor {
        match self.names.binary_search_by(|n| n.as_str().cmp(name)) {
            Ok(_) if name == lotus_attribute::UNEXPLAINED => RGBColor(170, 170, 170),
            Ok(i) => {
                let c = Palette99::pick(i).to_rgba();
                RGBColor(c.0, c.1, c.2)
            }
            Err(_) => RGBColor(120, 120, 120),
        }
    }
}

/// The title over the whole image, fitted to its width.
pub fn title(root: &DrawingArea<SVGBackend, plotters::coord::Shift>, text: &str) -> Result<()> {
    let (w, _) = root.dim_in_pixel();
    let style = ("sans-serif", 18)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Center, VPos::Top));
    root.draw(&Text::new(
        fit(text, w.saturating_sub(24), 18),
        (w as i32 / 2, 8),
        style,
    ))?;
    Ok(())
}

/// The frame of a bar chart: one slot per bar (or group of bars) at
/// x = 0..n, x labels left to the caller (drawn under each slot), no
/// vertical grid lines, y from 0 to `y_max` with `y_decimals` decimals
/// below 100 and none from 100 up.
pub fn bar_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    n: usize,
    y_max: f64,
    x_label_area: u32,
    y_decimals: usize,
    y_desc: &str,
) -> Result<
    ChartContext<
        'a,
        SVGBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(x_label_area)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .light_line_style(TRANSPARENT)
        .y_label_formatter(&|v| axis_label(*v, y_max, y_decimals))
        .y_desc(y_desc)
        .draw()?;
    Ok(chart)
}

/// Groups of bars: one group per `groups` entry (a configuration, a
/// profile), one bar per series in each, coloured by the series' name.
/// `values[s][g]` is series `s` in group `g`.
pub fn grouped_bars(
    title_text: &str,
    y_desc: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
    colours: &Colours,
) -> Result<String> {
    let n = groups.len().max(1);
    let k = series.len().max(1);
    let longest_series = series
        .iter()
        .map(|s| text_width(&s.0, 13))
        .max()
        .unwrap_or(0);
    let legend_w = (longest_series + 50).min(360);
    let slot = (k as u32 * 18 + 40)
        .max(
            groups
                .iter()
                .map(|g| text_width(g, 13) + 16)
                .max()
                .unwrap_or(0),
        )
        .max(90);
    let chart_w = (slot * n as u32 + 110).max(560);
    let height = 420u32.max(series.len() as u32 * 20 + 90);
    let width = chart_w + legend_w;
    let top = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let y_max = if top > 0.0 { top * 1.08 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        title(&root, title_text)?;
        let body = root.margin(36, 0, 0, 0);
        let (left, right) = body.split_horizontally(chart_w);
        let mut chart = bar_chart(&left, n, y_max, 36, 2, &fit(y_desc, height - 120, 14))?;
        let w = 0.8 / k as f64;
        for (s, (name, values)) in series.iter().enumerate() {
            let c = colours.of(name);
            chart.draw_series(
                values
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(g, &v)| {
                        let x0 = g as f64 - 0.4 + s as f64 * w;
                        Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], c.filled())
                    }),
            )?;
        }
        // Group names under their bars, drawn on the whole image:
        // backend_coord gives the image's pixels, not the chart area's.
        let style = ("sans-serif", 13)
            .into_font()
            .into_text_style(&root)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (i, name) in groups.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64, 0.0));
            root.draw(&Text::new(
                fit(name, slot - 8, 13),
                (x, y + 6),
                style.clone(),
            ))?;
        }
        for (row, (name, _)) in series.iter().enumerate() {
            let y = 20 + 20 * row as i32;
            right.draw(&Rectangle::new(
                [(8, y), (22, y + 13)],
                colours.of(name).filled(),
            ))?;
            right.draw(&Text::new(
                fit(name, legend_w - 40, 13),
                (30, y),
                ("sans-serif", 13).into_font(),
            ))?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// A value axis's label: whole numbers on an axis reaching 100 or more,
/// else `decimals` decimals.
fn axis_label(v: f64, axis_max: f64, decimals: usize) -> String {
    if axis_max >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.decimals$}")
    }
}

/// One bar of [`labelled_bars`].
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledBar {
    /// What the bar stands for, written under it and looked up in the
    /// colours.
    pub label: String,
    /// Its height.
    pub value: f64,
    /// A second line under the label (the row's top function), smaller.
    pub note: String,
}

/// The widest label column of [`labelled_bars`], px (longer: cut).
const LABEL_COLUMN_MAX_PX: u32 = 380;
/// [`labelled_bars`]'s width, px: an 800 px page's column, at its size.
const BARS_WIDTH_PX: u32 = 760;
/// A bar's row height, px: its label and, under it, its note.
const BAR_ROW_PX: u32 = 34;

/// One horizontal bar an entry, top down, coloured by its label, its label
/// and note (grey) on its left and its value (`value_decimals`) at its end;
/// one row each at a page's width (bars side by side grew unreadable).
pub fn labelled_bars(
    title_text: &str,
    x_desc: &str,
    bars: &[LabelledBar],
    value_decimals: usize,
    colours: &Colours,
) -> Result<String> {
    let n = bars.len().max(1);
    let label_column = bars
        .iter()
        .map(|b| text_width(&b.label, 13).max(text_width(&b.note, 11)) + 16)
        .max()
        .unwrap_or(0)
        .clamp(120, LABEL_COLUMN_MAX_PX);
    let width = BARS_WIDTH_PX;
    let height = 36 + BAR_ROW_PX * n as u32 + 64;
    let top = bars
        .iter()
        .map(|b| b.value)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // Room past the longest bar for its value.
    let x_max = if top > 0.0 { top * 1.18 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        title(&root, title_text)?;
        let body = root.margin(36, 0, 0, 0);
        // The first bar on top: row i at y = n - 1 - i.
        let mut chart = ChartBuilder::on(&body)
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(label_column)
            .build_cartesian_2d(0f64..x_max, -0.5f64..(n as f64 - 0.5))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| axis_label(*v, x_max, value_decimals))
            .x_desc(fit(x_desc, width - label_column - 40, 14))
            .draw()?;
        let row_y = |i: usize| (n - 1 - i) as f64;
        chart.draw_series(
            bars.iter()
                .enumerate()
                .filter(|(_, b)| b.value.is_finite())
                .map(|(i, b)| {
                    let y = row_y(i);
                    Rectangle::new(
                        [(0.0, y - 0.32), (b.value, y + 0.32)],
                        colours.of(&b.label).filled(),
                    )
                }),
        )?;
        let right = |size: u32, v: VPos| {
            ("sans-serif", size)
                .into_font()
                .into_text_style(&root)
                .pos(Pos::new(HPos::Right, v))
        };
        let grey = RGBColor(90, 90, 90);
        for (i, b) in bars.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(0.0, row_y(i)));
            let room = label_column - 12;
            root.draw(&Text::new(
                fit(&b.label, room, 13),
                (x - 8, y - 1),
                right(13, VPos::Bottom),
            ))?;
            root.draw(&Text::new(
                fit(&b.note, room, 11),
                (x - 8, y + 1),
                right(11, VPos::Top).color(&grey),
            ))?;
            if b.value.is_finite() {
                let (end_x, _) = chart.backend_coord(&(b.value, row_y(i)));
                root.draw(&Text::new(
                    format!("{:.value_decimals$}", b.value),
                    (end_x + 4, y),
                    ("sans-serif", 12)
                        .into_font()
                        .into_text_style(&root)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))?;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// One box of a box plot: `[min, q1, median, q3, max]`.
pub type BoxFigures = [f64; 5];

/// Box plots side by side, one per label: whiskers from min to max, the
/// box from q1 to q3, a line at the median.
pub fn box_plot(title_text: &str, y_desc: &str, boxes: &[(String, BoxFigures)]) -> Result<String> {
    let n = boxes.len().max(1);
    let slot = boxes
        .iter()
        .map(|b| text_width(&b.0, 13) + 16)
        .max()
        .unwrap_or(0)
        .max(100);
    let width = (slot * n as u32 + 130).max(640);
    let height = 420u32;
    let lo = boxes.iter().map(|b| b.1[0]).fold(f64::INFINITY, f64::min);
    let hi = boxes
        .iter()
        .map(|b| b.1[4])
        .fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && hi > lo {
        let pad = (hi - lo) * 0.08;
        ((lo - pad).max(0.0), hi + pad)
    } else if lo.is_finite() {
        ((lo - 1.0).max(0.0), lo + 1.0)
    } else {
        (0.0, 1.0)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE)?;
        title(&root, title_text)?;
        let body = root.margin(36, 0, 0, 0);
        let mut chart = ChartBuilder::on(&body)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), lo..hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .light_line_style(TRANSPARENT)
            .y_desc(fit(y_desc, height - 120, 14))
            .draw()?;
        let blue = RGBColor(60, 110, 180);
        for (i, (_, [min, q1, med, q3, max])) in boxes.iter().enumerate() {
            let x = i as f64;
            chart.draw_series([
                PathElement::new(vec![(x, *min), (x, *q1)], blue.stroke_width(2)),
                PathElement::new(vec![(x, *q3), (x, *max)], blue.stroke_width(2)),
                PathElement::new(
                    vec![(x - 0.12, *min), (x + 0.12, *min)],
                    blue.stroke_width(2),
                ),
                PathElement::new(
                    vec![(x - 0.12, *max), (x + 0.12, *max)],
                    blue.stroke_width(2),
                ),
            ])?;
            chart.draw_series([Rectangle::new(
                [(x - 0.25, *q1), (x + 0.25, *q3)],
                blue.mix(0.35).filled(),
            )])?;
            chart.draw_series([Rectangle::new(
                [(x - 0.25, *q1), (x + 0.25, *q3)],
                blue.stroke_width(2),
            )])?;
            chart.draw_series([PathElement::new(
                vec![(x - 0.25, *med), (x + 0.25, *med)],
                RGBColor(200, 60, 40).stroke_width(3),
            )])?;
        }
        let style = ("sans-serif", 13)
            .into_font()
            .into_text_style(&root)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (i, (name, _)) in boxes.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64, lo));
            root.draw(&Text::new(
                fit(name, slot - 8, 13),
                (x, y + 6),
                style.clone(),
            ))?;
        }
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_cuts_in_the_middle() {
        assert_eq!(fit("short", 400, 18), "short");
        let long = "CPU time per op (split: by op time from /a/very/long/path/to/op_times.csv)";
        let f = fit(long, 300, 18);
        assert!(text_width(&f, 18) <= 300, "{f}");
        assert!(
            f.starts_with("CPU time") && f.ends_with("csv)") && f.contains('…'),
            "{f}"
        );
    }

    #[test]
    fn labelled_bars_name_each_bar_and_cut_long_notes() {
        let long = format!("std::vector<{}>::push_back", "float".repeat(40));
        let bars = [
            LabelledBar {
                label: "Crop".into(),
                value: 120.5,
                note: "resample (80%)".into(),
            },
            LabelledBar {
                label: "outside any op (worker)".into(),
                value: 30.0,
                note: long.clone(),
            },
        ];
        let colours = Colours::new(["Crop"]);
        let svg = labelled_bars("CPU time", "CPU time (ms)", &bars, 1, &colours).expect("svg");
        let texts: Vec<&str> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| t.split_once('>'))
            .filter_map(|(_, rest)| rest.split_once("</text>"))
            .map(|(t, _)| t.trim())
            .collect();
        for want in [
            "Crop",
            "outside any op (worker)",
            "resample (80%)",
            "120.5",
            "30.0",
        ] {
            assert!(texts.contains(&want), "{want}: {texts:?}");
        }
        let cut = texts
            .iter()
            .find(|t| t.starts_with("std::vector"))
            .expect("the long note, cut");
        let unescaped = cut.replace("&lt;", "<").replace("&gt;", ">");
        // Cut to the label column, at most.
        assert!(
            unescaped.contains('…') && text_width(&unescaped, 11) <= LABEL_COLUMN_MAX_PX,
            "{cut}"
        );
        // Drawn at a page's width, one row a bar, however many bars.
        let many: Vec<LabelledBar> = (0..12)
            .map(|i| LabelledBar {
                label: format!("training loop, outside the DataLoader {i} (main)"),
                value: i as f64,
                note: long.clone(),
            })
            .collect();
        let tall = labelled_bars("CPU time", "CPU time (ms)", &many, 1, &colours).expect("svg");
        let size = |k: &str| -> u32 {
            tall.split(&format!(" {k}=\""))
                .nth(1)
                .and_then(|v| v.split('"').next())
                .and_then(|v| v.parse().ok())
                .expect("size")
        };
        assert_eq!(size("width"), BARS_WIDTH_PX);
        assert!(size("height") >= 12 * BAR_ROW_PX, "{}", size("height"));
        // Ops get their colour; the other rows grey.
        let fill = |c: RGBColor| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        assert!(svg.contains(&fill(colours.of("Crop"))), "{svg}");
        assert!(svg.contains(&fill(RGBColor(120, 120, 120))), "{svg}");
    }

    #[test]
    fn colours_follow_names_not_order() {
        let a = Colours::new(["Loader", "Crop", "Flip"]);
        let b = Colours::new(["Flip", "Loader", "Crop"]);
        for n in ["Loader", "Crop", "Flip"] {
            assert_eq!(a.of(n), b.of(n));
        }
        assert_ne!(a.of("Loader"), a.of("Crop"));
    }
}
