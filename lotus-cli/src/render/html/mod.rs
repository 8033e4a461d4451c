//! The page of `lotus report`, rendered with a template engine that
//! escapes by default.
//!
//! Why minijinja: the page is one template with a few macros, rendered
//! once per run, so a run-time engine costs nothing noticeable; it is
//! small, well kept, has no unsafe-by-default switch (HTML escaping follows
//! the template's `.html` name) and keeps the markup in one file
//! (`templates/report.html`) instead of Rust string pasting. The sections
//! of the report fill a list of [`Block`]s (headings, paragraphs, tables,
//! plots) that the template renders; no report code writes markup with
//! text from data. Text reaches the page through [`formatter`]: control
//! characters shown escaped (`\x1b`, as lotus prints them everywhere),
//! then HTML-escaped. Only plotters' SVG is passed through as is (marked
//! `|safe` in the template: plotters escapes the text it writes).

pub mod timeline;

use anyhow::{Context, Result};
use minijinja::{AutoEscape, Environment, Output, State, Value};
use serde::Serialize;

/// The page template.
const TEMPLATE: &str = include_str!("../../../templates/report.html");
/// The timeline's zoom and pan (inline: the page makes no request).
const TIMELINE_JS: &str = include_str!("../../../templates/timeline.js");
/// The page's style.
const STYLE: &str = include_str!("../../../templates/report.css");

/// The longest text a cell shows in full in its tooltip; past it the
/// tooltip is cut too (a hostile or broken name of megabytes stays out of
/// the page).
const TOOLTIP_MAX: usize = 2000;

// A function or op name shortened for a table cell as the terminal tables
// shorten it (lotus-core's one rule: a C name whole, a C++ name to its own
// name and its lambdas), cut to `max` columns. The full name goes into the
// cell's tooltip.
pub(crate) use lotus_core::short_name;

/// One piece of a paragraph: text, optionally as code, optionally keyed
/// (`data-key`, for tests and scripts that read the page's figures).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Part {
    text: String,
    code: bool,
    key: Option<String>,
}

/// Plain text.
pub(crate) fn text(t: impl Into<String>) -> Part {
    Part {
        text: t.into(),
        code: false,
        key: None,
    }
}

/// A command or path, shown as code.
pub(crate) fn code(t: impl Into<String>) -> Part {
    Part {
        text: t.into(),
        code: true,
        key: None,
    }
}

/// A figure keyed `key`.
pub(crate) fn keyed(key: impl Into<String>, t: impl Into<String>) -> Part {
    Part {
        text: t.into(),
        code: false,
        key: Some(key.into()),
    }
}

/// One table cell.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cell {
    /// What it shows (lines, for a list of names).
    lines: Vec<String>,
    /// Its tooltip (the full names).
    title: Option<String>,
    /// Its `data-key`.
    key: Option<String>,
    /// `name` (left-aligned text) or `num`.
    class: &'static str,
    /// A colour swatch before the text (an op's colour in the plots).
    swatch: Option<String>,
    /// Shown under its row, across the table, after this lead.
    below: Option<&'static str>,
}

impl Cell {
    /// A cell of `class` showing `lines`, nothing else set.
    fn of(class: &'static str, lines: Vec<String>) -> Cell {
        Cell {
            lines,
            title: None,
            key: None,
            class,
            swatch: None,
            below: None,
        }
    }

    /// A number (or `-`), keyed.
    pub(crate) fn num(key: impl Into<String>, text: impl Into<String>) -> Cell {
        Cell {
            key: Some(key.into()),
            ..Cell::of("num", vec![text.into()])
        }
    }

    /// A number cell with no key.
    pub(crate) fn plain_num(text: impl Into<String>) -> Cell {
        Cell::of("num", vec![text.into()])
    }

    /// Left-aligned text, whole.
    pub(crate) fn text(text: impl Into<String>) -> Cell {
        Cell::of("name", vec![text.into()])
    }

    /// A name shortened ([`short_name`]), the full name in its tooltip.
    pub(crate) fn name(full: &str) -> Cell {
        let short = short_name(full, 48);
        Cell {
            title: (short != full).then(|| tooltip(full)),
            ..Cell::of("name", vec![short])
        }
    }

    /// Names, one a line, each shortened, the full ones in the tooltip.
    pub(crate) fn names(key: impl Into<String>, full: &[String], short: Vec<String>) -> Cell {
        Cell {
            title: Some(tooltip(&full.join("\n"))),
            key: Some(key.into()),
            ..Cell::of("name", short)
        }
    }

    /// Its lines wrapped at spaces (names cells are otherwise not).
    pub(crate) fn wrapping(mut self) -> Cell {
        self.class = "name wrap";
        self
    }

    /// Shown under its row across the table after `lead`: no column.
    pub(crate) fn below(mut self, lead: &'static str) -> Cell {
        self.below = Some(lead);
        self
    }

