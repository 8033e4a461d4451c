//! The unwinders of a job's processes, kept in step with their mappings
//! as they change: a change marks the range it touched, and a process's
//! unwinder takes in the marked ranges at its next walk (framehop's rule
//! cache is per unwinder, and counts its changes in 16 bits: rebuilding
//! one per change would wrap it; copying a process's mappings per sample
//! to compare them made lotus hold gigabytes for a job of tens of
//! thousands of mappings).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use crate::{Module, ModuleSymbols, SpaceUnwinder, SymbolCache, UserStack};

/// The most processes whose unwinders are kept; past it, the least
/// recently used is dropped (and built again if its process samples
/// again).
const MAX_UNWINDERS: usize = 512;

/// The most changed ranges an unwinder waits with; past it, it is built
/// again at its next walk.
const MAX_DIRTY: usize = 256;

/// One mapping of a process's code, as [`Unwinders::unwind`] asks for
/// them: `[start, end)` from file offset `pgoff` of the module at index
/// `module` of the caller's modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeMapping {
    /// Its first address.
    pub start: u64,
    /// Past its last address.
    pub end: u64,
    /// The file offset mapped at `start`.
    pub pgoff: u64,
    /// The module's index in the caller's list.
    pub module: u32,
}

/// The processes' unwinders (see the module's documentation).
#[derive(Debug)]
pub struct Unwinders {
    /// Where the tables are read through and kept.
    cache: Arc<SymbolCache>,
    by_pid: HashMap<u32, PidUnwinder>,
    /// Each module's symbol tables (whose unwind tables an unwinder
    /// reads), not kept alive here: the [`SymbolCache`] keeps them while
    /// they are used (its cache has a byte budget), and the unwinders
    /// keep the unwind tables of the files they have mapped.
    symbols: HashMap<u32, Weak<ModuleSymbols>>,
    /// Modules whose tables could not be read.
    unreadable: HashSet<u32>,
    /// Walks made so far: the age of each unwinder's last use.
    walks: u64,
}

#[derive(Debug)]
struct PidUnwinder {
    unwinder: SpaceUnwinder,
    last_used: u64,
    /// Address ranges whose mappings changed since the unwinder last took
    /// them in.
    dirty: Vec<(u64, u64)>,
}

impl Unwinders {
    /// No unwinders yet; tables read through `cache`.
    pub fn new(cache: Arc<SymbolCache>) -> Unwinders {
        Unwinders {
            cache,
            by_pid: HashMap::new(),
            symbols: HashMap::new(),
            unreadable: HashSet::new(),
            walks: 0,
        }
    }

    /// Says that `pid`'s mappings changed in `[start, end)`.
    pub fn changed(&mut self, pid: u32, start: u64, end: u64) {
        if let Some(u) = self.by_pid.get_mut(&pid) {
            if u.dirty.last() != Some(&(start, end)) {
                u.dirty.push((start, end));
            }
            if u.dirty.len() > MAX_DIRTY {
                self.by_pid.remove(&pid);
            }
        }
    }

    /// Drops `pid`'s unwinder (a new program, or a new process with its
    /// pid): built again from its mappings at its next walk.
    pub fn forget(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }

    /// The symbol tables of `module` (where its tables can be read).
    fn symbols_of(&mut self, modules: &[Module], module: u32) -> Option<Arc<ModuleSymbols>> {
        if self.unreadable.contains(&module) {
            return None;
        }
        if let Some(s) = self.symbols.get(&module).and_then(Weak::upgrade) {
            return Some(s);
        }
        let m = modules.get(module as usize).filter(|m| m.is_file)?;
        match self.cache.module_symbols(m) {
            Ok(s) => {
                self.symbols.insert(module, Arc::downgrade(&s));
                Some(s)
            }
            Err(_) => {
                self.unreadable.insert(module);
                None
            }
        }
    }

