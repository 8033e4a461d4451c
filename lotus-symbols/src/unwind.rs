//! Function ranges from the unwind tables, for code without symbols.
//!
//! A stripped library still carries `.eh_frame` (C++ exceptions and
//! backtraces need it): one FDE per function, giving the function's first
//! address and length. Grouping samples by the FDE that contains them gives
//! one stable entry per function (`func@0x<start>`, as VTune names them)
//! instead of one per sampled address.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use gimli::{BaseAddresses, CieOrFde, EhFrame, EhFrameHdr, RunTimeEndian, UnwindSection};
use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSection};

use crate::plt::RawSection;

/// The (start, end) virtual address ranges of the functions that the
/// `.eh_frame` of `obj` describes, sorted by start; empty without one.
pub fn function_ranges<'data, O: Object<'data>>(obj: &O) -> Result<Vec<(u64, u64)>, String> {
    let mut ranges = Vec::new();
    let Some(section) = obj.section_by_name(".eh_frame") else {
        return Ok(ranges);
    };
    let data = section.data().map_err(|e| format!(".eh_frame: {e}"))?;
    let endian = if obj.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let mut eh_frame = EhFrame::new(data, endian);
    eh_frame.set_address_size(if obj.is_64() { 8 } else { 4 });
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = obj.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = obj.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut entries = eh_frame.entries(&bases);
    // A malformed entry ends the walk: what was read so far stays.
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                let start = fde.initial_address();
                if fde.len() > 0 {
                    ranges.push((start, start.saturating_add(fde.len())));
                }
            }
        }
    }
    ranges.sort_unstable();
    Ok(ranges)
}

/// Bytes of unwind tables, shared by every holder of the same bytes (see
/// `shared`); empty by default.
#[derive(Debug, Clone, Default)]
pub struct TableBytes(Arc<Box<[u8]>>);

