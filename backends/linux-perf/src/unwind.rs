//! Function starts from the unwind tables, for code without symbols.
//!
//! A stripped library still carries `.eh_frame` (C++ exceptions and
//! backtraces need it): one FDE per function, giving the function's first
//! address and length. Grouping samples by the FDE that contains them gives
//! one stable entry per function (`func@0x<start>`, as VTune names them)
//! instead of one per sampled address.

use std::fs::File;
use std::path::Path;

use gimli::{BaseAddresses, CieOrFde, EhFrame, RunTimeEndian, UnwindSection};
use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment};

/// A loadable segment: its file range and address.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    size: u64,
    address: u64,
}

/// The function ranges of one ELF file, from `.eh_frame`.
#[derive(Debug, Default)]
pub(crate) struct FunctionStarts {
    segments: Vec<Segment>,
    /// (start, end) virtual addresses, sorted by start.
    ranges: Vec<(u64, u64)>,
}

impl FunctionStarts {
    /// Reads the segments and unwind table of the ELF file at `path`.
    pub(crate) fn load(path: &Path) -> Result<FunctionStarts, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cache = ReadCache::new(file);
        let obj = object::File::parse(&cache).map_err(|e| format!("{}: {e}", path.display()))?;
        let segments = obj
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                Segment {
                    offset,
                    size,
                    address: s.address(),
                }
            })
            .collect();
        let mut starts = FunctionStarts {
            segments,
            ranges: Vec::new(),
        };
        let Some(section) = obj.section_by_name(".eh_frame") else {
            return Ok(starts);
        };
        let data = section
            .data()
            .map_err(|e| format!("{}: .eh_frame: {e}", path.display()))?;
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
                        starts.ranges.push((start, start.saturating_add(fde.len())));
                    }
                }
            }
        }
        starts.ranges.sort_unstable();
        Ok(starts)
    }

    /// The file offset where the function holding file offset `offset`
    /// begins, if an FDE covers it.
    pub(crate) fn function_start(&self, offset: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.size)?;
        let address = seg.address.checked_add(offset - seg.offset)?;
        let i = self.ranges.partition_point(|&(s, _)| s <= address);
        let &(start, end) = self.ranges.get(i.checked_sub(1)?)?;
        (address < end).then(|| offset - (address - start))
    }

    /// How many functions the unwind table describes.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_binary_has_function_ranges() {
        let exe = std::env::current_exe().expect("current exe");
        let starts = FunctionStarts::load(&exe).expect("load own binary");
        assert!(starts.len() > 100, "{} FDEs", starts.len());
        // The start of a function's FDE maps to itself.
        let (start, _) = starts.ranges[starts.ranges.len() / 2];
        let seg = starts
            .segments
            .iter()
            .find(|s| start >= s.address && start - s.address < s.size)
            .expect("segment");
        let off = start - seg.address + seg.offset;
        assert_eq!(starts.function_start(off), Some(off));
        assert_eq!(starts.function_start(off + 1), Some(off));
    }

    #[test]
    fn missing_file_is_an_error() {
        assert!(FunctionStarts::load(Path::new("/nonexistent/lib.so")).is_err());
    }
}
