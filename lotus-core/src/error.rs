//! The one error of lotus-core: what a backend, a report reader or a
//! mapping or profile file can go wrong with, each variant naming the
//! backend, program or file and saying what to do.

use std::fmt;

/// What can go wrong in lotus-core: running a backend (the first
/// variants), reading a report, a mapping or a profile, finding a backend,
/// or checking a mapping's figures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend cannot run here.
    #[error("the {backend} backend is not available here: {reason}")]
    Unavailable {
        /// Backend name.
        backend: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The backend does not do this (yet).
    #[error("the {backend} backend does not support {what}")]
    Unsupported {
        /// Backend name.
        backend: String,
        /// The unsupported operation.
        what: String,
    },
    /// The system refused access.
    #[error("{backend}: permission denied: {message}; to fix: {fix}")]
    Permission {
        /// Backend name.
        backend: String,
        /// What was refused.
        message: String,
        /// The setting to change.
        fix: String,
    },
    /// The target or the vendor tool could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An I/O failure.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Anything else a backend says, in words.
    #[error("{backend}: {message}")]
    Other {
        /// Backend name.
        backend: String,
        /// What happened.
        message: String,
    },
    /// A report (a vendor tool's CSV, a profile's rows) could not be read:
    /// the file, the line where there is one, what is wrong and, where
    /// known, what to do ([`Error::report`], [`Error::report_at`],
    /// [`Error::with_hint`]).
    #[error("{}", ReportPlace { file, line: *line, message, hint: hint.as_deref() })]
    Report {
        /// The file, as given.
        file: String,
        /// 1-based line, where the problem has one.
        line: Option<u64>,
        /// What is wrong.
        message: String,
        /// What to do, where known.
        hint: Option<String>,
    },
    /// A mapping or profile file is not valid JSON.
    #[error("{file}:{line}:{column}: not valid JSON: {message}")]
    Json {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A mapping or profile file could not be read.
    #[error("{file}: cannot read: {message}")]
    Unreadable {
        /// The file.
        file: String,
        /// The system's message.
        message: String,
    },
    /// A file given as a mapping that is not one, with what it looks like
    /// (a CSV or text report, a profile): what to pass instead.
    #[error("{source}{hint}")]
    NotAMappingFile {
        /// Why it was refused.
        source: Box<Error>,
        /// What it looks like, and what to do.
        hint: &'static str,
    },
    /// A lotus mapping of another schema version.
    #[error("{file}: mapping schema {found} is not supported (this lotus reads \"lotus.mapping/1\" and the original tool's op_to_func files)")]
    UnknownMappingSchema {
        /// The file.
        file: String,
        /// The schema tag found.
        found: String,
    },
    /// JSON, but neither mapping schema.
    #[error("{file}: not a mapping: expected a \"schema\": \"lotus.mapping/1\" object or an \"op_to_func\" object")]
    NotAMapping {
        /// The file.
        file: String,
    },
    /// A mapping of the right schema with wrong contents.
    #[error("{file}: invalid mapping: {message}")]
    InvalidMapping {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A lotus profile of another schema version, or another lotus file.
    #[error("{file}: schema \"{found}\" is not a profile this lotus reads (\"lotus.profile/1\")")]
    UnknownProfileSchema {
        /// The file.
        file: String,
        /// The schema tag found.
        found: String,
    },
    /// JSON, but not a profile.
    #[error("{file}: not a profile: {what}")]
    NotAProfile {
        /// The file.
        file: String,
        /// What it is, or what was expected.
        what: String,
    },
    /// A profile of the right schema with wrong contents.
    #[error("{file}: invalid profile: {message}")]
    InvalidProfile {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A merge rule that is not `union`, `majority`, `all` or `min:K`.
    #[error("unknown merge rule '{0}': use union, majority, all or min:K with K a whole number of runs of 1 or more")]
    UnknownMergeRule(String),
    /// A figure of a mapping that `lotus map` cannot have measured
    /// (`lotus compare`).
    #[error("{file}: op {op}: {field} = {value}: {why}; this is not what `lotus map` measures: remake the mapping with `lotus map` on that host, or correct the field")]
    BadFigure {
        /// The mapping file, as given.
        file: String,
        /// The op (control characters escaped).
        op: String,
        /// The field, as a path in the file (`window.seconds`,
        /// `window.counters.task-clock-ns`).
        field: String,
        /// Its value, as lotus prints figures (bounded width).
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// No backend of that name is registered.
    #[error("unknown backend '{name}'; known backends: {}", known.join(", "))]
    UnknownBackend {
        /// The name asked for.
        name: String,
        /// The registered names.
        known: Vec<&'static str>,
    },
}

/// How a report error reads: `file:line: message (hint)`.
struct ReportPlace<'a> {
    file: &'a str,
    line: Option<u64>,
    message: &'a str,
    hint: Option<&'a str>,
}

impl fmt::Display for ReportPlace<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file, line, self.message)?,
            None => write!(f, "{}: {}", self.file, self.message)?,
        }
        if let Some(hint) = self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl Error {
    /// A report error about the whole file.
    pub fn report(file: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Report {
            file: file.into(),
            line: None,
            message: message.into(),
            hint: None,
        }
    }

    /// A report error at a line.
    pub fn report_at(file: impl Into<String>, line: u64, message: impl Into<String>) -> Self {
        Error::report_at_line(file, Some(line), message)
    }

    /// A report error at a line where there is one.
    pub fn report_at_line(
        file: impl Into<String>,
        line: Option<u64>,
        message: impl Into<String>,
    ) -> Self {
        Error::Report {
            file: file.into(),
            line,
            message: message.into(),
            hint: None,
        }
    }

    /// A report that could not be read at `line`: a line past
    /// [`MAX_LINE_BYTES`](crate::MAX_LINE_BYTES) (a [`LineTooLong`](crate::LineTooLong)
    /// inside `e`) says so with its own line number; anything else is
    /// "cannot read".
    pub fn reading(file: impl Into<String>, line: Option<u64>, e: &std::io::Error) -> Self {
        match crate::LineTooLong::from_io(e) {
            Some(too_long) => Error::report_at(file, too_long.line, too_long.to_string()),
            None => Error::report_at_line(file, line, format!("cannot read: {e}")),
        }
    }

    /// The same error with what to do added (a report error only; any
    /// other error is given back as it is).
    pub fn with_hint(mut self, text: impl Into<String>) -> Self {
        if let Error::Report { hint, .. } = &mut self {
            *hint = Some(text.into());
        }
        self
    }

    /// A mapping or profile file that could not be read.
    pub(crate) fn unreadable(file: &str, e: &dyn fmt::Display) -> Self {
        Error::Unreadable {
            file: file.to_string(),
            message: e.to_string(),
        }
    }

    /// The file the error is about, where it is about one.
    pub fn file(&self) -> Option<&str> {
        match self {
            Error::Report { file, .. }
            | Error::Json { file, .. }
            | Error::Unreadable { file, .. }
            | Error::UnknownMappingSchema { file, .. }
            | Error::NotAMapping { file }
            | Error::InvalidMapping { file, .. }
            | Error::UnknownProfileSchema { file, .. }
            | Error::NotAProfile { file, .. }
            | Error::InvalidProfile { file, .. }
            | Error::BadFigure { file, .. } => Some(file),
            Error::NotAMappingFile { source, .. } => source.file(),
            _ => None,
        }
    }

    /// The 1-based line of the file the error is about, where it has one.
    pub fn line(&self) -> Option<u64> {
        match self {
            Error::Report { line, .. } => *line,
            Error::Json { line, .. } => Some(*line as u64),
            _ => None,
        }
    }

    /// What is wrong with a report, without its place (a report error
    /// only).
    pub fn report_message(&self) -> Option<&str> {
        match self {
            Error::Report { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Whether this is a report error (a report, vendor CSV or profile
    /// rows that could not be read).
    pub fn is_report(&self) -> bool {
        matches!(self, Error::Report { .. })
    }
}
