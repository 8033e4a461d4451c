//! What `lotus trace run` says once the job ended: what the workers ran
//! outside every op, and what to run next.

use std::path::Path;

use crate::traces::sampled_attribution;

/// Where the folder holds samples of `prefix` (`lotus trace run
/// --sample`): what the workers ran outside every op, past 5% of their CPU
/// ([`lotus_attribute::unseen_work`]), as notes.
/// Nothing when it holds none; a warning (and nothing) when they cannot be
/// read: the statistics (or the trace) stand without them.
pub(super) fn unseen_notes(dir: &Path, prefix: &str) -> Vec<String> {
    sampled_attribution(dir, prefix)
        .map(|a| a.unseen.iter().map(|u| u.message()).collect())
        .unwrap_or_default()
}

/// The one line `trace run` ends with (on stderr, not with `-q`): what to
/// run next on the folder it wrote: `attribute` where it was sampled,
/// `trace stats` where not, then the report.
pub(super) fn next_hint(out: &Path, prefix: &str, sampled: bool) -> String {
    let dir = lotus_core::shell_quote(&out.display().to_string());
    let prefix = if prefix == "lotus" {
        String::new()
    } else {
        format!(" --prefix {}", lotus_core::shell_quote(prefix))
    };
    let first = if sampled {
        format!("lotus attribute {dir}{prefix}")
    } else {
        format!("lotus trace stats {dir}")
    };
    format!("next: {first}    (then lotus report --trace {dir} --out report.html)")
}

#[cfg(test)]
mod hint_tests {
    use super::next_hint;
    use std::path::Path;

    #[test]
    fn the_hint_names_the_folder_as_one_shell_word() {
        assert_eq!(
            next_hint(Path::new("/tmp/run 1"), "lotus", true),
            "next: lotus attribute '/tmp/run 1'    (then lotus report --trace '/tmp/run 1' --out report.html)"
        );
        assert_eq!(
            next_hint(Path::new("out"), "mine", false),
            "next: lotus trace stats out    (then lotus report --trace out --out report.html)"
        );
        assert_eq!(
            next_hint(Path::new("out"), "mine", true),
            "next: lotus attribute out --prefix mine    (then lotus report --trace out --out report.html)"
        );
        assert!(next_hint(Path::new("it's"), "lotus", true).contains(r"'it'\''s'"));
    }
}
