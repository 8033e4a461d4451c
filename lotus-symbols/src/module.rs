//! A file (or pseudo-module) a process mapped, as the symbolizer opens it.

use crate::elf_symbols::FileId;

/// A mapped file or pseudo-module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// The path or pseudo-name as the kernel gave it.
    pub name: String,
    /// True for a regular file that can be opened for symbols.
    pub is_file: bool,
    /// (device, inode) of the file mapped, where the kernel said (a
    /// module is one file: the same path with another inode is another
    /// module).
    pub file_id: Option<FileId>,
    /// Where it was mapped, (pid, start, end), the last few times: while
    /// such a process lives, `/proc/PID/map_files/START-END` opens the
    /// file it mapped, whatever its path names by then.
    pub mapped_at: Vec<(u32, u64, u64)>,
    /// The file as the first process mapped it, opened through its
    /// `map_files` entry when the mapping was seen (where descriptors are
    /// plentiful): names its code even after the process exited and its
    /// path was pointed elsewhere. See [`crate::pin_mapped`].
    pub pinned: Option<crate::Pinned>,
}

/// The kernel's vDSO: not a file, but symbolized from this process's copy
/// (the same image in every process of the same ABI).
pub const VDSO: &str = "[vdso]";

impl Module {
    /// Whether samples keep their offset in this module (files, and the
    /// vDSO); others group at offset 0.
    pub fn keeps_offsets(&self) -> bool {
        self.is_file || self.name == VDSO
    }
}
