//! Reading the kernel's clocks.

/// `clock`'s time in nanoseconds (`clock_gettime`): the monotonic clock
/// that windows and samples are stamped on, and the CPU-time clocks.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec; the clocks lotus reads always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = super::clock_ns(libc::CLOCK_MONOTONIC);
        let b = super::clock_ns(libc::CLOCK_MONOTONIC);
        assert!(a > 0 && b >= a, "{a} then {b}");
    }
}
