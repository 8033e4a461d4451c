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
use std::time::{Duration, Instant};

use lotus_core::demangle;
use lotus_core::Row;
use lotus_core::UNKNOWN_MODULE;

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::model::{Location, Model, ModuleId};
use lotus_symbols::{module_symbols, with_descriptors, Found};
use lotus_symbols::{perf_map_path, python_frame, PerfMap};
use lotus_symbols::{KernelSymbols, KALLSYMS_PATH};
use lotus_symbols::{Module, VDSO};

/// The module of a JIT's code named from its perf map that is not one of
/// CPython's `py::` trampolines (those carry their file).
const PERF_MAP_MODULE: &str = "[perf map]";

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

/// The function name for code nothing could name.
pub const UNKNOWN_FUNCTION: &str = "[unknown]";

/// The module of kernel code (the kernel image); loadable modules show as
/// `[name]`.
pub const KERNEL_MODULE: &str = "[kernel]";
/// The function name for kernel code when kernel symbols cannot be read
/// (`kernel.kptr_restrict` hides their addresses from this user).
pub const KERNEL_FUNCTION: &str = "[kernel]";

/// What named an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Symbol,
    UnwindTable,
    CodeScan,
    Unknown,
}

/// How one offset was resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    /// Raw (mangled) name, `func@0x...`, or [`UNKNOWN_FUNCTION`].
    function: String,
    /// File offset of the function's start, where known.
    start: Option<u64>,
    how: How,
}

impl Resolved {
    fn unknown() -> Resolved {
        Resolved {
            function: UNKNOWN_FUNCTION.to_string(),
            start: None,
            how: How::Unknown,
        }
    }

    /// A function without a name, `func@0x<file offset of its start>`.
    fn grouped(start: u64, how: How) -> Resolved {
        Resolved {
            function: format!("func@{start:#x}"),
            start: Some(start),
            how,
        }
    }
}

/// Figures about one symbolization pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SymbolizeStats {
    /// Distinct (module, offset) pairs looked up.
    pub addresses: usize,
    /// Of those, named from symbols.
    pub named: usize,
    /// Of those, grouped by unwind-table function start (`func@0x...`).
    pub by_unwind_table: usize,
    /// Of those, in code that neither symbols nor unwind tables cover,
    /// grouped by the function start found in its bytes (`func@0x...`).
    pub by_code_scan: usize,
    /// Of those, left `[unknown]`.
    pub unknown: usize,
    /// Distinct kernel addresses looked up (not in `addresses`).
    pub kernel_addresses: usize,
    /// Of those, named from `/proc/kallsyms`.
    pub kernel_named: usize,
    /// Wall time spent.
    pub elapsed: Duration,
}

impl SymbolizeStats {
    /// Counts one looked-up (module, offset) pair, named as `how` says.
    fn count(&mut self, how: How) {
        self.addresses += 1;
        match how {
            How::Symbol => self.named += 1,
            How::UnwindTable => self.by_unwind_table += 1,
            How::CodeScan => self.by_code_scan += 1,
            How::Unknown => self.unknown += 1,
        }
    }
}

/// Symbolizes one file's offsets from its symbol tables (read once per
/// process, see [`module_symbols`]); or says why the file could not be
/// read (its offsets are then `[unknown]`).
fn resolve_file(module: &Module, offsets: &[u64]) -> Result<Vec<Resolved>, String> {
    let symbols = module_symbols(module)?;
    Ok(offsets
        .iter()
        .map(|&offset| match symbols.lookup(offset) {
            Found::Named { name, start } => Resolved {
                function: name.to_string(),
                start: Some(start),
                how: How::Symbol,
            },
            Found::Unwind { start } => Resolved::grouped(start, How::UnwindTable),
            Found::Gap { start } => Resolved::grouped(start, How::CodeScan),
            Found::Nothing => Resolved::unknown(),
        })
        .collect())
}

/// Why the samples of a module that is not a file lotus can open are
/// unnamed: a file deleted after it was mapped. `None` for the others
/// (anonymous memory, JIT code in `memfd:`, pseudo-modules).
fn unopenable_reason(m: &Module) -> Option<String> {
    let path = m.name.strip_suffix(" (deleted)")?;
    (path.starts_with('/') && !path.starts_with("/memfd:"))
        .then(|| format!("{path} was deleted after it was mapped"))
}

/// "1 sample", "N samples".
fn samples(n: u64) -> String {
    if n == 1 {
        "1 sample".to_string()
    } else {
        format!("{n} samples")
    }
}

/// `n` as a percentage of `total` (0 for no total).
fn percent(n: u64, total: u64) -> f64 {
    if total > 0 {
        100.0 * n as f64 / total as f64
    } else {
        0.0
    }
}

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

/// This process's copy of the vDSO, read from memory.
fn vdso_image() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.trim_end().ends_with(VDSO))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    // SAFETY: getauxval has no preconditions.
    let aux = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if aux != start {
        return None;
    }
    let len = usize::try_from(end.checked_sub(start)?).ok()?;
    // SAFETY: [start, end) is this process's vDSO mapping (checked against
    // the auxiliary vector), readable and mapped for the process's life.
    let bytes = unsafe { std::slice::from_raw_parts(start as usize as *const u8, len) };
    Some(bytes.to_vec())
}

