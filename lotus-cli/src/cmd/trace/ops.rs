//! `--op` and `--op-module` of `lotus trace run`: which functions the
//! tracer wraps as ops.

use std::path::Path;

pub use lotus_tracer::ENV_TRACE_OPS;

/// `lotus trace run --op`: the user's own functions and methods traced as
/// ops, with no change to their code.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OpArgs {
    /// Trace a function or method of the job's own code as an op, one span
    /// per call, named after its qualified name: MODULE:QUALNAME, e.g.
    /// `mypkg.data:decode` or `mypkg.data:MyDataset.load_*` (QUALNAME is a
    /// glob; `__main__` is the script). Repeatable. Wrapped in every
    /// process of the job as its module is imported; one that never
    /// matches is a warning at the end.
    #[arg(long = "op", value_name = "MODULE:QUALNAME", value_parser = parse_op_spec)]
    pub ops: Vec<String>,
}

/// Checks one `--op` value: `MODULE:QUALNAME`, MODULE a dotted Python
/// name, QUALNAME a dotted Python name in which `*`, `?` and `[...]`
/// globs may stand for parts of names.
pub fn parse_op_spec(value: &str) -> std::result::Result<String, String> {
    let hint = "expected MODULE:QUALNAME, e.g. mypkg.data:decode or mypkg.data:MyDataset.*";
    let (module, qual) = value
        .split_once(':')
        .ok_or_else(|| format!("'{value}' has no ':' ({hint})"))?;
    let ident = |s: &str, glob: bool| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| {
                c == '_'
                    || c.is_alphanumeric()
                    || (glob && matches!(c, '*' | '?' | '[' | ']' | '!'))
            })
    };
    if !module.split('.').all(|p| ident(p, false)) {
        return Err(format!(
            "'{value}': '{module}' is not a module name ({hint})"
        ));
    }
    if !qual.split('.').all(|p| ident(p, true)) {
        return Err(format!(
            "'{value}': '{qual}' is not a qualified name or glob ({hint})"
        ));
    }
    Ok(value.to_string())
}

impl OpArgs {
    /// Passes the specs to the job (`LOTUS_TRACE_OPS`).
    pub fn apply(&self, cmd: &mut std::process::Command) {
        if !self.ops.is_empty() {
            cmd.env(ENV_TRACE_OPS, self.ops.join("\n"));
        } else {
            cmd.env_remove(ENV_TRACE_OPS);
        }
    }

    /// After the run: warns (and returns the warnings, kept in the run's
    /// record) of each `--op` no process matched (the tracer
    /// leaves `op_matched_<n>` in the private status folder for the n-th)
    /// and of each that matched but whose functions no process ran as ops
    /// (`op_ran_<n>`: the first traced call of one), and, where the tracer asked for it (`note_finer_spans`: a dataset's
    /// own code ran as one span, on Python before 3.12 or with
    /// `LOTUS_TRACE_FINER=0`, and no `--op`), says once how to get spans
    /// finer than a dataset's.
    pub fn report(&self, status: &Path) -> Vec<String> {
        let mut warnings = Vec::new();
        for (n, spec) in self.ops.iter().enumerate() {
            if !status.join(format!("op_matched_{n}")).exists() {
                warnings.push(format!(
                    "--op {spec} matched nothing: no traced process imported that module with a function or method of that name (check the spelling; it may live in a process that did not start)"
                ));
            } else if !status.join(format!("op_ran_{n}")).exists() {
                warnings.push(format!(
                    "--op {spec} matched nothing that ran: what it wrapped was never called through its name in any traced process (the trace has no span of it; code that kept a reference taken before the wrap, e.g. a DataLoader's collate_fn=, calls the original)"
                ));
            }
        }
        for w in &warnings {
            eprintln!("lotus: warning: {w}");
        }
        if self.ops.is_empty() && status.join("note_finer_spans").exists() {
            crate::usage::note!(
                "lotus: note: spans stop at each dataset's __getitem__ here (the calls in it are spans of their own with no flag on Python 3.12+); name the functions it calls with --op MODULE:QUALNAME (or mark them with lotus_trace.span / lotus_trace.wrap) to see them as ops"
            );
        }
        warnings
    }
}