    /// With a colour swatch (`#rrggbb`).
    pub(crate) fn swatch(mut self, colour: String) -> Cell {
        self.swatch = Some(colour);
        self
    }
}

/// A module cell: its file name (`libjpeg.so.8`), the whole path in its
/// tooltip.
pub(crate) fn module_cell(module: &str) -> Cell {
    let base = module.rsplit('/').next().unwrap_or(module);
    let base = if base.is_empty() { module } else { base };
    let shown = crate::render::svg::fit(base, 28 * 6, 10);
    Cell {
        title: (shown != module).then(|| tooltip(module)),
        ..Cell::of("name", vec![shown])
    }
}

/// A tooltip's text, bounded.
pub(crate) fn tooltip(full: &str) -> String {
    if full.chars().count() <= TOOLTIP_MAX {
        full.to_string()
    } else {
        let head: String = full.chars().take(TOOLTIP_MAX).collect();
        format!("{head}… (cut)")
    }
}

/// One block of the page.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "t", rename_all = "lowercase")]
pub(crate) enum Block {
    /// A heading (`level` 2 to 4).
    H {
        /// 2, 3 or 4.
        level: u8,
        /// Its text.
        text: String,
    },
    /// A paragraph.
    P {
        /// Its pieces.
        parts: Vec<Part>,
    },
    /// A table.
    Table {
        /// Column headings.
        headers: Vec<String>,
        /// Its rows.
        rows: Vec<Vec<Cell>>,
    },
    /// A plot: its index in the page's plots.
    Plot {
        /// Its `data-plot` name.
        name: String,
        /// Its caption.
        caption: String,
        /// Its index in the page's plots (`report_cmd::Page`).
        index: usize,
    },
    /// A flame graph, collapsed under its summary: inferno's SVG as an
    /// `<img>` of a `data:` URL ([`crate::render::flame::data_url`]), so
    /// that it makes no request, runs no script and its ids clash with
    /// no other graph's.
    Flame {
        /// Its `data-flame` name (run and op path).
        name: String,
        /// The line shown while it is collapsed.
        summary: String,
        /// The image's text alternative.
        alt: String,
        /// Its `data:image/svg+xml;base64,` URL: made by [`flame_block`]
        /// alone (the template writes it unescaped).
        src: String,
        /// The SVG's height, in its pixels ([`crate::render::flame::WIDTH`]
        /// wide): the image keeps its proportions.
        height: usize,
        /// What draws it interactively (`lotus attribute DIR --flamegraph`).
        command: String,
    },
}

/// A flame graph's block: `svg` (inferno's) as the `data:` URL of an
/// image, collapsed under `summary`; the other texts are escaped as any.
pub(crate) fn flame_block(
    name: String,
    summary: String,
    alt: String,
    svg: &str,
    command: String,
) -> Block {
    let src = crate::render::flame::data_url(svg);
    // Marked safe in the template: only a fixed prefix and base64.
    debug_assert!(src
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "+/=:;,-".contains(c)));
    Block::Flame {
        name,
        summary,
        alt,
        src,
        height: crate::render::flame::height(svg).unwrap_or(400),
        command,
    }
}

/// A paragraph block.
pub(crate) fn para(parts: Vec<Part>) -> Block {
    Block::P { parts }
}

/// A heading block.
pub(crate) fn heading(level: u8, t: impl Into<String>) -> Block {
    Block::H {
        level,
        text: t.into(),
    }
}

/// The top of the page for one configuration: its run ([`lotus_runner::RunShown`]).
pub(crate) use lotus_runner::RunShown as RunInfo;

/// A run's verdict as the page shows it (from [`lotus_attribute::Verdict`]):
/// the facts in one sentence and what would help, one a line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VerdictView {
    /// The run's label (shown where the page has several runs).
    pub(crate) label: Option<String>,
    /// One sentence.
    pub(crate) headline: String,
    /// What would help, one a line.
    pub(crate) points: Vec<String>,
}

impl VerdictView {
    /// The view of `v`, labelled `label` where the page has several runs.
    pub(crate) fn of(v: &lotus_attribute::Verdict, label: Option<String>) -> VerdictView {
        let facts = v.facts();
        let mut headline = facts.join("; ");
        if let Some(first) = headline.get(..1) {
            headline = first.to_uppercase() + &headline[1..] + ".";
        }
        VerdictView {
            label,
            headline,
            points: v.advice.iter().map(|a| a.text.clone()).collect(),
        }
    }
}

/// Everything the template renders.
#[derive(Debug, Serialize)]
pub(crate) struct PageContext {
    /// This lotus's version.
    pub(crate) version: &'static str,
    /// The outlier rule, described.
    pub(crate) outliers: String,
    /// One per configuration.
    pub(crate) runs: Vec<RunInfo>,
    /// Each run's verdict (none where the page has no trace).
    pub(crate) verdicts: Vec<VerdictView>,
    /// A few figures at a glance (until the verdict lands, and beside it).
    pub(crate) summary: Vec<Vec<Part>>,
    /// The timelines, one per configuration.
    pub(crate) timelines: Vec<crate::render::html::timeline::Timeline>,
    /// What the page cannot show, at its top (folders of samples alone).
    pub(crate) note: Option<Vec<Part>>,
    /// The rest of the page.
    pub(crate) blocks: Vec<Block>,
}

