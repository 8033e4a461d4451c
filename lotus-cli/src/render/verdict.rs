//! The verdict ([`lotus_attribute::Verdict`]) as the few lines above
//! `lotus attribute DIR`'s table and `lotus trace stats`'s figures: what
//! was measured, then what would help, each a sentence.

use lotus_attribute::Verdict;

/// The verdict's lines: `verdict:` and its facts, `what would help:`
/// and each piece of advice, `how:` and how it is measured.
pub(crate) fn lines(v: &Verdict) -> Vec<String> {
    let mut out = vec![format!("verdict: {}", v.facts().join("; "))];
    out.extend(
        v.advice
            .iter()
            .map(|a| format!("what would help: {}", a.text)),
    );
    out.push(format!("how: {}", v.measured));
    out
}

/// The lines as text, each wrapped to `width` where given (the lines after
/// a line's first indented), then a blank line.
pub(crate) fn text(v: &Verdict, width: Option<usize>) -> String {
    let mut out = String::new();
    for line in lines(v) {
        match width {
            Some(w) => out += &crate::render::table::wrap(&line, w),
            None => out += &line,
        }
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The lines as a Markdown list, then a blank line.
pub(crate) fn markdown(v: &Verdict) -> String {
    let mut out = String::new();
    for line in lines(v) {
        let (head, rest) = line.split_once(": ").unwrap_or(("", &line));
        out += &format!("- **{head}**: {rest}\n");
    }
    out.push('\n');
    out
}
