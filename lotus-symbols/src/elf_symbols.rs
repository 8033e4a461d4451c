//! The function symbols of one ELF file, read once per invocation.
//!
//! Names come from the symbol tables as perf takes them: `.symtab` (or,
//! where the file was stripped of it, the `.symtab` of its debug file,
//! found by build ID or debug link), `.dynsym`, and `name@plt` for PLT
//! stubs; DWARF is never consulted for names. (blazesym, used before,
//! was left at its default, which consults DWARF debug information where
//! a file has it (`debug_syms`); read that way it named neither the
//! `.cold` parts that GCC splits off hot functions nor, in some libraries,
//! the hot parts. It can be told to read the symbol tables only; it is not
//! used here because it synthesizes no PLT names and does not choose
//! among symbols at one address as perf does, and lotus's names must be
//! perf's.) The rules follow perf's
//! `symbol-elf.c`: function and label symbols in executable sections;
//! one symbol per address (sized over size-less, strong over weak, global
//! over local, fewer leading underscores, then the longer name); a symbol
//! without a size reaches the next symbol (here: not past its section).
//! `.cold` parts keep their own symbols (`func.cold`), as perf shows them.
//! PLT stubs, which no symbol covers, are `name@plt`.
//!
//! Only the tables' fixed-size entries are read up front; a name is read
//! when a lookup lands on its symbol (or when perf's choice among symbols
//! sharing an address needs it), and stubs, unwind ranges and uncovered
//! code only when a lookup falls outside every symbol. libtorch's tables
//! took 0.6 s to read whole; now 25 ms, and a job sampled in a few
//! thousand of its functions reads a few thousand names.
//!
//! Code that no symbol covers is grouped by the unwind table's function
//! ([`crate::unwind`]); code that neither covers (hand-written assembly
//! without CFI, as in libjpeg-turbo's SIMD kernels) is split at the
//! frame-pointer prologues that start functions there (see
//! [`crate::code_scan`]).

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use object::elf;
use object::read::elf::{ElfFile64, SectionHeader, Sym};
use object::read::ReadCache;
use object::{Endianness, Object, ObjectSection, ObjectSegment};

use crate::cache::out_of_descriptors;
use crate::code_scan::gap_function_starts;
use crate::debug_link::debug_file;
use crate::plt::{slot_symbols, stub_at, PltLayout, SlotSymbols};
use crate::stack_unwind::UnwindSections;
use crate::unwind;
use crate::unwind::{EhLayout, EhTables};
use crate::Module;

mod checks;
use checks::*;

/// The most bytes of one uncovered gap scanned for prologues.
const MAX_GAP_SCAN: u64 = 16 << 20;

/// The longest symbol name read (C++ names of a few KiB are common).
const MAX_NAME: u64 = 1 << 20;

/// A loadable segment: its file range and address.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    size: u64,
    address: u64,
}

/// One function or label symbol as the table has it. Names are not read
/// when the table is: a sampled program hits a few thousand of libtorch's
/// 390,000 functions, and reading, checking and sorting every name was
/// 90% of the 600 ms it took to read libtorch's tables (a sampled trace
/// of a torch job paid that in every run). A name is read when a lookup
/// lands on its symbol, or when several symbols share an address and
/// perf's choice among them needs the names.
#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u64,
    size: u64,
    /// Offset of the name in its source's string table.
    name_at: u32,
    /// Index into [`ModuleSymbols::sources`].
    source: u8,
    weak: bool,
    global: bool,
}

/// Where names are read from.
#[derive(Debug)]
enum NameSource {
    /// A string table in a file, read on demand: (file, offset, size).
    File(Arc<File>, u64, u64),
    /// NUL-terminated names in memory (tests).
    #[cfg(test)]
    Memory(Vec<u8>),
}

impl NameSource {
    /// The name at `at`, if it is valid UTF-8 and inside the table.
    fn name(&self, at: u32) -> Option<String> {
        let at = u64::from(at);
        match self {
            #[cfg(test)]
            NameSource::Memory(bytes) => {
                let rest = bytes.get(usize::try_from(at).ok()?..)?;
                let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                std::str::from_utf8(&rest[..len]).ok().map(str::to_string)
            }
            NameSource::File(file, offset, size) => {
                let mut out = Vec::new();
                let mut chunk = [0u8; 256];
                let mut pos = at;
                while pos < *size && pos - at < MAX_NAME {
                    let want = usize::try_from((*size - pos).min(chunk.len() as u64)).ok()?;
                    let n = file.read_at(&mut chunk[..want], offset + pos).ok()?;
                    if n == 0 {
                        return None;
                    }
                    if let Some(nul) = chunk[..n].iter().position(|&b| b == 0) {
                        out.extend_from_slice(&chunk[..nul]);
                        return String::from_utf8(out).ok();
                    }
                    out.extend_from_slice(&chunk[..n]);
                    pos += n as u64;
                }
                None
            }
        }
    }
}

/// How an address was resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A symbol names it.
    Named {
        /// The symbol's name, as the table has it (mangled).
        name: Arc<str>,
        /// The symbol's file offset.
        start: u64,
    },
    /// An unwind-table function holds it.
    Unwind {
        /// The function's file offset.
        start: u64,
    },
    /// Code that neither covers.
    Gap {
        /// The guessed function start (a frame-pointer prologue).
        start: u64,
    },
    /// Not in code.
    Nothing,
}

/// The symbol chosen among those starting at one address.
#[derive(Debug, Clone)]
struct Chosen {
    end: u64,
    name: Arc<str>,
}

/// A named PLT stub: (start, end, `name@plt`).
type Stub = (u64, u64, Arc<str>);

/// Uncovered code ranges and the function starts guessed inside them.
type Gaps = (Vec<(u64, u64)>, Vec<u64>);

/// Code that symbols do not cover, read at the first lookup that needs
/// each part (never, for most libraries with symbols): reading them all
/// took libtorch 0.5 s.
#[derive(Debug, Default)]
struct Fallback {
    /// GOT slot -> dynamic symbol, read at the first lookup in a PLT.
    plt_slots: OnceLock<SlotSymbols>,
    /// `name@plt` stubs looked up so far, by address: (start, end, name),
    /// `None` where no stub there is named.
    plt_found: Mutex<HashMap<u64, Option<Stub>>>,
    /// The unwind tables' bytes, read at the first lookup that needs them
    /// (`None`: not kept, every FDE is walked instead).
    eh_tables: OnceLock<Option<EhTables>>,
    /// Unwind-table function ranges, sorted.
    fdes: OnceLock<Vec<(u64, u64)>>,
    /// Executable code no symbol, stub or FDE covers, and the function
    /// starts guessed inside it; both sorted.
    gaps: OnceLock<Gaps>,
}

