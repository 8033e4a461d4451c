//! Names for (module, file offset) and kernel addresses, as the samplers'
//! reports give them: a file's offsets from its symbol tables (read once
//! per file version, [`crate::module_symbols`]), the vDSO's from this
//! process's own copy, the kernel's from `/proc/kallsyms` (read once per
//! process), with figures on how each was named ([`SymbolizeStats`]).

use std::collections::HashMap;
use std::time::Duration;

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::{Found, KernelSymbols, Module, SymbolCache, KALLSYMS_PATH, VDSO};

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
#[non_exhaustive]
pub enum How {
    /// A symbol table's entry.
    Symbol,
    /// The unwind tables' function start (`func@0x...`).
    UnwindTable,
    /// A function start found in the code's bytes (`func@0x...`).
    CodeScan,
    /// Nothing.
    Unknown,
}

/// How one offset was resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Raw (mangled) name, `func@0x...`, or [`UNKNOWN_FUNCTION`].
    pub function: String,
    /// File offset of the function's start, where known.
    pub start: Option<u64>,
    /// What named it.
    pub how: How,
}

impl Resolved {
    /// Nothing named it.
    pub fn unknown() -> Resolved {
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
    pub fn count(&mut self, how: How) {
        self.addresses += 1;
        match how {
            How::Symbol => self.named += 1,
            How::UnwindTable => self.by_unwind_table += 1,
            How::CodeScan => self.by_code_scan += 1,
            How::Unknown => self.unknown += 1,
        }
    }
}

/// Symbolizes one file's offsets from its symbol tables (read once while
/// `cache` keeps them, see [`SymbolCache::module_symbols`]); or says why
/// the file could not be read (its offsets are then `[unknown]`).
pub fn resolve_file(
    cache: &SymbolCache,
    module: &Module,
    offsets: &[u64],
) -> Result<Vec<Resolved>, String> {
    let symbols = cache.module_symbols(module)?;
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
pub fn unopenable_reason(m: &Module) -> Option<String> {
    let path = m.name.strip_suffix(" (deleted)")?;
    (path.starts_with('/') && !path.starts_with("/memfd:"))
        .then(|| format!("{path} was deleted after it was mapped"))
}

/// "1 sample", "N samples".
pub fn samples(n: u64) -> String {
    if n == 1 {
        "1 sample".to_string()
    } else {
        format!("{n} samples")
    }
}

/// `n` as a percentage of `total` (0 for no total).
pub fn percent(n: u64, total: u64) -> f64 {
    if total > 0 {
        100.0 * n as f64 / total as f64
    } else {
        0.0
    }
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
pub fn resolve_vdso(offsets: &[u64]) -> Vec<Resolved> {
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

/// Kernel address -> (function, module label, function start).
pub type KernelNames = HashMap<u64, (String, String, Option<u64>)>;

/// Names kernel addresses: (function, module label, start) per address, and
/// a note when kernel symbols could not be read (the table read once while
/// `cache` lives: [`SymbolCache::kernel_table`]).
pub fn resolve_kernel(
    cache: &SymbolCache,
    addresses: &[u64],
    stats: &mut SymbolizeStats,
) -> (KernelNames, Option<String>) {
    if addresses.is_empty() {
        return (HashMap::new(), None);
    }
    match cache.kernel_table() {
        Ok(table) => resolve_kernel_from(addresses, Ok(table), stats),
        Err(e) => resolve_kernel_from(addresses, Err(&e), stats),
    }
}

/// [`resolve_kernel`] from the table `loaded`.
pub fn resolve_kernel_from(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
