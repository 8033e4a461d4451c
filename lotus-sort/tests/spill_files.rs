//! A sorter keeps its runs in one temporary file, however many runs: a
//! long trace never runs into the limit on open files. (A test binary of
//! its own, so no other test opens files meanwhile.)
#![allow(clippy::unwrap_used)]

use lotus_sort::{Budget, Record, Sorter};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Num(u64);

impl Record for Num {
    const SIZE: usize = 8;
    fn encode(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.0.to_le_bytes());
    }
    fn decode(b: &[u8]) -> Self {
        Num(u64::from_le_bytes(b.try_into().unwrap()))
    }
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn thousands_of_runs_hold_one_file() {
    let before = open_files();
    // 1 byte of budget: 16 records per run, 2000 runs.
    let mut s = Sorter::new(Budget::new(1));
    let n = 32_000u64;
    for i in 0..n {
        s.push(Num((i * 7919) % n)).unwrap();
    }
    assert!(s.spilled());
    let during = open_files();
    assert!(
        during <= before + 1,
        "{before} open files before, {during} with 2000 runs"
    );
    let got: Vec<u64> = s.finish().unwrap().map(|r| r.unwrap().0).collect();
    assert_eq!(got, (0..n).collect::<Vec<_>>());
}
