//! Turning (module, file offset) into (function, module) rows.
//!
//! Each distinct offset is symbolized once (the counts are already grouped
//! by module and offset) from the module's symbol tables, read once per
//! process ([`crate::elf_symbols`]: `.symtab` or its debug file's,
//! `.dynsym`, `name@plt`). An offset without a symbol (stripped code) is
//! grouped under the function that the unwind tables say holds it, named
//! `func@0x<file offset of its start>`; code without either is grouped at
//! the function start found in its bytes, also `func@0x...`; only code
//! outside any executable section becomes `[unknown]` in its module. Names are demangled by
//! [`lotus_core::Row::new`]. vDSO samples are named from this process's own
//! copy of the vDSO. Kernel addresses are named from `/proc/kallsyms`
//! (read once per report, only when there are kernel samples), in module
//! [`KERNEL_MODULE`] (or `[ext4]` and the like for loadable modules).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use lotus_core::demangle;
use std::sync::Arc;

use lotus_core::Row;
use lotus_core::UNKNOWN_MODULE;

use crate::model::{Location, Model, ModuleId};
use lotus_symbols::{
    percent, resolve_file, resolve_kernel, resolve_kernel_from, resolve_vdso, samples,
    unopenable_reason, JitNames, KernelSymbols, Module, Resolved, SymbolCache, SymbolizeStats,
    KERNEL_FUNCTION, KERNEL_MODULE, UNKNOWN_FUNCTION,
};

/// Notes for samples that could not be named, one per module:
/// "N samples (x%) in MODULE could not be named: REASON", most samples
/// first. `failed` holds the reason per module; `counts` every sample.
fn unnamed_notes(
    model: &Model,
    counts: &HashMap<Location, u64>,
    failed: &BTreeMap<ModuleId, String>,
) -> Vec<String> {
    let total: u64 = counts.values().sum();
    let mut per_module: BTreeMap<ModuleId, u64> = BTreeMap::new();
    for (loc, &n) in counts {
        if let Location::Module { module, .. } = *loc {
            if failed.contains_key(&module) {
                *per_module.entry(module).or_insert(0) += n;
            }
        }
    }
    let mut rows: Vec<(u64, ModuleId)> = per_module.into_iter().map(|(m, n)| (n, m)).collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    rows.into_iter()
        .map(|(n, module)| {
            format!(
                "{} ({:.1}%) in {} could not be named: {}",
                samples(n),
                percent(n, total),
                module_label(model, module),
                failed[&module]
            )
        })
        .collect()
}

/// The module path (or pseudo-name) a row shows for `module`.
fn module_label(model: &Model, module: ModuleId) -> String {
    module_label_of(&model.modules, module)
}

/// [`module_label`] from the module list alone.
fn module_label_of(modules: &[Module], module: ModuleId) -> String {
    match modules.get(module as usize) {
        Some(m) if m.name == "//anon" => "[anon]".to_string(),
        Some(m) if m.is_file => m.name.clone(),
        // `[vdso]`, `[heap]`, `memfd:...`, `/x (deleted)`: a name, not a
        // path to open; bracket it so it is not taken for a file.
        Some(m) if m.name.starts_with('[') => m.name.clone(),
        Some(m) => format!("[{}]", m.name.trim_start_matches('/')),
        None => UNKNOWN_MODULE.to_string(),
    }
}

