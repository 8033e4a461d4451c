//! Shared driver of the readers' property tests (lotus-trace's,
//! lotus-attribute's, and the VTune and uProf backends').
//!
//! Each property runs `PROPTEST_CASES` cases (256 by default, so the suite
//! stays fast). With `LOTUS_FUZZ_SECONDS=N` each property instead runs
//! rounds of cases with fresh seeds until N seconds have passed: a fuzz run
//! of a fixed time. Each property prints its seed as it starts (shown with
//! a failing test's output, or with `--nocapture`), and a failure prints it
//! again (`Fixed(N)`); run again with `PROPTEST_RNG_SEED=N` (and without
//! `LOTUS_FUZZ_SECONDS`) to replay it. A generator makes only input whose
//! expected result the property knows: one that can make what the reader
//! rightly refuses is a defect of the test.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

/// Cases per round: `PROPTEST_CASES`, else 256.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Seconds of fuzzing per property, when `LOTUS_FUZZ_SECONDS` is set.
fn fuzz_seconds() -> Option<f64> {
    std::env::var("LOTUS_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
}

/// A seed from the clock and the process id (no extra crate needed).
fn fresh_seed(round: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // splitmix64 of the mix, so nearby clocks give unrelated seeds.
    let mut z = nanos ^ (u64::from(std::process::id()) << 32) ^ round.wrapping_mul(0x9E37);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn config(seed: RngSeed) -> Config {
    Config {
        cases: cases(),
        // Failures are reported with their seed; no regression files are
        // written into the source tree.
        failure_persistence: None,
        max_shrink_time: 30_000,
        rng_seed: seed,
        ..Config::default()
    }
}

fn run_round<S>(
    name: &str,
    seed: RngSeed,
    strategy: &S,
    test: &impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let mut runner = TestRunner::new(config(seed));
    let replay = replay_line(seed);
    match runner.run(strategy, test) {
        Ok(()) => {}
        Err(TestError::Fail(why, value)) => {
            panic!("property {name} failed (seed {seed:?}): {why}\nminimal input: {value:#?}\n{replay}")
        }
        Err(TestError::Abort(why)) => {
            panic!("property {name} aborted (seed {seed:?}): {why}\n{replay}")
        }
    }
}

/// How to run a round again: its seed and its number of cases (the case
/// that failed is found again only with at least as many cases).
fn replay_line(seed: RngSeed) -> String {
    match seed {
        RngSeed::Fixed(n) => format!(
            "replay it: PROPTEST_RNG_SEED={n} PROPTEST_CASES={} (without LOTUS_FUZZ_SECONDS)",
            cases()
        ),
        RngSeed::Random => "replay: no fixed seed".into(),
    }
}

/// Checks `test` on values of `strategy`: `PROPTEST_CASES` cases, or
/// rounds of them for `LOTUS_FUZZ_SECONDS`. A panic inside `test` is a
/// failure, shrunk like any other.
pub fn check<S>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let Some(seconds) = fuzz_seconds() else {
        // PROPTEST_RNG_SEED replays a failure; otherwise a fresh seed,
        // printed with any failure.
        let seed = match Config::default().rng_seed {
            RngSeed::Fixed(s) => RngSeed::Fixed(s),
            RngSeed::Random => RngSeed::Fixed(fresh_seed(0)),
        };
        if let RngSeed::Fixed(n) = seed {
            // Shown with the test's output (every failure, or --nocapture).
            eprintln!("{name}: seed {n} (PROPTEST_RNG_SEED={n} replays it)");
        }
        run_round(name, seed, &strategy, &test);
        return;
    };
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut rounds = 0u64;
    while Instant::now() < deadline {
        let seed = RngSeed::Fixed(fresh_seed(rounds));
        run_round(name, seed, &strategy, &test);
        rounds += 1;
    }
    eprintln!(
        "{name}: {} cases in {rounds} round(s) of {seconds} s, no failure",
        rounds * u64::from(cases())
    );
}

/// Cuts `bytes` at `at` (a fraction of the length, 0..=1).
pub fn cut(bytes: &[u8], at: f64) -> &[u8] {
    let n = ((bytes.len() as f64) * at).floor() as usize;
    &bytes[..n.min(bytes.len())]
}
