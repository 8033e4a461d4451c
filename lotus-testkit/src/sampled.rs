//! Synthetic sampled trace folders: the samples, symbols and stacks files
//! `lotus trace run --sample` writes, from samples a test spells out.

use std::path::Path;

use lotus_samples::{
    write_sampling, Sample, SampleFiles, SampleSink, SamplesWriter, StackNode, Symbol,
};

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
