//! The error of every report reader: what went wrong, in which file, on
//! which line, and what to do about it.

/// The longest line a report reader accepts. Vendor reports have lines of
/// a few kilobytes at most (long C++ signatures); a longer line means the
/// input is not a report (a binary, a file with no newlines), and the
/// limit keeps the reader's memory bounded whatever it is given.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// What an I/O error carries when a line is longer than [`MAX_LINE_BYTES`]
/// (the payload of a reader's `std::io::Error`, read back with
/// [`LineTooLong::from_io`]; the error lotus-core returns is [`Error`](crate::Error)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("line {line} is longer than {} MiB: this is not a profiler report", MAX_LINE_BYTES >> 20)]
pub struct LineTooLong {
    /// The 1-based line.
    pub line: u64,
}

impl LineTooLong {
    /// The [`LineTooLong`] inside an I/O error, if that is what it is.
    pub fn from_io(e: &std::io::Error) -> Option<LineTooLong> {
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<LineTooLong>())
            .copied()
    }
}

/// `text` cut to at most `max` characters (with `…`), for quoting input
/// in messages: an error stays readable whatever the file holds.
pub fn quote_cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// Names quoted and joined for a message (`'a', 'b'`), at most 24 of them,
/// each shortened, then how many more there are.
pub fn name_list<S: AsRef<str>>(names: &[S]) -> String {
    const SHOWN: usize = 24;
    let mut out = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("'{}'", quote_cut(n.as_ref(), 80)))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out += &format!(" and {} more", names.len() - SHOWN);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{name_list, quote_cut};
    use crate::Error;

    #[test]
    fn long_input_is_shortened_in_messages() {
        assert_eq!(quote_cut("abcdef", 3), "abc…");
        assert_eq!(quote_cut("日本語", 3), "日本語");
        let names: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        let list = name_list(&names);
        assert!(
            list.starts_with("'0', '1'") && list.ends_with("'23' and 6 more"),
            "{list}"
        );
        assert_eq!(name_list(&[&"x".repeat(100)]).chars().count(), 83);
    }

    #[test]
    fn display_names_file_line_and_hint() {
        let e = Error::report_at("a/1.csv", 7, "bad number").with_hint("re-export");
        assert_eq!(e.to_string(), "a/1.csv:7: bad number (re-export)");
        assert_eq!(Error::report("b.csv", "empty").to_string(), "b.csv: empty");
    }
}
