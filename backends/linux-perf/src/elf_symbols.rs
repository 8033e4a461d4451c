//! The function symbols of one ELF file, read once per invocation.
//!
//! Names come from the symbol tables as perf takes them: `.symtab` (or,
//! where the file was stripped of it, the `.symtab` of its debug file,
//! found by build ID or debug link), `.dynsym`, and `name@plt` for PLT
//! stubs; DWARF is never consulted for names. (blazesym, used before,
//! prefers DWARF where a file has it and then names neither the `.cold`
//! parts that GCC splits off hot functions nor, in some libraries, the hot
//! parts; it synthesizes no PLT names.) The rules follow perf's
//! `symbol-elf.c`: function and label symbols in executable sections;
//! one symbol per address (sized over size-less, strong over weak, global
//! over local, fewer leading underscores, then the longer name); a symbol
//! without a size reaches the next symbol (here: not past its section).
//! `.cold` parts keep their own symbols (`func.cold`), as perf shows them.
//!
//! Code that no symbol covers is grouped by the unwind table's function
//! ([`crate::unwind`]); code that neither covers (hand-written assembly
//! without CFI, as in libjpeg-turbo's SIMD kernels) is split at the
//! frame-pointer prologues that start functions there (see
//! [`crate::code_scan`]).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use object::elf;
use object::read::elf::{ElfFile64, SectionHeader, Sym};
use object::read::ReadCache;
use object::{Endianness, Object, ObjectSection, ObjectSegment, SectionIndex};

use crate::code_scan::gap_function_starts;
use crate::debug_link::debug_file;
use crate::plt::plt_symbols;
use crate::unwind;

/// The most bytes of one uncovered gap scanned for prologues.
const MAX_GAP_SCAN: u64 = 16 << 20;

/// A loadable segment: its file range and address.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    size: u64,
    address: u64,
}

/// One function symbol: [start, end) and its name in the arena.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: u64,
    end: u64,
    name_at: u32,
    name_len: u32,
}

/// How an address was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found<'a> {
    /// A symbol names it; `start` is the symbol's file offset.
    Named { name: &'a str, start: u64 },
    /// An unwind-table function holds it, starting at file offset `start`.
    Unwind { start: u64 },
    /// Code that neither covers: the guessed function start.
    Gap { start: u64 },
    /// Not in code.
    Nothing,
}

/// The symbols, unwind ranges and uncovered code of one ELF file.
#[derive(Debug, Default)]
pub(crate) struct ModuleSymbols {
    segments: Vec<Segment>,
    /// Sorted by start, one per start.
    symbols: Vec<Symbol>,
    names: String,
    /// Unwind-table function ranges, sorted.
    fdes: Vec<(u64, u64)>,
    /// Executable code no symbol or FDE covers, sorted.
    gaps: Vec<(u64, u64)>,
    /// Function starts guessed inside `gaps`, sorted.
    gap_starts: Vec<u64>,
}

/// A symbol as read, before duplicates are resolved.
struct Candidate<'a> {
    start: u64,
    size: u64,
    /// End of its section: where a size-less symbol stops at the latest.
    limit: u64,
    weak: bool,
    global: bool,
    name: &'a str,
}

impl Candidate<'_> {
    /// perf's `choose_best_symbol` as an ordering key (greater is better);
    /// the name itself breaks the last ties so the choice is stable.
    fn rank(&self) -> (bool, bool, bool, std::cmp::Reverse<usize>, usize) {
        let underscores = self.name.bytes().take_while(|&b| b == b'_').count();
        (
            self.size > 0,
            !self.weak,
            self.global,
            std::cmp::Reverse(underscores),
            self.name.len(),
        )
    }
}

