//! `name@plt` symbols for procedure linkage table stubs.
//!
//! Neither symbol table names the stubs in `.plt`, `.plt.sec` and
//! `.plt.got`: perf and objdump synthesize `name@plt` from the dynamic
//! relocations. objdump matches each stub's indirect jump to the GOT slot
//! a relocation patches, which holds whatever the stubs' order; that is
//! done here too (perf counts entries in relocation order, which needs the
//! lazy-binding layout). blazesym and `object` offer no such synthesis.

use std::collections::HashMap;

use object::read::elf::{ElfFile64, SectionHeader};
use object::{Endianness, Object, ObjectSection};

/// One synthesized stub symbol: (start address, size, `name@plt`).
pub type PltSymbol = (u64, u64, String);

/// The PLT sections that hold one stub per imported function.
pub const PLT_SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

/// The GOT slot an x86-64 stub at `address` jumps through, from its bytes:
/// `jmp *disp32(%rip)` (`ff 25`), optionally after `endbr64` and a `bnd`
/// prefix (`f2`).
fn x86_64_slot(address: u64, code: &[u8]) -> Option<u64> {
    let at = code.windows(2).position(|w| w == [0xff, 0x25])?;
    let disp = code.get(at + 2..at + 6)?;
    let disp = i32::from_le_bytes(disp.try_into().ok()?);
    let next = address.checked_add(u64::try_from(at + 6).ok()?)?;
    Some(next.wrapping_add_signed(i64::from(disp)))
}

/// `name@plt` symbols for every stub of `obj` (x86-64 only: other
/// architectures' stubs are left to the unwind-table grouping), objdump's
/// way: the reference [`stub_at`] is tested against.
#[cfg(test)]
pub fn plt_symbols<'data, R: object::ReadRef<'data>>(
    obj: &ElfFile64<'data, Endianness, R>,
) -> Vec<PltSymbol> {
    use object::{ObjectSymbol, ObjectSymbolTable, RelocationTarget};
    if obj.architecture() != object::Architecture::X86_64 {
        return Vec::new();
    }
    let Some(dynsym) = obj.dynamic_symbol_table() else {
        return Vec::new();
    };
    let endian = obj.endian();
    // The stubs first, by the GOT slot each jumps through: only the
    // relocations of those slots need their symbol's name (libtorch has
    // 300,000 dynamic relocations and 30,000 stubs; reading every name
    // took 0.1 s).
    let mut stubs: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    let mut order = Vec::new();
    for name in PLT_SECTIONS {
        let Some(section) = obj.section_by_name(name) else {
            continue;
        };
        let Ok(data) = section.data() else { continue };
        // 16 bytes a stub, 8 in a .plt.got without IBT: sh_entsize says.
        let entry = match section.elf_section_header().sh_entsize(endian) {
            n if n >= 8 => n,
            _ => 16,
        };
        let Ok(entry_len) = usize::try_from(entry) else {
            continue;
        };
        let mut address = section.address();
        for code in data.chunks(entry_len) {
            if let Some(slot) = x86_64_slot(address, code) {
                stubs.entry(slot).or_default().push((address, entry));
                order.push(slot);
            }
            let Some(next) = address.checked_add(entry) else {
                break;
            };
            address = next;
        }
    }
    if stubs.is_empty() {
        return Vec::new();
    }
    // GOT slot -> imported name, from .rela.plt (JUMP_SLOT) and .rela.dyn
    // (GLOB_DAT, which the stubs in .plt.got jump through); the first
    // relocation of a slot names it.
    let mut slots: HashMap<u64, String> = HashMap::new();
    for (slot, reloc) in obj.dynamic_relocations().into_iter().flatten() {
        if !stubs.contains_key(&slot) || slots.contains_key(&slot) {
            continue;
        }
        if let RelocationTarget::Symbol(index) = reloc.target() {
            if let Some(name) = dynsym
                .symbol_by_index(index)
                .ok()
                .and_then(|s| s.name().ok().map(str::to_string))
                .filter(|n| !n.is_empty())
            {
                slots.insert(slot, name);
            }
        }
    }
    let mut out = Vec::new();
    order.dedup();
    for slot in order {
        let Some(name) = slots.get(&slot) else {
            continue;
        };
        for &(address, entry) in stubs.get(&slot).into_iter().flatten() {
            out.push((address, entry, format!("{name}@plt")));
        }
    }
    out.sort_unstable_by_key(|p| p.0);
    out.dedup_by_key(|p| p.0);
    out
}

