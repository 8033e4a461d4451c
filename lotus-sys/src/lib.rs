//! Where lotus writes, what it trusts, the processes it spawns and the
//! files it reads: the one crate of the workspace that talks to the
//! operating system for those (through `libc` and `rustix`), so that each
//! rule lives in one place.
//!
//! - Writing: [`OutputFile`], [`write_file`], [`check_writable`],
//!   [`create_dir_all`] (the one writer) and [`PrivateDir`], [`temp_file`]
//!   (the one maker of private folders and files), below.
//! - Trusting: [`trust`], whether a path is under the control of this user
//!   alone, for what lotus loads or executes.
//! - Processes: [`process`], a child's inherited descriptors, logs and
//!   process group, waits with a bound, and the reaper that ends what a run
//!   left behind; [`clock_ns`] reads the clocks samples are stamped on.
//! - Reading: [`input`], the files users name (regular files only, opened
//!   without blocking) and the trace folders they receive (nothing read
//!   through a link out of the folder, nor past the size a file had).
//! - Printing: [`text`], names that came from data made safe for a
//!   terminal, a table or a CSV cell, and the numbers printed beside them;
//!   [`terminal_columns`], the width of the terminal the output is read on
//!   ([`terminal_rows`], its height).
//!
//! # Writing
//!
//! lotus often runs as root. Every file it writes goes through one writer,
//! [`OutputFile`] ([`write_file`], [`check_writable`], [`create_dir_all`]),
//! and every temporary folder or file it makes through one maker,
//! [`PrivateDir`] ([`temp_file`]):
//!
//! - The path is made absolute (joined to the working folder) and walked
//!   from `/` one component at a time with `openat(O_PATH|O_NOFOLLOW)`,
//!   each checked with `fstat` on the descriptor held, never looked up by
//!   name again. A folder on the way must be owned by this user or root and
//!   not writable by group or others unless sticky (`/tmp`). A symbolic
//!   link on the way or at the end is followed (by the walk, at most 40)
//!   only when this user or root owns it; it sits in a folder that passed.
//!   Another user's link, or a FIFO or device on the way, is refused,
//!   naming it.
//! - A regular file (or nothing) at the name: the text goes to a temporary
//!   file made in the already-opened folder (`O_TMPFILE`, else
//!   `O_CREAT|O_EXCL|O_NOFOLLOW`), mode 0666 less the umask (never copied
//!   from the file it replaces), then renamed over the name within that
//!   folder. Nothing half-written is ever at the name.
//! - A FIFO or character device at the name (`/dev/stdout`, `/dev/null`)
//!   is written in place when this user or root owns it; it is opened
//!   without waiting, so a FIFO no process reads is an error at once.
//! - A private folder is made with `mkdirat` (mode 0700, a random name) in
//!   `TMPDIR` (else `/tmp`) once that passes the same check (refused
//!   otherwise, naming `TMPDIR`), and removed through descriptors.
//!
//! ```
//! let dir = lotus_sys::PrivateDir::new("lotus-doc-")?;
//! lotus_sys::write_file(&dir.path().join("out.txt"), b"hello\n")?;
//! # Ok::<(), lotus_sys::Error>(())
//! ```
#![deny(missing_docs)]

mod clock;
mod error;
mod output;
mod private;
mod sys;
mod terminal;
mod walk;

pub mod input;
pub mod process;
pub mod text;
pub mod trust;

#[cfg(test)]
mod tests;

pub use clock::clock_ns;
pub use error::{Error, Result};
pub use output::{check_writable, create_dir_all, write_file, OutputFile};
pub use private::{owner_stamp, remove_stale_folders, temp_dir, temp_file, PrivateDir, OWNER_FILE};
pub use terminal::{terminal_columns, terminal_rows};

/// The modules behind the `pub use` lists are private: each block must fail
/// to compile (E0603: private).
///
/// ```compile_fail,E0603
/// use lotus_sys::process::reaper::Reaper;
/// ```
///
/// ```compile_fail,E0603
/// use lotus_sys::output::OutputFile;
/// ```
#[cfg(doctest)]
pub struct PrivateModules;
