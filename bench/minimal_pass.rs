//! The floor for `lotus trace stats` (driven by `bench/scale_trace.py`):
//! a minimal byte-level pass over the same logs, on every CPU.
//!
//! ```text
//! cargo build --release -p lotus-trace --example minimal_pass
//! target/release/examples/minimal_pass DIR
//! ```
//!
//! Each thread (one per CPU, plain `std` threads) takes the next log file,
//! reads it in 1 MiB pieces, splits lines with `memchr`, skips `#` lines,
//! takes the name and the duration (the first and third fields), parses
//! the duration from its bytes and adds it to its name's count and sum.
//! No validation, no other field, no percentiles: what any reader must do
//! at least. Prints one JSON line: events, names, and per name the count
//! and the sum of durations (ns).

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

type Sums = HashMap<Vec<u8>, (u64, u64)>;

fn add_line(line: &[u8], sums: &mut Sums) {
    if line.is_empty() || line[0] == b'#' {
        return;
    }
    let mut commas = memchr::memchr_iter(b',', line);
    let (Some(a), Some(b)) = (commas.next(), commas.next()) else {
        return;
    };
    let c = commas.next().unwrap_or(line.len());
    let dur = line[b + 1..c]
        .iter()
        .fold(0u64, |v, &d| v * 10 + u64::from(d.wrapping_sub(b'0')));
    let name = &line[1..a];
    match sums.get_mut(name) {
        Some(s) => {
            s.0 += 1;
            s.1 += dur;
        }
        None => {
            sums.insert(name.to_vec(), (1, dur));
        }
    }
}

fn read_file(path: &std::path::Path, sums: &mut Sums) -> std::io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut kept = 0;
    loop {
        let n = f.read(&mut buf[kept..])?;
        if n == 0 {
            add_line(&buf[..kept], sums);
            return Ok(());
        }
        let filled = kept + n;
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &buf[..filled]) {
            add_line(&buf[start..end], sums);
            start = end + 1;
        }
        buf.copy_within(start..filled, 0);
        kept = filled - start;
        if kept == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: minimal_pass DIR")?;
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("_pid_"))
        })
        .collect();
    // Largest first, so the threads finish together.
    files.sort_by_key(|p| std::cmp::Reverse(p.metadata().map_or(0, |m| m.len())));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let parts: Vec<Sums> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut sums = Sums::new();
                    while let Some(p) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                        read_file(p, &mut sums).expect("read");
                    }
                    sums
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let mut all: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for part in parts {
        for (name, (n, sum)) in part {
            let e = all
                .entry(String::from_utf8_lossy(&name).into_owned())
                .or_default();
            e.0 += n;
            e.1 += sum;
        }
    }
    let events: u64 = all.values().map(|v| v.0).sum();
    let per_name: Vec<String> = all
        .iter()
        .map(|(k, (n, s))| format!("\"{k}\": [{n}, {s}]"))
        .collect();
    println!(
        "{{\"events\": {events}, \"names\": {}, \"per_name\": {{{}}}}}",
        all.len(),
        per_name.join(", ")
    );
    Ok(())
}
