//! The error of every report reader: what went wrong, in which file, on
//! which line, and what to do about it.

use std::fmt;

/// A report that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct ReportError {
    /// The file (or other source name) being read.
    pub file: String,
    /// The 1-based line, where the problem has one.
    pub line: Option<u64>,
    /// What is wrong.
    pub message: String,
    /// What the user can do about it, where there is something to say.
    pub hint: Option<String>,
}

impl ReportError {
    /// An error about the whole file.
    pub fn new(file: impl Into<String>, message: impl Into<String>) -> Self {
        ReportError {
            file: file.into(),
            line: None,
            message: message.into(),
            hint: None,
        }
    }

    /// An error at one line of the file.
    pub fn at(file: impl Into<String>, line: u64, message: impl Into<String>) -> Self {
        ReportError {
            line: Some(line),
            ..ReportError::new(file, message)
        }
    }

    /// An error at `line` of the file where it is known.
    pub fn at_line(file: impl Into<String>, line: Option<u64>, message: impl Into<String>) -> Self {
        ReportError {
            line,
            ..ReportError::new(file, message)
        }
    }

    /// A failed read of the file near `line`: a [`LineTooLong`] names its
    /// own line, anything else is "cannot read".
    pub fn reading(file: impl Into<String>, line: Option<u64>, e: &std::io::Error) -> Self {
        match LineTooLong::from_io(e) {
            Some(too_long) => ReportError::at(file, too_long.line, too_long.to_string()),
            None => ReportError::at_line(file, line, format!("cannot read: {e}")),
        }
    }

    /// Adds what the user can do.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message)?,
            None => write!(f, "{}: {}", self.file, self.message)?,
        }
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

/// The longest line a report reader accepts. Vendor reports have lines of
/// a few kilobytes at most (long C++ signatures); a longer line means the
/// input is not a report (a binary, a file with no newlines), and the
/// limit keeps the reader's memory bounded whatever it is given.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// What an I/O error carries when a line is longer than [`MAX_LINE_BYTES`].
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
pub fn shorten(text: &str, max: usize) -> String {
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
        .map(|n| format!("'{}'", shorten(n.as_ref(), 80)))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        out += &format!(" and {} more", names.len() - SHOWN);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{name_list, shorten, ReportError};

    #[test]
    fn long_input_is_shortened_in_messages() {
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("日本語", 3), "日本語");
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
        let e = ReportError::at("a/1.csv", 7, "bad number").with_hint("re-export");
        assert_eq!(e.to_string(), "a/1.csv:7: bad number (re-export)");
        assert_eq!(
            ReportError::new("b.csv", "empty").to_string(),
            "b.csv: empty"
        );
    }
}
