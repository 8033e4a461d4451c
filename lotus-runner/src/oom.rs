//! Running out of memory: a clear message and exit status 1, not an abort
//! with "memory allocation of N bytes failed" and status 134, and the
//! harness folder removed.
//!
//! Rust aborts the process when an allocation fails (`handle_alloc_error`),
//! and the hook that would change that is unstable. The global allocator
//! below passes every call to the system allocator and, when one fails,
//! says so on stderr, removes the folders registered with
//! [`remove_on_oom`], and exits with status 1. Nothing on that path
//! allocates: the message is written with `write(2)` from fixed bytes and
//! a stack buffer. Under `trace run --sample` it also rewrites the run's
//! status ([`on_oom_write`]: `status=failed`, out of memory) and sends
//! SIGTERM to the job's process group ([`on_oom_signal_group`]); the
//! tracer in each process of the job ends it once lotus is gone. Files lotus writes are unnamed until complete
//! (`lotus_sys::write_file`), so no half-written output is left.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};

/// The system allocator, with a clean exit when it fails.
pub struct ExitOnOom;

// SAFETY: every call is forwarded to `System` with the same arguments; a
// failure never returns (the process exits), which the contract allows.
unsafe impl GlobalAlloc for ExitOnOom {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's arguments.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }
}

/// Folders removed when memory runs out (a few: one harness folder per
/// mapping). Each holds a leaked `CString`, so nothing is allocated then.
static CLEANUP: [AtomicPtr<libc::c_char>; 4] = [
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
    AtomicPtr::new(std::ptr::null_mut()),
];

/// Has the folder `dir` (and the files in it) removed if memory runs out
/// while lotus runs: the harness folder, which its `TempDir` would remove
/// on an orderly exit. Only a few are kept; more are ignored.
pub fn remove_on_oom(dir: &Path) {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return;
    };
    let raw = c.into_raw();
    for slot in &CLEANUP {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            return;
        }
    }
    // SAFETY: `raw` came from `into_raw` above and was not stored.
    drop(unsafe { CString::from_raw(raw) });
}

/// The status file to rewrite when memory runs out (a leaked `CString`),
/// and the bytes to write there (a leaked boxed slice: pointer, length).
static STATUS_PATH: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());
static STATUS_TEXT: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static STATUS_LEN: AtomicUsize = AtomicUsize::new(0);
/// The process group to end when memory runs out (0: none): a job in a
/// group of its own (`trace run --sample`), which lotus's death alone
/// would not end.
static JOB_GROUP: AtomicI32 = AtomicI32::new(0);

/// Has `text` written over the file `path` (in place, from its start, the
/// rest cut) if memory runs out while lotus runs: `trace run --sample`'s
/// status, which would otherwise say `running` for ever. One at a time; a
/// later call replaces an earlier one.
pub fn on_oom_write(path: &Path, text: Vec<u8>) {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    on_oom_write_cancel();
    let text = Box::leak(text.into_boxed_slice());
    STATUS_LEN.store(text.len(), Ordering::SeqCst);
    STATUS_TEXT.store(text.as_mut_ptr(), Ordering::SeqCst);
    STATUS_PATH.store(c.into_raw(), Ordering::SeqCst);
}

/// Forgets the status registered with [`on_oom_write`] (its run wrote its
/// own last word) and the group of [`on_oom_signal_group`]. The bytes stay
/// leaked: a few KiB once per run.
pub fn on_oom_write_cancel() {
    JOB_GROUP.store(0, Ordering::SeqCst);
    let old = STATUS_PATH.swap(std::ptr::null_mut(), Ordering::SeqCst);
    if !old.is_null() {
        // SAFETY: `old` came from `into_raw` in `on_oom_write`, and the
        // swap took it out of the slot.
        drop(unsafe { CString::from_raw(old) });
    }
}