/// The symbols, unwind ranges and uncovered code of one ELF file.
#[derive(Debug, Default)]
pub struct ModuleSymbols {
    segments: Vec<Segment>,
    /// Executable sections: (start, end, file offset), sorted.
    sections: Vec<(u64, u64, u64)>,
    /// Where the stubs (the PLT sections: only lookups there read them),
    /// relocations and dynamic symbols are in the file.
    plt_layout: PltLayout,
    /// Where the unwind tables are in the file.
    eh_layout: Option<EhLayout>,
    /// Sorted by start; symbols sharing a start are adjacent.
    entries: Vec<Entry>,
    sources: Vec<NameSource>,
    /// The symbol chosen per start, once asked for.
    chosen: Mutex<HashMap<u64, Option<Chosen>>>,
    /// The file, for the fallback (one descriptor per module, shared with
    /// its name sources: see [`module_symbols`]).
    file: Option<Arc<File>>,
    /// x86-64 code (where the prologue scan of uncovered code applies).
    x86_64: bool,
    fallback: Fallback,
    /// The unwind tables as the stack unwinder reads them, once asked for.
    unwind: OnceLock<Option<Arc<UnwindSections>>>,
}

/// An ELF64 file read through a cache of the parts read so far.
type Elf64<'data, 'f> = ElfFile64<'data, Endianness, &'data ReadCache<At<'f>>>;

/// A file read with `pread` from a position of its own, for
/// [`ReadCache`]: the descriptor is shared (one per module, see
/// [`module_symbols`]), so its file offset is not used.
#[derive(Debug)]
struct At<'f> {
    file: &'f File,
    pos: u64,
}

impl<'f> At<'f> {
    fn new(file: &'f File) -> Self {
        At { file, pos: 0 }
    }
}

impl io::Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl io::Seek for At<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        let base = match to {
            io::SeekFrom::Start(at) => {
                self.pos = at;
                return Ok(at);
            }
            io::SeekFrom::End(d) => (self.file.metadata()?.len(), d),
            io::SeekFrom::Current(d) => (self.pos, d),
        };
        self.pos = base
            .0
            .checked_add_signed(base.1)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// The executable sections of `obj`: (start, end, file offset) by section
/// index, `None` for the others.
fn executable_sections<'data, O: Object<'data>>(obj: &O) -> Vec<Option<(u64, u64, u64)>> {
    let mut out = Vec::new();
    for s in obj.sections() {
        let exec = match s.flags() {
            object::SectionFlags::Elf { sh_flags, .. } => {
                sh_flags.0 & object::elf::SHF_EXECINSTR.0 != 0
            }
            _ => s.kind() == object::SectionKind::Text,
        };
        let i = s.index().0;
        if out.len() <= i {
            out.resize(i + 1, None);
        }
        if exec {
            let file_at = s.file_range().map_or(u64::MAX, |(at, _)| at);
            out[i] = Some((s.address(), s.address().saturating_add(s.size()), file_at));
        }
    }
    out
}

/// Function and label symbols in executable sections of one of `elf`'s
/// tables (`.dynsym` or `.symtab`), names left in the file (see
/// [`Entry`]); their string table becomes a [`NameSource`] in `sources`.
fn read_table(
    elf: &Elf64<'_, '_>,
    file: &Arc<File>,
    dynamic: bool,
    sources: &mut Vec<NameSource>,
    out: &mut Vec<Entry>,
) {
    let endian = elf.endian();
    let table = if dynamic {
        elf.elf_dynamic_symbol_table()
    } else {
        elf.elf_symbol_table()
    };
    if table.is_empty() {
        return;
    }
    let Ok(strings) = elf.elf_section_table().section(table.string_section()) else {
        return;
    };
    if strings.sh_type(endian) == elf::SHT_NOBITS {
        return;
    }
    let Ok(source) = u8::try_from(sources.len()) else {
        return;
    };
    sources.push(NameSource::File(
        Arc::clone(file),
        strings.sh_offset(endian),
        strings.sh_size(endian),
    ));
    let sections = executable_sections(elf);
    for sym in table.iter() {
        let kind = sym.st_type();
        if !matches!(kind, elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_NOTYPE) {
            continue;
        }
        let Some(index) = sym.st_shndx(endian).index() else {
            continue;
        };
        if !matches!(sections.get(usize::from(index)), Some(Some(_))) {
            continue;
        }
        let name_at = sym.st_name(endian);
        if name_at == 0 {
            continue;
        }
        let bind = sym.st_bind();
        out.push(Entry {
            start: sym.st_value(endian),
            size: sym.st_size(endian),
            name_at,
            source,
            weak: bind == elf::STB_WEAK,
            global: bind != elf::STB_LOCAL,
        });
    }
}

/// perf's `choose_best_symbol` as an ordering key (greater is better); the
/// name itself breaks the last ties so the choice is stable.
fn rank(e: &Entry, name: &str) -> (bool, bool, bool, std::cmp::Reverse<usize>, usize) {
    let underscores = name.bytes().take_while(|&b| b == b'_').count();
    (
        e.size > 0,
        !e.weak,
        e.global,
        std::cmp::Reverse(underscores),
        name.len(),
    )
}

impl ModuleSymbols {
    /// Reads the symbol tables of the ELF file at `path` (and of its debug
    /// file, where it has no `.symtab`), without their names.
    #[cfg(test)]
    pub fn load(path: &Path) -> Result<ModuleSymbols, String> {
        let (file, meta) = open_regular(path).map_err(|e| format!("{}: {e}", path.display()))?;
        ModuleSymbols::load_from(Arc::new(file), &meta, path)
    }

    /// Reads the symbol tables of `file` (opened by lotus-sys's checked open, its
    /// metadata `meta`; mapped from `path`) and of its debug file, where it
    /// has no `.symtab`, without their names. The tables are checked
    /// against the file's real size first (`check_tables`).
    pub fn load_from(
        file: Arc<File>,
        meta: &Metadata,
        path: &Path,
    ) -> Result<ModuleSymbols, String> {
        check_tables(&file, meta.len())?;
        let cache = ReadCache::new(At::new(&file));
        // 64-bit ELF only: lotus profiles x86-64 processes.
        let obj = Elf64::parse(&cache).map_err(|e| format!("not a 64-bit ELF file: {e}"))?;
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
            sections: executable_sections(&obj).into_iter().flatten().collect(),
            plt_layout: PltLayout::of(&obj),
            eh_layout: EhLayout::of(&obj),
            ..ModuleSymbols::default()
        };
        out.sections.sort_unstable();