/// Symbolizes vDSO offsets from this process's copy of the vDSO: the
/// kernel maps the same image into every process of the same ABI.
fn resolve_vdso(offsets: &[u64]) -> Vec<Resolved> {
    let unknown = Resolved::unknown;
    let Some(image) = vdso_image() else {
        return offsets.iter().map(|_| unknown()).collect();
    };
    let Ok(obj) = object::File::parse(&*image) else {
        return offsets.iter().map(|_| unknown()).collect();
    };
    let segments: Vec<(u64, u64, u64)> = obj
        .segments()
        .map(|s| (s.file_range().0, s.file_range().1, s.address()))
        .collect();
    // (start, end, name): aliases share a range; the smallest name wins
    // (`__vdso_clock_gettime` over `clock_gettime`), so rows are stable.
    let mut syms: Vec<(u64, u64, String)> = obj
        .dynamic_symbols()
        .chain(obj.symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            Some((s.address(), s.address().saturating_add(s.size()), name))
        })
        .collect();
    syms.sort();
    offsets
        .iter()
        .map(|&off| {
            let addr = segments
                .iter()
                .find(|(o, len, _)| off >= *o && off - o < *len)
                .map(|(o, _, a)| a + (off - o));
            let best = addr.and_then(|addr| {
                syms.iter()
                    .filter(|(s, e, _)| *s <= addr && addr < *e)
                    .min_by(|a, b| a.2.cmp(&b.2))
                    .map(|(s, _, name)| (addr - s, name))
            });
            match best {
                Some((into, name)) => Resolved {
                    function: name.clone(),
                    start: off.checked_sub(into),
                    how: How::Symbol,
                },
                None => unknown(),
            }
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

/// Kernel address -> (function, module label, function start).
type KernelNames = HashMap<u64, (String, String, Option<u64>)>;

/// Names kernel addresses: (function, module label, start) per address, and
/// a note when kernel symbols could not be read.
fn resolve_kernel(addresses: &[u64], stats: &mut SymbolizeStats) -> (KernelNames, Option<String>) {
    if addresses.is_empty() {
        return (HashMap::new(), None);
    }
    match kernel_table() {
        Ok(table) => resolve_kernel_from(addresses, Ok(table), stats),
        Err(e) => resolve_kernel_from(addresses, Err(&e), stats),
    }
}

/// The kernel's symbol table, read once per process: `lotus map` reports
/// many runs, and `/proc/kallsyms` (some 200,000 lines) changes only when a
/// module is loaded, which a mapping does not wait for. A failure is not
/// kept (it may be passing: too many files open at that moment).
fn kernel_table() -> std::io::Result<&'static KernelSymbols> {
    static TABLE: std::sync::OnceLock<KernelSymbols> = std::sync::OnceLock::new();
    if let Some(table) = TABLE.get() {
        return Ok(table);
    }
    let loaded = with_descriptors(KernelSymbols::load)?;
    Ok(TABLE.get_or_init(|| loaded))
}

/// [`resolve_kernel`] from the table `loaded`.
fn resolve_kernel_from(
    addresses: &[u64],
    loaded: Result<&KernelSymbols, &std::io::Error>,
    stats: &mut SymbolizeStats,
) -> (KernelNames, Option<String>) {
    let mut out = HashMap::with_capacity(addresses.len());
    let empty = KernelSymbols::default();
    let (table, note) = match loaded {
        Ok(t) if !t.is_empty() => (t, None),
        Ok(t) => {
            let note = if t.zeroed > 0 {
                format!(
                    "kernel functions: unnamed ({KALLSYMS_PATH} shows zeroed addresses to \
                     this user, kernel.kptr_restrict); kernel time is one `{KERNEL_FUNCTION}` \
                     row; run as root to name it"
                )
            } else {
                format!("kernel functions: unnamed ({KALLSYMS_PATH} lists no text symbols)")
            };
            (t, Some(note))
        }
        Err(e) => (
            &empty,
            Some(format!(
                "kernel functions: unnamed ({KALLSYMS_PATH} unreadable: {e})"
            )),
        ),
    };
    for &address in addresses {
        stats.kernel_addresses += 1;
        let resolved = match table.lookup(address) {
            Some(s) => {
                stats.kernel_named += 1;
                let module = match s.module {
                    Some(m) => format!("[{m}]"),
                    None => KERNEL_MODULE.to_string(),
                };
                (s.name.to_string(), module, Some(s.start))
            }
            None => (KERNEL_FUNCTION.to_string(), KERNEL_MODULE.to_string(), None),
        };
        out.insert(address, resolved);
    }
    (out, note)
}

/// Rows for the sample counts in `counts` ((location) -> samples), one per
/// (function, module), most samples first; and notes for samples that
/// could not be named (a module that could not be read, with how many
/// samples it holds; kernel samples without kernel symbols).
pub(crate) fn rows(
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
            resolve_file(m, offsets).unwrap_or_else(|reason| {
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
    let (kernel, kernel_note) = resolve_kernel(&kernel_addresses, &mut stats);
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
/// (see [`crate::stream`]): each ELF file's tables are read once (cached by
/// [`module_symbols`]) and the kernel's table is read once.
pub(crate) struct LocationNamer {
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
    /// Each process's perf map (JIT code's names), opened when its first
    /// JIT frame is named, or why it could not be.
    perf_maps: HashMap<u32, Result<PerfMap, String>>,
    /// Each forked process's parent.
    parents: HashMap<u32, u32>,
}

impl LocationNamer {
    pub(crate) fn new() -> Self {
        LocationNamer {
            kernel: None,
            stats: SymbolizeStats::default(),
            kernel_note: None,
            failed: BTreeMap::new(),
            samples: 0,
            kernel_samples: 0,
            unnamed: BTreeMap::new(),
            perf_maps: HashMap::new(),
            parents: HashMap::new(),
        }
    }

    /// Says that `pid` was forked from `ppid`.
    pub(crate) fn forked(&mut self, pid: u32, ppid: u32) {
        self.parents.insert(pid, ppid);
    }

    /// The (function, module) of JIT code at `address` in `pid`, from the
    /// process's perf map, else its parent's (a forked worker's frames
    /// from before its fork run the parent's trampolines): `py::qualname`
    /// and its file for CPython's trampolines (`py::spin` in `/job.py`),
    /// the entry's name otherwise.
    fn name_jit(&mut self, pid: u32, address: u64) -> (String, String) {
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
    /// it was refused (kept, with why, for [`Self::notes`]).
    fn perf_map(&mut self, pid: u32) -> Option<&mut PerfMap> {
        let map = match self.perf_maps.entry(pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = perf_map_path(pid);
                std::fs::symlink_metadata(&path).ok()?;
                e.insert(PerfMap::open(&path, process_user(pid)))
            }
        };
        map.as_mut().ok()
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
        // A map that is there but refused (another user's, a link): its
        // JIT frames stay unnamed. A map that is not there is no news:
        // most processes run no JIT.
        let refused: Vec<&String> = self
            .perf_maps
            .values()
            .filter_map(|m| m.as_ref().err())
            .collect();
        if let Some(first) = refused.iter().min() {
            let more = match refused.len() {
                1 => String::new(),
                n => format!(" (and {} more processes' maps)", n - 1),
            };
            notes.push(format!(
                "JIT frames (Python's on 3.12+) left unnamed: {first}{more}"
            ));
        }
        let mut damaged: Vec<String> = self
            .perf_maps
            .values()
            .filter_map(|m| m.as_ref().ok()?.note())
            .collect();
        damaged.sort();
        if let Some(first) = damaged.first() {
            let more = match damaged.len() {
                1 => String::new(),
                n => format!(" (and {} more processes' maps)", n - 1),
            };
            notes.push(format!("JIT frames: {first}{more}"));
        }
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
                resolve_file(m, offsets).unwrap_or_else(|why| {
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
                .get_or_insert_with(|| with_descriptors(KernelSymbols::load));
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
                    Location::Jit { pid, address } => self.name_jit(pid, address),
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

    #[test]
    fn vdso_functions_are_named_from_our_copy() {
        let image = vdso_image().expect("this process has a vDSO");
        let obj = object::File::parse(&*image).expect("vDSO is ELF");
        let sym = obj
            .dynamic_symbols()
            .find(|s| s.name().is_ok_and(|n| n.ends_with("clock_gettime")))
            .expect("clock_gettime in the vDSO");
        let seg = obj
            .segments()
            .find(|s| sym.address() >= s.address() && sym.address() < s.address() + s.size())
            .expect("segment");
        let off = sym.address() - seg.address() + seg.file_range().0;
        let r = resolve_vdso(&[off + 1, 0]);
        assert!(r[0].function.ends_with("clock_gettime"), "{r:?}");
        assert_eq!(r[0].start, Some(off));
        assert_eq!(r[1].function, UNKNOWN_FUNCTION);
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
            format!("4 samples (44.4%) in {fifo} could not be named: not a regular file (a FIFO)"),
            "2 samples (22.2%) in /nonexistent/libgone.so could not be named: \
             /nonexistent/libgone.so is gone (deleted or renamed since it was mapped)"
                .to_string(),
            "1 sample (11.1%) in [tmp/libx.so (deleted)] could not be named: \
             /tmp/libx.so was deleted after it was mapped"
                .to_string(),
        ];
        let (rows, _, notes) = rows(&model, &counts);
        assert_eq!(notes, expected);
        assert!(rows
            .iter()
            .filter(|r| r.module != "[unknown]")
            .all(|r| r.function == UNKNOWN_FUNCTION));

        let mut namer = LocationNamer::new();
        let mut distinct = all.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        namer.name(&model.modules, &distinct);
        namer.count(all);
        assert_eq!(namer.notes(), expected);
    }
}