/// Where a section lies: its address, size, file offset and entry size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawSection {
    pub address: u64,
    pub size: u64,
    pub offset: u64,
    pub entsize: u64,
}

impl RawSection {
    /// `s` of an ELF file, where its bytes are in the file (all of them:
    /// a header claiming more than the file holds gives `None`, so that no
    /// read is sized by it).
    pub fn of<'data, R: object::ReadRef<'data>>(
        s: &object::read::elf::ElfSection64<'data, '_, Endianness, R>,
        endian: Endianness,
        file_len: u64,
    ) -> Option<RawSection> {
        let (offset, size) = s.file_range()?;
        if offset.checked_add(size)? > file_len {
            return None;
        }
        Some(RawSection {
            address: s.address(),
            size,
            offset,
            entsize: s.elf_section_header().sh_entsize(endian),
        })
    }

    /// Whether `address` is in the section.
    pub fn holds(&self, address: u64) -> bool {
        self.address <= address && address - self.address < self.size
    }

    /// The section's bytes, read through `file`.
    pub fn bytes(&self, file: &std::fs::File) -> Option<Vec<u8>> {
        read_at(file, self.offset, usize::try_from(self.size).ok()?)
    }
}

/// What naming one stub at a time needs of a file, found when its symbol
/// tables are read, so that a lookup reads a few bytes through the file
/// kept open instead of parsing it again (a parse reads the symbol
/// tables: 1.4 ms a lookup for libtorch).
#[derive(Debug, Clone, Default)]
pub struct PltLayout {
    /// The PLT sections, in [`PLT_SECTIONS`] order.
    pub stubs: Vec<RawSection>,
    /// The relocation sections that apply through the dynamic symbols, in
    /// section order.
    pub relas: Vec<RawSection>,
    pub dynsym: Option<RawSection>,
    pub dynstr: Option<RawSection>,
}

impl PltLayout {
    /// The layout of `obj`; empty (no stub is named) where it is not
    /// x86-64 or has no dynamic symbols.
    pub fn of<'data, R: object::ReadRef<'data>>(
        obj: &ElfFile64<'data, Endianness, R>,
    ) -> PltLayout {
        let mut out = PltLayout::default();
        let dynsym = obj.elf_dynamic_symbol_table();
        if obj.architecture() != object::Architecture::X86_64 || dynsym.is_empty() {
            return out;
        }
        let endian = obj.endian();
        let len = obj.data().len().unwrap_or(0);
        for name in PLT_SECTIONS {
            if let Some(raw) = obj
                .section_by_name(name)
                .and_then(|s| RawSection::of(&s, endian, len))
            {
                out.stubs.push(raw);
            }
        }
        for s in obj.sections() {
            let header = s.elf_section_header();
            if s.index() == dynsym.section() {
                out.dynsym = RawSection::of(&s, endian, len);
            } else if s.index() == dynsym.string_section() {
                out.dynstr = RawSection::of(&s, endian, len);
            } else if header.sh_type(endian) == object::elf::SHT_RELA
                && header.sh_link(endian) as usize == dynsym.section().0
            {
                out.relas.extend(RawSection::of(&s, endian, len));
            }
        }
        out
    }
}

/// GOT slot -> the dynamic symbol of its first relocation that has one,
/// from the raw relocation records (read once per file: 7 MB for libtorch).
pub type SlotSymbols = HashMap<u64, u32>;

/// Bytes of `file` at `offset`, or `None` where it cannot be read.
fn read_at(file: &std::fs::File, offset: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, offset).ok()?;
    Some(buf)
}

/// The (slot, dynamic symbol) of each relocation record in `bytes` (a
/// relocation section's) that names a symbol.
fn symbol_relocations(bytes: &[u8]) -> impl Iterator<Item = (u64, u32)> + '_ {
    // Elf64_Rela: r_offset, r_info (symbol index in the high half), r_addend.
    bytes.chunks_exact(24).filter_map(|r| {
        let slot = u64::from_le_bytes(r[0..8].try_into().ok()?);
        let sym = u32::from_le_bytes(r[12..16].try_into().ok()?);
        (sym != 0).then_some((slot, sym))
    })
}

