//! What one sample costs the sampled code here, and the default frequency
//! that follows from it.
//!
//! Each cpu-clock sample is a timer interrupt in the sampled thread. On
//! bare metal that is a microsecond or two; in some virtual machines each
//! one is also a trap to the hypervisor (the timer is re-armed through an
//! MSR write), and the development VM measured 15-17 µs a sample: at
//! 10 kHz the sampled code ran 17-20% slower, and the shares of an
//! interpreter-heavy op shifted well beyond run-to-run noise (the flip's
//! kernel 0.87 of its samples at 10 kHz against 0.92 at 4 and 6 kHz). So
//! the default frequency is the highest, up to
//! [`crate::DEFAULT_FREQUENCY_HZ`], that keeps the slowdown under
//! [`MAX_SLOWDOWN`], measured once per process by running the same loop on
//! a private thread with and without a sampler on it.

use std::sync::OnceLock;
use std::time::Duration;

use lotus_core::SampleCost;
use perf_event::events::Software;
use perf_event::Builder;

use crate::DEFAULT_FREQUENCY_HZ;

/// The slowdown of the sampled code that the default frequency keeps
/// under: at 10% (6 kHz on the development VM) the function shares were
/// those of 4 kHz; at 17% (10 kHz there) they were not.
pub const MAX_SLOWDOWN: f64 = 0.10;

/// The lowest default: below it a window takes seconds to fill.
pub const MIN_DEFAULT_HZ: u64 = 1000;

/// The frequency the cost is measured at.
const PROBE_HZ: u64 = 10_000;

/// CPU time of one measured loop.
const LOOP: Duration = Duration::from_millis(5);

/// Loops measured with and without the sampler (the fastest counts).
const ROUNDS: usize = 6;

/// The default frequency for a cost of `per_sample`: the highest multiple
/// of 500 Hz up to [`DEFAULT_FREQUENCY_HZ`] whose slowdown stays under
/// [`MAX_SLOWDOWN`], and at least [`MIN_DEFAULT_HZ`].
pub fn default_frequency_for(cost: Option<SampleCost>) -> u64 {
    let Some(cost) = cost.filter(|c| !c.per_sample.is_zero()) else {
        return DEFAULT_FREQUENCY_HZ;
    };
    let hz = (MAX_SLOWDOWN / cost.per_sample.as_secs_f64()).min(DEFAULT_FREQUENCY_HZ as f64);
    // Whole multiples of 500 Hz: the figure is a measurement, not a
    // setting to carry to the hertz.
    let hz = (hz as u64 / 500) * 500;
    hz.clamp(MIN_DEFAULT_HZ, DEFAULT_FREQUENCY_HZ)
}

/// What one sample costs the sampled code here, measured once per process
/// (about 0.1 s); `Err` says why it could not be (perf not permitted).
pub fn sampling_cost() -> Result<SampleCost, String> {
    static COST: OnceLock<Result<SampleCost, String>> = OnceLock::new();
    COST.get_or_init(|| {
        // A thread of its own: the sampler observes that thread only.
        std::thread::Builder::new()
            .name("lotus-calibrate".into())
            .spawn(measure)
            .map_err(|e| format!("cannot start the calibration thread: {e}"))?
            .join()
            .map_err(|_| "the calibration thread panicked".to_string())?
    })
    .clone()
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    Duration::from_nanos(lotus_sys::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID))
}

/// `n` steps of a generator the optimizer cannot drop: ALU work with no
/// memory traffic, so the difference is the interrupts' own cost.
fn spin(n: u64) -> u64 {
    let mut x = std::hint::black_box(1u64);
    for _ in 0..n {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
    }
    std::hint::black_box(x)
}

/// CPU time of `spin(n)`.
fn timed(n: u64) -> Duration {
    let t = thread_cpu();
    spin(n);
    thread_cpu().saturating_sub(t)
}

fn measure() -> Result<SampleCost, String> {
    let mut sampler = Builder::new(Software::CPU_CLOCK);
    sampler
        .observe_self()
        .any_cpu()
        .exclude_kernel(true)
        .exclude_hv(true)
        .sample_frequency(PROBE_HZ)
        .enabled(false);
    let mut sampler = sampler
        .build()
        .map_err(|e| format!("cannot open a cpu-clock sampler on lotus itself: {e}"))?;
    // Steps for about LOOP of CPU time.
    let mut n = 100_000u64;
    loop {
        let t = timed(n);
        if t >= LOOP / 4 || n >= 1 << 40 {
            let scale = LOOP.as_secs_f64() / t.as_secs_f64().max(1e-6);
            n = ((n as f64) * scale).max(1.0) as u64;
            break;
        }
        n *= 4;
    }
    let (mut off, mut on) = (Duration::MAX, Duration::MAX);
    for _ in 0..ROUNDS {
        off = off.min(timed(n));
        sampler
            .enable()
            .map_err(|e| format!("cannot enable the calibration sampler: {e}"))?;
        let t = timed(n);
        sampler
            .disable()
            .map_err(|e| format!("cannot disable the calibration sampler: {e}"))?;
        on = on.min(t);
    }
    let samples = on.as_secs_f64() * PROBE_HZ as f64;
    let extra = on.saturating_sub(off).as_secs_f64();
    Ok(SampleCost::new(Duration::from_secs_f64(
        extra / samples.max(1.0),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(us: f64) -> Option<SampleCost> {
        Some(SampleCost::new(Duration::from_secs_f64(us * 1e-6)))
    }

    #[test]
    fn the_default_keeps_the_slowdown_under_the_limit() {
        // Bare metal: the full default.
        assert_eq!(default_frequency_for(cost(1.5)), DEFAULT_FREQUENCY_HZ);
        assert_eq!(default_frequency_for(cost(0.0)), DEFAULT_FREQUENCY_HZ);
        assert_eq!(default_frequency_for(None), DEFAULT_FREQUENCY_HZ);
        // The development VM: 16 µs a sample -> 6250 -> 6000 Hz.
        assert_eq!(default_frequency_for(cost(16.0)), 6000);
        let c = cost(16.0).unwrap();
        assert!(c.slowdown_at(6000) <= MAX_SLOWDOWN);
        assert!(c.slowdown_at(6500) > MAX_SLOWDOWN);
        // Never below the floor.
        assert_eq!(default_frequency_for(cost(500.0)), MIN_DEFAULT_HZ);
    }

    #[test]
    fn the_cost_is_measured_on_this_machine() {
        // perf_event_open with software events works where the tests run;
        // the figure itself depends on the machine, so only its sanity.
        let c = sampling_cost().expect("calibration");
        eprintln!(
            "sampling cost here: {c:?}, default {} Hz",
            default_frequency_for(Some(c))
        );
        assert!(c.per_sample < Duration::from_millis(1), "{c:?}");
        assert_eq!(sampling_cost(), Ok(c), "measured once");
    }
}
