//! Turning (module, file offset) into (function, module) rows.
//!
//! Each distinct offset is symbolized once (the counts are already grouped
//! by module and offset), each module in one batch: blazesym reads the ELF
//! symbol tables (and debug files found through debug links, where
//! installed). An offset without a symbol (stripped code, `.plt`) is grouped
//! under the function that the unwind tables say holds it, named
//! `func@0x<file offset of its start>`; only when that fails too does it
//! become `[unknown]` in its module. Names are demangled by
//! [`lotus_core::Row::new`].

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use lotus_core::demangle::demangle;
use lotus_core::row::UNKNOWN_MODULE;
use lotus_core::Row;

use crate::model::{Location, Model, ModuleId};
use crate::unwind::FunctionStarts;

/// The function name for code nothing could name.
pub const UNKNOWN_FUNCTION: &str = "[unknown]";

/// How one offset was resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    /// Raw (mangled) name, `func@0x...`, or [`UNKNOWN_FUNCTION`].
    function: String,
    /// File offset of the function's start, where known.
    start: Option<u64>,
}

/// Figures about one symbolization pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SymbolizeStats {
    /// Distinct (module, offset) pairs looked up.
    pub addresses: usize,
    /// Of those, named from symbols.
    pub named: usize,
    /// Of those, grouped by unwind-table function start (`func@0x...`).
    pub by_unwind_table: usize,
    /// Of those, left `[unknown]`.
    pub unknown: usize,
    /// Wall time spent.
    pub elapsed: Duration,
}

/// Symbolizes one file's offsets.
fn resolve_file(sym: &Symbolizer, path: &str, offsets: &[u64]) -> Vec<Resolved> {
    let unknown = || Resolved {
        function: UNKNOWN_FUNCTION.to_string(),
        start: None,
    };
    let src = Source::Elf(Elf::new(path));
    let looked_up = sym.symbolize(&src, Input::FileOffset(offsets)).ok();
    let mut starts: Option<Option<FunctionStarts>> = None;
    let mut out = Vec::with_capacity(offsets.len());
    for (i, &offset) in offsets.iter().enumerate() {
        if let Some(Symbolized::Sym(s)) = looked_up.as_ref().and_then(|v| v.get(i)) {
            out.push(Resolved {
                function: s.name.to_string(),
                start: offset.checked_sub(s.offset as u64),
            });
            continue;
        }
        let table = starts.get_or_insert_with(|| FunctionStarts::load(Path::new(path)).ok());
        match table.as_ref().and_then(|t| t.function_start(offset)) {
            Some(start) => out.push(Resolved {
                function: format!("func@{start:#x}"),
                start: Some(start),
            }),
            None => out.push(unknown()),
        }
    }
    out
}

/// The module path (or pseudo-name) a row shows for `module`.
fn module_label(model: &Model, module: ModuleId) -> String {
    match model.modules.get(module as usize) {
        Some(m) if m.name == "//anon" => "[anon]".to_string(),
        Some(m) if m.is_file => m.name.clone(),
        // `[vdso]`, `[heap]`, `memfd:...`, `/x (deleted)`: a name, not a
        // path to open; bracket it so it is not taken for a file.
        Some(m) if m.name.starts_with('[') => m.name.clone(),
        Some(m) => format!("[{}]", m.name.trim_start_matches('/')),
        None => UNKNOWN_MODULE.to_string(),
    }
}

/// Rows for the sample counts in `counts` ((location) -> samples), one per
/// (function, module), most samples first.
pub(crate) fn rows(model: &Model, counts: &HashMap<Location, u64>) -> (Vec<Row>, SymbolizeStats) {
    let t0 = Instant::now();
    let mut stats = SymbolizeStats::default();
    let sym = Symbolizer::builder()
        .enable_code_info(false)
        .enable_inlined_fns(false)
        .enable_demangling(false)
        .build();

    // Offsets per file module, sorted (a stable order, and blazesym likes
    // batches).
    let mut by_module: BTreeMap<ModuleId, Vec<u64>> = BTreeMap::new();
    for loc in counts.keys() {
        if let Location::Module { module, offset } = *loc {
            if model
                .modules
                .get(module as usize)
                .is_some_and(|m| m.is_file)
            {
                by_module.entry(module).or_default().push(offset);
            }
        }
    }
    let mut resolved: HashMap<(ModuleId, u64), Resolved> = HashMap::new();
    for (module, offsets) in &mut by_module {
        offsets.sort_unstable();
        offsets.dedup();
        let path = &model.modules[*module as usize].name;
        for (off, r) in offsets.iter().zip(resolve_file(&sym, path, offsets)) {
            stats.addresses += 1;
            if r.function == UNKNOWN_FUNCTION {
                stats.unknown += 1;
            } else if r.function.starts_with("func@0x") {
                stats.by_unwind_table += 1;
            } else {
                stats.named += 1;
            }
            resolved.insert((*module, *off), r);
        }
    }

    // (function, module label) -> (samples, start)
    let mut grouped: HashMap<(String, String), (u64, Option<u64>)> = HashMap::new();
    for (loc, &n) in counts {
        let (function, module, start) = match *loc {
            Location::Module { module, offset } => match resolved.get(&(module, offset)) {
                Some(r) => (r.function.clone(), module_label(model, module), r.start),
                None => (
                    UNKNOWN_FUNCTION.to_string(),
                    module_label(model, module),
                    None,
                ),
            },
            Location::Unmapped => (
                UNKNOWN_FUNCTION.to_string(),
                UNKNOWN_MODULE.to_string(),
                None,
            ),
        };
        // Group by the demangled name: Rust monomorphizations that differ
        // only in their hash are one function to a reader.
        let e = grouped
            .entry((demangle(&function), module))
            .or_insert((0, start));
        e.0 += n;
        if e.1.is_none() {
            e.1 = start;
        }
    }
    let mut rows: Vec<Row> = grouped
        .into_iter()
        .map(|((function, module), (n, start))| {
            let mut row = Row::new(&function, &module, n as f64);
            row.start_address = start;
            row
        })
        .collect();
    rows.sort_by(|a, b| {
        b.value
            .total_cmp(&a.value)
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.module.cmp(&b.module))
    });
    stats.elapsed = t0.elapsed();
    (rows, stats)
}