/// Rows for the sample counts in `counts` ((location) -> samples), one per
/// (function, module), most samples first; and notes for samples that
/// could not be named (a module that could not be read, with how many
/// samples it holds; kernel samples without kernel symbols).
pub(crate) fn rows(
    cache: &SymbolCache,
    model: &Model,
    counts: &HashMap<Location, u64>,
) -> (Vec<Row>, SymbolizeStats, Vec<String>) {
    let t0 = Instant::now();
    let mut stats = SymbolizeStats::default();
    let mut failed: BTreeMap<ModuleId, String> = BTreeMap::new();
    // Offsets per file module (and the vDSO), sorted (a stable order).
    let mut by_module: BTreeMap<ModuleId, Vec<u64>> = BTreeMap::new();
    for loc in counts.keys() {
        if let Location::Module { module, offset } = *loc {
            match model.modules.get(module as usize) {
                Some(m) if m.keeps_offsets() => by_module.entry(module).or_default().push(offset),
                Some(m) => {
                    if let Some(reason) = unopenable_reason(m) {
                        failed.insert(module, reason);
                    }
                }
                None => {}
            }
        }
    }
    let mut resolved: HashMap<(ModuleId, u64), Resolved> = HashMap::new();
    for (module, offsets) in &mut by_module {
        offsets.sort_unstable();
        offsets.dedup();
        let m = &model.modules[*module as usize];
        let resolved_offsets = if m.is_file {
            resolve_file(cache, m, offsets).unwrap_or_else(|reason| {
                failed.insert(*module, reason);
                offsets.iter().map(|_| Resolved::unknown()).collect()
            })
        } else {
            resolve_vdso(offsets)
        };
        for (off, r) in offsets.iter().zip(resolved_offsets) {
            stats.count(r.how);
            resolved.insert((*module, *off), r);
        }
    }

    let mut kernel_addresses: Vec<u64> = counts
        .keys()
        .filter_map(|loc| match *loc {
            Location::Kernel { address } => Some(address),
            _ => None,
        })
        .collect();
    kernel_addresses.sort_unstable();
    let (kernel, kernel_note) = resolve_kernel(cache, &kernel_addresses, &mut stats);
    // The note says how many samples it is about.
    let kernel_note = kernel_note.map(|note| {
        let total: u64 = counts.values().sum();
        let n: u64 = counts
            .iter()
            .filter(|(loc, _)| matches!(loc, Location::Kernel { .. }))
            .map(|(_, &n)| n)
            .sum();
        format!(
            "{note}: {} ({:.1}%) in {KERNEL_MODULE} could not be named",
            samples(n),
            percent(n, total)
        )
    });

    // (function, module label) -> (samples, start)
    let mut grouped: HashMap<(String, String), (u64, Option<u64>)> = HashMap::new();
    for (loc, &n) in counts {
        let (function, module, start) = match *loc {
            Location::Module { module, offset } => match resolved.get(&(module, offset)) {
                Some(r) => (r.function.clone(), module_label(model, module), r.start),
                None => (
                    UNKNOWN_FUNCTION.to_string(),
                    module_label(model, module),
                    None,
                ),
            },
            Location::Kernel { address } => match kernel.get(&address) {
                Some((function, module, start)) => (function.clone(), module.clone(), *start),
                None => (KERNEL_FUNCTION.to_string(), KERNEL_MODULE.to_string(), None),
            },
            Location::Unmapped | Location::Jit { .. } => (
                UNKNOWN_FUNCTION.to_string(),
                UNKNOWN_MODULE.to_string(),
                None,
            ),
        };
        // Group by the demangled name: Rust monomorphizations that differ
        // only in their hash are one function to a reader.
        let e = grouped
            .entry((demangle(&function), module))
            .or_insert((0, start));
        e.0 += n;
        if e.1.is_none() {
            e.1 = start;
        }
    }
    let mut rows: Vec<Row> = grouped
        .into_iter()
        .map(|((function, module), (n, start))| {
            let mut row = Row::new(&function, &module, n as f64);
            row.start_address = start;
            row
        })
        .collect();
    rows.sort_by(|a, b| {
        b.value
            .total_cmp(&a.value)
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.module.cmp(&b.module))
    });
    stats.elapsed = t0.elapsed();
    let mut notes = unnamed_notes(model, counts, &failed);
    notes.extend(kernel_note);
    (rows, stats, notes)
}

/// Names locations one batch at a time, for samples streamed as they come
/// (see [`crate::stream`]): each ELF file's tables are read once (kept by
/// the profiler's [`SymbolCache`]) and the kernel's table is read once.
pub(crate) struct LocationNamer {
    cache: Arc<SymbolCache>,
    kernel: Option<std::io::Result<KernelSymbols>>,
    /// Figures so far.
    pub stats: SymbolizeStats,
    /// Said when kernel functions cannot be named (once).
    pub kernel_note: Option<String>,
    /// Modules that could not be read: (label, why).
    failed: BTreeMap<ModuleId, (String, String)>,
    /// Samples counted ([`Self::count`]): all, in the kernel, and in
    /// each module of `failed`.
    samples: u64,
    kernel_samples: u64,
    unnamed: BTreeMap<ModuleId, u64>,
    /// JIT code's names, from the processes' perf maps.
    jit: JitNames,
}

