//! Call stacks from a copy of a thread's user stack and its registers
//! (what `perf record --call-graph dwarf` takes with each sample), for
//! code built without frame pointers: most distributions' CPython,
//! libjpeg, libtorch.
//!
//! The walk is framehop's (samply's unwinder, maintained and fast: it
//! caches the rule of each address): each file mapped in the process is
//! a framehop module with its `.eh_frame_hdr` and `.eh_frame`, read once
//! per file version ([`crate::ModuleSymbols::unwind_sections`]) and shared
//! by every process that maps it. Where an address is in no file (code a
//! JIT wrote, CPython's perf trampolines), framehop falls back to the
//! frame pointer, which those trampolines keep.
//!
//! x86-64 only: the one architecture lotus's samplers read registers for.

use std::collections::BTreeMap;
use std::ops::Range;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module as UnwindModule, Unwinder};

use crate::unwind::TableBytes;
use crate::ModuleSymbols;

/// A file's unwind tables as the unwinder reads them, with the addresses
/// its headers state for them.
#[derive(Debug)]
pub struct UnwindSections {
    /// `.eh_frame_hdr`'s bytes (its binary-search table).
    pub eh_frame_hdr: TableBytes,
    /// Where `.eh_frame_hdr` is, as stated.
    pub eh_frame_hdr_svma: Range<u64>,
    /// `.eh_frame`'s bytes (shared with every file of the same tables).
    pub eh_frame: TableBytes,
    /// Where `.eh_frame` is, as stated.
    pub eh_frame_svma: Range<u64>,
    /// Where `.got` starts (GOT-relative pointers in the tables).
    pub got_svma: Option<Range<u64>>,
}

/// A thread's user registers and a copy of its stack from `sp` up, as the
/// kernel took them with a sample (`PERF_SAMPLE_REGS_USER`,
/// `PERF_SAMPLE_STACK_USER`).
#[derive(Debug, Clone, Copy)]
pub struct UserStack<'a> {
    /// The instruction pointer.
    pub ip: u64,
    /// The stack pointer: the address of `stack[0]`.
    pub sp: u64,
    /// The frame pointer register (rbp).
    pub bp: u64,
    /// The stack's bytes from `sp` up.
    pub stack: &'a [u8],
}

impl UserStack<'_> {
    /// The 8 bytes at `address` of the copy, little-endian.
    fn read(&self, address: u64) -> Result<u64, ()> {
        let at = usize::try_from(address.checked_sub(self.sp).ok_or(())?).map_err(|_| ())?;
        let bytes = self.stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WalkEnd {
    /// At the stack's root (the tables say the outermost frame was reached).
    Root,
    /// Short of the root: the copy of the stack ended, a frame's rule was
    /// missing or its result implausible.
    Cut,
    /// At the most frames asked for.
    Full,
}

/// One process's code as the unwinder sees it: the files mapped, where.
/// Mappings are added and removed as the process maps and unmaps code.
pub struct SpaceUnwinder {
    unwinder: UnwinderX86_64<TableBytes>,
    cache: Box<CacheX86_64>,
    /// The code added, `start -> end`.
    known: BTreeMap<u64, u64>,
}

impl std::fmt::Debug for SpaceUnwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpaceUnwinder").finish_non_exhaustive()
    }
}

impl Default for SpaceUnwinder {
    fn default() -> Self {
        SpaceUnwinder::new()
    }
}

impl SpaceUnwinder {
    /// An unwinder for a process with no code mapped yet.
    pub fn new() -> SpaceUnwinder {
        SpaceUnwinder {
            unwinder: UnwinderX86_64::new(),
            cache: Box::new(CacheX86_64::new()),
            known: BTreeMap::new(),
        }
    }

