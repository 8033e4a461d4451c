//! Text that came from data (symbol, module, op, host and file names, a
//! vendor's messages), made safe to print, and the numbers printed beside
//! it. Every renderer of the workspace goes through here:
//!
//! - [`one_line`]: a name on one line of a terminal or text table. Control
//!   characters (C0, DEL, C1: the ESC that opens a CSI or OSC sequence, the
//!   BEL that ends one, a newline) and the Unicode bidirectional overrides
//!   (which reorder what a terminal shows) are shown escaped (`\x1b`,
//!   `\n`, `\u{202e}`), never raw: a hostile name can neither drive the
//!   terminal (retitle it, clear it, fake a line) nor break a table row.
//! - [`printable`]: a whole rendered text (a table, a message), escaped as
//!   [`one_line`] does but for its own line breaks and tabs: the last
//!   guard before text reaches a terminal.
//! - [`csv_cell`] / [`csv_record`]: a CSV text cell that a spreadsheet
//!   would run as a formula (it begins with `=`, `+`, `-`, `@`, a tab or a
//!   carriage return: OWASP's "CSV injection" rule) gets a leading `'`;
//!   a cell that is a number (`-0.5`, `1e-9`) is left as it is.
//! - [`figure`] and [`csv_number`]: numbers with bounded width (a
//!   magnitude far from 1 is written in exponent form), so that no file
//!   can make lotus print a 300-digit figure.
//!
//! Hand-written: the rules are a few lines each, and no well-kept crate
//! does exactly this (terminal sanitizers strip rather than escape, and
//! CSV writers leave formulas to the caller).

use std::borrow::Cow;

/// Whether `c` is shown escaped: a control character (C0, DEL, C1), or a
/// bidirectional embedding, override or isolate (U+202A–U+202E,
/// U+2066–U+2069), which reorder the text a terminal shows after them.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `c` escaped: `\n`, `\r`, `\t` by name, other code points up to U+00FF
/// as `\xNN`, the rest as `\u{NNNN}`.
fn escape(c: char, out: &mut String) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if u32::from(c) <= 0xff => out.push_str(&format!("\\x{:02x}", u32::from(c))),
        c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
    }
}

fn escaped(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) && !keep(c) {
            escape(c, &mut out);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `name` on one line, safe for a terminal: every control character and
/// bidirectional override escaped (see the module). Names without any
/// are returned as they are, without a copy.
///
/// ```
/// use lotus_sys::text::one_line;
/// assert_eq!(one_line("f\x1b]0;pwned\x07"), "f\\x1b]0;pwned\\x07");
/// assert_eq!(one_line("Two\nLines"), "Two\\nLines");
/// assert_eq!(one_line("at::add"), "at::add");
/// ```
pub fn one_line(name: &str) -> Cow<'_, str> {
    escaped(name, |_| false)
}

/// A rendered text (a table, a message of several lines) safe for a
/// terminal: as [`one_line`], but its line breaks and tabs are kept.
///
/// ```
/// use lotus_sys::text::printable;
/// assert_eq!(printable("a\n\x1b[2Jb\n"), "a\n\\x1b[2Jb\n");
/// ```
pub fn printable(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c == '\n' || c == '\t')
}

/// Whether `s` is a plain decimal number (`12`, `-0.5`, `+3e-7`, `.5`):
/// what a spreadsheet reads as a number rather than a formula.
pub fn is_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i = 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let mut mantissa = digits(&mut i);
    if b.get(i) == Some(&b'.') {
        i += 1;
        mantissa += digits(&mut i);
    }
    if mantissa == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// A CSV cell a spreadsheet will not run: a cell beginning with `=`, `+`,
/// `-`, `@`, a tab or a carriage return gets a leading `'`, unless it is a
/// number ([`is_number`]: `-0.5` stays a number). The rest of the cell is
/// kept as it is (the CSV writer quotes it).
///
/// ```
/// use lotus_sys::text::csv_cell;
/// assert_eq!(csv_cell("=cmd|' /C calc'!A0"), "'=cmd|' /C calc'!A0");
/// assert_eq!(csv_cell("-0.5"), "-0.5");
/// assert_eq!(csv_cell("-x"), "'-x");
/// assert_eq!(csv_cell("at::add"), "at::add");
/// ```
pub fn csv_cell(cell: &str) -> Cow<'_, str> {
    match cell.as_bytes().first() {
        Some(b'=' | b'+' | b'-' | b'@' | b'\t' | b'\r') if !is_number(cell) => {
            Cow::Owned(format!("'{cell}"))
        }
        _ => Cow::Borrowed(cell),
    }
}

