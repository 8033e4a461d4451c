//! The samples of each op span, for `lotus trace view DIR`: the rule of
//! [`super::in_pipeline`] applied once (`SampledTrace::credit`, the same
//! call `lotus attribute DIR` sums per op), summed per span instead.
//!
//! Memory: each sample credited to a span becomes a (span id, symbol) pair
//! sorted through [`lotus_sort`] (in memory up to its budget, past that
//! in temporary files). The view reads its events in reading order, the
//! order of span ids, and asks [`SpanSamples::at`] for each op span: the
//! pairs are met in that order and counted as they pass, keeping at most
//! `top` functions for the one span at hand. Nothing grows with the
//! trace's length but the sorted file.

use lotus_sys::input::Dir;
use std::cmp::Reverse;
use std::iter::Peekable;
use std::path::Path;

use serde::Serialize;

use super::in_pipeline::{Credit, Error, SampledTrace, Target};
use lotus_samples::SymbolTable;
use lotus_sort::bytes::{Get, Put};
use lotus_sort::{Budget, Record, Sorted, Sorter, SpillError};

/// What one op span received: the arguments `lotus trace view` gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SpanSample {
    /// Samples credited to the span (not those of spans nested in it).
    pub cpu_samples: u64,
    /// Their CPU time: samples times the sampling interval, ms.
    pub cpu_ms: f64,
    /// The functions with the most samples, most first.
    pub top_functions: Vec<SpanFunction>,
}

/// One of a span's top functions. Short, as a view holds one list per op
/// span (millions of them): the module's file name, not its path (`lotus
/// attribute DIR` gives the path), the share to 4 decimals.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SpanFunction {
    /// The function.
    pub function: String,
    /// Its module's file name (`[kernel]` as it is).
    pub module: String,
    /// The span's samples in it.
    pub samples: u64,
    /// Their share of the span's samples (0..1, 4 decimals).
    pub share: f64,
}

impl SpanFunction {
    fn of(symbols: &SymbolTable, symbol: u32, samples: u64, of: u64) -> SpanFunction {
        let s = symbols.get(symbol);
        let module = Path::new(&s.module)
            .file_name()
            .map_or(s.module.clone(), |n| n.to_string_lossy().into_owned());
        SpanFunction {
            function: s.function.clone(),
            module,
            samples,
            share: (samples as f64 / of.max(1) as f64 * 1e4).round() / 1e4,
        }
    }
}

/// One sample credited to a span: the span's id and the sample's symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct SpanSymbol {
    span: u64,
    symbol: u32,
}

impl Record for SpanSymbol {
    const SIZE: usize = 12;
    fn encode(&self, out: &mut [u8]) {
        Put::new(out).u64(self.span).u32(self.symbol);
    }
    fn decode(b: &[u8]) -> Self {
        let mut g = Get::new(b);
        SpanSymbol {
            span: g.u64(),
            symbol: g.u32(),
        }
    }
}

/// The samples of a sampled trace folder, by op span, handed out in the
/// order of span ids.
#[non_exhaustive]
pub struct SpanSamples {
    pairs: Peekable<Sorted<SpanSymbol>>,
    symbols: SymbolTable,
    interval_ns: u64,
    top: usize,
    /// Every sample read.
    pub total_samples: u64,
    /// Samples credited to an op span.
    pub credited_samples: u64,
    /// Credited samples whose span was not asked for (the logs changed
    /// between the two passes over them): left out.
    pub mismatched: u64,
    /// Whether the samples are those of a run cut short.
    pub partial: bool,
    /// What is worth telling the user (as `lotus attribute DIR` says it).
    pub notes: Vec<String>,
}

