//! Finding a trace's files: every log under a folder, recursively (the
//! logs of several processes, ranks or machines merge into one timeline),
//! and any PyTorch profiler trace beside them.
//!
//! A log is a file named `<prefix>_main_pid_<pid>` or
//! `<prefix>_worker_pid_<pid>` ([`parse_file_name`]). A PyTorch profiler
//! trace is a `*.json` file named `*.pt.trace.json` or with `trace` in its
//! name whose first 64 KiB hold `"traceEvents"` (and not `"lotusTrace"`,
//! the mark of `lotus trace view`'s own output). Names starting with `.`
//! are skipped, and so are links to folders. Files are listed in path
//! order, so results do not depend on the file system's order.

use std::fs::{self, File};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::event::Process;
use super::parse::{parse_file_name, FileName, TraceReader};
use super::TraceError;

/// The mark `lotus trace view` puts at the start of its output, so that
/// a view written into the trace folder is not read back as a PyTorch
/// profiler trace.
pub const VIEW_MARK: &str = "\"lotusTrace\"";

/// How much of a JSON file is read to tell whether it is a profiler trace.
const SNIFF_BYTES: u64 = 64 * 1024;

/// One log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFile {
    /// Its path.
    pub path: PathBuf,
    /// Its path as shown in messages.
    pub display: String,
    /// The folder it is in, relative to the trace folder (`""` at the top):
    /// logs of one run share it, so batches are matched within it.
    pub folder: String,
    /// What its name says.
    pub name: FileName,
}

impl LogFile {
    /// Opens it for reading.
    pub fn open(&self) -> Result<TraceReader<BufReader<File>>, TraceError> {
        let f = File::open(&self.path).map_err(|e| TraceError::io(&self.display, &e))?;
        Ok(TraceReader::new(
            BufReader::with_capacity(256 * 1024, f),
            self.display.clone(),
            Process::new(self.name.role, self.name.pid),
        ))
    }
}

/// The files of one trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceFolder {
    /// The folder (or the one log file) given.
    pub root: PathBuf,
    /// The logs, in path order.
    pub logs: Vec<LogFile>,
    /// PyTorch profiler traces, in path order.
    pub torch: Vec<PathBuf>,
}

impl TraceFolder {
    /// Finds the logs and profiler traces under `root`, or takes `root`
    /// itself when it is one log file. An error when there are no logs.
    pub fn scan(root: &Path) -> Result<TraceFolder, TraceError> {
        let shown = root.display().to_string();
        let meta = fs::metadata(root).map_err(|e| TraceError::io(&shown, &e))?;
        let mut folder = TraceFolder {
            root: root.to_path_buf(),
            ..TraceFolder::default()
        };
        if meta.is_file() {
            let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("");
            match parse_file_name(name) {
                Some(name) => folder.logs.push(LogFile {
                    path: root.to_path_buf(),
                    display: shown,
                    folder: String::new(),
                    name,
                }),
                None => return Err(TraceError::NoLogs { path: shown }),
            }
            return Ok(folder);
        }
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let entries = fs::read_dir(&dir).map_err(|e| TraceError::io(dir.display(), &e))?;
            let mut paths = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| TraceError::io(dir.display(), &e))?;
                paths.push(entry.path());
            }
            paths.sort();
            let mut subdirs = Vec::new();
            for path in paths {
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                    continue;
                };
                if name.starts_with('.') {
                    continue;
                }
                let Ok(link_meta) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if link_meta.is_dir() {
                    subdirs.push(path);
                    continue;
                }
                // A link counts where it leads to a file.
                if !path.is_file() {
                    continue;
                }
                if let Some(parsed) = parse_file_name(name) {
                    let rel = dir.strip_prefix(root).unwrap_or(&dir);
                    folder.logs.push(LogFile {
                        display: path.display().to_string(),
                        folder: rel.display().to_string(),
                        path,
                        name: parsed,
                    });
                } else if looks_like_torch_trace(name) && sniff_torch_trace(&path) {
                    folder.torch.push(path);
                }
            }
            // Depth first, in name order.
            subdirs.reverse();
            stack.extend(subdirs);
        }
        folder.logs.sort_by(|a, b| a.path.cmp(&b.path));
        folder.torch.sort();
        if folder.logs.is_empty() {
            return Err(TraceError::NoLogs { path: shown });
        }
        Ok(folder)
    }
}

/// Whether a file name may be a PyTorch profiler trace.
pub fn looks_like_torch_trace(name: &str) -> bool {
    name.ends_with(".pt.trace.json") || (name.ends_with(".json") && name.contains("trace"))
}

/// Whether the start of `path` holds `"traceEvents"` and not
/// [`VIEW_MARK`].
fn sniff_torch_trace(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    let mut head = Vec::new();
    if f.take(SNIFF_BYTES).read_to_end(&mut head).is_err() {
        return false;
    }
    let head = String::from_utf8_lossy(&head);
    head.contains("\"traceEvents\"") && !head.contains(VIEW_MARK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Role;

    #[test]
    fn scans_recursively_in_order() {
        let tmp = tempdir();
        let root = tmp.as_path();
        fs::create_dir_all(root.join("rank1/deep")).expect("mkdir");
        fs::write(root.join("lotus_worker_pid_20"), "SA,1,2\n").expect("w");
        fs::write(root.join("lotus_main_pid_10"), "SA,1,2\n").expect("w");
        fs::write(root.join("rank1/deep/x_worker_pid_30.log"), "SA,1,2\n").expect("w");
        fs::write(root.join("rank1/notes.txt"), "hi").expect("w");
        fs::write(root.join(".lotus-123.tmp"), "").expect("w");
        fs::write(root.join("run.pt.trace.json"), r#"{"traceEvents": []}"#).expect("w");
        fs::write(
            root.join("trace.json"),
            r#"{"lotusTrace": "x", "traceEvents": []}"#,
        )
        .expect("w");
        fs::write(root.join("other_trace.json"), r#"{"a": 1}"#).expect("w");
        let f = TraceFolder::scan(root).expect("scan");
        let names: Vec<(&str, Role, u32)> = f
            .logs
            .iter()
            .map(|l| (l.folder.as_str(), l.name.role, l.name.pid))
            .collect();
        assert_eq!(
            names,
            vec![
                ("", Role::Main, 10),
                ("", Role::Worker, 20),
                ("rank1/deep", Role::Worker, 30)
            ]
        );
        assert_eq!(f.torch, vec![root.join("run.pt.trace.json")]);
        // One log file on its own.
        let one = TraceFolder::scan(&root.join("lotus_main_pid_10")).expect("file");
        assert_eq!(one.logs.len(), 1);
        // No logs.
        let empty = root.join("rank1");
        fs::remove_dir_all(root.join("rank1/deep")).expect("rm");
        let e = TraceFolder::scan(&empty).expect_err("no logs");
        assert!(e.to_string().contains("no trace logs"), "{e}");
    }

    /// A fresh folder under the target directory (lotus-core has no
    /// tempfile dependency).
    fn tempdir() -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "lotus-trace-folder-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("mkdir");
        TempDir(p)
    }

    struct TempDir(PathBuf);
    impl TempDir {
        fn as_path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}