impl LocationNamer {
    pub(crate) fn new(cache: Arc<SymbolCache>) -> Self {
        LocationNamer {
            cache,
            kernel: None,
            stats: SymbolizeStats::default(),
            kernel_note: None,
            failed: BTreeMap::new(),
            samples: 0,
            kernel_samples: 0,
            unnamed: BTreeMap::new(),
            jit: JitNames::new(),
        }
    }

    /// Says that `pid` was forked from `ppid`.
    pub(crate) fn forked(&mut self, pid: u32, ppid: u32) {
        self.jit.forked(pid, ppid);
    }

    /// Counts samples at `locs` (named already), for [`Self::notes`].
    pub(crate) fn count(&mut self, locs: impl IntoIterator<Item = Location>) {
        for loc in locs {
            self.samples += 1;
            match loc {
                Location::Module { module, .. } if self.failed.contains_key(&module) => {
                    *self.unnamed.entry(module).or_insert(0) += 1;
                }
                Location::Kernel { .. } => self.kernel_samples += 1,
                _ => {}
            }
        }
    }

    /// Notes for the samples counted that could not be named: "N samples
    /// (x%) in MODULE could not be named: REASON", as [`rows`] says them.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut out: Vec<(u64, String)> = self
            .unnamed
            .iter()
            .filter_map(|(module, &n)| {
                let (label, why) = self.failed.get(module)?;
                Some((
                    n,
                    format!(
                        "{} ({:.1}%) in {label} could not be named: {why}",
                        samples(n),
                        percent(n, self.samples)
                    ),
                ))
            })
            .collect();
        out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut notes: Vec<String> = out.into_iter().map(|(_, note)| note).collect();
        if let Some(note) = &self.kernel_note {
            notes.push(format!(
                "{note}: {} ({:.1}%) in {KERNEL_MODULE} could not be named",
                samples(self.kernel_samples),
                percent(self.kernel_samples, self.samples)
            ));
        }
        notes.extend(self.jit.notes());
        notes
    }

    /// (function, module label) per location, in order; functions
    /// demangled, as [`rows`] names them.
    pub(crate) fn name(&mut self, modules: &[Module], locs: &[Location]) -> Vec<(String, String)> {
        let mut by_module: BTreeMap<ModuleId, Vec<u64>> = BTreeMap::new();
        let mut kernel_addresses = Vec::new();
        for loc in locs {
            match *loc {
                Location::Module { module, offset }
                    if modules
                        .get(module as usize)
                        .is_some_and(Module::keeps_offsets) =>
                {
                    by_module.entry(module).or_default().push(offset)
                }
                Location::Kernel { address } => kernel_addresses.push(address),
                Location::Module { module, .. } => {
                    let why = modules.get(module as usize).and_then(unopenable_reason);
                    if let Some(why) = why {
                        self.failed
                            .entry(module)
                            .or_insert_with(|| (module_label_of(modules, module), why));
                    }
                }
                _ => {}
            }
        }
        let mut resolved: HashMap<(ModuleId, u64), String> = HashMap::new();
        for (module, offsets) in &mut by_module {
            offsets.sort_unstable();
            offsets.dedup();
            let m = &modules[*module as usize];
            let names = if m.is_file {
                resolve_file(&self.cache, m, offsets).unwrap_or_else(|why| {
                    self.failed
                        .insert(*module, (module_label_of(modules, *module), why));
                    offsets.iter().map(|_| Resolved::unknown()).collect()
                })
            } else {
                resolve_vdso(offsets)
            };
            for (off, r) in offsets.iter().zip(names) {
                self.stats.count(r.how);
                resolved.insert((*module, *off), r.function);
            }
        }
        let kernel = if kernel_addresses.is_empty() {
            HashMap::new()
        } else {
            let table = self
                .kernel
                .get_or_insert_with(|| self.cache.with_descriptors(KernelSymbols::load));
            let (names, note) =
                resolve_kernel_from(&kernel_addresses, table.as_ref(), &mut self.stats);
            if self.kernel_note.is_none() {
                self.kernel_note = note;
            }
            names
        };
        locs.iter()
            .map(|loc| {
                let (function, module) = match *loc {
                    Location::Module { module, offset } => (
                        resolved
                            .get(&(module, offset))
                            .cloned()
                            .unwrap_or_else(|| UNKNOWN_FUNCTION.to_string()),
                        module_label_of(modules, module),
                    ),
                    Location::Kernel { address } => match kernel.get(&address) {
                        Some((f, m, _)) => (f.clone(), m.clone()),
                        None => (KERNEL_FUNCTION.to_string(), KERNEL_MODULE.to_string()),
                    },
                    Location::Unmapped => {
                        (UNKNOWN_FUNCTION.to_string(), UNKNOWN_MODULE.to_string())
                    }
                    Location::Jit { pid, address } => self.jit.name(pid, address),
                };
                (demangle(&function), module)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_addresses_are_named_or_grouped_with_a_note() {
        let text = "\
ffffffff81001000 T clear_page_erms
ffffffff81001040 t clear_page_rep
ffffffffc0300000 t ext4_readdir\t[ext4]
";
        let addrs = [0xffff_ffff_8100_1010, 0xffff_ffff_c030_0004, 0x10];
        let mut stats = SymbolizeStats::default();
        let (named, note) = resolve_kernel_from(
            &addrs,
            KernelSymbols::parse(text.as_bytes()).as_ref(),
            &mut stats,
        );
        assert_eq!(note, None);
        assert_eq!(
            named[&addrs[0]],
            (
                "clear_page_erms".to_string(),
                KERNEL_MODULE.to_string(),
                Some(0xffff_ffff_8100_1000)
            )
        );
        assert_eq!(named[&addrs[1]].1, "[ext4]");
        assert_eq!(named[&addrs[2]].0, KERNEL_FUNCTION);
        assert_eq!((stats.kernel_addresses, stats.kernel_named), (3, 2));

        // kptr_restrict: every address zero.
        let hidden = "0000000000000000 T clear_page_erms\n";
        let (named, note) = resolve_kernel_from(
            &addrs,
            KernelSymbols::parse(hidden.as_bytes()).as_ref(),
            &mut SymbolizeStats::default(),
        );
        assert!(named
            .values()
            .all(|r| r.0 == KERNEL_FUNCTION && r.1 == KERNEL_MODULE));
        let note = note.expect("note");
        assert!(note.contains("kptr_restrict"), "{note}");

        let (named, note) = resolve_kernel_from(
            &addrs,
            Err(&std::io::Error::from_raw_os_error(libc::EACCES)),
            &mut SymbolizeStats::default(),
        );
        assert_eq!(named.len(), 3);
        assert!(note.expect("note").contains("unreadable"));
    }

    /// Samples in modules that could not be read (a FIFO where the
    /// library was, a file gone, a file deleted after it was mapped) are
    /// counted in one note per module, with the figure, by [`rows`] and
    /// by the streamed namer alike.
    #[test]
    fn samples_in_a_module_that_cannot_be_read_are_counted_in_a_note() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("lib.so");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let fifo = fifo.to_string_lossy().into_owned();
        let mut model = Model::default();
        let lib = model.module(fifo.as_bytes());
        let gone = model.module(b"/nonexistent/libgone.so");
        let deleted = model.module(b"/tmp/libx.so (deleted)");
        let at = |module, offset| Location::Module { module, offset };
        let all = [
            at(lib, 0x10),
            at(lib, 0x10),
            at(lib, 0x10),
            at(lib, 0x20),
            at(gone, 0x30),
            at(gone, 0x30),
            at(deleted, 0),
            Location::Unmapped,
            Location::Unmapped,
        ];
        let mut counts: HashMap<Location, u64> = HashMap::new();
        for loc in all {
            *counts.entry(loc).or_insert(0) += 1;
        }
        let expected = vec![
            format!("4 samples (44.4%) in {fifo} could not be named: is a fifo (named pipe), not a regular file"),
            "2 samples (22.2%) in /nonexistent/libgone.so could not be named: \
             /nonexistent/libgone.so is gone (deleted or renamed since it was mapped)"
                .to_string(),
            "1 sample (11.1%) in [tmp/libx.so (deleted)] could not be named: \
             /tmp/libx.so was deleted after it was mapped"
                .to_string(),
        ];
        let (rows, _, notes) = rows(&SymbolCache::new(), &model, &counts);
        assert_eq!(notes, expected);
        assert!(rows
            .iter()
            .filter(|r| r.module != "[unknown]")
            .all(|r| r.function == UNKNOWN_FUNCTION));

        let mut namer = LocationNamer::new(Arc::default());
        let mut distinct = all.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        namer.name(&model.modules, &distinct);
        namer.count(all);
        assert_eq!(namer.notes(), expected);
    }
}
