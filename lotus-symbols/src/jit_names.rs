//! Names for code a JIT wrote into a process's anonymous memory, from the
//! process's perf map (`/tmp/perf-<pid>.map`, [`crate::PerfMap`]): CPython
//! 3.12+'s perf trampolines (`py::qualname` frames, with their file as the
//! module) and any other JIT that writes one.

use std::collections::HashMap;

use crate::resolve::UNKNOWN_FUNCTION;
use crate::{perf_map_path, python_frame, PerfMap, PerfMapBudget};

/// The module of a JIT's code named from its perf map that is not one of
/// CPython's `py::` trampolines (those carry their file).
pub const PERF_MAP_MODULE: &str = "[perf map]";

/// The module of JIT code no perf map names.
const UNKNOWN_MODULE: &str = "[unknown]";

/// The user a process runs as (the owner of `/proc/PID`, its effective
/// user), whose perf map alone is trusted; where it is gone, the user
/// lotus runs as (the job's, unless it dropped privileges).
fn process_user(pid: u32) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .map(|m| m.uid())
        // SAFETY: geteuid has no preconditions.
        .unwrap_or_else(|_| unsafe { libc::geteuid() })
}

/// The perf maps of a job's processes, each opened when its first JIT
/// frame is named, and the processes' parents (a forked worker runs its
/// parent's trampolines for the frames it had on its stack at the fork).
/// The maps hold no descriptor between reads, and share one memory budget
/// ([`PerfMapBudget::DEFAULT`]; a map past it says so in [`JitNames::notes`]).
#[derive(Debug, Default)]
pub struct JitNames {
    /// Each process's map, or why it was refused.
    perf_maps: HashMap<u32, Result<PerfMap, String>>,
    /// What the maps may hold together.
    budget: PerfMapBudget,
    /// Each forked process's parent.
    parents: HashMap<u32, u32>,
}

impl JitNames {
    /// No maps read yet.
    pub fn new() -> JitNames {
        JitNames::default()
    }

    /// Says that `pid` was forked from `ppid`.
    pub fn forked(&mut self, pid: u32, ppid: u32) {
        self.parents.insert(pid, ppid);
    }

    /// The (function, module) of JIT code at `address` in `pid`, from the
    /// process's perf map, else its parent's: `py::qualname` and its file
    /// for CPython's trampolines (`py::spin` in `/job.py`), the entry's
    /// name in [`PERF_MAP_MODULE`] otherwise; `[unknown]` where no map
    /// names it.
    pub fn name(&mut self, pid: u32, address: u64) -> (String, String) {
        let mut at = Some(pid);
        // A few generations at most (a worker's parent is the main
        // process); a cycle of records cannot loop.
        for _ in 0..4 {
            let Some(p) = at else { break };
            if let Some(name) = self.perf_map(p).and_then(|m| m.lookup(address)) {
                return match python_frame(name) {
                    Some((qualname, file)) => (format!("py::{qualname}"), file.to_string()),
                    None => (name.to_string(), PERF_MAP_MODULE.to_string()),
                };
            }
            at = self.parents.get(&p).copied();
        }
        (UNKNOWN_FUNCTION.to_string(), UNKNOWN_MODULE.to_string())
    }

    /// `pid`'s perf map, opened once; `None` where it has none (not kept,
    /// so that a map made later is still read: most processes run no JIT,
    /// and one that does writes its map before running code from it) or
    /// it was refused (kept, with why, for [`JitNames::notes`]).
    fn perf_map(&mut self, pid: u32) -> Option<&mut PerfMap> {
        let map = match self.perf_maps.entry(pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = perf_map_path(pid);
                std::fs::symlink_metadata(&path).ok()?;
                e.insert(PerfMap::open_within(&path, process_user(pid), &self.budget))
            }
        };
        map.as_mut().ok()
    }

    /// What the user should know: a map that is there but was refused
    /// (another user's, a link), whose JIT frames stay unnamed; a map with
    /// lines that could not be read. One line each, the first process's
    /// words and how many more there are.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let mut refused: Vec<&String> = self
            .perf_maps
            .values()
            .filter_map(|m| m.as_ref().err())
            .collect();
        refused.sort();
        if let Some(first) = refused.first() {
            notes.push(format!(
                "JIT frames (Python's on 3.12+) left unnamed: {first}{}",
                more(refused.len())
            ));
        }
        let mut damaged: Vec<String> = self
            .perf_maps
            .values()
            .filter_map(|m| m.as_ref().ok()?.note())
            .collect();
        damaged.sort();
        if let Some(first) = damaged.first() {
            notes.push(format!("JIT frames: {first}{}", more(damaged.len())));
        }
        notes
    }
}

/// " (and N more processes' maps)" for `n` maps said as one.
fn more(n: usize) -> String {
    match n {
        0 | 1 => String::new(),
        n => format!(" (and {} more processes' maps)", n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process without a map names nothing and notes nothing; its
    /// parent's map is not looked for when it has none either.
    #[test]
    fn no_map_names_nothing_and_says_nothing() {
        let mut names = JitNames::new();
        // A pid no process has (above pid_max's largest default).
        names.forked(4_194_399, 4_194_398);
        let (function, module) = names.name(4_194_399, 0x1000);
        assert_eq!(
            (function.as_str(), module.as_str()),
            ("[unknown]", "[unknown]")
        );
        assert!(names.notes().is_empty());
    }
}
