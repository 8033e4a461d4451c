//! Synthetic sampled trace folders: the samples, symbols and stacks files
//! `lotus trace run --sample` writes, from samples a test spells out.

use std::path::Path;

use lotus_samples::{
    write_sampling, Sample, SampleFiles, SampleSink, SamplesWriter, StackNode, Symbol,
};

/// The wall clock of [`worker_folder`]'s log, this far ahead of the
/// samples' clock, ns.
pub const WALL_AHEAD_NS: u64 = 1_000_000;

/// Writes a sampled worker's folder into `dir` (pid 10, one thread):
/// its log holds `spans` (`(name, start, duration, fields)`, the start on
/// the samples' clock, written [`WALL_AHEAD_NS`] ahead on the wall clock
/// as `S<name>,<start>,<duration>,<fields>`) and a clock pair at 5,000 ns;
/// it is sampled every 100 ns from 0 to 5,000 ns, `sample(t)` giving the
/// sample's `(symbol, kernel, stack id)` at `t`, then `extra` (each with
/// its stack id); `symbols` and `stacks` as [`write_stacked_samples`]
/// takes them.
pub fn worker_folder(
    dir: &Path,
    spans: &[(&str, u64, u64, &str)],
    symbols: &[(u32, Symbol)],
    stacks: &[StackNode],
    sample: impl Fn(u64) -> (u32, bool, u32),
    extra: &[(Sample, u32)],
) {
    let off = WALL_AHEAD_NS;
    let mut log = format!("#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n");
    for (name, start, dur, fields) in spans {
        log += &format!("S{name},{},{dur},{fields}\n", start + off);
    }
    log += &format!(
        "# lotus-trace: clock wall_ns={} monotonic_ns=5000\n",
        5000 + off
    );
    std::fs::write(dir.join("lotus_worker_pid_10"), log).expect("log");
    let (mut samples, mut ids) = (Vec::new(), Vec::new());
    for t in (0..5000u64).step_by(100) {
        let (symbol, kernel, id) = sample(t);
        samples.push(Sample {
            time_ns: t,
            pid: 10,
            tid: 10,
            symbol,
            kernel,
            counters: Default::default(),
        });
        ids.push(id);
    }
    for (s, id) in extra {
        samples.push(*s);
        ids.push(*id);
    }
    write_stacked_samples(dir, symbols, stacks, &samples, &ids);
}

/// Writes `prefix` `lotus`'s samples files into `dir`: `symbols`, the
/// stack tree `stacks`, each of `samples` with its stack id in
/// `stack_ids` (0: no stack), and a complete `.sampling` at 10 MHz (one
/// sample every 100 ns), as a run would leave them.
pub fn write_stacked_samples(
    dir: &Path,
    symbols: &[(u32, Symbol)],
    stacks: &[StackNode],
    samples: &[Sample],
    stack_ids: &[u32],
) {
    let mut w = SamplesWriter::create(dir, "lotus").expect("samples writer");
    w.with_stacks().expect("stacks");
    w.symbols(symbols).expect("symbols");
    w.stacks(stacks).expect("stacks");
    w.samples_with_stacks(samples, stack_ids).expect("samples");
    w.finish().expect("finish");
    let files = SampleFiles::of(dir, "lotus");
    write_sampling(
        &files.sampling,
        &[
            ("status", "complete".into()),
            ("frequency_hz", "10000000".into()),
            ("interval_ns", "100".into()),
        ],
    )
    .expect("sampling");
}
