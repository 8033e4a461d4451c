//! `--op` of `lotus trace run`: which functions the tracer wraps as ops
//! (passed to the job, and warned of when they match nothing, by
//! `lotus_runner`).

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