        let mut entries = Vec::new();
        read_table(&obj, &file, true, &mut out.sources, &mut entries);
        if !obj.elf_symbol_table().is_empty() {
            read_table(&obj, &file, false, &mut out.sources, &mut entries);
        } else if let Some((debug, _)) = debug_file(&obj, path)
            .and_then(|p| open_trusted(&p))
            .filter(|(debug, meta)| check_tables(debug, meta.len()).is_ok())
        {
            let debug = Arc::new(debug);
            let debug_cache = ReadCache::new(At::new(&debug));
            if let Ok(d) = Elf64::parse(&debug_cache) {
                read_table(&d, &debug, false, &mut out.sources, &mut entries);
            }
        }
        entries.sort_unstable_by_key(|e| e.start);
        out.entries = entries;
        out.x86_64 = obj.architecture() == object::Architecture::X86_64;
        out.file = Some(file);
        Ok(out)
    }

    /// The entries sharing `start`, where `end` (exclusive) is the index
    /// after the last of them.
    fn group(&self, end: usize) -> Range<usize> {
        let start = self.entries[end - 1].start;
        self.entries[..end].partition_point(|e| e.start < start)..end
    }

    /// The end of the executable section holding `address`.
    fn section_end(&self, address: u64) -> Option<u64> {
        let i = self.sections.partition_point(|&(s, _, _)| s <= address);
        let &(_, end, _) = self.sections.get(i.checked_sub(1)?)?;
        (address < end).then_some(end)
    }

    /// The symbol perf shows for the entries in `group`, one start, and
    /// where it ends (a size-less symbol reaches the next start, not past
    /// its section).
    fn choose(&self, group: Range<usize>) -> Option<Chosen> {
        let start = self.entries[group.start].start;
        let mut cache = self.chosen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(&start) {
            return c.clone();
        }
        let best = self.entries[group.clone()]
            .iter()
            .filter_map(|e| {
                let name = self.sources.get(usize::from(e.source))?.name(e.name_at)?;
                // `$x`/`$d`: ARM mapping symbols, not functions.
                (!name.is_empty() && !name.starts_with('$')).then_some((e, name))
            })
            .max_by(|(a, na), (b, nb)| {
                rank(a, na)
                    .cmp(&rank(b, nb))
                    .then_with(|| nb.as_str().cmp(na.as_str()))
            });
        let chosen = best.map(|(e, name)| {
            let end = if e.size > 0 {
                e.start.saturating_add(e.size)
            } else {
                let next = self.entries.get(group.end).map_or(u64::MAX, |n| n.start);
                let limit = self.section_end(e.start).unwrap_or(next);
                next.min(limit).max(e.start)
            };
            Chosen {
                end,
                name: Arc::from(name),
            }
        });
        cache.insert(start, chosen.clone());
        chosen
    }

    /// The extent of the entries sharing one start, without their names
    /// (for telling covered code from uncovered).
    fn extent(&self, group: Range<usize>) -> (u64, u64) {
        let start = self.entries[group.start].start;
        let sized = self.entries[group.clone()].iter().map(|e| e.size).max();
        let end = match sized {
            Some(size) if size > 0 => start.saturating_add(size),
            _ => {
                let next = self.entries.get(group.end).map_or(u64::MAX, |n| n.start);
                next.min(self.section_end(start).unwrap_or(next))
            }
        };
        (start, end.max(start))
    }

    /// The file parsed again, for the fallback's parts.
    fn reparse<T: Default>(&self, read: impl FnOnce(&Elf64<'_, '_>) -> T) -> T {
        let Some(file) = self.file.as_deref() else {
            return T::default();
        };
        let cache = ReadCache::new(At::new(file));
        match Elf64::parse(&cache) {
            Ok(obj) => read(&obj),
            Err(_) => T::default(),
        }
    }

    /// The `name@plt` stub holding `address`: that stub's bytes read and
    /// its GOT slot's symbol named through the file kept open (see
    /// [`stub_at`]), once per address. Synthesizing every stub of
    /// libtorch (30,000, from 300,000 relocations) took 80 ms; this reads
    /// the relocations once (7 MB, a few ms) and a few bytes per stub.
    fn plt_stub(&self, address: u64) -> Option<Stub> {
        let file = self.file.as_ref()?;
        let mut found = self
            .fallback
            .plt_found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        found
            .entry(address)
            .or_insert_with(|| {
                let slots = self
                    .fallback
                    .plt_slots
                    .get_or_init(|| slot_symbols(&self.plt_layout, file));
                stub_at(&self.plt_layout, file, slots, address)
                    .map(|(start, size, name)| (start, start.saturating_add(size), Arc::from(name)))
            })
            .clone()
    }

    /// The unwind-table function holding `address`: through the binary
    /// search table of `.eh_frame_hdr` (one FDE parsed), else from every
    /// FDE, walked once.
    fn unwind_function(&self, address: u64) -> Option<(u64, u64)> {
        let tables = self.fallback.eh_tables.get_or_init(|| {
            let file = self.file.as_ref()?;
            self.eh_layout.as_ref()?.read(file)
        });
        if let Some(found) = tables.as_ref().and_then(|t| t.function_at(address)) {
            return Some(found);
        }
        unwind::containing(self.fdes(), address)
    }

    fn fdes(&self) -> &[(u64, u64)] {
        self.fallback.fdes.get_or_init(|| {
            // Unwind tables are a fallback: a malformed one leaves none.
            self.reparse(|obj| unwind::function_ranges(obj).unwrap_or_default())
        })
    }

    fn gaps(&self) -> &Gaps {
        self.fallback.gaps.get_or_init(|| {
            // Without the file (a module built in memory) there is no
            // code to scan, and no gap is claimed.
            let Some(file) = self.file.as_ref() else {
                return Gaps::default();
            };
            let mut covered: Vec<(u64, u64)> = Vec::with_capacity(self.entries.len());
            let mut end = 0;
            while end < self.entries.len() {
                let next = self.entries[end..]
                    .iter()
                    .position(|e| e.start != self.entries[end].start)
                    .map_or(self.entries.len(), |n| end + n);
                covered.push(self.extent(end..next));
                end = next;
            }
            // Stubs fill the PLT sections: code there is never a gap.
            covered.extend(
                self.plt_layout
                    .stubs
                    .iter()
                    .map(|s| (s.address, s.address.saturating_add(s.size))),
            );
            covered.extend(self.fdes().iter().copied());
            let covered = merged(covered);
            // The code is read through the file kept open since the load:
            // no second parse of the ELF file for it.
            let (mut gaps, mut starts) = (Vec::new(), Vec::new());
            for &(start, end, file_at) in &self.sections {
                for (gap_start, gap_end) in uncovered(&covered, start, end) {
                    gaps.push((gap_start, gap_end));
                    let len = (gap_end - gap_start).min(MAX_GAP_SCAN);
                    // Padding between functions: too short to hold one.
                    let code = (file_at != u64::MAX && len >= 16)
                        .then(|| {
                            let mut code = vec![0; usize::try_from(len).ok()?];
                            file.read_exact_at(&mut code, file_at + (gap_start - start))
                                .ok()?;
                            Some(code)
                        })
                        .flatten();
                    match code {
                        Some(code) => {
                            gap_function_starts(gap_start, &code, self.x86_64, &mut starts)
                        }
                        None => starts.push(gap_start),
                    }
                }
            }
            gaps.sort_unstable();
            starts.sort_unstable();
            (gaps, starts)
        })
    }

    /// The unwind tables (`.eh_frame` and `.eh_frame_hdr`) for unwinding
    /// stacks through this file's code, read once; `None` where the file
    /// has none in its file, they cannot be read, or it is not x86-64
    /// code (the one architecture the unwinder is built for).
    pub fn unwind_sections(&self) -> Option<Arc<UnwindSections>> {
        self.unwind
            .get_or_init(|| {
                if !self.x86_64 {
                    return None;
                }
                let file = self.file.as_ref()?;
                self.eh_layout.as_ref()?.unwind_sections(file).map(Arc::new)
            })
            .clone()
    }

    /// About the bytes this file's tables hold: its symbols, and its unwind
    /// tables and function ranges read so far (tables shared with another
    /// file's are counted with each).
    pub fn held_bytes(&self) -> u64 {
        let mut n = self.entries.capacity() * std::mem::size_of::<Entry>();
        let unwind = self.unwind.get().and_then(Option::as_ref);
        if let Some(u) = unwind {
            n += u.eh_frame.len() + u.eh_frame_hdr.len();
        }
        if let Some(Some(t)) = self.fallback.eh_tables.get() {
            n += t.bytes();
        }
        if let Some(f) = self.fallback.fdes.get() {
            n += f.len() * 16;
        }
        if let Some((gaps, starts)) = self.fallback.gaps.get() {
            n += gaps.len() * 16 + starts.len() * 8;
        }
        n as u64
    }

    /// How far this file's code was moved when it was mapped (its actual
    /// address minus the address its headers state), for a mapping of
    /// `len` bytes from file offset `pgoff` at `start`: from the first
    /// segment that mapping overlaps most (a mapping starts on a page, so
    /// it may take in the end of the segment before its own). `None`
    /// where it overlaps none.
    pub fn load_bias(&self, start: u64, len: u64, pgoff: u64) -> Option<u64> {
        let end = pgoff.checked_add(len)?;
        let overlap = |s: &Segment| {
            end.min(s.offset.saturating_add(s.size))
                .saturating_sub(pgoff.max(s.offset))
        };
        let seg = self
            .segments
            .iter()
            .filter(|s| overlap(s) > 0)
            .max_by_key(|s| overlap(s))?;
        // The mapping puts file offset `o` at `start + o - pgoff`, the
        // segment states it at `address + o - offset`.
        Some(
            start
                .wrapping_sub(pgoff)
                .wrapping_add(seg.offset)
                .wrapping_sub(seg.address),
        )
    }

    /// The address of file offset `offset`.
    fn address_of(&self, offset: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.size)?;
        seg.address.checked_add(offset - seg.offset)
    }

    /// Resolves file offset `offset`.
    pub fn lookup(&self, offset: u64) -> Found {
        let Some(address) = self.address_of(offset) else {
            return Found::Nothing;
        };
        let start_offset = |start: u64| offset - (address - start);
        // The nearest symbol starting at or before the address; an
        // enclosing one a few starts back (one nested in another).
        let mut end = self.entries.partition_point(|e| e.start <= address);
        for _ in 0..8 {
            if end == 0 {
                break;
            }
            let group = self.group(end);
            let start = self.entries[group.start].start;
            if let Some(c) = self.choose(group.clone()) {
                if address < c.end {
                    return Found::Named {
                        name: c.name,
                        start: start_offset(start),
                    };
                }
            }
            end = group.start;
        }
        let in_plt = self.plt_layout.stubs.iter().any(|s| s.holds(address));
        if let Some((start, end, name)) = in_plt.then(|| self.plt_stub(address)).flatten() {
            if address < end {
                return Found::Named {
                    name,
                    start: start_offset(start),
                };
            }
        }
        if let Some((start, _)) = self.unwind_function(address) {
            return Found::Unwind {
                start: start_offset(start),
            };
        }
        let (gaps, gap_starts) = self.gaps();
        if unwind::containing(gaps, address).is_some() {
            let i = gap_starts.partition_point(|&s| s <= address);
            if let Some(&start) = i.checked_sub(1).and_then(|i| gap_starts.get(i)) {
                return Found::Gap {
                    start: start_offset(start),
                };
            }
        }
        Found::Nothing
    }

    /// How many distinct symbol starts were read.
    #[cfg(test)]
    pub(crate) fn starts(&self) -> usize {
        let mut starts: Vec<u64> = self.entries.iter().map(|e| e.start).collect();
        starts.dedup();
        starts.len()
    }
}

