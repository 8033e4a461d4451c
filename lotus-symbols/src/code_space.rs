//! A process's executable mappings, by start address: what its samples'
//! addresses and its stacks' frames are placed in, and what its unwinder
//! reads ([`crate::Unwinders`]). A new mapping replaces whatever it
//! overlaps (as `perf report` does).

use std::collections::BTreeMap;

use crate::CodeMapping;

/// The most mappings a process can have at once (the kernel's
/// `vm.max_map_count`, 65,530 by default), read once.
fn max_live_mappings() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|t| t.trim().parse::<usize>().ok())
            .unwrap_or(65_530)
            .clamp(1 << 10, 1 << 22)
    })
}

/// One mapping as kept, under its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapped {
    end: u64,
    pgoff: u64,
    module: u32,
    /// When it was mapped: the how-manieth mapping of the space (the
    /// oldest are forgotten first, see [`CodeSpace::insert`]).
    seq: u64,
}

/// One process's executable mappings (see the module's documentation).
#[derive(Debug, Clone, Default)]
pub struct CodeSpace {
    maps: BTreeMap<u64, Mapped>,
    /// Mappings inserted so far.
    inserted: u64,
}

impl CodeSpace {
    /// Maps `m`, over whatever it overlaps; returns how many mappings were
    /// forgotten to make room.
    ///
    /// perf records no unmapping: a process that maps and unmaps at ever
    /// new addresses would grow its space here without end. It cannot
    /// have more than the kernel's `vm.max_map_count` at once, so past
    /// that the oldest eighth are forgotten (a sample in one of them, if
    /// it is still mapped, stays unnamed).
    pub fn insert(&mut self, m: CodeMapping) -> u64 {
        self.insert_within(m, max_live_mappings())
    }

    fn insert_within(&mut self, m: CodeMapping, max: usize) -> u64 {
        let (start, end) = (m.start, m.end);
        if end <= start {
            return 0;
        }
        let seq = self.inserted;
        self.inserted += 1;
        for s in self.starts_overlapping(start, end) {
            let Some(old) = self.maps.remove(&s) else {
                continue;
            };
            if s < start {
                self.maps.insert(s, Mapped { end: start, ..old });
            }
            if old.end > end {
                let pgoff = old.pgoff.wrapping_add(end - s);
                self.maps.insert(end, Mapped { pgoff, ..old });
            }
        }
        let new = Mapped {
            end,
            pgoff: m.pgoff,
            module: m.module,
            seq,
        };
        self.maps.insert(start, new);
        if self.maps.len() <= max {
            return 0;
        }
        let forget = self.maps.len() - max + max / 8;
        let mut seqs: Vec<u64> = self.maps.values().map(|m| m.seq).collect();
        let (_, &mut cut, _) = seqs.select_nth_unstable(forget - 1);
        let before = self.maps.len();
        self.maps.retain(|_, m| m.seq > cut);
        (before - self.maps.len()) as u64
    }

    /// The starts of the mappings that overlap `[start, end)`.
    fn starts_overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        let before = self.maps.range(..start).next_back();
        let before = before.filter(|(_, m)| m.end > start).map(|(&s, _)| s);
        let inside = self.maps.range(start..end).map(|(&s, _)| s);
        before.into_iter().chain(inside).collect()
    }

    /// The module mapped at `address` and the file offset there.
    pub fn find(&self, address: u64) -> Option<(u32, u64)> {
        let (&start, m) = self.maps.range(..=address).next_back()?;
        (address < m.end).then(|| (m.module, address - start + m.pgoff))
    }

    /// The mappings that overlap `[start, end)`, by start address.
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<CodeMapping> {
        let starts = self.starts_overlapping(start, end);
        let at = |s: u64| {
            let m = self.maps[&s];
            CodeMapping {
                start: s,
                end: m.end,
                pgoff: m.pgoff,
                module: m.module,
            }
        };
        starts.into_iter().map(at).collect()
    }

    /// How many mappings it holds.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: u64, end: u64, pgoff: u64, module: u32) -> CodeMapping {
        CodeMapping {
            start,
            end,
            pgoff,
            module,
        }
    }

    #[test]
    fn a_new_mapping_splits_what_it_overlaps() {
        let mut space = CodeSpace::default();
        space.insert(at(0x1000, 0x4000, 0x10000, 1));
        space.insert(at(0x2000, 0x3000, 0, 2));
        assert_eq!(space.find(0x1800), Some((1, 0x10800)));
        assert_eq!(space.find(0x2800), Some((2, 0x800)));
        assert_eq!(space.find(0x3800), Some((1, 0x12800)));
        assert_eq!(space.find(0x4000), None);
        assert_eq!(space.find(0x0fff), None);
        assert_eq!(
            space.overlapping(0x1fff, 0x3001),
            [
                at(0x1000, 0x2000, 0x10000, 1),
                at(0x2000, 0x3000, 0, 2),
                at(0x3000, 0x4000, 0x12000, 1)
            ]
        );
    }

    /// perf records no unmapping: a process that maps at ever new
    /// addresses is kept to the most mappings it can hold at once, the
    /// newest, and the rest are counted as forgotten.
    #[test]
    fn a_space_keeps_no_more_mappings_than_can_be_live() {
        let mut space = CodeSpace::default();
        let mut forgotten = 0;
        for i in 0..100u64 {
            let start = 0x1000 * (i + 1);
            forgotten += space.insert_within(at(start, start + 0x800, 0, 1), 16);
            assert!(space.len() <= 16, "{} mappings", space.len());
        }
        assert_eq!(forgotten, 100 - space.len() as u64);
        // The newest are kept.
        assert!(space.find(0x1000 * 100).is_some());
        assert!(space.find(0x1000).is_none());
        // Replacing at one address forgets nothing.
        let mut space = CodeSpace::default();
        for _ in 0..100 {
            assert_eq!(space.insert_within(at(0x1000, 0x2000, 0, 1), 16), 0);
        }
        assert_eq!(space.len(), 1);
    }
}
