//! The perf maps (`/tmp/perf-<pid>.map`) the tracer made for the job's
//! processes, removed once the run's samples are named.
//!
//! The tracer creates each map itself (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600)
//! before it turns CPython's perf trampolines on, and lists it in lotus's
//! private status folder as `perfmap_pid_<pid>`, holding the map's device
//! and inode (`lotus_trace/_frames.py`). lotus removes the file at that
//! path only while it is that very file: a map another process put there
//! since (the pid reused) is left alone. CPython itself never removes its
//! maps; left in `/tmp`, a later process with the same pid would append
//! to a stale one.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The longest listing read (two numbers and a newline).
const MAX_LISTING: u64 = 128;

/// What [`remove_made_maps`] did.
#[derive(Debug, Default)]
pub(crate) struct Removed {
    /// Maps removed.
    pub(crate) removed: usize,
    /// Maps left where they are, each with why.
    pub(crate) left: Vec<String>,
}

/// Removes the maps the tracer listed in `status`, lotus's private status
/// folder, from `/tmp`.
pub(crate) fn remove_made_maps(status: &Path) -> Removed {
    remove_listed(status, Path::new("/tmp"))
}

fn remove_listed(status: &Path, tmp: &Path) -> Removed {
    let mut done = Removed::default();
    let Ok(entries) = std::fs::read_dir(status) else {
        return done;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("perfmap_pid_") else {
            continue;
        };
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let map: PathBuf = tmp.join(format!("perf-{pid}.map"));
        let Some((dev, ino)) = read_listing(&e.path()) else {
            done.left.push(format!(
                "{}: its listing in lotus's status folder cannot be read",
                map.display()
            ));
            continue;
        };
        match std::fs::symlink_metadata(&map) {
            Ok(meta) if meta.file_type().is_file() && meta.dev() == dev && meta.ino() == ino => {
                match std::fs::remove_file(&map) {
                    Ok(()) => done.removed += 1,
                    Err(e) => done.left.push(format!("{}: {e}", map.display())),
                }
            }
            // Gone already, or another file now: not lotus's to remove.
            _ => {}
        }
    }
    done
}

/// `<dev> <ino>` from a listing file lotus's own folder holds.
fn read_listing(path: &Path) -> Option<(u64, u64)> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_LISTING)
        .read_to_string(&mut text)
        .ok()?;
    let mut it = text.split_whitespace().map(|n| n.parse::<u64>().ok());
    match (it.next(), it.next(), it.next()) {
        (Some(Some(dev)), Some(Some(ino)), None) => Some((dev, ino)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(status: &Path, pid: u32, file: &Path) {
        let meta = std::fs::metadata(file).unwrap();
        std::fs::write(
            status.join(format!("perfmap_pid_{pid}")),
            format!("{} {}\n", meta.dev(), meta.ino()),
        )
        .unwrap();
    }

    #[test]
    fn only_the_listed_file_itself_is_removed() {
        let status = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        // Listed and still there: removed.
        let ours = tmp.path().join("perf-11.map");
        std::fs::write(&ours, "1 2 py::f:a.py\n").unwrap();
        listing(status.path(), 11, &ours);
        // Listed, then replaced by another file (the pid reused): kept.
        let replaced = tmp.path().join("perf-12.map");
        std::fs::write(&replaced, "x").unwrap();
        listing(status.path(), 12, &replaced);
        std::fs::remove_file(&replaced).unwrap();
        let other = tmp.path().join("other");
        std::fs::write(&other, "y").unwrap();
        std::os::unix::fs::symlink(&other, &replaced).unwrap();
        // Not listed: kept.
        let unlisted = tmp.path().join("perf-13.map");
        std::fs::write(&unlisted, "z").unwrap();
        // A damaged listing: kept, and said.
        let damaged = tmp.path().join("perf-14.map");
        std::fs::write(&damaged, "w").unwrap();
        std::fs::write(status.path().join("perfmap_pid_14"), "1 2 3").unwrap();
        // Other files of the status folder are not listings.
        std::fs::write(status.path().join("failed_pid_15"), "disk full").unwrap();

        let done = remove_listed(status.path(), tmp.path());
        assert_eq!(done.removed, 1);
        assert!(!ours.exists());
        assert!(std::fs::symlink_metadata(&replaced).is_ok());
        assert!(other.exists());
        assert!(unlisted.exists());
        assert!(damaged.exists());
        assert_eq!(done.left.len(), 1, "{:?}", done.left);
        assert!(done.left[0].contains("perf-14.map"), "{:?}", done.left);
    }
}