/// The executable sections of `obj` by index: (start, end).
fn executable_sections<'data, O: Object<'data>>(obj: &O) -> HashMap<SectionIndex, (u64, u64)> {
    obj.sections()
        .filter(|s| match s.flags() {
            object::SectionFlags::Elf { sh_flags, .. } => {
                sh_flags.0 & object::elf::SHF_EXECINSTR.0 != 0
            }
            _ => s.kind() == object::SectionKind::Text,
        })
        .map(|s| {
            (
                s.index(),
                (s.address(), s.address().saturating_add(s.size())),
            )
        })
        .collect()
}

/// An ELF64 file read through a cache of the parts read so far.
type Elf64<'data> = ElfFile64<'data, Endianness, &'data ReadCache<File>>;

/// Function and label symbols in executable sections of one of `elf`'s
/// tables (`.dynsym` or `.symtab`). The string table is read whole, once:
/// reading each name on its own costs one read per symbol (hundreds of
/// thousands in libtorch).
fn candidates<'data>(elf: &Elf64<'data>, dynamic: bool, out: &mut Vec<Candidate<'data>>) {
    let endian = elf.endian();
    let table = if dynamic {
        elf.elf_dynamic_symbol_table()
    } else {
        elf.elf_symbol_table()
    };
    if table.is_empty() {
        return;
    }
    let Ok(strings) = elf
        .elf_section_table()
        .section(table.string_section())
        .and_then(|s| s.data(endian, elf.data()))
    else {
        return;
    };
    let sections = executable_sections(elf);
    for sym in table.iter() {
        let kind = sym.st_type();
        if !matches!(kind, elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_NOTYPE) {
            continue;
        }
        let Some(index) = sym.st_shndx(endian).index() else {
            continue;
        };
        let Some(&(_, limit)) = sections.get(&SectionIndex(usize::from(index))) else {
            continue;
        };
        let Some(rest) = usize::try_from(sym.st_name(endian))
            .ok()
            .and_then(|at| strings.get(at..))
        else {
            continue;
        };
        let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let Ok(name) = std::str::from_utf8(&rest[..len]) else {
            continue;
        };
        // `$x`/`$d`: ARM mapping symbols, not functions.
        if name.is_empty() || name.starts_with('$') {
            continue;
        }
        let bind = sym.st_bind();
        out.push(Candidate {
            start: sym.st_value(endian),
            size: sym.st_size(endian),
            limit,
            weak: bind == elf::STB_WEAK,
            global: bind != elf::STB_LOCAL,
            name,
        });
    }
}

