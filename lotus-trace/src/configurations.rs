//! The configurations a study compares: trace folders given one by one,
//! or the sub-folders of logs of a parent folder (`--configs`), in the
//! order people count (`b128` before `b1024`, as the study's natsort).

use std::path::{Path, PathBuf};

use crate::{TraceError, TraceFolder};

/// Orders names as people count: `b128` before `b1024` (the study sorts
/// its configurations with natsort). Written here: a dozen lines against
/// another dependency.
fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let key = |s: &str| -> Vec<(u8, u128, String)> {
        chunks(s)
            .into_iter()
            .map(|(digits, c)| match c.parse::<u128>() {
                Ok(n) if digits => (0, n, String::new()),
                _ => (1, 0, c.to_lowercase()),
            })
            .collect()
    };
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}

/// The configurations of `dirs`: each one, or with `configs` each of
/// their sub-folders that holds logs (labelled by name, in natural order:
/// `b128` before `b1024`); a sub-folder without logs is not one (`note`
/// gets why). Labels that repeat are replaced by the paths.
pub fn configurations_of(
    dirs: &[PathBuf],
    configs: bool,
    note: &mut dyn FnMut(String),
) -> Result<Vec<(String, PathBuf)>, TraceError> {
    let mut out = Vec::new();
    for dir in dirs {
        if !configs {
            // Labelled by `labels_of` below.
            out.push((String::new(), dir.clone()));
            continue;
        }
        let entries = std::fs::read_dir(dir).map_err(|e| {
            TraceError::Configurations(format!(
                "--configs {}: cannot list the folder: {e}",
                dir.display()
            ))
        })?;
        let mut subs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| {
                TraceError::Configurations(format!("cannot list {}: {e}", dir.display()))
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // Folders only, not links to them (as the trace scan does).
            if name.starts_with('.') || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            match TraceFolder::scan(&path) {
                Ok(f) if !f.logs.is_empty() => subs.push((name, path)),
                _ => note(format!(
                    "note: {}: no trace logs, not a configuration",
                    path.display()
                )),
            }
        }
        if subs.is_empty() {
            return Err(TraceError::Configurations(format!(
                "--configs {}: no sub-folder holds trace logs (each configuration is a sub-folder of logs, such as b128_gpu4/)",
                dir.display()
            )));
        }
        subs.sort_by(|a, b| natural_order(&a.0, &b.0));
        out.extend(subs);
    }
    // The same name twice (two DIRs ending alike): the paths tell them apart.
    let paths: Vec<&Path> = out.iter().map(|(_, d)| d.as_path()).collect();
    let labels = labels_of(&paths);
    for ((label, _), unique) in out.iter_mut().zip(labels) {
        *label = unique;
    }
    Ok(out)
}

/// Each folder's label: its own name (its path where it has none), or
/// its whole path where two names repeat. The configurations' labels, and
/// the hosts' in a merged job ([`crate::JobHosts`]).
pub(crate) fn labels_of(paths: &[&Path]) -> Vec<String> {
    let name = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let names: Vec<String> = paths.iter().map(|p| name(p)).collect();
    names
        .iter()
        .zip(paths)
        .map(|(n, p)| match names.iter().filter(|m| *m == n).count() {
            1 => n.clone(),
            _ => p.display().to_string(),
        })
        .collect()
}
