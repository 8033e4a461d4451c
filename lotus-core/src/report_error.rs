//! The error of every report reader: what went wrong, in which file, on
//! which line, and what to do about it.

use std::fmt;

/// A report that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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

#[cfg(test)]
mod tests {
    use super::ReportError;

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
