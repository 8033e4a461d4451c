//! Flame graphs of a sampled trace folder's folded stacks
//! ([`lotus_attribute::FoldedStacks`]), drawn by inferno (the
//! flamegraph.pl port): `lotus attribute DIR --flamegraph FILE.svg [--op
//! NAME]` writes the interactive SVG, `lotus report` shows each op's as an
//! image ([`data_url`]).

use anyhow::Result;
use base64::Engine as _;

/// inferno's image width (its default), in SVG pixels.
pub(crate) const WIDTH: usize = 1200;

/// A flame graph of `lines` (`frames count`), titled `title`, as inferno
/// draws it: interactive (its script: zoom, search) unless `still`;
/// frames narrower than `min_width` pixels of [`WIDTH`] are left out.
/// Colours follow the names (the same function is the same colour in
/// every graph, and the same folder draws the same SVG).
pub(crate) fn svg(lines: &[String], title: &str, min_width: f64, still: bool) -> Result<String> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = "samples".to_string();
    options.hash = true;
    options.deterministic = true;
    options.min_width = min_width;
    options.no_javascript = still;
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out)
        .map_err(|e| anyhow::anyhow!("inferno: {e}"))?;
    let svg = String::from_utf8_lossy(&out).into_owned();
    // Without its script the graph's "Search" button does nothing: not
    // shown (the text of an element inferno writes with that id).
    Ok(if still {
        svg.replacen(">Search</text>", "></text>", 1)
    } else {
        svg
    })
}

/// The height inferno gave `svg` (its root's `height`), for the page to
/// keep the image's proportions before it is drawn.
pub(crate) fn height(svg: &str) -> Option<usize> {
    let at = svg.find("<svg ")?;
    let rest = &svg[at..];
    let h = rest.find(" height=\"")? + " height=\"".len();
    let end = rest[h..].find('"')?;
    rest[h..h + end].parse().ok()
}

/// `svg` as a `data:` URL: an `<img>` of it draws it with no request, runs
/// none of its script and keeps its ids to itself.
pub(crate) fn data_url(svg: &str) -> String {
    format!(
        "data:image/svg+xml;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(svg)
    )
}

/// Collapsed lines (`root;outer;...;leaf count`) of `stacks`, under the
/// frame `root` where given; frames made safe for the format (`;` as `:`,
/// line breaks as spaces).
pub(crate) fn folded_lines(root: Option<&str>, stacks: &[lotus_core::StackCount]) -> Vec<String> {
    let frame = |s: &str| s.replace(';', ":").replace(['\n', '\r'], " ");
    stacks
        .iter()
        .map(|s| {
            let frames: Vec<String> = root
                .into_iter()
                .map(frame)
                .chain(s.frames.iter().map(|f| frame(f)))
                .collect();
            format!("{} {}", frames.join(";"), s.samples)
        })
        .collect()
}

/// Writes collapsed `lines` to `folded` and draws them (titled `title`)
/// into the SVG `svg`, where asked; says what it wrote, or that there was
/// nothing to draw (no stacks: the kernel refused them, or nothing was
/// sampled).
pub(crate) fn write_stacks(
    lines: &[String],
    folded: Option<&std::path::Path>,
    svg_out: Option<&std::path::Path>,
    title: &str,
) -> Result<()> {
    if folded.is_none() && svg_out.is_none() {
        return Ok(());
    }
    if lines.is_empty() {
        crate::usage::say!(
            "lotus: note: no call stacks (the kernel refused them, or nothing was sampled): nothing written"
        );
        return Ok(());
    }
    if let Some(path) = folded {
        let mut text = lines.join("\n");
        text.push('\n');
        lotus_sys::write_file(path, text.as_bytes())?;
        crate::usage::say!("lotus: wrote {} ({} stack(s))", path.display(), lines.len());
    }
    if let Some(path) = svg_out {
        let drawn = svg(lines, title, 0.1, false)?;
        lotus_sys::write_file(path, drawn.as_bytes())?;
        crate::usage::say!("lotus: wrote {} ({} stack(s))", path.display(), lines.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_attribute::FoldedStacks;

    fn stacks() -> FoldedStacks {
        let mut f = FoldedStacks::default();
        f.lines = vec![
            ("A;main;outer;inner".into(), 8),
            ("A;B;main;f".into(), 2),
            ("AB;main;g".into(), 5),
        ];
        f.row_samples = [("A".into(), 8), ("A;B".into(), 2), ("AB".into(), 5)]
            .into_iter()
            .collect();
        f
    }

    #[test]
    fn a_still_graph_has_no_script_and_says_its_height() {
        let f = stacks();
        let (lines, _) = f.lines_under(&[&"A".to_string()]);
        let s = svg(&lines, "t", 0.1, true).expect("svg");
        assert!(!s.contains("function init"), "no script");
        assert!(
            !s.contains(">Search<"),
            "no search button that does nothing"
        );
        assert!(height(&s).is_some_and(|h| h > 50), "{:?}", height(&s));
        let url = data_url(&s);
        assert!(url.starts_with("data:image/svg+xml;base64,"));
        assert!(!url.contains(['<', '"', ' ']));
    }
}