/// Text to the page: control characters escaped as lotus prints them
/// (`\x1b`), then HTML-escaped (the engine's own escaping), unless the
/// value was marked safe.
fn formatter(out: &mut Output, state: &State, value: &Value) -> Result<(), minijinja::Error> {
    if let (AutoEscape::Html, Some(s)) = (state.auto_escape(), value.as_str()) {
        if !value.is_safe() {
            let shown = lotus_sys::text::printable(s);
            return minijinja::escape_formatter(out, state, &Value::from(shown.as_ref()));
        }
    }
    minijinja::escape_formatter(out, state, value)
}

/// Renders the page.
pub(crate) fn render(ctx: &PageContext, plots: &[String]) -> Result<String> {
    let mut env = Environment::new();
    env.set_formatter(formatter);
    env.add_template("report.html", TEMPLATE)
        .context("the report's template")?;
    let t = env.get_template("report.html")?;
    let ctx = minijinja::context! {
        page => Value::from_serialize(ctx),
        flame_width => crate::render::flame::WIDTH,
        plots => plots.iter().map(|p| Value::from_safe_string(p.clone())).collect::<Vec<_>>(),
        style => Value::from_safe_string(STYLE.to_string()),
        script => Value::from_safe_string(TIMELINE_JS.to_string()),
    };
    t.render(ctx)
        .map_err(|e| anyhow::anyhow!("cannot render the report page: {e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_keep_a_c_name_and_cut_a_cpp_one_to_its_own_name() {
        assert_eq!(
            short_name("__memmove_avx512_unaligned_erms", 48),
            "__memmove_avx512_unaligned_erms"
        );
        assert_eq!(
            short_name(
                "void std::vector<float, std::allocator<float> >::push_back(float const&)",
                48
            ),
            "push_back"
        );
        assert!(short_name("(anonymous namespace)::f", 48).ends_with('f'));
        assert_eq!(short_name("func@0x59620", 48), "func@0x59620");
        let long = "a".repeat(300);
        assert!(short_name(&long, 48).chars().count() <= 48);
    }

    #[test]
    fn a_module_shows_its_file_name_and_its_whole_name_in_its_tooltip() {
        let c = module_cell("/usr/lib/x86_64-linux-gnu/libjpeg.so.8");
        assert_eq!(c.lines, ["libjpeg.so.8"]);
        assert_eq!(
            c.title.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libjpeg.so.8")
        );
        let c = module_cell("_imaging.cpython-310-x86_64-linux-gnu.so");
        assert!(c.lines[0].contains('…') && c.lines[0].chars().count() <= 28);
        assert_eq!(
            c.title.as_deref(),
            Some("_imaging.cpython-310-x86_64-linux-gnu.so")
        );
        assert_eq!(module_cell("libc.so.6").title, None);
    }

    #[test]
    fn the_verdict_comes_first_after_the_runs() {
        let mut ctx = PageContext {
            version: "0",
            outliers: "x".into(),
            runs: vec![RunInfo::of(
                "a",
                std::path::Path::new("/t"),
                None,
                &[],
                None,
            )],
            verdicts: vec![VerdictView {
                label: None,
                headline: "Training waited for data 40% of the loop.".into(),
                points: vec!["Use more workers.".into()],
            }],
            summary: vec![vec![text("figures")]],
            timelines: Vec::new(),
            note: None,
            blocks: vec![heading(2, "Ops")],
        };
        let html = render(&ctx, &[]).expect("page");
        let at = |s: &str| html.find(s).unwrap_or_else(|| panic!("{s}: {html}"));
        assert!(at("data-run=") < at("id=\"verdict\""));
        assert!(at("Training waited") < at("id=\"summary\""));
        assert!(at("Use more workers.") < at("<h2>Ops</h2>"));
        ctx.verdicts.clear();
        assert!(!render(&ctx, &[]).expect("page").contains("id=\"verdict\""));
    }

    #[test]
    fn a_hostile_name_renders_inert() {
        let ctx = PageContext {
            version: "0",
            outliers: "x".into(),
            runs: Vec::new(),
            verdicts: Vec::new(),
            summary: vec![vec![text("<script>alert(1)</script>\x1b[31m\"'")]],
            timelines: Vec::new(),
            note: None,
            blocks: vec![Block::Table {
                headers: vec!["op".into()],
                rows: vec![vec![Cell::name("<img src=x onerror=alert(1)>")]],
            }],
        };
        let html = render(&ctx, &[]).expect("page");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains('\x1b'));
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;\\x1b[31m"),
            "{html}"
        );
    }
}
