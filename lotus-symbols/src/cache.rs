//! The symbol tables read so far, owned by whoever names addresses.
//!
//! A process-wide static held them until 2026-11-28: a library user could
//! neither bound nor drop it, and two users in one process shared one
//! budget. Now the caller makes a [`SymbolCache`] (the perf backend, one
//! per profiler, shared by its collections and their writers, so that
//! `lotus map`'s runs of many ops read libtorch once) and passes it to
//! what reads tables: [`crate::resolve_file`], [`crate::resolve_kernel`],
//! [`crate::Unwinders`].

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use crate::elf_symbols::{open_failure, open_module};
use crate::{KernelSymbols, Module, ModuleSymbols};

/// What identifies one version of a file: replaced or rebuilt libraries
/// are read again.
type FileVersion = (u64, u64, u64, i64, i64);

/// Symbol and unwind tables of files, by file version (not by path: a
/// path names whatever is there now, the version what was read), one
/// version per file (device, inode): a file read again after it changed
/// replaces its earlier version (a job that maps one library under 40
/// names and 40 modification times made lotus keep 40 copies of its
/// tables). Within the cache's byte budget (counted by
/// [`ModuleSymbols::held_bytes`]), least recently used first out: a file
/// dropped is read again if asked for (time, not names, is lost). The
/// tables of a file still mapped where stacks are unwound stay held by
/// the unwinder (and are shared between the processes that map them).
///
/// And the kernel's symbol table, read once: `lotus map` reports many
/// runs, and `/proc/kallsyms` (some 200,000 lines) changes only when a
/// module is loaded, which a mapping does not wait for. A failure is not
/// kept (it may be passing: too many files open at that moment).
///
/// ```
/// use lotus_symbols::{Module, SymbolCache};
///
/// let cache = SymbolCache::with_budget(64 << 20);
/// let exe = std::env::current_exe().unwrap();
/// let module = Module {
///     name: exe.display().to_string(),
///     is_file: true,
///     file_id: None,
///     mapped_at: Vec::new(),
///     pinned: None,
/// };
/// let a = cache.module_symbols(&module).unwrap();
/// let b = cache.module_symbols(&module).unwrap();
/// assert!(std::sync::Arc::ptr_eq(&a, &b), "read once");
/// assert!(cache.held_bytes() > 0);
/// cache.clear();
/// assert_eq!(cache.held_bytes(), 0);
/// ```
#[derive(Debug)]
pub struct SymbolCache {
    loaded: Mutex<Loaded>,
    budget: u64,
    kernel: OnceLock<KernelSymbols>,
}

impl Default for SymbolCache {
    /// [`SymbolCache::DEFAULT_BUDGET`].
    fn default() -> Self {
        SymbolCache::with_budget(SymbolCache::DEFAULT_BUDGET)
    }
}

impl SymbolCache {
    /// The bytes of tables a cache keeps by default: 512 MiB (libtorch's
    /// symbol and unwind tables are about 60 MiB).
    pub const DEFAULT_BUDGET: u64 = 512 << 20;

    /// An empty cache of [`Self::DEFAULT_BUDGET`].
    pub fn new() -> SymbolCache {
        SymbolCache::default()
    }

    /// An empty cache that keeps at most `bytes` of tables (besides the
    /// one in use).
    pub fn with_budget(bytes: u64) -> SymbolCache {
        SymbolCache {
            loaded: Mutex::new(Loaded::default()),
            budget: bytes,
            kernel: OnceLock::new(),
        }
    }

    /// The bytes of tables held now.
    pub fn held_bytes(&self) -> u64 {
        self.lock().total
    }

    /// How many files' tables are held now (by version).
    pub fn held_files(&self) -> usize {
        self.lock().by_version.len()
    }

