//! The one error of this crate.

/// Why attribution cannot be done: through a mapping (the first
/// variants) or in the pipeline, from a sampled trace folder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The mapping has no ops, or no op has a function.
    #[error("the mapping is empty: {0}")]
    EmptyMapping(String),
    /// The profile has no rows.
    #[error("the profile has no rows")]
    EmptyProfile,
    /// An op-times file could not be read.
    #[error("{}: {message}", match line { Some(l) => format!("{file}:{l}"), None => file.clone() })]
    OpTimes {
        /// The file.
        file: String,
        /// 1-based line, where the problem has one.
        line: Option<u64>,
        /// What is wrong.
        message: String,
    },
    /// Two ops of the mapping have the same name.
    #[error("op '{0}' is in the mapping twice: each op must have its own name")]
    DuplicateOp(String),
    /// Values of a profile that add up past what a number can hold (a
    /// garbled profile).
    #[error("op '{0}': the profile's values add up to more than a number can hold (is the profile garbled?)")]
    ValuesOverflow(String),
    /// The op times name none of the mapping's ops.
    #[error("{file}: names none of the mapping's ops (it has {given}; the mapping has {ops})")]
    OpTimesMatchNoOp {
        /// Where the times came from.
        file: String,
        /// The ops it names.
        given: String,
        /// The mapping's ops.
        ops: String,
    },

    /// A profile that cannot be read, or is not one (the text says which
    /// and why, with its causes).
    #[error("{0}")]
    Profile(String),
    /// A profile's rows or report could not be read.
    #[error(transparent)]
    Core(#[from] lotus_core::Error),

    // In the pipeline.
    /// A file could not be read.
    #[error("{0}")]
    Io(String),
    /// The trace logs could not be read.
    #[error(transparent)]
    Trace(#[from] lotus_trace::TraceError),
    /// Sorting the spans failed.
    #[error(transparent)]
    Spill(#[from] lotus_sort::SpillError),
    /// The folder has no samples.
    #[error("{0}")]
    NoSamples(String),
    /// The samples carry no call stacks, so no Python frames to take ops
    /// from ([`crate::attribute_frames`]).
    #[error("{path}: the samples carry no call stacks: ops from Python frames need a sampling with stacks (`--stacks fp` or `--stacks dwarf`)")]
    NoStacks {
        /// The samples file.
        path: String,
    },
    /// A log has no clock pairs (written by an older lotus).
    #[error("{path}: no clock pairs (wall_ns= / monotonic_ns=): the trace was written by an older lotus; trace again with `lotus trace run --sample`")]
    NoClock {
        /// The log.
        path: String,
    },
    /// A log in the original format (`lotus trace run --format original`,
    /// or the original PyTorch fork): no header, no clock pairs.
    #[error("{path}: a log in the original format (`lotus trace run --format original`, or the original PyTorch fork): it has no header and no clock pairs, so its spans cannot be put on the samples' clock; `lotus attribute` needs a trace taken with `lotus trace run --sample` without `--format original` (`lotus trace view` and `lotus trace stats` read this one as it is)")]
    OriginalFormat {
        /// The log.
        path: String,
    },
    /// A folder of samples alone (`lotus trace attach`) named with
    /// trace folders, where only one kind is read at once
    /// ([`crate::samples_alone`]).
    #[error("{alone}: samples without trace logs (a job sampled by `lotus trace attach`) cannot share a report with trace folders such as {traced}: report it on a page of its own (`lotus report --out R.html --trace {alone}`), or run the job under lotus (`lotus trace run --sample -- CMD`) to compare it with the others")]
    MixedFolders {
        /// The folder of samples alone.
        alone: String,
        /// A trace folder named with it.
        traced: String,
    },
    /// A figure of a trace file past what lotus can count.
    #[error("{path}: {field}: {message}")]
    Overflow {
        /// The file.
        path: String,
        /// The field (`interval_ns=...`).
        field: String,
        /// What overflows.
        message: String,
    },
}

/// `context` and the error `e` with its causes, each after a `: ` (as
/// `anyhow` prints an error with `{:#}`).
pub(crate) fn with_causes(context: String, e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = context;
    let mut next = Some(e);
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
