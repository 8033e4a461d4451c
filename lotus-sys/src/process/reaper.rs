//! Ending everything a run started, including processes that left its
//! process group (`setsid` daemons, double forks).
//!
//! Killing the target's process group misses a daemon that made a session
//! of its own; it then outlives lotus and holds lotus's stdout and stderr
//! (`lotus map ... | tee` never ends). As a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), this process inherits every orphan of the
//! processes it started, so every process the run left behind is a
//! descendant of it; [`kill_descendants`] finds them through `/proc` and
//! kills them. [`Reaper`] does that when it is dropped, on every exit path.
//!
//! Written here rather than taken from a crate: the crates that walk
//! `/proc` (procfs, sysinfo) parse far more than the parent pid this needs.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

/// Makes this process a child subreaper: orphans of its descendants are
/// reparented to it instead of to init, so they stay its descendants.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The fields of `/proc/<pid>/stat` after the command name, from field 3
/// ("state"): the name is in parentheses and may hold spaces or ')', so
/// they start after the last ')'.
fn stat_fields(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(text[text.rfind(')')? + 1..].to_string())
}

/// (parent pid, whether it is a zombie) of `/proc/<pid>/stat`.
fn stat_of(pid: u32) -> Option<(u32, bool)> {
    let rest = stat_fields(pid)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state == "Z" || state == "X"))
}

/// Whether process `pid` is running: it exists and is neither a zombie
/// nor dead (what a caller deciding whether a process's files may still
/// grow asks).
pub fn is_running(pid: u32) -> bool {
    stat_of(pid).is_some_and(|(_, gone)| !gone)
}

/// When process `pid` started: field 22 of `/proc/<pid>/stat`, in clock
/// ticks since boot. With the pid, it names one process for good (a pid
/// alone may be reused once the process is gone): a reader of a status
/// that names a lotus pid compares it to tell "lotus was killed" from
/// "still running".
pub fn start_time(pid: u32) -> Option<u64> {
    // "state" is field 3.
    stat_fields(pid)?
        .split_whitespace()
        .nth(22 - 3)?
        .parse()
        .ok()
}

/// The CPU time process `pid` has run, user and system (fields 14 and 15
/// of `/proc/<pid>/stat`), in clock ticks; `None` once it is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let rest = stat_fields(pid)?;
    let mut fields = rest.split_whitespace().skip(14 - 3);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Runs the calling thread ahead of ordinary ones where the system allows
/// it (root, `CAP_SYS_NICE`; silently not otherwise): for threads that do
/// little but must do it promptly (the sampler's drain, the reader of
/// Python frames).
pub fn raise_thread_priority() {
    // SAFETY: gettid and setpriority take plain integers; a refusal is
    // only an error code. (The system call, not glibc's wrapper of 2.30:
    // the wheel's binary needs glibc 2.17.)
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid);
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -10);
    }
}

/// The live (not zombie) descendants of `ancestor`, and which of them are
/// its own children; zombies among its children are in the second list.
fn scan(ancestor: u32) -> (Vec<u32>, Vec<u32>) {
    let mut parent_of: HashMap<u32, (u32, bool)> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(stat) = stat_of(pid) {
            parent_of.insert(pid, stat);
        }
    }
    let mut live = Vec::new();
    let mut children = Vec::new();
    for (&pid, &(ppid, zombie)) in &parent_of {
        if ppid == ancestor {
            children.push(pid);
        }
        if zombie {
            continue;
        }
        // Walk up the parent links; a chain is short, and a cycle cannot
        // happen (bounded all the same).
        let mut up = ppid;
        for _ in 0..4096 {
            if up == ancestor {
                live.push(pid);
                break;
            }
            match parent_of.get(&up) {
                Some(&(next, _)) if next != up && up > 1 => up = next,
                _ => break,
            }
        }
    }
    (live, children)
}

/// The live descendants of this process.
pub fn descendants() -> Vec<u32> {
    scan(std::process::id()).0
}

/// SIGKILLs every descendant of this process (what a run started, with
/// [`become_subreaper`] in effect also the orphans that left its process
/// group) and reaps those that are its children, until none is left or
/// `limit` has passed. Returns how many it killed. Only for a process
/// whose children are all part of the run: a library embedding lotus
/// should not call it while it has children of its own.
pub fn kill_descendants(limit: Duration) -> usize {
    end_descendants(Duration::ZERO, limit)
}

/// Ends every descendant of this process as [`kill_descendants`] does,
/// but politely first: each gets SIGTERM once and up to `grace` to exit
/// (a traced DataLoader worker writes out its last events then), and only
/// then SIGKILL. Gives up at `limit` (a process stuck in the kernel cannot
/// be waited for), returning how many it signalled.
pub fn end_descendants(grace: Duration, limit: Duration) -> usize {
    let me = std::process::id();
    let start = Instant::now();
    let mut signalled = std::collections::HashSet::new();
    loop {
        let (live, children) = scan(me);
        let polite = start.elapsed() < grace;
        for &pid in &live {
            // A process is sent SIGTERM once; SIGKILL every round after.
            if polite && signalled.contains(&pid) {
                continue;
            }
            let signal = if polite { libc::SIGTERM } else { libc::SIGKILL };
            // SAFETY: kill(2) of a process that is our descendant right now
            // (an unreaped pid cannot be reused).
            if unsafe { libc::kill(pid as libc::pid_t, signal) } == 0 {
                signalled.insert(pid);
            }
        }
        for &pid in &children {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid status pointer.
            unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        }
        if live.is_empty() || start.elapsed() >= limit {
            return signalled.len();
        }
        std::thread::sleep(Duration::from_millis(if polite { 20 } else { 2 }));
    }
}

/// Kills every descendant of this process when dropped (see
/// [`kill_descendants`]); hold one for the length of a run.
#[derive(Debug)]
pub struct Reaper {
    limit: Duration,
}

impl Reaper {
    /// Makes this process a child subreaper (failure to do so only means
    /// an orphan that left the group is not found) and returns the guard.
    pub fn new(limit: Duration) -> Reaper {
        let _ = become_subreaper();
        Reaper { limit }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        kill_descendants(self.limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_time_names_a_live_process_and_none_for_a_gone_one() {
        let me = std::process::id();
        let t = start_time(me).expect("our own start time");
        assert_eq!(start_time(me), Some(t), "stable");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        assert_eq!(start_time(pid), None, "a reaped child has no /proc entry");
    }
}