impl std::ops::Deref for TableBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl TableBytes {
    /// Whether `self` and `other` are the same bytes in memory (not only
    /// equal ones).
    pub fn same(&self, other: &TableBytes) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Unwind tables read so far and still held somewhere, by (length, hash
/// of their bytes): the same bytes read again (the same library under
/// another name, another version of a file whose tables did not change,
/// a file read again after it left the cache) are shared, not kept twice.
/// Not kept alive here (a weak reference to the box: the bytes are freed
/// with their last holder).
type Shared = HashMap<(usize, u64), Vec<Weak<Box<[u8]>>>>;
static SHARED: Mutex<Option<Shared>> = Mutex::new(None);

/// `bytes` as the tables already held with the same bytes, where there
/// are some; else as new shared bytes, remembered for the next reader.
pub(crate) fn shared(bytes: Vec<u8>) -> TableBytes {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    let key = (bytes.len(), hasher.finish());
    let mut guard = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let tables = guard.get_or_insert_with(HashMap::new);
    let same = tables.entry(key).or_default();
    same.retain(|w| w.strong_count() > 0);
    if let Some(held) = same
        .iter()
        .filter_map(Weak::upgrade)
        .find(|held| ***held == *bytes)
    {
        return TableBytes(held);
    }
    let new = Arc::new(bytes.into_boxed_slice());
    same.push(Arc::downgrade(&new));
    // Forget the tables freed since: the map stays the size of what is held.
    if tables.len() > 64 && tables.len().is_power_of_two() {
        tables.retain(|_, same| {
            same.retain(|w| w.strong_count() > 0);
            !same.is_empty()
        });
    }
    TableBytes(new)
}

/// Where the unwind tables of a file are, found when its symbol tables
/// are read.
#[derive(Debug, Clone, Copy)]
pub struct EhLayout {
    hdr: RawSection,
    frame: RawSection,
    text: Option<u64>,
    got: Option<u64>,
}

/// The most bytes of unwind tables kept for lookups through
/// `.eh_frame_hdr` (libtorch's are 20 MB); past it, every FDE is walked
/// once instead.
const MAX_KEPT: u64 = 64 << 20;

impl EhLayout {
    /// The layout of `obj`'s `.eh_frame_hdr` and `.eh_frame`, where it has
    /// both in the file (little-endian, 64-bit: what lotus profiles).
    pub fn of<'data, R: object::ReadRef<'data>>(
        obj: &ElfFile64<'data, Endianness, R>,
    ) -> Option<EhLayout> {
        let endian = obj.endian();
        if !obj.is_little_endian() {
            return None;
        }
        let len = obj.data().len().ok()?;
        let raw = |name| {
            obj.section_by_name(name)
                .and_then(|s| RawSection::of(&s, endian, len))
        };
        Some(EhLayout {
            hdr: raw(".eh_frame_hdr")?,
            frame: raw(".eh_frame")?,
            text: obj.section_by_name(".text").map(|s| s.address()),
            got: obj.section_by_name(".got").map(|s| s.address()),
        })
    }

    /// The tables' bytes and addresses as an unwinder needs them, read
    /// through `file`; `None` where they cannot be read or are too large
    /// to keep.
    pub fn unwind_sections(&self, file: &File) -> Option<crate::stack_unwind::UnwindSections> {
        if self.hdr.size.saturating_add(self.frame.size) > MAX_KEPT {
            return None;
        }
        let range = |s: &RawSection| s.address..s.address.saturating_add(s.size);
        Some(crate::stack_unwind::UnwindSections {
            eh_frame_hdr: shared(self.hdr.bytes(file)?),
            eh_frame_hdr_svma: range(&self.hdr),
            eh_frame: shared(self.frame.bytes(file)?),
            eh_frame_svma: range(&self.frame),
            got_svma: self.got.map(|g| g..g.saturating_add(1)),
        })
    }

    /// The tables' bytes, read through `file`; `None` where they cannot be
    /// read or are too large to keep.
    pub fn read(&self, file: &File) -> Option<EhTables> {
        if self.hdr.size.saturating_add(self.frame.size) > MAX_KEPT {
            return None;
        }
        Some(EhTables {
            hdr: shared(self.hdr.bytes(file)?),
            frame: shared(self.frame.bytes(file)?),
            layout: *self,
        })
    }
}

/// A file's unwind tables, kept for lookups through `.eh_frame_hdr`'s
/// binary-search table: one FDE parsed per lookup, instead of every FDE
/// (walking all of a stripped CUDA library's took the sample writer 20 ms
/// for one sampled address).
#[derive(Debug)]
pub struct EhTables {
    /// Shared with the unwinder's copy ([`shared`]).
    hdr: TableBytes,
    frame: TableBytes,
    layout: EhLayout,
}

impl EhTables {
    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.hdr.len() + self.frame.len()
    }
}

impl EhTables {
    /// The (start, end) of the function holding `address`; `None` where
    /// the table has none, or where the FDE it points to does not hold
    /// the address or has no length ([`function_ranges`] then decides: it
    /// looks further back).
    pub fn function_at(&self, address: u64) -> Option<(u64, u64)> {
        let endian = RunTimeEndian::Little;
        let mut eh_frame = EhFrame::new(&self.frame[..], endian);
        eh_frame.set_address_size(8);
        let mut bases = BaseAddresses::default()
            .set_eh_frame_hdr(self.layout.hdr.address)
            .set_eh_frame(self.layout.frame.address);
        if let Some(text) = self.layout.text {
            bases = bases.set_text(text);
        }
        if let Some(got) = self.layout.got {
            bases = bases.set_got(got);
        }
        let parsed = EhFrameHdr::new(&self.hdr[..], endian)
            .parse(&bases, 8)
            .ok()?;
        let fde = parsed
            .table()?
            .fde_for_address(&eh_frame, &bases, address, EhFrame::cie_from_offset)
            .ok()?;
        let start = fde.initial_address();
        (fde.len() > 0).then(|| (start, start.saturating_add(fde.len())))
    }
}

/// The range of `ranges` (sorted by start) that holds `address`.
pub fn containing(ranges: &[(u64, u64)], address: u64) -> Option<(u64, u64)> {
    let i = ranges.partition_point(|&(s, _)| s <= address);
    let &(start, end) = ranges.get(i.checked_sub(1)?)?;
    (address < end).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_binary_has_function_ranges() {
        let exe = std::env::current_exe().expect("current exe");
        let data = std::fs::read(exe).expect("read own binary");
        let obj = object::File::parse(&*data).expect("parse own binary");
        let ranges = function_ranges(&obj).expect("eh_frame");
        assert!(ranges.len() > 100, "{} FDEs", ranges.len());
        let (start, end) = ranges[ranges.len() / 2];
        assert_eq!(containing(&ranges, start), Some((start, end)));
        assert_eq!(containing(&ranges, end - 1), Some((start, end)));
        assert_eq!(containing(&ranges, 0), None);
    }

    /// The table of `.eh_frame_hdr` finds the FDE that the walk of every
    /// FDE finds, at each function's first and last byte, reading the
    /// tables through the file.
    #[test]
    fn the_header_table_finds_what_the_whole_walk_finds() {
        let exe = std::env::current_exe().expect("current exe");
        let data = std::fs::read(&exe).expect("read own binary");
        let obj = ElfFile64::<Endianness>::parse(&*data).expect("parse own binary");
        let ranges = function_ranges(&obj).expect("eh_frame");
        let tables = EhLayout::of(&obj)
            .expect("own binary has .eh_frame_hdr")
            .read(&File::open(&exe).expect("open"))
            .expect("tables read");
        let mut found = 0;
        for &(start, end) in ranges.iter().step_by(7) {
            for address in [start, end - 1] {
                if let Some(r) = tables.function_at(address) {
                    assert_eq!(Some(r), containing(&ranges, address), "at {address:#x}");
                    found += 1;
                }
            }
        }
        assert!(found > 100, "the table found {found} functions");
        assert_eq!(tables.function_at(0), None);
    }
}
