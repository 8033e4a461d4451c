//! Scale bench of the VTune CSV reader (driven by `bench/scale_profile.py`).
//!
//! ```text
//! cargo run --release -p lotus-backend-vtune --example scale_read -- FILE collect|stream
//! ```
//!
//! - `collect`: [`read_hotspots`], every row kept in memory (what `lotus
//!   attribute` reads a profile with);
//! - `stream`: [`HotspotRows`], CPU time summed per (function, module) as
//!   the rows come: the `groupby(...).sum()` of the pandas reference.
//!
//! Prints one JSON line: rows, distinct functions, seconds, bytes and the
//! peak resident memory (`VmHWM`).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::time::Instant;

use lotus_backend_vtune::{read_hotspots, HotspotRows};

/// Peak resident set size of this process, in KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(mode)) = (args.get(1), args.get(2)) else {
        return Err("usage: scale_read FILE collect|stream".into());
    };
    let bytes = std::fs::metadata(path)?.len();
    let mut input = BufReader::with_capacity(1 << 16, File::open(path)?);
    let start = Instant::now();
    let (rows, groups, total) = match mode.as_str() {
        "collect" => {
            let report = read_hotspots(&mut input, path)?;
            let mut groups: HashMap<(&str, &str), f64> = HashMap::new();
            for r in &report.rows {
                *groups.entry((&r.function, &r.module)).or_default() += r.value;
            }
            (report.rows.len(), groups.len(), report.total())
        }
        "stream" => {
            let mut groups: HashMap<(String, String), f64> = HashMap::new();
            let mut rows = 0usize;
            let mut total = 0.0;
            for row in HotspotRows::new(&mut input, path)? {
                let row = row?;
                rows += 1;
                total += row.value;
                *groups.entry((row.function, row.module)).or_default() += row.value;
            }
            (rows, groups.len(), total)
        }
        other => return Err(format!("unknown mode {other}: collect or stream").into()),
    };
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{{\"mode\": \"{mode}\", \"rows\": {rows}, \"functions\": {groups}, \"total_cpu_s\": {total}, \"seconds\": {seconds}, \"bytes\": {bytes}, \"vmhwm_kib\": {}}}",
        vm_hwm_kib()
    );
    Ok(())
}
