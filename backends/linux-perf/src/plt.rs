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
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationTarget,
};

/// One synthesized stub symbol: (start address, size, `name@plt`).
pub(crate) type PltSymbol = (u64, u64, String);

/// The PLT sections that hold one stub per imported function.
pub(crate) const PLT_SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

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

/// `name@plt` symbols for the stubs of `obj` (x86-64 only: other
/// architectures' stubs are left to the unwind-table grouping).
pub(crate) fn plt_symbols<'data, R: object::ReadRef<'data>>(
    obj: &ElfFile64<'data, Endianness, R>,
) -> Vec<PltSymbol> {
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