/// Sorted ranges merged where they overlap or touch.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The parts of [start, end) that no range of `covered` (sorted, disjoint:
/// see [`merged`]) covers.
fn uncovered(covered: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut gaps = Vec::new();
    let mut at = start;
    let first = covered.partition_point(|&(_, e)| e <= start);
    for &(s, e) in &covered[first..] {
        if s >= end {
            break;
        }
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

/// (device, inode) of a file, as `fstat` gives them: what the kernel says
/// a process mapped (the perf MMAP2 record).
pub type FileId = (u64, u64);

/// Opens `path` for reading if it is a regular file: lotus-sys's one
/// checked open ([`lotus_sys::input::open_regular_with_metadata`]: no
/// driver's `open`, no FIFO wait, the same inode checked again).
pub(crate) fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    lotus_sys::input::open_regular_with_metadata(path)
}

/// [`open_regular`], for a file found by its path alone (a separate debug
/// file): lotus-sys's trust rule on the file opened
/// ([`lotus_sys::trust::open_trusted`]).
pub(crate) fn open_trusted(path: &Path) -> Option<(File, Metadata)> {
    lotus_sys::trust::open_trusted(path).ok()
}

/// Filesystems whose `stat` device number is not the one the kernel
/// reports for a mapping (overlayfs stacks on another filesystem's inodes,
/// btrfs gives each subvolume a device of its own): there the inode
/// number alone identifies the file.
fn stat_device_differs(file: &File) -> bool {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
    // SAFETY: an all-zero statfs is a valid buffer for fstatfs to fill.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid buffer.
    let ok = unsafe { libc::fstatfs(std::os::fd::AsRawFd::as_raw_fd(file), &mut fs) } == 0;
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.f_type as i64;
    ok && (kind == OVERLAYFS_SUPER_MAGIC || kind == BTRFS_SUPER_MAGIC)
}

/// Whether `file` (with metadata `meta`) is the file the kernel said was
/// mapped, `id`.
fn is_mapped_file(file: &File, meta: &Metadata, id: FileId) -> bool {
    meta.ino() == id.1 && (meta.dev() == id.0 || stat_device_differs(file))
}

/// Why a module's file could not be opened, in words for a note.
pub(crate) fn open_failure(path: &str, e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) => {
            // SAFETY: an all-zero rlimit is a valid buffer.
            let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
            // SAFETY: a valid buffer.
            let soft = (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0)
                .then_some(lim.rlim_cur);
            match soft {
                Some(n) => {
                    format!("too many open files (`ulimit -n` is {n}): raise it and run again")
                }
                None => "too many open files: raise `ulimit -n` and run again".to_string(),
            }
        }
        Some(libc::ENFILE) => "the system's open-file table is full".to_string(),
        Some(libc::ENOENT) => format!("{path} is gone (deleted or renamed since it was mapped)"),
        Some(libc::EACCES) | Some(libc::EPERM) => format!("{path}: permission denied"),
        _ => format!("{path}: {e}"),
    }
}

