//! Function ranges from the unwind tables, for code without symbols.
//!
//! A stripped library still carries `.eh_frame` (C++ exceptions and
//! backtraces need it): one FDE per function, giving the function's first
//! address and length. Grouping samples by the FDE that contains them gives
//! one stable entry per function (`func@0x<start>`, as VTune names them)
//! instead of one per sampled address.

use gimli::{BaseAddresses, CieOrFde, EhFrame, RunTimeEndian, UnwindSection};
use object::{Object, ObjectSection};

/// The (start, end) virtual address ranges of the functions that the
/// `.eh_frame` of `obj` describes, sorted by start; empty without one.
pub(crate) fn function_ranges<'data, O: Object<'data>>(obj: &O) -> Result<Vec<(u64, u64)>, String> {
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

/// The range of `ranges` (sorted by start) that holds `address`.
pub(crate) fn containing(ranges: &[(u64, u64)], address: u64) -> Option<(u64, u64)> {
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
}
