//! Folders of samples alone: a job sampled without the tracer (`lotus
//! trace attach PID`) leaves its samples and no trace log. What reads
//! trace folders tells them apart here ([`is_samples_alone`],
//! [`samples_alone`]: `lotus report` draws such a folder from its samples
//! only), and what a page of one cannot show is said once
//! ([`SAMPLES_ALONE_NOTE`]).

use std::path::Path;

use lotus_samples::SampleFiles;

use crate::Error;

/// What a folder of samples alone cannot show, why, and the command that
/// gets it: the note at the top of its report, text and commands in turn
/// (the first part text, the second a command, and so on).
pub const SAMPLES_ALONE_NOTE: [&str; 7] = [
    "Sampled without the tracer (",
    "lotus trace attach PID",
    "): the folder holds the job's samples and no trace log. Its ops come from the samples' Python frames, so what only the tracer's spans measure is not available here: each op's calls and wall time (no per-op table), the batches' preprocessing times, the main process's waits and the delays to consumption, and the verdict's figures of the training loop (how long it waited for data) with its predictions. Its timeline is estimated from the samples (below, and for the Perfetto UI: ",
    "lotus trace view DIR",
    "), not measured. To measure all of it, run the job under lotus: ",
    "lotus trace run --sample -- CMD",
    ".",
];

/// Whether `dir` is a folder of samples alone: a folder with samples of
/// `prefix` and no tracer log. Its files are listed, none opened (the
/// readers of a trace folder open each of its files once). An error
/// where a folder in it cannot be listed.
pub fn is_samples_alone(dir: &Path, prefix: &str) -> Result<bool, Error> {
    if !dir.is_dir() || !SampleFiles::of(dir, prefix).samples.is_file() {
        return Ok(false);
    }
    Ok(!names_a_log(dir)?)
}

/// Whether a file under `dir` (in its sub-folders too; links not
/// followed, names starting with a dot skipped, as the trace scan does)
/// is named like a tracer log.
fn names_a_log(dir: &Path) -> Result<bool, Error> {
    let listing = |d: &Path, e: std::io::Error| {
        Error::Io(format!("{}: cannot list the folder: {e}", d.display()))
    };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| listing(&d, e))? {
            let entry = entry.map_err(|e| listing(&d, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| !n.starts_with('.')) else {
                continue;
            };
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            } else if lotus_trace::parse_file_name(name).is_some() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Whether the configurations `configs` (each a label and its folder)
/// are folders of samples alone: all of them (true) or none (false).
/// Both kinds at once are refused ([`Error::MixedFolders`], naming one
/// of each): a folder of samples alone has none of the figures the
/// others are compared by.
pub fn samples_alone<P: AsRef<Path>>(configs: &[(String, P)], prefix: &str) -> Result<bool, Error> {
    let (mut alone, mut traced) = (None, None);
    for (_, dir) in configs {
        let dir = dir.as_ref();
        match is_samples_alone(dir, prefix)? {
            true => alone.get_or_insert(dir),
            false => traced.get_or_insert(dir),
        };
    }
    match (alone, traced) {
        (Some(a), Some(t)) => Err(Error::MixedFolders {
            alone: a.display().to_string(),
            traced: t.display().to_string(),
        }),
        (a, _) => Ok(a.is_some()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with an empty samples file of prefix `lotus`, and a log
    /// where `log` says.
    fn folder(log: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(SampleFiles::of(dir.path(), "lotus").samples, b"").expect("samples");
        if log {
            // In a sub-folder, as a rank's logs are.
            std::fs::create_dir(dir.path().join("rank1")).expect("rank");
            let log = dir.path().join("rank1/lotus_main_pid_7.log");
            std::fs::write(log, b"x\n").expect("log");
        }
        dir
    }

    #[test]
    fn samples_without_logs_are_alone_and_a_folder_of_both_kinds_is_refused_by_name() {
        let (alone, traced) = (folder(false), folder(true));
        let empty = tempfile::tempdir().expect("tmp");
        assert!(is_samples_alone(alone.path(), "lotus").expect("alone"));
        assert!(!is_samples_alone(alone.path(), "other").expect("prefix"));
        assert!(!is_samples_alone(traced.path(), "lotus").expect("traced"));
        assert!(!is_samples_alone(empty.path(), "lotus").expect("empty"));
        let of = |dirs: &[&Path]| {
            let c: Vec<(String, &Path)> = dirs.iter().map(|d| ("c".into(), *d)).collect();
            samples_alone(&c, "lotus")
        };
        assert!(of(&[alone.path(), alone.path()]).expect("all alone"));
        assert!(!of(&[traced.path(), empty.path()]).expect("none alone"));
        let e = of(&[traced.path(), alone.path()])
            .expect_err("mixed")
            .to_string();
        assert!(
            e.starts_with(&alone.path().display().to_string())
                && e.contains(&traced.path().display().to_string())
                && e.contains("lotus report --out"),
            "{e}"
        );
    }
}
