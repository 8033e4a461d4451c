//! Code without symbols: one stable `func@0x...` row per function.

use std::path::Path;

use crate::common::*;
use object::{Object, ObjectSegment, ObjectSymbol};

/// The file offset of `name` in the ELF file at `path`, from its symbol
/// table and program headers: computed here without the backend's code.
fn file_offset_of(path: &Path, name: &str) -> u64 {
    let data = std::fs::read(path).expect("read lib");
    let obj = object::File::parse(&*data).expect("parse lib");
    let sym = obj
        .symbols()
        .find(|s| s.name() == Ok(name))
        .expect("symbol in the unstripped copy");
    let addr = sym.address();
    let seg = obj
        .segments()
        .find(|s| addr >= s.address() && addr < s.address() + s.size())
        .expect("segment");
    addr - seg.address() + seg.file_range().0
}

#[test]
fn stripped_function_is_one_stable_entry_at_its_start() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (exe, lib, unstripped) = build_burn_with_lib(dir.path());
    let expected = format!("func@{:#x}", file_offset_of(&unstripped, "hot_kernel"));
    // The stripped copy really has no name for it.
    let stripped = std::fs::read(&lib).expect("read");
    assert!(!String::from_utf8_lossy(&stripped).contains("hot_kernel"));

    let mut names = Vec::new();
    for run in 0..2 {
        let report = profile_window(&exe, "lib", 0.6);
        eprintln!("run {run}: {:?}\n{}", report.symbolize, top(&report, 8));
        let rows: Vec<_> = report
            .report
            .rows
            .iter()
            .filter(|r| r.module == "libhot.so")
            .collect();
        let in_lib: f64 = rows.iter().map(|r| r.value).sum();
        let hot = rows[0];
        assert!(hot.function.starts_with("func@0x"), "{}", top(&report, 8));
        assert_eq!(hot.function, expected, "{}", top(&report, 8));
        assert_eq!(hot.module_path.as_deref(), lib.to_str());
        assert_eq!(
            hot.start_address,
            Some(file_offset_of(&unstripped, "hot_kernel"))
        );
        assert!(hot.value >= 1000.0, "{}", top(&report, 8));
        assert!(hot.value >= 0.9 * in_lib, "{}", top(&report, 8));
        // Hundreds of sampled addresses, a handful of rows: the hot
        // function, and hot_entry (still exported, so named).
        assert!(rows.len() <= 3, "{}", top(&report, 8));
        assert!(
            report.symbolize.addresses > 50,
            "only {} distinct addresses sampled",
            report.symbolize.addresses
        );
        names.push(hot.function.clone());
    }
    assert_eq!(names[0], names[1]);
}