impl ModuleSymbols {
    /// Reads the ELF file at `path` (and its debug file, where it has no
    /// `.symtab`).
    pub(crate) fn load(path: &Path) -> Result<ModuleSymbols, String> {
        let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
        let file = File::open(path).map_err(|e| fail(&e))?;
        let reader = file.try_clone().map_err(|e| fail(&e))?;
        let cache = ReadCache::new(file);
        // 64-bit ELF only: lotus profiles x86-64 processes.
        let obj = Elf64::parse(&cache).map_err(|e| fail(&e))?;
        let mut out = ModuleSymbols {
            segments: obj
                .segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    Segment {
                        offset,
                        size,
                        address: s.address(),
                    }
                })
                .collect(),
            ..ModuleSymbols::default()
        };

        let mut found = Vec::new();
        candidates(&obj, true, &mut found);
        let debug_cache;
        let debug_obj;
        if !obj.elf_symbol_table().is_empty() {
            candidates(&obj, false, &mut found);
        } else if let Some(debug) = debug_file(&obj, path).and_then(|p| File::open(p).ok()) {
            debug_cache = ReadCache::new(debug);
            debug_obj = Elf64::parse(&debug_cache).ok();
            if let Some(d) = &debug_obj {
                candidates(d, false, &mut found);
            }
        }
        let plt = plt_symbols(&obj);
        let sections = executable_sections(&obj);
        for (start, size, name) in &plt {
            let limit = sections
                .values()
                .find(|&&(s, e)| *start >= s && *start < e)
                .map_or(start + size, |&(_, e)| e);
            found.push(Candidate {
                start: *start,
                size: *size,
                limit,
                weak: false,
                global: true,
                name,
            });
        }
        out.take_symbols(found);
        // Unwind tables are a fallback: a malformed one leaves none.
        out.fdes = unwind::function_ranges(&obj).unwrap_or_default();
        let x86_64 = obj.architecture() == object::Architecture::X86_64;
        for section in obj.sections() {
            let Some(&(start, end)) = sections.get(&section.index()) else {
                continue;
            };
            let Some((file_at, _)) = section.file_range() else {
                continue;
            };
            for (gap_start, gap_end) in out.uncovered(start, end) {
                out.gaps.push((gap_start, gap_end));
                let len = (gap_end - gap_start).min(MAX_GAP_SCAN);
                let mut code = vec![0; usize::try_from(len).unwrap_or(0)];
                // Padding between functions: too short to hold one.
                if len < 16
                    || reader
                        .read_exact_at(&mut code, file_at + (gap_start - start))
                        .is_err()
                {
                    out.gap_starts.push(gap_start);
                    continue;
                }
                gap_function_starts(gap_start, &code, x86_64, &mut out.gap_starts);
            }
        }
        out.gaps.sort_unstable();
        out.gap_starts.sort_unstable();
        Ok(out)
    }

    /// Keeps one symbol per start and gives size-less ones their end.
    fn take_symbols(&mut self, found: Vec<Candidate<'_>>) {
        // Ranks computed once: hundreds of thousands of symbols in libtorch.
        let mut ranked: Vec<_> = found.into_iter().map(|c| (c.rank(), c)).collect();
        ranked.sort_unstable_by(|(ra, a), (rb, b)| {
            a.start
                .cmp(&b.start)
                .then_with(|| rb.cmp(ra))
                .then_with(|| a.name.cmp(b.name))
        });
        let mut found: Vec<Candidate<'_>> = ranked.into_iter().map(|(_, c)| c).collect();
        found.dedup_by_key(|c| c.start);
        for (i, c) in found.iter().enumerate() {
            let end = if c.size > 0 {
                c.start.saturating_add(c.size)
            } else {
                let next = found.get(i + 1).map_or(u64::MAX, |n| n.start);
                next.min(c.limit).max(c.start)
            };
            let (Ok(name_at), Ok(name_len)) =
                (u32::try_from(self.names.len()), u32::try_from(c.name.len()))
            else {
                break;
            };
            self.names.push_str(c.name);
            self.symbols.push(Symbol {
                start: c.start,
                end,
                name_at,
                name_len,
            });
        }
    }

    /// The parts of [start, end) that no symbol or FDE covers.
    fn uncovered(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut covered: Vec<(u64, u64)> = self
            .symbols
            .iter()
            .map(|s| (s.start, s.end))
            .chain(self.fdes.iter().copied())
            .filter(|&(s, e)| e > start && s < end)
            .collect();
        covered.sort_unstable();
        let mut gaps = Vec::new();
        let mut at = start;
        for (s, e) in covered {
            if s > at {
                gaps.push((at, s));
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps
    }

    fn name(&self, s: &Symbol) -> &str {
        let at = s.name_at as usize;
        self.names.get(at..at + s.name_len as usize).unwrap_or("")
    }

    /// The address of file offset `offset`, and back.
    fn address_of(&self, offset: u64) -> Option<(u64, &Segment)> {
        let seg = self
            .segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.size)?;
        Some((seg.address.checked_add(offset - seg.offset)?, seg))
    }

    /// Resolves file offset `offset`.
    pub(crate) fn lookup(&self, offset: u64) -> Found<'_> {
        let Some((address, _)) = self.address_of(offset) else {
            return Found::Nothing;
        };
        let start_offset = |start: u64| offset - (address - start);
        // The nearest symbol starting at or before the address; an
        // enclosing one a few symbols back (one nested in another).
        let i = self.symbols.partition_point(|s| s.start <= address);
        for s in self.symbols[..i].iter().rev().take(8) {
            if address < s.end {
                return Found::Named {
                    name: self.name(s),
                    start: start_offset(s.start),
                };
            }
        }
        if let Some((start, _)) = unwind::containing(&self.fdes, address) {
            return Found::Unwind {
                start: start_offset(start),
            };
        }
        if unwind::containing(&self.gaps, address).is_some() {
            let i = self.gap_starts.partition_point(|&s| s <= address);
            if let Some(&start) = i.checked_sub(1).and_then(|i| self.gap_starts.get(i)) {
                return Found::Gap {
                    start: start_offset(start),
                };
            }
        }
        Found::Nothing
    }

    /// How many symbols were kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.symbols.len()
    }
}

