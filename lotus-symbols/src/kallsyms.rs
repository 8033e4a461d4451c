//! Naming kernel addresses from `/proc/kallsyms`.
//!
//! Each line is `address type name [module]`. Only text symbols (`t`, `T`,
//! `w`, `W`) are kept, sorted by address; an address is named by the
//! nearest symbol at or below it. Symbols of loadable modules keep their
//! module (`[ext4]`), the rest are the kernel image's. Several names at one
//! address (`_stext`, `_text`...) resolve to one, chosen the same way every
//! time: global before weak before local, fewer leading underscores, the
//! shorter name.
//!
//! Without the right (root, `CAP_SYSLOG`, or `kernel.kptr_restrict` = 0)
//! the kernel shows every address as zero: those lines are counted, not
//! kept, and the table says so ([`KernelSymbols::zeroed`]).

use std::io::{self, BufRead};
use std::path::Path;

use crate::elf_symbols::open_regular;

/// Where the kernel lists its symbols.
pub const KALLSYMS_PATH: &str = "/proc/kallsyms";

/// No kernel function is this long: an address further than this past the
/// nearest symbol below it is in none that kallsyms lists (a gap, or
/// JIT-compiled code not listed), and is left unnamed.
const MAX_FUNCTION_SIZE: u64 = 1 << 20;

/// One text symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Symbol {
    address: u64,
    name: Box<str>,
    /// Index into [`KernelSymbols::modules`]; `None` for the kernel image.
    module: Option<u32>,
}

/// A named kernel address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSymbol<'a> {
    /// The function.
    pub name: &'a str,
    /// The loadable module (`ext4`), or `None` for the kernel image.
    pub module: Option<&'a str>,
    /// The function's first address.
    pub start: u64,
}

/// The kernel's text symbols, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct KernelSymbols {
    symbols: Vec<Symbol>,
    modules: Vec<Box<str>>,
    /// Text symbols listed with a zero address (hidden by kptr_restrict).
    pub zeroed: usize,
}

/// Order among symbols at one address: the first one names it.
fn preference(kind: char, name: &str) -> (u8, usize, usize) {
    let binding = match kind {
        'T' => 0,
        'W' | 'w' => 1,
        _ => 2,
    };
    let underscores = name.bytes().take_while(|&b| b == b'_').count();
    (binding, underscores, name.len())
}

impl KernelSymbols {
    /// Parses kallsyms text. Lines that are not text symbols, or that do
    /// not parse, are skipped.
    pub fn parse(input: impl BufRead) -> io::Result<KernelSymbols> {
        let mut table = KernelSymbols::default();
        // (symbol, preference) before sorting.
        let mut all: Vec<(Symbol, (u8, usize, usize))> = Vec::new();
        for line in input.lines() {
            let line = line?;
            let mut fields = line.split_whitespace();
            let (Some(address), Some(kind), Some(name)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let mut kinds = kind.chars();
            let (Some(kind), None) = (kinds.next(), kinds.next()) else {
                continue;
            };
            if !matches!(kind, 't' | 'T' | 'w' | 'W') {
                continue;
            }
            let Ok(address) = u64::from_str_radix(address, 16) else {
                continue;
            };
            if address == 0 {
                table.zeroed += 1;
                continue;
            }
            let module = fields
                .next()
                .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
                .map(|m| match table.modules.iter().rposition(|x| &**x == m) {
                    Some(i) => i as u32,
                    None => {
                        table.modules.push(m.into());
                        (table.modules.len() - 1) as u32
                    }
                });
            let pref = preference(kind, name);
            all.push((
                Symbol {
                    address,
                    name: name.into(),
                    module,
                },
                pref,
            ));
        }
        all.sort_by(|(a, pa), (b, pb)| {
            a.address
                .cmp(&b.address)
                .then(pa.cmp(pb))
                .then_with(|| a.name.cmp(&b.name))
        });
        all.dedup_by_key(|(s, _)| s.address);
        table.symbols = all.into_iter().map(|(s, _)| s).collect();
        Ok(table)
    }

    /// Reads and parses [`KALLSYMS_PATH`].
    pub fn load() -> io::Result<KernelSymbols> {
        let (file, _) = open_regular(Path::new(KALLSYMS_PATH))?;
        Self::parse(io::BufReader::with_capacity(1 << 16, file))
    }

    /// How many symbols the table holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// True when the table names nothing.
    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The function holding `address`: the nearest symbol at or below it.
    pub fn lookup(&self, address: u64) -> Option<KernelSymbol<'_>> {
        let i = self
            .symbols
            .partition_point(|s| s.address <= address)
            .checked_sub(1)?;
        let s = &self.symbols[i];
        if address - s.address >= MAX_FUNCTION_SIZE {
            return None;
        }
        Some(KernelSymbol {
            name: &s.name,
            module: s.module.map(|m| &*self.modules[m as usize]),
            start: s.address,
        })
    }
}