impl SpanSamples {
    /// Credits the samples of the sampled trace folder `dir` (samples of
    /// `prefix`) to its op spans, keeping the `top` functions of each.
    pub fn of_folder<'a>(
        dir: impl Into<Dir<'a>>,
        prefix: &str,
        budget: Budget,
        top: usize,
    ) -> Result<SpanSamples, Error> {
        let dir: Dir<'_> = dir.into();
        let mut trace = SampledTrace::open(dir, prefix, budget)?;
        let mut sorter: Sorter<SpanSymbol> = Sorter::new(budget);
        let total_samples = trace.credit(|c: Credit<'_>| {
            if let (Target::Op(_), Some(span)) = (c.target, c.span) {
                sorter.push(SpanSymbol {
                    span,
                    symbol: c.sample.symbol,
                })?;
            }
            Ok(())
        })?;
        let credited_samples = sorter.len();
        let partial = trace.partial();
        let notes = trace.notes().to_vec();
        Ok(SpanSamples {
            pairs: sorter.finish()?.peekable(),
            interval_ns: trace.sampling.interval_ns,
            symbols: trace.sampling.symbols,
            top,
            total_samples,
            credited_samples,
            mismatched: 0,
            partial,
            notes,
        })
    }

    /// What the op span of id `span` received (asked in increasing order
    /// of id; 0 samples for a span that got none).
    pub fn at(&mut self, span: u64) -> Result<SpanSample, SpillError> {
        // Pairs of spans before this one were never asked for.
        while let Some(p) = self
            .pairs
            .next_if(|p| p.as_ref().is_ok_and(|p| p.span < span))
        {
            p?;
            self.mismatched += 1;
        }
        let mut samples = 0u64;
        // The `top` largest (count, symbol) runs, ordered as `lotus
        // attribute` orders functions: most samples first, then symbol id.
        let mut best: Vec<(u64, u32)> = Vec::with_capacity(self.top + 1);
        let mut run: Option<(u32, u64)> = None;
        let keep = |best: &mut Vec<(u64, u32)>, (symbol, n): (u32, u64)| {
            let at = best.partition_point(|&(k, s)| (Reverse(k), s) < (Reverse(n), symbol));
            if at < self.top {
                best.insert(at, (n, symbol));
                best.truncate(self.top);
            }
        };
        while let Some(p) = self
            .pairs
            .next_if(|p| p.as_ref().map_or(true, |p| p.span == span))
        {
            let p = p?;
            samples += 1;
            match &mut run {
                Some((symbol, n)) if *symbol == p.symbol => *n += 1,
                _ => {
                    if let Some(done) = run.replace((p.symbol, 1)) {
                        keep(&mut best, done);
                    }
                }
            }
        }
        if let Some(done) = run {
            keep(&mut best, done);
        }
        Ok(SpanSample {
            cpu_samples: samples,
            cpu_ms: samples.saturating_mul(self.interval_ns) as f64 / 1e6,
            top_functions: best
                .into_iter()
                .map(|(n, symbol)| SpanFunction::of(&self.symbols, symbol, n, samples))
                .collect(),
        })
    }

    /// Counts the pairs no span asked for (call after the last span).
    pub fn finish(&mut self) -> Result<(), SpillError> {
        for p in self.pairs.by_ref() {
            p?;
            self.mismatched += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_pipeline::tests::{folder, sampled_folder};
    use crate::in_pipeline::{attribute_folder, TOP_FUNCTIONS};
    use lotus_samples::{Sample, Symbol};

    /// The per-span figures summed per op are `lotus attribute`'s per-op
    /// figures (one rule), on a folder with a pool thread, an independent
    /// thread and an untraced process.
    #[test]
    fn spans_sum_to_the_ops_of_the_attribution() {
        let dir = folder();
        let a = attribute_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("attribute");
        // A tiny budget: the pairs go through temporary files.
        let mut s = SpanSamples::of_folder(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
            .expect("spans");
        // The log's events in reading order: A is event 0, B event 1.
        let sa = s.at(0).expect("A");
        let sb = s.at(1).expect("B");
        s.finish().expect("finish");
        assert_eq!(s.mismatched, 0);
        let row = |name: &str| a.rows.iter().find(|r| r.name == name).expect("row");
        assert_eq!(sa.cpu_samples, row("A").samples);
        assert_eq!(sb.cpu_samples, row("B").samples);
        assert_eq!(sa.cpu_samples, 20);
        assert_eq!(sa.cpu_ms, 20.0 * 100.0 / 1e6);
        let top = &row("A").top_functions;
        assert_eq!(sa.top_functions.len(), top.len());
        for (f, t) in sa.top_functions.iter().zip(top) {
            assert_eq!((&f.function, f.samples), (&t.function, t.samples));
            assert_eq!(f.module, "k.so", "the module's file name");
            assert!((f.share - t.share).abs() <= 5e-5);
        }
        assert_eq!(sb.top_functions[0].function, "kb");
        assert_eq!(s.credited_samples, 40);
        assert_eq!(s.total_samples, a.total_samples);
    }

    /// Nested spans: the outer span's samples leave out the inner's; each
    /// span of an op counts its own (two calls, two spans); a span with no
    /// samples gets 0; the top list is cut at `top`, most first.
    #[test]
    fn nested_and_repeated_spans_each_get_their_own() {
        // Events (monotonic = wall here): Outer [0, 1000) holding Inner
        // [200, 400), a Batch span, Outer again [2000, 3000), Idle
        // [5000, 5100) with no sample.
        let log = "#lotus-trace v1 role=worker pid=10 wall_ns=0 monotonic_ns=0\n\
                   SOuter,0,1000,kind=op\nSInner,200,200,kind=op\n\
                   SBatch,0,3000,kind=batch,batch=1\n\
                   SOuter,2000,1000,kind=op\nSIdle,5000,100,kind=op\n\
                   # lotus-trace: clock wall_ns=9000 monotonic_ns=9000\n";
        let symbols = [
            (0, Symbol::new("outer_a", "/k.so")),
            (1, Symbol::new("outer_b", "/k.so")),
            (2, Symbol::new("inner", "/k.so")),
            (3, Symbol::new("outer_c", "/k.so")),
        ];
        let mut samples = Vec::new();
        for t in (0..3000u64).step_by(10) {
            let symbol = if (200..400).contains(&t) {
                2
            } else if t < 1000 {
                // 3 of every 4 in outer_a, the rest split b / c.
                [0, 0, 0, 1, 0, 0, 0, 3][(t / 10 % 8) as usize]
            } else {
                1
            };
            samples.push(Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol,
                kernel: false,
                counters: Default::default(),
            });
        }
        let dir = sampled_folder(log, &symbols, &samples, 10);
        let mut s =
            SpanSamples::of_folder(dir.path(), "lotus", Budget::default(), 2).expect("spans");
        let outer = s.at(0).expect("outer");
        let inner = s.at(1).expect("inner");
        let outer2 = s.at(3).expect("outer 2");
        let idle = s.at(4).expect("idle");
        s.finish().expect("finish");
        assert_eq!(s.mismatched, 0);
        assert_eq!(inner.cpu_samples, 20);
        assert_eq!(inner.top_functions.len(), 1);
        assert_eq!(inner.top_functions[0].function, "inner");
        assert_eq!(inner.top_functions[0].share, 1.0);
        // 100 samples in [0, 1000), 20 of them the inner span's.
        assert_eq!(outer.cpu_samples, 80);
        let names: Vec<&str> = outer
            .top_functions
            .iter()
            .map(|f| f.function.as_str())
            .collect();
        assert_eq!(names, ["outer_a", "outer_b"], "cut at 2, most first");
        assert_eq!(
            outer.top_functions[0].samples + outer.top_functions[1].samples,
            80 - outer_c_samples(&samples)
        );
        assert_eq!(outer2.cpu_samples, 100);
        assert_eq!(outer2.top_functions[0].function, "outer_b");
        assert_eq!(idle.cpu_samples, 0);
        assert!(idle.top_functions.is_empty());
        // Samples after the last span are outside any op: not on a span.
        assert_eq!(s.credited_samples, 200);
        assert_eq!(s.total_samples, 300);
    }

    fn outer_c_samples(samples: &[Sample]) -> u64 {
        samples.iter().filter(|s| s.symbol == 3).count() as u64
    }

    /// A span the view never asks for leaves its samples counted as
    /// mismatched, never handed to the next span.
    #[test]
    fn spans_not_asked_for_are_counted_not_misplaced() {
        let dir = folder();
        let mut s =
            SpanSamples::of_folder(dir.path(), "lotus", Budget::default(), 5).expect("spans");
        let sb = s.at(1).expect("B");
        assert_eq!(sb.cpu_samples, 20);
        assert_eq!(sb.top_functions[0].function, "kb");
        s.finish().expect("finish");
        assert_eq!(s.mismatched, 20);
    }
}