    /// Adds the code of the file `symbols` were read from, mapped at
    /// `[start, end)` from file offset `pgoff`. False (and nothing added)
    /// where the file has no unwind tables lotus can read, or the mapping
    /// overlaps none of its segments.
    pub fn add_mapping(
        &mut self,
        name: &str,
        symbols: &ModuleSymbols,
        start: u64,
        end: u64,
        pgoff: u64,
    ) -> bool {
        let Some(tables) = symbols.unwind_sections() else {
            return false;
        };
        let Some(bias) = symbols.load_bias(start, end.saturating_sub(start), pgoff) else {
            return false;
        };
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            eh_frame_svma: Some(tables.eh_frame_svma.clone()),
            eh_frame: Some(tables.eh_frame.clone()),
            eh_frame_hdr_svma: Some(tables.eh_frame_hdr_svma.clone()),
            eh_frame_hdr: Some(tables.eh_frame_hdr.clone()),
            got_svma: tables.got_svma.clone(),
            ..ExplicitModuleSectionInfo::default()
        };
        self.unwinder
            .add_module(UnwindModule::new(name.to_string(), start..end, bias, info));
        self.known.insert(start, end);
        true
    }

    /// Removes the mapping added at `start`.
    pub fn remove_mapping(&mut self, start: u64) {
        self.unwinder.remove_module(start);
        self.known.remove(&start);
    }

    /// The starts of the mappings added that overlap `[start, end)`.
    fn overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        let before = self
            .known
            .range(..start)
            .next_back()
            .filter(|(_, &e)| e > start)
            .map(|(&s, _)| s);
        before
            .into_iter()
            .chain(self.known.range(start..end).map(|(&s, _)| s))
            .collect()
    }

    /// Whether a mapping added overlaps `[start, end)`.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        !self.overlapping(start, end).is_empty()
    }

    /// Removes every mapping added that overlaps `[start, end)`, and
    /// returns the range they and `[start, end)` cover together (what a
    /// caller adds again from the process's mappings as they are now).
    pub fn remove_overlapping(&mut self, start: u64, end: u64) -> (u64, u64) {
        let (mut lo, mut hi) = (start, end);
        for s in self.overlapping(start, end) {
            if let Some(e) = self.known.get(&s).copied() {
                lo = lo.min(s);
                hi = hi.max(e);
            }
            self.remove_mapping(s);
        }
        (lo, hi)
    }

    /// Whether `address` is in code added with its tables.
    fn is_known(&self, address: u64) -> bool {
        self.known
            .range(..=address)
            .next_back()
            .is_some_and(|(_, &end)| address < end)
    }

    /// Walks `user`'s stack: the addresses of its frames, innermost first,
    /// into `out` (the interrupted instruction, then each return address
    /// less one, so that a call that ends its function is placed in its
    /// caller), at most `max`; and how the walk ended.
    ///
    /// A return address in no file's code, whose frame has CPython's perf
    /// trampoline's shape (3.12 and 3.13 on x86-64: `sub $8,%rsp; call
    /// *%rcx; add $8,%rsp; ret`, no frame pointer kept, no unwind table:
    /// the caller's return address 8 bytes above the stack pointer, in a
    /// file's code), is stepped over by that shape; framehop's rule for
    /// code without tables (the frame pointer) would stop there, as perf's
    /// own `--call-graph dwarf` does, losing every caller of the Python
    /// function.
    pub fn unwind(&mut self, user: &UserStack<'_>, max: usize, out: &mut Vec<u64>) -> WalkEnd {
        let mut regs = UnwindRegsX86_64::new(user.ip, user.sp, user.bp);
        let mut read = |address: u64| user.read(address);
        let mut frame = FrameAddress::from_instruction_pointer(user.ip);
        let start = out.len();
        loop {
            if out.len() - start >= max {
                return WalkEnd::Full;
            }
            out.push(frame.address_for_lookup());
            let trampoline = if frame.is_return_address() && !self.is_known(frame.address()) {
                read(regs.sp().wrapping_add(8))
                    .ok()
                    .filter(|&ret| ret > 0 && self.is_known(ret - 1))
            } else {
                None
            };
            let next = match trampoline {
                Some(ret) => {
                    regs.set_sp(regs.sp().wrapping_add(16));
                    Ok(Some(ret))
                }
                None => self
                    .unwinder
                    .unwind_frame(frame, &mut regs, &mut self.cache, &mut read),
            };
            match next {
                Ok(Some(ret)) => match FrameAddress::from_return_address(ret) {
                    Some(f) => frame = f,
                    None => return WalkEnd::Cut,
                },
                Ok(None) => return WalkEnd::Root,
                Err(_) => return WalkEnd::Cut,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack copy is read only inside itself.
    #[test]
    fn reads_stay_inside_the_copy() {
        let stack: Vec<u8> = (0u8..24).collect();
        let user = UserStack {
            ip: 0,
            sp: 0x1000,
            bp: 0,
            stack: &stack,
        };
        assert_eq!(
            user.read(0x1000),
            Ok(u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]))
        );
        assert_eq!(
            user.read(0x1010),
            Ok(u64::from_le_bytes([16, 17, 18, 19, 20, 21, 22, 23]))
        );
        assert_eq!(user.read(0x1011), Err(()));
        assert_eq!(user.read(0xfff), Err(()));
        assert_eq!(user.read(u64::MAX), Err(()));
    }

    /// Where no code is known, the frame pointer chain is followed (JIT
    /// code, CPython's trampolines): two frames of rbp/return pairs.
    #[test]
    fn frame_pointers_are_followed_where_no_tables_are() {
        let sp = 0x7000_0000u64;
        let mut stack = vec![0u8; 64];
        // Frame at sp+16: saved rbp -> sp+32, return address 0x5000.
        stack[16..24].copy_from_slice(&(sp + 32).to_le_bytes());
        stack[24..32].copy_from_slice(&0x5000u64.to_le_bytes());
        // Frame at sp+32: saved rbp 0 (the root), return address 0x6000.
        stack[32..40].copy_from_slice(&0u64.to_le_bytes());
        stack[40..48].copy_from_slice(&0x6000u64.to_le_bytes());
        let user = UserStack {
            ip: 0x4000,
            sp,
            bp: sp + 16,
            stack: &stack,
        };
        let mut unwinder = SpaceUnwinder::new();
        let mut out = Vec::new();
        unwinder.unwind(&user, 16, &mut out);
        assert_eq!(out[..3], [0x4000, 0x4fff, 0x5fff], "{out:x?}");
        let mut few = Vec::new();
        assert_eq!(unwinder.unwind(&user, 2, &mut few), WalkEnd::Full);
        assert_eq!(few, [0x4000, 0x4fff]);
    }

    /// This test's own stack, copied with its registers as the kernel
    /// copies a sample's, walks through the unwind tables of the test
    /// binary (the frame pointer register zeroed, so that only the tables
    /// can give the callers) back through `outer` and the test itself.
    #[test]
    fn own_stack_unwinds_through_the_tables() {
        #[inline(never)]
        fn outer() -> (Vec<u64>, WalkEnd) {
            std::hint::black_box(inner())
        }
        #[inline(never)]
        fn inner() -> (Vec<u64>, WalkEnd) {
            let (ip, sp): (u64, u64);
            // SAFETY: reads two registers into outputs, nothing else.
            unsafe {
                std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", ip = out(reg) ip, sp = out(reg) sp);
            }
            let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
            let mut unwinder = SpaceUnwinder::new();
            let mut stack_end = sp;
            let mut added = 0;
            for line in maps.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                let (s, e) = f[0].split_once('-').expect("range");
                let start = u64::from_str_radix(s, 16).expect("start");
                let end = u64::from_str_radix(e, 16).expect("end");
                if (start..end).contains(&sp) {
                    stack_end = end;
                }
                if f[1].contains('x') && f.len() > 5 && f[5].starts_with('/') {
                    let module = crate::Module {
                        name: f[5].to_string(),
                        is_file: true,
                        file_id: None,
                        mapped_at: Vec::new(),
                        pinned: None,
                    };
                    let pgoff = u64::from_str_radix(f[2], 16).expect("offset");
                    if let Ok(symbols) = crate::SymbolCache::new().module_symbols(&module) {
                        added +=
                            usize::from(unwinder.add_mapping(f[5], &symbols, start, end, pgoff));
                    }
                }
            }
            assert!(added > 0, "no mapping with unwind tables");
            let len = (stack_end - sp).min(32 << 10) as usize;
            // SAFETY: [sp, sp + len) lies in this thread's stack mapping,
            // above the stack pointer: mapped and readable.
            let stack = unsafe { std::slice::from_raw_parts(sp as *const u8, len) }.to_vec();
            let user = UserStack {
                ip,
                sp,
                bp: 0,
                stack: &stack,
            };
            let mut out = Vec::new();
            let end = unwinder.unwind(&user, 64, &mut out);
            (out, end)
        }
        let (frames, _) = outer();
        let within = |f: fn() -> (Vec<u64>, WalkEnd), a: u64| {
            let start = f as usize as u64;
            a > start && a < start + 4096
        };
        assert!(within(inner, frames[0]), "{frames:x?}");
        assert!(
            frames.iter().any(|&a| within(outer, a)),
            "outer is not among the frames {frames:x?}"
        );
        assert!(frames.len() > 4, "{frames:x?}");
    }
}