/// [`SlotSymbols`] of a file.
pub fn slot_symbols(layout: &PltLayout, file: &std::fs::File) -> SlotSymbols {
    let mut out = SlotSymbols::new();
    for bytes in layout.relas.iter().filter_map(|rela| rela.bytes(file)) {
        for (slot, sym) in symbol_relocations(&bytes) {
            out.entry(slot).or_insert(sym);
        }
    }
    out
}

/// The name of dynamic symbol `index`, read through the file.
fn dynamic_name(layout: &PltLayout, file: &std::fs::File, index: u32) -> Option<String> {
    // Elf64_Sym: st_name first.
    const SYM: u64 = 24;
    let (dynsym, dynstr) = (layout.dynsym?, layout.dynstr?);
    let at = u64::from(index).checked_mul(SYM)?;
    if at.checked_add(SYM)? > dynsym.size {
        return None;
    }
    let sym = read_at(file, dynsym.offset + at, 4)?;
    let name_at = u64::from(u32::from_le_bytes(sym[..4].try_into().ok()?));
    let mut name = Vec::new();
    let mut at = name_at;
    // A piece at a time up to the NUL, within the string table.
    while at < dynstr.size {
        let len = (dynstr.size - at).min(256);
        let piece = read_at(file, dynstr.offset + at, usize::try_from(len).ok()?)?;
        match piece.iter().position(|&b| b == 0) {
            Some(end) => {
                name.extend_from_slice(&piece[..end]);
                return Some(String::from_utf8_lossy(&name).into_owned());
            }
            None => name.extend_from_slice(&piece),
        }
        at += len;
    }
    None
}

/// The stub holding `address`, named as [`plt_symbols`] names it: (start,
/// size, `name@plt`), or `None` where no stub there is named. Only that
/// stub's bytes are read, and its GOT slot's symbol is found in `slots`.
pub fn stub_at(
    layout: &PltLayout,
    file: &std::fs::File,
    slots: &SlotSymbols,
    address: u64,
) -> Option<PltSymbol> {
    let section = layout.stubs.iter().find(|s| s.holds(address))?;
    let entry = if section.entsize >= 8 {
        section.entsize
    } else {
        16
    };
    let index = (address - section.address) / entry;
    let start = section.address + index * entry;
    let len = entry.min(section.size - index * entry);
    let code = read_at(
        file,
        section.offset + index * entry,
        usize::try_from(len).ok()?,
    )?;
    let slot = x86_64_slot(start, &code)?;
    let mut name = dynamic_name(layout, file, *slots.get(&slot)?)?;
    if name.is_empty() {
        // The first relocation's symbol has no name: as plt_symbols does,
        // take the next relocation of the slot that has one.
        name = later_named(layout, file, slot)?;
    }
    Some((start, entry, format!("{name}@plt")))
}

/// The first named symbol among the relocations of `slot` (the rare case
/// where the first one's symbol has no name).
fn later_named(layout: &PltLayout, file: &std::fs::File, slot: u64) -> Option<String> {
    for bytes in layout.relas.iter().filter_map(|rela| rela.bytes(file)) {
        for (_, sym) in symbol_relocations(&bytes).filter(|&(s, _)| s == slot) {
            if let Some(name) = dynamic_name(layout, file, sym).filter(|n| !n.is_empty()) {
                return Some(name);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_jump_slots_are_decoded() {
        // jmp *0x2fe2(%rip) at 0x1020: slot 0x1020 + 6 + 0x2fe2.
        let plain = [
            0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0, 0, 0, 0,
        ];
        assert_eq!(x86_64_slot(0x1020, &plain), Some(0x1020 + 6 + 0x2fe2));
        // endbr64; bnd jmp *-0x10(%rip)
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xf0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(x86_64_slot(0x2000, &ibt), Some(0x2000 + 11 - 0x10));
        assert_eq!(x86_64_slot(0, &[0x90; 16]), None);
    }
}