/// Has the process group `pgid` sent SIGTERM if memory runs out while
/// lotus runs (the job of `trace run --sample`, in a group of its own).
pub fn on_oom_signal_group(pgid: u32) {
    JOB_GROUP.store(i32::try_from(pgid).unwrap_or(0), Ordering::SeqCst);
}

/// Writes the registered status, without allocating.
fn write_status() {
    let path = STATUS_PATH.load(Ordering::SeqCst);
    let text = STATUS_TEXT.load(Ordering::SeqCst);
    let len = STATUS_LEN.load(Ordering::SeqCst);
    if path.is_null() || text.is_null() {
        return;
    }
    // SAFETY: `path` is a NUL-terminated path and `text` a `len`-byte
    // slice, both leaked by `on_oom_write`; open, write, ftruncate and
    // close are plain system calls.
    unsafe {
        let fd = libc::open(path, libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if fd < 0 {
            return;
        }
        let mut done = 0;
        while done < len {
            let n = libc::write(fd, text.add(done).cast(), len - done);
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        if done == len {
            libc::ftruncate(fd, len as libc::off_t);
        }
        libc::close(fd);
    }
}

fn out_of_memory(size: usize) -> ! {
    write_stderr(b"lotus: error: out of memory: an allocation of ");
    let mut digits = [0u8; 20];
    let mut n = size;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    write_stderr(&digits[i..]);
    write_stderr(
        b" bytes failed, past the memory this process may use (ulimit -v, a cgroup \
          limit, or the machine's memory): give lotus more memory, or a smaller input. ",
    );
    if STATUS_PATH.load(Ordering::SeqCst).is_null() {
        write_stderr(b"No partial output was written and the harness folder was removed.\n");
    } else {
        write_stderr(
            b"The job was ended; what it traced and the samples so far stay in the trace \
              folder, whose status says the run failed (out of memory).\n",
        );
    }
    let group = JOB_GROUP.load(Ordering::SeqCst);
    if group > 0 {
        // SAFETY: kill(2) of the job's process group.
        unsafe { libc::kill(-group, libc::SIGTERM) };
    }
    write_status();
    for slot in &CLEANUP {
        let dir = slot.load(Ordering::SeqCst);
        if !dir.is_null() {
            // SAFETY: `dir` is a NUL-terminated path leaked by `remove_on_oom`.
            unsafe { remove_flat_dir(dir) };
        }
    }
    // SAFETY: _exit ends the process at once without running destructors
    // or atexit handlers, which could allocate.
    unsafe { libc::_exit(1) }
}

fn write_stderr(bytes: &[u8]) {
    // SAFETY: `bytes` is a live slice; a short or failed write is ignored.
    unsafe {
        libc::write(2, bytes.as_ptr().cast(), bytes.len());
    }
}

/// Removes `dir`, its files and its folders down to [`REMOVE_DEPTH`]
/// levels (a harness folder's `__pycache__`; the tracer's
/// `lotus_trace/_boot/__pycache__`), best effort. Uses the C library only
/// (`opendir` allocates through malloc, not through this allocator, and
/// little); the recursion is bounded and allocates nothing.
///
/// # Safety
/// `dir` must be a valid NUL-terminated path.
unsafe fn remove_flat_dir(dir: *const libc::c_char) {
    // SAFETY: the caller passes a valid path; every libc call gets valid
    // descriptors and NUL-terminated names from readdir.
    unsafe {
        let fd = libc::open(dir, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW);
        if fd < 0 {
            return;
        }
        remove_entries(fd, REMOVE_DEPTH);
        libc::close(fd);
        libc::rmdir(dir);
    }
}

/// How many levels of folders below a registered folder are removed.
const REMOVE_DEPTH: u32 = 4;

/// Unlinks the entries of the open folder `fd`, and empties and removes
/// its sub-folders, `depth` levels down. Consumes nothing: `fd` stays open.
unsafe fn remove_entries(fd: libc::c_int, depth: u32) {
    // SAFETY: `fd` is an open folder; every name comes from its readdir.
    unsafe {
        for_each_entry(fd, |name| {
            let bytes = std::ffi::CStr::from_ptr(name).to_bytes();
            if bytes == b"." || bytes == b".." {
                return;
            }
            if libc::unlinkat(fd, name, 0) != 0 && depth > 0 {
                let sub = libc::openat(
                    fd,
                    name,
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                );
                if sub >= 0 {
                    remove_entries(sub, depth - 1);
                    libc::close(sub);
                    libc::unlinkat(fd, name, libc::AT_REMOVEDIR);
                }
            }
        });
    }
}

/// Calls `f` with the NUL-terminated name of each entry of the open folder
/// `fd` (`.` and `..` included), read through a duplicate so `fd` stays
/// open. Gives up quietly when the folder cannot be read: this runs on the
/// way out of an exhausted process, with nothing left to report to.
///
/// # Safety
/// `fd` must be an open folder; `f` gets a name valid only for the call.
unsafe fn for_each_entry<R>(fd: libc::c_int, mut f: impl FnMut(*const libc::c_char) -> R) {
    // SAFETY: the duplicate is owned by the DIR, closed with it.
    unsafe {
        let dup = libc::dup(fd);
        if dup < 0 {
            return;
        }
        let d = libc::fdopendir(dup);
        if d.is_null() {
            libc::close(dup);
            return;
        }
        loop {
            let e = libc::readdir(d);
            if e.is_null() {
                break;
            }
            f((*e).d_name.as_ptr());
        }
        libc::closedir(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `trace run --sample` registers is done when memory runs out:
    /// the status is rewritten in place (`failed`, not `running`) and the
    /// job's group gets SIGTERM. The exhausted process is a forked child
    /// (it exits); it allocates nothing after the fork.
    #[test]
    fn out_of_memory_rewrites_the_status_and_ends_the_job_group() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        let dir = tempfile::tempdir().expect("tmp");
        let status = dir.path().join("lotus.sampling");
        std::fs::write(&status, format!("status=running\n#{}\n", " ".repeat(4000))).expect("write");
        let mut job = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let failed = b"#lotus-sampling v1\nstatus=failed\nreason=out of memory\n".to_vec();
        on_oom_write(&status, failed.clone());
        on_oom_signal_group(job.id());
        // SAFETY: the child calls only out_of_memory, which allocates
        // nothing and ends it with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            out_of_memory(12345);
        }
        on_oom_write_cancel();
        let mut code = 0;
        // SAFETY: waitpid on our own child with a valid status pointer.
        unsafe { libc::waitpid(pid, &mut code, 0) };
        assert!(
            libc::WIFEXITED(code) && libc::WEXITSTATUS(code) == 1,
            "{code}"
        );
        assert_eq!(std::fs::read(&status).expect("status"), failed);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let ended = loop {
            if let Some(s) = job.try_wait().expect("wait") {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = job.kill();
                panic!("the job's group was not signalled");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(ended.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_registered_folder_is_removed_with_its_files_and_sub_folders() {
        let dir = tempfile::Builder::new()
            .prefix("lotus-oom-test-")
            .tempdir()
            .expect("tempdir");
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("lotus_harness.py"), "x").expect("write");
        std::fs::write(path.join(".lotus-result-1.json"), "{}").expect("write");
        std::fs::create_dir(path.join("__pycache__")).expect("mkdir");
        std::fs::write(path.join("__pycache__/lotus.pyc"), "x").expect("write");
        // The tracer's folder: three levels.
        let deep = path.join("lotus_trace/_boot/__pycache__");
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::write(deep.join("sitecustomize.pyc"), "x").expect("write");
        std::fs::write(path.join("lotus_trace/_core.py"), "x").expect("write");
        std::fs::create_dir(path.join("status")).expect("mkdir");
        let c = CString::new(path.as_os_str().as_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        unsafe { remove_flat_dir(c.as_ptr()) };
        assert!(!path.exists(), "{} is left", path.display());
    }
}