    /// Walks `stack` of process `pid` (at most `max` frames, into `out`:
    /// see [`SpaceUnwinder::unwind`]), its unwinder first brought up to
    /// date with its mappings as they are now: `mappings(start, end)`
    /// gives those that overlap `[start, end)`, by start.
    pub fn unwind(
        &mut self,
        modules: &[Module],
        pid: u32,
        stack: &UserStack<'_>,
        max: usize,
        out: &mut Vec<u64>,
        mappings: impl Fn(u64, u64) -> Vec<CodeMapping>,
    ) {
        self.walks += 1;
        if !self.by_pid.contains_key(&pid) && self.by_pid.len() >= MAX_UNWINDERS {
            if let Some(oldest) = self
                .by_pid
                .iter()
                .min_by_key(|(_, u)| u.last_used)
                .map(|(&p, _)| p)
            {
                self.by_pid.remove(&oldest);
            }
        }
        let mut entry = self.by_pid.remove(&pid).unwrap_or_else(|| PidUnwinder {
            unwinder: SpaceUnwinder::new(),
            last_used: 0,
            dirty: vec![(0, u64::MAX)],
        });
        entry.last_used = self.walks;
        for (start, end) in std::mem::take(&mut entry.dirty) {
            let (lo, hi) = entry.unwinder.remove_overlapping(start, end);
            for m in mappings(lo, hi) {
                if entry.unwinder.overlaps(m.start, m.end) {
                    continue;
                }
                let Some(symbols) = self.symbols_of(modules, m.module) else {
                    continue;
                };
                if let Some(module) = modules.get(m.module as usize) {
                    entry
                        .unwinder
                        .add_mapping(&module.name, &symbols, m.start, m.end, m.pgoff);
                }
            }
        }
        entry.unwinder.unwind(stack, max, out);
        self.by_pid.insert(pid, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// This test binary, as a module whose unwind tables can be read.
    fn own_binary() -> Module {
        Module {
            name: std::env::current_exe()
                .expect("exe")
                .to_string_lossy()
                .into_owned(),
            is_file: true,
            file_id: None,
            mapped_at: Vec::new(),
            pinned: None,
        }
    }

    /// A process's unwinder takes in its whole mappings at its first walk,
    /// then only the ranges that changed (and the mappings they cut),
    /// once each; a forgotten one is built again whole.
    #[test]
    fn an_unwinder_takes_in_only_what_changed() {
        let modules = [own_binary()];
        let mapping = |start: u64| CodeMapping {
            start,
            end: start + 0x1000,
            pgoff: 0,
            module: 0,
        };
        let current = RefCell::new(vec![mapping(0x10000), mapping(0x30000)]);
        let asked = RefCell::new(Vec::new());
        let mappings = |lo: u64, hi: u64| {
            asked.borrow_mut().push((lo, hi));
            let m = current.borrow();
            m.iter()
                .filter(|m| m.start < hi && m.end > lo)
                .copied()
                .collect()
        };
        let stack = UserStack {
            ip: 0,
            sp: 0,
            bp: 0,
            stack: &[],
        };
        let mut unwinders = Unwinders::new(Arc::new(SymbolCache::new()));
        let mut out = Vec::new();
        unwinders.unwind(&modules, 7, &stack, 4, &mut out, mappings);
        assert_eq!(*asked.borrow(), [(0, u64::MAX)]);
        let u = &unwinders.by_pid[&7].unwinder;
        assert!(u.overlaps(0x10000, 0x10001) && u.overlaps(0x30fff, 0x31000));
        // A mapping over the first one's second half.
        current.borrow_mut()[0].end = 0x10800;
        current.borrow_mut().insert(1, mapping(0x10800));
        unwinders.changed(7, 0x10800, 0x11800);
        unwinders.changed(7, 0x10800, 0x11800);
        unwinders.changed(8, 0x10800, 0x11800); // no unwinder: nothing to do
        asked.borrow_mut().clear();
        unwinders.unwind(&modules, 7, &stack, 4, &mut out, mappings);
        // The changed range and the whole mapping it cut, once.
        assert_eq!(*asked.borrow(), [(0x10000, 0x11800)]);
        let u = &unwinders.by_pid[&7].unwinder;
        assert!(u.overlaps(0x10000, 0x10001) && u.overlaps(0x11000, 0x11001));
        assert!(u.overlaps(0x30000, 0x30001));
        assert!(!u.overlaps(0x11800, 0x30000));
        unwinders.forget(7);
        asked.borrow_mut().clear();
        unwinders.unwind(&modules, 7, &stack, 4, &mut out, mappings);
        assert_eq!(*asked.borrow(), [(0, u64::MAX)]);
    }
}