    /// Drops every file's tables (closing the descriptors they held);
    /// tables still used elsewhere live on there.
    pub fn clear(&self) {
        let mut loaded = self.lock();
        loaded.by_version.clear();
        loaded.total = 0;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Loaded> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The symbols of the file `module` maps, read once per version of the
    /// file while this cache keeps them; or why they cannot be read, in
    /// words for a note.
    ///
    /// Each module read holds one descriptor (shared by its name sources;
    /// two with a debug file) while it stays cached. When this process
    /// runs out of descriptors (a low `ulimit -n`), the cache is emptied
    /// (closing what it held) and the open tried again: the tables are
    /// then read again when next needed, which costs time, not names.
    pub fn module_symbols(&self, module: &Module) -> Result<Arc<ModuleSymbols>, String> {
        let (file, meta) =
            self.with_descriptors(|| open_module(module))
                .map_err(|e| match e.kind() {
                    // Our own words ("is a fifo (named pipe), not a regular
                    // file", "replaced while it was being opened").
                    io::ErrorKind::Other | io::ErrorKind::InvalidInput => e.to_string(),
                    _ => open_failure(&module.name, &e),
                })?;
        let version = (
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
        );
        let mut loaded = self.lock();
        if let Some(symbols) = loaded.get(&version) {
            // Its unwind tables may have been read since it was kept.
            loaded.evict(self.budget, &version);
            return Ok(symbols);
        }
        // Read under the lock: two reports symbolizing the same library at
        // once read it once.
        let symbols = Arc::new(ModuleSymbols::load_from(
            file,
            &meta,
            Path::new(&module.name),
        )?);
        loaded.insert(version, Arc::clone(&symbols));
        loaded.evict(self.budget, &version);
        Ok(symbols)
    }

    /// `open()`, run again once after this cache is emptied (closing the
    /// descriptors it held) where it failed for want of descriptors (a
    /// low `ulimit -n`).
    pub fn with_descriptors<T>(&self, open: impl Fn() -> io::Result<T>) -> io::Result<T> {
        match open() {
            Err(e) if out_of_descriptors(&e) => {
                self.clear();
                open()
            }
            other => other,
        }
    }

    /// The versions kept, oldest file first.
    #[cfg(test)]
    pub(crate) fn kept_versions(&self) -> Vec<FileVersion> {
        self.lock().by_version.keys().copied().collect()
    }

    /// The kernel's symbol table (see the type's documentation).
    pub fn kernel_table(&self) -> io::Result<&KernelSymbols> {
        if let Some(table) = self.kernel.get() {
            return Ok(table);
        }
        let loaded = self.with_descriptors(KernelSymbols::load)?;
        Ok(self.kernel.get_or_init(|| loaded))
    }
}

/// Whether `e` says this process is out of descriptors.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The tables of a [`SymbolCache`].
#[derive(Debug, Default)]
struct Loaded {
    /// Each version's tables, their last use and their bytes as last
    /// counted.
    by_version: BTreeMap<FileVersion, (Arc<ModuleSymbols>, u64, u64)>,
    /// Uses so far: the age of each entry's last use.
    uses: u64,
    /// The bytes of all, as last counted.
    total: u64,
}

impl Loaded {
    /// The tables of `version`, where kept (their bytes counted again:
    /// unwind tables are read after the symbols).
    fn get(&mut self, version: &FileVersion) -> Option<Arc<ModuleSymbols>> {
        self.uses += 1;
        let uses = self.uses;
        let (symbols, used, bytes) = self.by_version.get_mut(version)?;
        *used = uses;
        let now = symbols.held_bytes();
        self.total = self.total.saturating_sub(*bytes) + now;
        *bytes = now;
        Some(Arc::clone(symbols))
    }

    /// Keeps `symbols` as `version`'s, instead of any other version of the
    /// same file.
    fn insert(&mut self, version: FileVersion, symbols: Arc<ModuleSymbols>) {
        let older: Vec<FileVersion> = self
            .by_version
            .range((version.0, version.1, 0, i64::MIN, i64::MIN)..)
            .take_while(|(v, _)| (v.0, v.1) == (version.0, version.1))
            .map(|(v, _)| *v)
            .collect();
        for v in older {
            self.remove(&v);
        }
        self.uses += 1;
        let bytes = symbols.held_bytes();
        self.total += bytes;
        self.by_version.insert(version, (symbols, self.uses, bytes));
    }

    fn remove(&mut self, version: &FileVersion) -> bool {
        let Some((_, _, bytes)) = self.by_version.remove(version) else {
            return false;
        };
        self.total = self.total.saturating_sub(bytes);
        true
    }

    /// Drops the least recently used tables, but `keep`'s, while they hold
    /// more than `budget` bytes.
    fn evict(&mut self, budget: u64, keep: &FileVersion) {
        while self.total > budget {
            let oldest = self
                .by_version
                .iter()
                .filter(|(v, _)| *v != keep)
                .min_by_key(|(_, (_, used, _))| *used)
                .map(|(v, _)| *v);
            if !oldest.is_some_and(|v| self.remove(&v)) {
                return;
            }
        }
    }
}