/// A cell [`csv_cell`] guarded, as it was: the leading `'` it adds taken
/// off (only where `csv_cell` would have added it), so that a file lotus
/// wrote reads back to the same names.
///
/// ```
/// use lotus_sys::text::{csv_cell, csv_uncell};
/// assert_eq!(csv_uncell(&csv_cell("=x")), "=x");
/// assert_eq!(csv_uncell("'quoted"), "'quoted");
/// ```
pub fn csv_uncell(cell: &str) -> &str {
    match cell.strip_prefix('\'') {
        Some(rest) if csv_cell(rest).len() != rest.len() => rest,
        _ => cell,
    }
}

/// Every cell of a CSV record through [`csv_cell`], ready for
/// `csv::Writer::write_record`.
pub fn csv_record<I, S>(cells: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    cells
        .into_iter()
        .map(|c| csv_cell(c.as_ref()).into_owned())
        .collect()
}

/// Beyond these magnitudes a figure is written in exponent form.
const PLAIN_MAX: f64 = 1e9;
const PLAIN_MIN: f64 = 1e-4;

/// `v` with `decimals` digits after the point where its magnitude is
/// ordinary (1e-4 to 1e9), else in exponent form with as many (`1.2345e12`):
/// never more than about 25 characters, whatever `v` is. Not-a-number and
/// infinities read `NaN`, `inf`, `-inf`.
///
/// ```
/// use lotus_sys::text::figure;
/// assert_eq!(figure(1.23456, 2), "1.23");
/// assert_eq!(figure(1e300, 4), "1.0000e300");
/// assert_eq!(figure(0.0, 4), "0.0000");
/// ```
pub fn figure(v: f64, decimals: usize) -> String {
    let decimals = decimals.min(12);
    let a = v.abs();
    if !v.is_finite() || a == 0.0 || (PLAIN_MIN..PLAIN_MAX).contains(&a) {
        format!("{v:.decimals$}")
    } else {
        format!("{v:.decimals$e}")
    }
}

/// `v` for a CSV cell: its shortest round-trip form (`0.5`, `12`), in
/// exponent form when it would be long (`1e300`, `2.5e-12`); empty for
/// not-a-number or an infinity (a spreadsheet reads none of them).
///
/// ```
/// use lotus_sys::text::csv_number;
/// assert_eq!(csv_number(-0.5), "-0.5");
/// assert_eq!(csv_number(3.0), "3");
/// assert_eq!(csv_number(1e300), "1e300");
/// ```
pub fn csv_number(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        String::new()
    } else if a == 0.0 || (1e-6..1e15).contains(&a) {
        v.to_string()
    } else {
        format!("{v:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_character_is_escaped_and_nothing_else() {
        for c in (0u32..0x20).chain([0x7f]).chain(0x80..0xa0) {
            let c = char::from_u32(c).expect("char");
            let s = format!("a{c}b");
            let out = one_line(&s);
            assert!(!out.contains(c), "{c:?} left raw: {out:?}");
            assert!(out.chars().all(|c| !c.is_control()), "{out:?}");
        }
        assert_eq!(one_line("\x1b[2J\u{9b}31m"), "\\x1b[2J\\x9b31m");
        assert_eq!(one_line("abc\u{202e}cba"), "abc\\u{202e}cba");
        // Ordinary Unicode is kept, and borrowed.
        assert!(matches!(one_line("λ1 über …"), Cow::Borrowed(_)));
        assert_eq!(printable("a\tb\nc\x07"), "a\tb\nc\\x07");
    }

    #[test]
    fn formula_cells_are_quoted_and_numbers_are_not() {
        for f in [
            "=1+1", "+cmd", "-cmd", "@SUM(A1)", "\t=x", "\r=x", "-", "+", "-e5", "-.e1",
        ] {
            assert_eq!(csv_cell(f), format!("'{f}"), "{f:?}");
        }
        for n in ["-0.5", "+3", "-1e-7", "-.5", "12", "-2.", "1E+300"] {
            assert!(is_number(n), "{n}");
            assert_eq!(csv_cell(n), n);
        }
        for t in ["", "a=b", "op", "'=x"] {
            assert_eq!(csv_cell(t), t);
        }
        assert_eq!(csv_record(["=a", "-1", "b"]), ["'=a", "-1", "b"]);
    }

    #[test]
    fn figures_stay_short() {
        for v in [
            1e300,
            -1e300,
            1e-300,
            f64::MAX,
            f64::MIN_POSITIVE,
            123.456,
            0.0,
        ] {
            for d in [0, 2, 4] {
                let s = figure(v, d);
                assert!(s.len() <= 25, "{v} {d}: {s}");
                assert!(s.parse::<f64>().is_ok(), "{s}");
            }
            let c = csv_number(v);
            assert!(c.len() <= 25, "{c}");
            assert_eq!(c.parse::<f64>().ok(), Some(v), "{c} round-trips");
        }
        assert_eq!(figure(0.012345, 4), "0.0123");
        assert_eq!(csv_number(f64::NAN), "");
    }
}
