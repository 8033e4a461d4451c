//! One time base for spans and samples: the tracer stamps spans with the
//! wall clock (`time.time_ns()`), the perf backend stamps samples with
//! `CLOCK_MONOTONIC`. Each log says where the two clocks stood against each
//! other, measured while the job ran: `wall_ns=` and `monotonic_ns=` in its
//! header, and `# lotus-trace: clock wall_ns=... monotonic_ns=...` lines
//! written with each block of events. [`ClockMap`] turns span times into
//! monotonic times from those pairs.
//!
//! ```
//! use lotus_protocol::{clock_pair_of_line, ClockMap};
//!
//! let head = "#lotus-trace v1 role=main pid=7 wall_ns=1000500 monotonic_ns=500";
//! let later = "# lotus-trace: clock wall_ns=2000600 monotonic_ns=1000500";
//! let pairs = [head, later].iter().filter_map(|l| clock_pair_of_line(l)).collect();
//! let map = ClockMap::new(pairs);
//! assert_eq!(map.to_monotonic(1000500), Some(500));
//! // Halfway, the offset is halfway between the two measured ones.
//! assert_eq!(map.to_monotonic(1500550), Some(500500));
//! assert_eq!(map.drift_ns(), Some(100));
//! ```

/// The two clocks read back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct ClockPair {
    /// Wall clock, ns since the Unix epoch.
    pub wall_ns: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub monotonic_ns: u64,
}

impl ClockPair {
    /// Wall minus monotonic, ns.
    pub fn offset_ns(&self) -> i128 {
        i128::from(self.wall_ns) - i128::from(self.monotonic_ns)
    }
}

/// The first word of a trace log's header line.
pub const HEADER_TAG: &str = "#lotus-trace";

/// The clock pair a log line holds: the `#lotus-trace` header's
/// `wall_ns=` / `monotonic_ns=`, or a `# lotus-trace: clock` line. `None`
/// for any other line, or one with only one of the two.
pub fn clock_pair_of_line(line: &str) -> Option<ClockPair> {
    let line = line.trim();
    let rest = if let Some(r) = line.strip_prefix(HEADER_TAG) {
        r
    } else {
        line.strip_prefix('#')?
            .trim_start()
            .strip_prefix("lotus-trace:")?
            .trim_start()
            .strip_prefix("clock ")?
    };
    let (mut wall, mut mono) = (None, None);
    for word in rest.split_whitespace() {
        match word.split_once('=') {
            Some(("wall_ns", v)) => wall = v.parse().ok(),
            Some(("monotonic_ns", v)) => mono = v.parse().ok(),
            _ => {}
        }
    }
    Some(ClockPair {
        wall_ns: wall?,
        monotonic_ns: mono?,
    })
}

/// Wall-clock span times to `CLOCK_MONOTONIC`, from the pairs measured
/// during the run: the offset is interpolated between the pairs around a
/// time, and the nearest pair's holds before the first and after the last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClockMap {
    /// Sorted by wall time, one per wall time.
    pairs: Vec<ClockPair>,
}

impl ClockMap {
    /// The map of these pairs (any order).
    pub fn new(mut pairs: Vec<ClockPair>) -> Self {
        pairs.sort_unstable();
        pairs.dedup_by_key(|p| p.wall_ns);
        ClockMap { pairs }
    }

    /// Whether no pair was measured (old logs): times cannot be mapped.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The pairs, by wall time.
    pub fn pairs(&self) -> &[ClockPair] {
        &self.pairs
    }

    /// The offset (wall minus monotonic) at wall time `wall_ns`.
    pub fn offset_at(&self, wall_ns: u64) -> Option<i128> {
        let i = self.pairs.partition_point(|p| p.wall_ns <= wall_ns);
        let (before, after) = (
            i.checked_sub(1).map(|j| self.pairs[j]),
            self.pairs.get(i).copied(),
        );
        Some(match (before, after) {
            (Some(a), Some(b)) => {
                let (oa, ob) = (a.offset_ns(), b.offset_ns());
                let span = i128::from(b.wall_ns - a.wall_ns);
                oa + (ob - oa) * i128::from(wall_ns - a.wall_ns) / span
            }
            (Some(a), None) => a.offset_ns(),
            (None, Some(b)) => b.offset_ns(),
            (None, None) => return None,
        })
    }

    /// `wall_ns` on the monotonic clock; `None` without pairs, or before
    /// the monotonic clock's zero.
    pub fn to_monotonic(&self, wall_ns: u64) -> Option<u64> {
        let m = i128::from(wall_ns) - self.offset_at(wall_ns)?;
        u64::try_from(m).ok()
    }

    /// How far the offset moved from the first pair to the last (ns): the
    /// wall clock's drift (NTP) during the run. `None` without pairs.
    pub fn drift_ns(&self) -> Option<i128> {
        Some(self.pairs.last()?.offset_ns() - self.pairs.first()?.offset_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_with_and_without_pairs() {
        let p = clock_pair_of_line("#lotus-trace v1 role=worker pid=3 wall_ns=10 monotonic_ns=4");
        assert_eq!(
            p,
            Some(ClockPair {
                wall_ns: 10,
                monotonic_ns: 4
            })
        );
        assert_eq!(p.map(|p| p.offset_ns()), Some(6));
        assert!(clock_pair_of_line("# lotus-trace: clock wall_ns=1 monotonic_ns=2").is_some());
        for none in [
            "#lotus-trace v1 role=main pid=3",
            "#lotus-trace v1 wall_ns=10",
            "# lotus-trace: role=worker from here on",
            "# lotus-trace: clock wall_ns=x monotonic_ns=2",
            "SOp,1,2,kind=op",
        ] {
            assert_eq!(clock_pair_of_line(none), None, "{none}");
        }
    }

    #[test]
    fn before_after_and_without_pairs() {
        let map = ClockMap::new(vec![
            ClockPair {
                wall_ns: 2000,
                monotonic_ns: 1000,
            },
            ClockPair {
                wall_ns: 1000,
                monotonic_ns: 10,
            },
        ]);
        assert_eq!(map.to_monotonic(995), Some(5));
        assert_eq!(map.to_monotonic(1500), Some(505));
        assert_eq!(map.to_monotonic(3000), Some(2000));
        assert_eq!(map.drift_ns(), Some(10));
        assert_eq!(ClockMap::default().to_monotonic(1), None);
        assert!(ClockMap::default().is_empty());
        // Before the monotonic clock's zero.
        assert_eq!(map.to_monotonic(100), None);
    }
}