/// What identifies one version of a file: replaced or rebuilt libraries
/// are read again.
type FileVersion = (u64, u64, u64, i64, i64);

/// Symbol tables read so far in this process, by path.
static LOADED: Mutex<BTreeMap<PathBuf, (FileVersion, Arc<ModuleSymbols>)>> =
    Mutex::new(BTreeMap::new());

/// The symbols of the file at `path`, read once per version of the file
/// in this process; `None` when it cannot be read as ELF.
pub(crate) fn module_symbols(path: &Path) -> Option<Arc<ModuleSymbols>> {
    let meta = std::fs::metadata(path).ok()?;
    let version = (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
    );
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((v, symbols)) = loaded.get(path) {
        if *v == version {
            return Some(Arc::clone(symbols));
        }
    }
    // Read under the lock: two reports symbolizing the same library at once
    // read it once.
    let symbols = Arc::new(ModuleSymbols::load(path).ok()?);
    loaded.insert(path.to_path_buf(), (version, Arc::clone(&symbols)));
    Some(symbols)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(name: &str, start: u64, size: u64, weak: bool, global: bool) -> Candidate<'_> {
        Candidate {
            start,
            size,
            limit: 0x1000,
            weak,
            global,
            name,
        }
    }

    #[test]
    fn one_symbol_per_address_as_perf_chooses() {
        let mut m = ModuleSymbols {
            segments: vec![Segment {
                offset: 0,
                size: 0x2000,
                address: 0,
            }],
            ..ModuleSymbols::default()
        };
        m.take_symbols(vec![
            candidate("__memcpy_alias", 0x100, 0x40, false, true),
            candidate("memcpy", 0x100, 0x40, false, true),
            candidate("memcpy_weak_but_long", 0x100, 0x40, true, true),
            candidate("local_fn", 0x200, 0x10, false, false),
            candidate("unsized", 0x300, 0, false, true),
            candidate("next", 0x380, 0x10, false, true),
            candidate("last_unsized", 0x400, 0, false, true),
        ]);
        assert_eq!(m.len(), 5);
        assert_eq!(
            m.lookup(0x120),
            Found::Named {
                name: "memcpy",
                start: 0x100
            }
        );
        assert_eq!(
            m.lookup(0x205),
            Found::Named {
                name: "local_fn",
                start: 0x200
            }
        );
        // Between sized symbols: nothing names it.
        assert_eq!(m.lookup(0x250), Found::Nothing);
        // A size-less symbol reaches the next one, or its section's end.
        assert_eq!(
            m.lookup(0x37f),
            Found::Named {
                name: "unsized",
                start: 0x300
            }
        );
        assert_eq!(
            m.lookup(0xfff),
            Found::Named {
                name: "last_unsized",
                start: 0x400
            }
        );
        assert_eq!(m.lookup(0x1000), Found::Nothing);
    }

    #[test]
    fn own_binary_names_its_functions_once_per_version() {
        let exe = std::env::current_exe().expect("current exe");
        let a = module_symbols(&exe).expect("own binary");
        let b = module_symbols(&exe).expect("own binary");
        assert!(Arc::ptr_eq(&a, &b), "read twice");
        assert!(a.len() > 100, "{} symbols", a.len());
    }
}