/// A mapped file held open since its mapping was seen.
#[derive(Debug, Clone)]
pub struct Pinned(Arc<File>, Metadata);

impl PartialEq for Pinned {
    fn eq(&self, other: &Pinned) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Pinned {}

/// The fewest descriptors this process may open (`ulimit -n`) for a file
/// to be pinned, and the share of them that may be open already: a pin
/// costs a descriptor for as long as the module is known, and at a low
/// limit perf's own descriptors and the symbol tables come first.
const MIN_LIMIT_TO_PIN: u64 = 1024;
const MAX_OPEN_SHARE_TO_PIN: u64 = 2;

/// Opens the file that `pid` mapped at `[start, end)` through
/// `/proc/PID/map_files` (root or the same user), when the mapping is
/// seen, so that the file the process really mapped can be read after
/// the process exited, whatever its path names by then (another user's
/// library swapped for a FIFO or for other code). `None` where that
/// cannot be opened, is not the file the kernel said (`id`), or
/// descriptors are scarce (see `MIN_LIMIT_TO_PIN`).
pub fn pin_mapped(pid: u32, start: u64, end: u64, id: Option<FileId>) -> Option<Pinned> {
    // SAFETY: an all-zero rlimit is a valid buffer.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: a valid buffer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur < MIN_LIMIT_TO_PIN
    {
        return None;
    }
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    if open >= lim.rlim_cur / MAX_OPEN_SHARE_TO_PIN {
        return None;
    }
    let link = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
    let (file, meta) = open_regular(Path::new(&link)).ok()?;
    id.is_none_or(|id| is_mapped_file(&file, &meta, id))
        .then(|| Pinned(Arc::new(file), meta))
}

/// Opens the file `module` maps: while a process that mapped it lives,
/// through `/proc/PID/map_files/START-END` (the very inode it mapped,
/// even if the path now names another file or nothing; root or the same
/// user only); else by its path, which must still be the file the kernel
/// said was mapped (device and inode, where the record gave them).
pub(crate) fn open_module(module: &Module) -> io::Result<(Arc<File>, Metadata)> {
    if let Some(Pinned(file, meta)) = &module.pinned {
        return Ok((Arc::clone(file), meta.clone()));
    }
    for &(pid, start, end) in module.mapped_at.iter().rev() {
        let link = format!("/proc/{pid}/map_files/{start:x}-{end:x}");
        match open_regular(Path::new(&link)) {
            Ok((file, meta)) => {
                if module
                    .file_id
                    .is_none_or(|id| is_mapped_file(&file, &meta, id))
                {
                    return Ok((Arc::new(file), meta));
                }
                // Another file is mapped there now.
            }
            Err(e) if out_of_descriptors(&e) => return Err(e),
            // The process is gone, or this user may not read its map_files.
            Err(_) => {}
        }
    }
    let (file, meta) = open_regular(Path::new(&module.name))?;
    if let Some(id) = module.file_id {
        if !is_mapped_file(&file, &meta, id) {
            return Err(io::Error::other(format!(
                "{} was replaced since it was mapped (the path is now inode {}, \
                 the process mapped inode {})",
                module.name,
                meta.ino(),
                id.1
            )));
        }
    }
    Ok((Arc::new(file), meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of `symbols` (name, start, size, weak, global), names held
    /// in memory, one executable section [0, 0x1000).
    fn module(symbols: &[(&str, u64, u64, bool, bool)]) -> ModuleSymbols {
        let mut names = vec![0u8];
        let mut entries = Vec::new();
        for &(name, start, size, weak, global) in symbols {
            entries.push(Entry {
                start,
                size,
                name_at: u32::try_from(names.len()).expect("small"),
                source: 0,
                weak,
                global,
            });
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        entries.sort_by_key(|e| e.start);
        ModuleSymbols {
            segments: vec![Segment {
                offset: 0,
                size: 0x2000,
                address: 0,
            }],
            sections: vec![(0, 0x1000, 0)],
            entries,
            sources: vec![NameSource::Memory(names)],
            ..ModuleSymbols::default()
        }
    }

    /// A file module at `path`, with no mapping or identity known.
    fn file_module(path: &str) -> Module {
        Module {
            name: path.to_string(),
            is_file: true,
            file_id: None,
            mapped_at: Vec::new(),
            pinned: None,
        }
    }

    fn named(found: Found) -> Option<(String, u64)> {
        match found {
            Found::Named { name, start } => Some((name.to_string(), start)),
            _ => None,
        }
    }

    #[test]
    fn one_symbol_per_address_as_perf_chooses() {
        let m = module(&[
            ("__memcpy_alias", 0x100, 0x40, false, true),
            ("memcpy", 0x100, 0x40, false, true),
            ("memcpy_weak_but_long", 0x100, 0x40, true, true),
            ("local_fn", 0x200, 0x10, false, false),
            ("unsized", 0x300, 0, false, true),
            ("next", 0x380, 0x10, false, true),
            ("last_unsized", 0x400, 0, false, true),
        ]);
        assert_eq!(m.starts(), 5);
        assert_eq!(named(m.lookup(0x120)), Some(("memcpy".into(), 0x100)));
        assert_eq!(named(m.lookup(0x205)), Some(("local_fn".into(), 0x200)));
        // Between sized symbols: nothing names it.
        assert_eq!(m.lookup(0x250), Found::Nothing);
        // A size-less symbol reaches the next one, or its section's end.
        assert_eq!(named(m.lookup(0x37f)), Some(("unsized".into(), 0x300)));
        assert_eq!(named(m.lookup(0xfff)), Some(("last_unsized".into(), 0x400)));
        assert_eq!(m.lookup(0x1000), Found::Nothing);
    }

    #[test]
    fn a_nested_symbol_leaves_its_container_named_around_it() {
        let m = module(&[
            ("outer", 0x100, 0x100, false, true),
            ("inner", 0x140, 0x10, false, true),
        ]);
        assert_eq!(named(m.lookup(0x145)), Some(("inner".into(), 0x140)));
        assert_eq!(named(m.lookup(0x1f0)), Some(("outer".into(), 0x100)));
    }

    #[test]
    fn uncovered_code_is_what_no_merged_range_holds() {
        let covered = merged(vec![(0x20, 0x30), (0x10, 0x18), (0x28, 0x40), (0x60, 0x70)]);
        assert_eq!(covered, vec![(0x10, 0x18), (0x20, 0x40), (0x60, 0x70)]);
        assert_eq!(
            uncovered(&covered, 0x0, 0x80),
            vec![(0x0, 0x10), (0x18, 0x20), (0x40, 0x60), (0x70, 0x80)]
        );
        assert_eq!(uncovered(&covered, 0x25, 0x65), vec![(0x40, 0x60)]);
        assert_eq!(uncovered(&covered, 0x20, 0x40), Vec::<(u64, u64)>::new());
    }

    #[test]
    fn own_binary_names_its_functions_once_per_version() {
        let exe = std::env::current_exe().expect("current exe");
        let exe = file_module(&exe.to_string_lossy());
        let cache = crate::SymbolCache::new();
        let a = cache.module_symbols(&exe).expect("own binary");
        let b = cache.module_symbols(&exe).expect("own binary");
        assert!(Arc::ptr_eq(&a, &b), "read twice");
        assert!(a.starts() > 100, "{} symbols", a.starts());
    }

    /// Every stub that the whole-table synthesis (objdump's way, the one
    /// lotus used before) names is named the same by a lookup of that one
    /// stub, at its first and last byte; no other address of the PLT
    /// sections gets a `@plt` name. On the system's libraries with `.plt`
    /// and `.plt.got` stubs.
    #[test]
    fn a_stub_looked_up_alone_is_named_as_the_whole_table_names_it() {
        let candidates = [
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
            "/lib64/libstdc++.so.6",
            "/lib64/libz.so.1",
        ];
        let mut checked = 0;
        for path in candidates {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            let obj = ElfFile64::<Endianness>::parse(&*bytes).expect("ELF");
            let all = crate::plt::plt_symbols(&obj);
            let symbols = ModuleSymbols::load(Path::new(path)).expect("load");
            let sections: Vec<(u64, u64, u64)> = crate::plt::PLT_SECTIONS
                .iter()
                .filter_map(|n| obj.section_by_name(n))
                .filter_map(|s| Some((s.address(), s.size(), s.file_range()?.0)))
                .collect();
            let offset_of = |address: u64| {
                let &(start, _, at) = sections
                    .iter()
                    .find(|&&(s, z, _)| s <= address && address < s + z)
                    .expect("in a PLT section");
                at + (address - start)
            };
            for (start, size, name) in &all {
                for address in [*start, start + size - 1] {
                    match symbols.lookup(offset_of(address)) {
                        Found::Named {
                            name: got,
                            start: at,
                        } => {
                            assert_eq!(
                                (&*got, at),
                                (name.as_str(), offset_of(*start)),
                                "{path} at {address:#x}"
                            );
                        }
                        other => panic!("{path} at {address:#x}: {other:?}, expected {name}"),
                    }
                }
            }
            for &(section, size, _) in &sections {
                for address in section..section + size {
                    if all.iter().any(|(s, z, _)| *s <= address && address < s + z) {
                        continue;
                    }
                    if let Found::Named { name, .. } = symbols.lookup(offset_of(address)) {
                        assert!(!name.ends_with("@plt"), "{path} at {address:#x}: {name}");
                    }
                }
            }
            checked += all.len();
        }
        assert!(
            checked >= 20,
            "no system library with PLT stubs among {candidates:?}: the test needs libstdc++ or zlib"
        );
    }

    /// A small system library, copied to `dir/name` (a file of the test's
    /// own), or `None` where there is none.
    fn library_copy(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
        let source = [
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
            "/lib64/libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        ]
        .into_iter()
        .find(|p| Path::new(p).is_file())?;
        let to = dir.join(name);
        std::fs::copy(source, &to).expect("copy");
        Some(to)
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
    }

    /// A FIFO (which `open(O_RDONLY)` would wait on for a writer, for
    /// ever) and a folder are refused at once, saying what they are.
    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("lib.so");
        mkfifo(&fifo);
        let e = open_regular(&fifo).expect_err("a FIFO");
        assert!(e.to_string().contains("a fifo (named pipe)"), "{e}");
        let e = open_regular(dir.path()).expect_err("a folder");
        assert!(e.to_string().contains("a folder"), "{e}");
        assert!(open_regular(Path::new("/dev/null")).is_err());
    }

    /// A library mapped here and then replaced by a FIFO at its path is
    /// read through `map_files` (the inode mapped) while the mapping
    /// lives; by path, the FIFO is refused, and a regular file put there
    /// instead is refused as not the file mapped.
    #[test]
    fn a_replaced_library_is_read_from_the_mapping_or_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(lib) = library_copy(dir.path(), "lib.so") else {
            eprintln!("skipped: no system library to copy");
            return;
        };
        let meta = std::fs::metadata(&lib).expect("stat");
        let file = File::open(&lib).expect("open");
        let len = usize::try_from(meta.len()).expect("size");
        // SAFETY: a fresh private read-only mapping of a file we hold.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let start = at as u64;
        let end = (start + meta.len()).next_multiple_of(4096);
        std::fs::remove_file(&lib).expect("rm");
        mkfifo(&lib);
        let mut module = file_module(&lib.to_string_lossy());
        module.file_id = Some((meta.dev(), meta.ino()));
        module.mapped_at = vec![(std::process::id(), start, end)];
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            let symbols = crate::SymbolCache::new()
                .module_symbols(&module)
                .expect("read through map_files");
            assert!(symbols.starts() > 10, "{} symbols", symbols.starts());
            let pinned = pin_mapped(std::process::id(), start, end, module.file_id);
            assert!(pinned.is_some(), "not pinned");
            // Not the file the kernel said was mapped: not pinned.
            assert!(pin_mapped(std::process::id(), start, end, Some((0, 1))).is_none());
        }
        module.mapped_at.clear();
        let e = crate::SymbolCache::new()
            .module_symbols(&module)
            .expect_err("a FIFO by path");
        assert!(e.contains("a fifo (named pipe)"), "{e}");
        std::fs::remove_file(&lib).expect("rm");
        library_copy(dir.path(), "lib.so").expect("copy again");
        let e = crate::SymbolCache::new()
            .module_symbols(&module)
            .expect_err("another file by path");
        assert!(e.contains("was replaced since it was mapped"), "{e}");
        // SAFETY: the mapping made above.
        assert_eq!(unsafe { libc::munmap(at, len) }, 0);
    }

    /// A separate debug file (found by path) is read only when no other
    /// user can have written it.
    #[test]
    fn debug_files_others_can_write_are_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let debug = dir.path().join("lib.debug");
        std::fs::write(&debug, b"\x7fELF").expect("write");
        std::fs::set_permissions(&debug, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(open_trusted(&debug).is_some());
        std::fs::set_permissions(&debug, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        assert!(open_trusted(&debug).is_none(), "world-writable");
        std::fs::set_permissions(&debug, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&debug, Some(65534), Some(65534)).expect("chown");
            assert!(open_trusted(&debug).is_none(), "owned by nobody");
        }
    }

    /// A symbol table whose header claims more than the file holds is
    /// refused before anything is read by it.
    #[test]
    fn a_table_claimed_past_the_end_of_the_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(lib) = library_copy(dir.path(), "lib.so") else {
            eprintln!("skipped: no system library to copy");
            return;
        };
        let bytes = std::fs::read(&lib).expect("read");
        let obj = ElfFile64::<Endianness>::parse(&*bytes).expect("ELF");
        let dynsym = obj.elf_dynamic_symbol_table().section().0 as u64;
        let shoff = u64::from_le_bytes(bytes[0x28..0x30].try_into().expect("8 bytes"));
        // sh_size of .dynsym: 10^8 symbols.
        let at = shoff + 64 * dynsym + 0x20;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&lib)
            .expect("open");
        file.write_all_at(&(100_000_000u64 * 24).to_le_bytes(), at)
            .expect("patch");
        let (file, meta) = open_regular(&lib).expect("open");
        let e = check_tables(&file, meta.len()).expect_err("refused");
        assert!(e.contains("past the end of the file"), "{e}");
        let e = ModuleSymbols::load(&lib).expect_err("refused");
        assert!(e.contains(".dynsym"), "{e}");

        // A note segment (where the build ID is looked for) likewise.
        let lib = library_copy(dir.path(), "notes.so").expect("copy");
        let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().expect("8 bytes"));
        let phnum = u64::from(u16::from_le_bytes([bytes[0x38], bytes[0x39]]));
        let note = (0..phnum)
            .map(|i| phoff + 56 * i)
            .find(|&at| {
                let at = usize::try_from(at).expect("small");
                u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) == elf::PT_NOTE.0
            })
            .expect("a library with a note segment");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&lib)
            .expect("open");
        file.write_all_at(&(1u64 << 40).to_le_bytes(), note + 32)
            .expect("patch");
        let (file, meta) = open_regular(&lib).expect("open");
        let e = check_tables(&file, meta.len()).expect_err("refused");
        assert!(e.contains("a note segment"), "{e}");
    }

    /// A 64-bit x86-64 shared object of one loadable segment whose unwind
    /// tables (`.eh_frame`, here `table_bytes` of `fill`) make up nearly all
    /// of it, as a library of large tables would.
    fn elf_with_tables(path: &Path, table_bytes: usize, fill: u8) {
        let text_at = 0x1000usize;
        let hdr_at = 0x2000usize;
        let frame_at = 0x3000usize;
        let strtab_at = frame_at + table_bytes;
        let names = b"\0.text\0.eh_frame_hdr\0.eh_frame\0.shstrtab\0";
        let sh_at = (strtab_at + names.len() + 7) & !7;
        let len = sh_at + 5 * 64;
        let mut f = vec![0u8; len];
        let put = |f: &mut Vec<u8>, at: usize, bytes: &[u8]| {
            f[at..at + bytes.len()].copy_from_slice(bytes)
        };
        put(&mut f, 0, b"\x7fELF\x02\x01\x01");
        put(&mut f, 16, &3u16.to_le_bytes()); // ET_DYN
        put(&mut f, 18, &62u16.to_le_bytes()); // EM_X86_64
        put(&mut f, 20, &1u32.to_le_bytes());
        put(&mut f, 32, &64u64.to_le_bytes()); // e_phoff
        put(&mut f, 40, &(sh_at as u64).to_le_bytes()); // e_shoff
        put(&mut f, 52, &64u16.to_le_bytes());
        put(&mut f, 54, &56u16.to_le_bytes());
        put(&mut f, 56, &1u16.to_le_bytes());
        put(&mut f, 58, &64u16.to_le_bytes());
        put(&mut f, 60, &5u16.to_le_bytes());
        put(&mut f, 62, &4u16.to_le_bytes()); // .shstrtab
                                              // PT_LOAD, R+X, the whole file at address 0.
        let ph = 64;
        put(&mut f, ph, &1u32.to_le_bytes());
        put(&mut f, ph + 4, &5u32.to_le_bytes());
        put(&mut f, ph + 32, &(strtab_at as u64).to_le_bytes());
        put(&mut f, ph + 40, &(strtab_at as u64).to_le_bytes());
        put(&mut f, ph + 48, &0x1000u64.to_le_bytes());
        f[text_at..text_at + 16].fill(0x90);
        f[hdr_at..hdr_at + 16].fill(fill);
        f[frame_at..frame_at + table_bytes].fill(fill);
        put(&mut f, strtab_at, names);
        // (name, type, flags, address and offset, size)
        let sections: [(u32, u32, u64, usize, usize); 4] = [
            (1, 1, 6, text_at, 16),             // .text: PROGBITS, ALLOC|EXEC
            (7, 1, 2, hdr_at, 16),              // .eh_frame_hdr
            (21, 1, 2, frame_at, table_bytes),  // .eh_frame
            (31, 3, 0, strtab_at, names.len()), // .shstrtab
        ];
        for (i, (name, kind, flags, at, size)) in sections.into_iter().enumerate() {
            let sh = sh_at + (i + 1) * 64;
            put(&mut f, sh, &name.to_le_bytes());
            put(&mut f, sh + 4, &kind.to_le_bytes());
            put(&mut f, sh + 8, &flags.to_le_bytes());
            let address = if kind == 3 { 0 } else { at as u64 };
            put(&mut f, sh + 16, &address.to_le_bytes());
            put(&mut f, sh + 24, &(at as u64).to_le_bytes());
            put(&mut f, sh + 32, &(size as u64).to_le_bytes());
            put(&mut f, sh + 48, &1u64.to_le_bytes());
        }
        std::fs::write(path, f).expect("write the library");
    }

    /// One library whose unwind tables are 16 MiB, mapped under 8 hard
    /// links with 8 modification times (as a job would, touching it
    /// between mappings), its tables read for each and all kept (as 8
    /// processes' unwinders keep them): one copy is held, counted by the
    /// allocator on this thread. Before, each name and version was read
    /// and kept apart (128 MiB here; 2.5 GB for a 60 MiB library under 40
    /// names in the issue).
    #[test]
    fn one_library_under_many_names_and_times_holds_its_tables_once() {
        const TABLES: usize = 16 << 20;
        let dir = tempfile::tempdir().expect("tmp");
        let lib = dir.path().join("libbig.so");
        elf_with_tables(&lib, TABLES, 0x5a);
        let meta = std::fs::metadata(&lib).expect("stat");
        let id = (meta.dev(), meta.ino());
        let cache = crate::SymbolCache::new();
        let before = crate::test_alloc::held();
        let mut kept = Vec::new();
        for i in 0..8u64 {
            let name = dir.path().join(format!("libbig-{i}.so"));
            std::fs::hard_link(&lib, &name).expect("link");
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i);
            std::fs::File::options()
                .write(true)
                .open(&name)
                .and_then(|f| f.set_modified(when))
                .expect("set the modification time");
            let mut module = file_module(&name.to_string_lossy());
            module.file_id = Some(id);
            let symbols = cache.module_symbols(&module).expect("read");
            kept.push(symbols.unwind_sections().expect("its tables"));
        }
        let held = crate::test_alloc::held() - before;
        eprintln!(
            "{} KiB held for 8 names and times of one library",
            held >> 10
        );
        assert!(
            held < 2 * TABLES as i64,
            "{} MiB held for 8 names of one library with 16 MiB of tables",
            held >> 20
        );
        assert!(kept.windows(2).all(|w| w[0].eh_frame.same(&w[1].eh_frame)));
    }

    /// The cache keeps the least recently used tables out once they pass
    /// its budget, and one version of a file: the tables no one holds are
    /// freed (counted by the allocator on this thread).
    #[test]
    fn the_cache_of_tables_keeps_within_its_budget() {
        const TABLES: usize = 4 << 20;
        let dir = tempfile::tempdir().expect("tmp");
        let cache = crate::SymbolCache::with_budget(2 * TABLES as u64 + (1 << 20));
        let before = crate::test_alloc::held();
        let mut last = None;
        for i in 0..6u8 {
            let lib = dir.path().join(format!("lib{i}.so"));
            elf_with_tables(&lib, TABLES, i);
            let module = file_module(&lib.to_string_lossy());
            let symbols = cache.module_symbols(&module).expect("read");
            assert!(symbols.unwind_sections().is_some());
            drop(symbols);
            // Asked again: its unwind tables, read since, are counted.
            cache.module_symbols(&module).expect("kept");
            let kept = cache.kept_versions();
            assert!(kept.len() <= 2, "{} kept", kept.len());
            let meta = std::fs::metadata(&lib).expect("stat");
            assert!(kept.iter().any(|v| (v.0, v.1) == (meta.dev(), meta.ino())));
            last = Some((lib, module));
        }
        let held = crate::test_alloc::held() - before;
        assert!(held < 3 * TABLES as i64, "{} MiB held", held >> 20);
        assert!(cache.held_bytes() <= 2 * TABLES as u64 + (1 << 20));
        // Another version of a kept file replaces it.
        let (lib, module) = last.expect("a library");
        let kept = cache.kept_versions().len();
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(2_000_000);
        std::fs::File::options()
            .write(true)
            .open(&lib)
            .and_then(|f| f.set_modified(when))
            .expect("set the modification time");
        cache.module_symbols(&module).expect("read again");
        let versions = cache.kept_versions();
        assert_eq!(versions.len(), kept);
        let meta = std::fs::metadata(&lib).expect("stat");
        let of_lib: Vec<_> = versions
            .iter()
            .filter(|v| (v.0, v.1) == (meta.dev(), meta.ino()))
            .collect();
        assert_eq!(of_lib.len(), 1, "{versions:?}");
        assert_eq!(of_lib[0].3, 2_000_000);
        // Cleared: nothing held.
        cache.clear();
        assert_eq!((cache.held_bytes(), cache.kept_versions().len()), (0, 0));
    }
}
