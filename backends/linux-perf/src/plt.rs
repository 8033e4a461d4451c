//! `name@plt` symbols for procedure linkage table stubs.
//!
//! Neither symbol table names the stubs in `.plt`, `.plt.sec` and
//! `.plt.got`: perf and objdump synthesize `name@plt` from the dynamic
//! relocations. objdump matches each stub's indirect jump to the GOT slot
//! a relocation patches, which holds whatever the stubs' order; that is
//! done here too (perf counts entries in relocation order, which needs the
//! lazy-binding layout). blazesym and `object` offer no such synthesis.

use object::read::elf::{ElfFile64, Rela, SectionHeader, Sym};
use object::{Endianness, Object, ObjectSection, SymbolIndex};

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

/// The stub of `obj` holding `address`, as objdump names it:
/// (start, size, `name@plt`), or `None` where no stub there is named.
/// Only that stub's bytes are decoded and only the relocations of its GOT
/// slot read for a name: the stubs of a library are sampled a few at a
/// time, and synthesizing all of libtorch's 30,000 took 80 ms of the
/// sample writer's time in a sampled pipeline run.
pub(crate) fn plt_stub_at<'data, R: object::ReadRef<'data>>(
    obj: &ElfFile64<'data, Endianness, R>,
    address: u64,
) -> Option<PltSymbol> {
    if obj.architecture() != object::Architecture::X86_64 {
        return None;
    }
    let endian = obj.endian();
    let section = PLT_SECTIONS
        .iter()
        .filter_map(|name| obj.section_by_name(name))
        .find(|s| s.address() <= address && address - s.address() < s.size())?;
    let entry = match section.elf_section_header().sh_entsize(endian) {
        n if n >= 8 => n,
        _ => 16,
    };
    let index = (address - section.address()) / entry;
    let start = section.address() + index * entry;
    let data = section.data().ok()?;
    let from = usize::try_from(index * entry).ok()?;
    let to = from
        .saturating_add(usize::try_from(entry).ok()?)
        .min(data.len());
    let slot = x86_64_slot(start, data.get(from..to)?)?;
    let name = slot_name(obj, slot)?;
    Some((start, entry, format!("{name}@plt")))
}

/// The imported name of a GOT slot: the symbol of the first dynamic
/// relocation of the slot that names one (objdump's choice).
fn slot_name<'data, R: object::ReadRef<'data>>(
    obj: &ElfFile64<'data, Endianness, R>,
    slot: u64,
) -> Option<String> {
    let endian = obj.endian();
    let dynsym = obj.elf_dynamic_symbol_table();
    if dynsym.is_empty() {
        return None;
    }
    for header in obj.elf_section_table().iter() {
        // Only the relocations that apply through the dynamic symbols.
        let Ok(Some((relas, link))) = header.rela(endian, obj.data()) else {
            continue;
        };
        if link != dynsym.section() {
            continue;
        }
        for rela in relas.iter().filter(|r| r.r_offset(endian) == slot) {
            let index = rela.r_sym(endian, false);
            let Ok(sym) = dynsym.symbol(SymbolIndex(index as usize)) else {
                continue;
            };
            if index == 0 {
                continue;
            }
            let Ok(name) = sym.name(endian, dynsym.strings()) else {
                continue;
            };
            if !name.is_empty() {
                return Some(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashMap;

    use object::{ObjectSymbol, ObjectSymbolTable, RelocationTarget};

    /// `name@plt` symbols for the stubs of `obj` (x86-64 only: other
    /// architectures' stubs are left to the unwind-table grouping).
    fn plt_symbols<'data, R: object::ReadRef<'data>>(
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

    /// Every stub that the whole-table synthesis (objdump's way) names is
    /// named the same by the lookup of one stub, from its first and last
    /// byte, and no other address of the PLT sections is: on the system's
    /// libraries with `.plt` and `.plt.got` stubs.
    #[test]
    fn one_stub_looked_up_is_named_as_the_whole_table_names_it() {
        let candidates = [
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
            "/lib64/libstdc++.so.6",
            "/lib64/libz.so.1",
        ];
        let mut checked = 0;
        for path in candidates {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            let obj = ElfFile64::<Endianness>::parse(&*bytes).expect("ELF");
            let all = plt_symbols(&obj);
            for (start, size, name) in &all {
                for address in [*start, start + size - 1] {
                    assert_eq!(
                        plt_stub_at(&obj, address).as_ref(),
                        Some(&(*start, *size, name.clone())),
                        "{path} at {address:#x}"
                    );
                }
            }
            for section in PLT_SECTIONS.iter().filter_map(|n| obj.section_by_name(n)) {
                for address in section.address()..section.address() + section.size() {
                    let named = all.iter().any(|(s, z, _)| *s <= address && address < s + z);
                    if !named {
                        assert_eq!(plt_stub_at(&obj, address), None, "{path} at {address:#x}");
                    }
                }
            }
            checked += all.len();
        }
        assert!(
            checked >= 20,
            "no system library with PLT stubs found among {candidates:?}: the test needs libstdc++ or zlib"
        );
    }

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