/// Whether this process sees kernel addresses in kallsyms (the first text
/// symbol has a non-zero address): `Ok(false)` when they are zeroed.
pub fn addresses_visible() -> io::Result<bool> {
    let (file, _) = open_regular(Path::new(KALLSYMS_PATH))?;
    for line in io::BufReader::new(file).lines().take(1000) {
        let line = line?;
        let mut fields = line.split_whitespace();
        if let (Some(address), Some(_)) = (fields.next(), fields.next()) {
            if let Ok(a) = u64::from_str_radix(address, 16) {
                return Ok(a != 0);
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _text
ffffffff81000000 T __pi__text
ffffffff81000000 T _stext
ffffffff81000000 t srso_local_alias
ffffffff81001000 T clear_page_erms
ffffffff81001040 t clear_page_rep
ffffffff81002000 D some_data
ffffffff81003000 W weak_fn
ffffffff81003000 t local_fn
ffffffff81004000 R rodata_thing
ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]
ffffffffc0300000 t ext4_readdir\t[ext4]
ffffffffc0300100 T ext4_fill_super\t[ext4]
garbage line
ffffffffc0400000 t
";

    fn table() -> KernelSymbols {
        KernelSymbols::parse(SAMPLE.as_bytes()).expect("parse")
    }

    #[test]
    fn only_text_symbols_are_kept_one_per_address() {
        let t = table();
        // _text/_stext/... at one address count once; D and R are dropped.
        assert_eq!(t.len(), 7);
        assert_eq!(t.zeroed, 0);
    }

    #[test]
    fn nearest_symbol_at_or_below() {
        let t = table();
        let at = |a: u64| t.lookup(a).map(|s| (s.name, s.module, s.start));
        assert_eq!(
            at(0xffff_ffff_8100_1000),
            Some(("clear_page_erms", None, 0xffff_ffff_8100_1000))
        );
        assert_eq!(
            at(0xffff_ffff_8100_103f),
            Some(("clear_page_erms", None, 0xffff_ffff_8100_1000))
        );
        assert_eq!(
            at(0xffff_ffff_8100_1041),
            Some(("clear_page_rep", None, 0xffff_ffff_8100_1040))
        );
        // Data symbols do not end the function before them.
        assert_eq!(
            at(0xffff_ffff_8100_2010).map(|s| s.0),
            Some("clear_page_rep")
        );
        // Below every symbol: nothing.
        assert_eq!(at(0xffff_ffff_80ff_ffff), None);
        assert_eq!(at(0x1000), None);
        // Far past the last symbol below: nothing.
        assert_eq!(at(0xffff_ffff_8200_0000), None);
    }

    #[test]
    fn aliases_resolve_to_one_stable_name() {
        let t = table();
        // Global before local, then fewer leading underscores, shorter.
        assert_eq!(t.lookup(0xffff_ffff_8100_0010).unwrap().name, "_text");
        // Weak before local.
        assert_eq!(t.lookup(0xffff_ffff_8100_3000).unwrap().name, "weak_fn");
        // The order of the lines does not matter.
        let mut lines: Vec<&str> = SAMPLE.lines().collect();
        lines.reverse();
        let reversed = KernelSymbols::parse(lines.join("\n").as_bytes()).unwrap();
        for a in [0xffff_ffff_8100_0010, 0xffff_ffff_8100_3000] {
            assert_eq!(reversed.lookup(a), t.lookup(a));
        }
    }

    #[test]
    fn module_symbols_keep_their_module() {
        let t = table();
        let s = t.lookup(0xffff_ffff_c030_0050).unwrap();
        assert_eq!((s.name, s.module), ("ext4_readdir", Some("ext4")));
        let s = t.lookup(0xffff_ffff_c030_0200).unwrap();
        assert_eq!((s.name, s.module), ("ext4_fill_super", Some("ext4")));
        let s = t.lookup(0xffff_ffff_c020_1008).unwrap();
        assert_eq!(s.module, Some("__builtin__ftrace"));
    }

    #[test]
    fn zeroed_addresses_name_nothing() {
        let hidden = "\
0000000000000000 T _text
0000000000000000 T clear_page_erms
0000000000000000 D some_data
0000000000000000 t ext4_readdir\t[ext4]
";
        let t = KernelSymbols::parse(hidden.as_bytes()).unwrap();
        assert_eq!(t.len(), 0);
        assert_eq!(t.zeroed, 3);
        assert_eq!(t.lookup(0xffff_ffff_8100_1000), None);
        assert_eq!(t.lookup(0), None);
    }

    #[test]
    fn this_kernels_table_parses() {
        // Whatever this process may see: a table, or zeroed addresses.
        if let Ok(t) = KernelSymbols::load() {
            assert!(
                !t.is_empty() || t.zeroed > 0,
                "{} symbols, {} zeroed",
                t.len(),
                t.zeroed
            );
            assert_eq!(addresses_visible().unwrap(), !t.is_empty());
        }
    }
}
