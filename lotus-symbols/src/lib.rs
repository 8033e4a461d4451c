//! Addresses to function names as perf gives them, for lotus's samplers:
//! the function symbols of an ELF file (`.symtab`, its debug file's by
//! build ID or debug link, `.dynsym`), `name@plt` for PLT stubs, function
//! starts from the unwind tables (`.eh_frame`) and frame-pointer
//! prologues where a stripped file has no symbol, and the kernel's
//! symbols from `/proc/kallsyms`.
//!
//! A file is opened as the process mapped it ([`Module`]: through
//! `/proc/PID/map_files` while that process lives, else by path when the
//! path still names the same inode), read once per file version while
//! the caller's [`SymbolCache`] keeps it, and looked up by file offset.
//!
//! ```
//! use lotus_symbols::{Module, SymbolCache};
//!
//! // This test binary, mapped as a file: its symbols can be read.
//! let exe = std::env::current_exe().unwrap();
//! let module = Module {
//!     name: exe.display().to_string(),
//!     is_file: true,
//!     file_id: None,
//!     mapped_at: Vec::new(),
//!     pinned: None,
//! };
//! let cache = SymbolCache::new();
//! assert!(cache.module_symbols(&module).is_ok());
//! ```
#![deny(missing_docs)]

mod cache;
mod code_scan;
mod code_space;
mod debug_link;
mod elf_symbols;
mod jit_names;
mod kallsyms;
mod module;
mod perf_map;
mod plt;
mod resolve;
mod stack_unwind;
#[cfg(test)]
mod test_alloc;
mod unwind;
mod unwinders;

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: test_alloc::Counting = test_alloc::Counting;

pub use cache::SymbolCache;
pub use code_space::CodeSpace;
pub use elf_symbols::{pin_mapped, FileId, Found, ModuleSymbols, Pinned};
pub use jit_names::{JitNames, PERF_MAP_MODULE};
pub use kallsyms::{addresses_visible, KernelSymbol, KernelSymbols, KALLSYMS_PATH};
pub use module::{Module, VDSO};
pub use perf_map::{perf_map_path, python_frame, PerfMap, PerfMapBudget};
pub use resolve::{
    percent, resolve_file, resolve_kernel, resolve_kernel_from, resolve_vdso, samples,
    unopenable_reason, How, KernelNames, Resolved, SymbolizeStats, KERNEL_FUNCTION, KERNEL_MODULE,
    UNKNOWN_FUNCTION,
};
pub use stack_unwind::{SpaceUnwinder, UnwindSections, UserStack, WalkEnd};
pub use unwind::TableBytes;
pub use unwinders::{CodeMapping, Unwinders};

/// The crate README's examples, run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
