//! How densely VTune's hotspots analysis samples.
//!
//! Intel's VTune User Guide ("Sampling Interval"; `-collect hotspots`,
//! knobs `sampling-mode` and `sampling-interval`, VTune 2019 and later):
//! user-mode sampling (`sampling-mode=sw`, the default) takes an interval
//! of 1 to 1000 ms, default 10 ms; hardware event-based sampling
//! (`sampling-mode=hw`) takes 0.01 to 1000 ms, default 1 ms. lotus turns
//! `--frequency` into an interval and picks the mode that allows it: user
//! mode down to 1 ms, hardware sampling below (which needs VTune's sampling
//! driver, or perf access for its driverless mode). Other analysis types
//! keep their own settings: lotus passes no knob to them.

use std::ffi::OsString;
use std::time::Duration;

use lotus_core::CollectOptions;

/// The analysis whose sampling lotus sets.
pub const HOTSPOTS: &str = "hotspots";

/// Least interval of user-mode sampling, ms.
pub const USER_MODE_MIN_MS: f64 = 1.0;
/// Least interval of hardware event-based sampling, ms.
pub const HARDWARE_MIN_MS: f64 = 0.01;
/// Greatest interval of either mode, ms.
pub const MAX_MS: f64 = 1000.0;
/// Hotspots' interval when lotus passes none (user-mode sampling), ms.
pub const DEFAULT_MS: f64 = 10.0;

/// What lotus asks of the hotspots analysis.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Sampling {
    /// Hardware event-based sampling (`sampling-mode=hw`), else user-mode.
    pub hardware: bool,
    /// The interval passed, ms (rounded to a microsecond).
    pub interval_ms: f64,
}

impl Sampling {
    /// The sampling for `options`: `None` for analyses other than
    /// hotspots, or without a frequency (the tool's defaults then).
    pub fn for_options(collect_type: &str, options: &CollectOptions) -> Option<Sampling> {
        if collect_type != HOTSPOTS {
            return None;
        }
        let hz = options.frequency_hz.filter(|&hz| hz > 0)?;
        let ms = (1000.0 / hz as f64).clamp(HARDWARE_MIN_MS, MAX_MS);
        let interval_ms = (ms * 1000.0).round() / 1000.0;
        Some(Sampling {
            hardware: interval_ms < USER_MODE_MIN_MS,
            interval_ms,
        })
    }

    /// `-knob sampling-mode=.. -knob sampling-interval=..`.
    pub fn knobs(&self) -> Vec<OsString> {
        let mode = if self.hardware { "hw" } else { "sw" };
        vec![
            "-knob".into(),
            format!("sampling-mode={mode}").into(),
            "-knob".into(),
            format!("sampling-interval={}", self.interval_ms).into(),
        ]
    }

    /// The interval as a duration.
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(self.interval_ms / 1000.0)
    }
}

/// The interval in force for `options`: the one passed, hotspots' default
/// when none is, `None` for other analyses (their settings are theirs).
pub fn interval_in_force(collect_type: &str, options: &CollectOptions) -> Option<Duration> {
    match Sampling::for_options(collect_type, options) {
        Some(s) => Some(s.interval()),
        None if collect_type == HOTSPOTS => Some(Duration::from_secs_f64(DEFAULT_MS / 1000.0)),
        None => None,
    }
}

/// The plan's line about sampling.
pub fn note(collect_type: &str, options: &CollectOptions) -> String {
    match Sampling::for_options(collect_type, options) {
        Some(s) if s.hardware => format!(
            "sampling: hardware event-based, every {} ms (--frequency; user-mode sampling goes no \
             finer than {USER_MODE_MIN_MS} ms): needs VTune's sampling driver or perf access",
            s.interval_ms
        ),
        Some(s) => format!(
            "sampling: user-mode, every {} ms (--frequency)",
            s.interval_ms
        ),
        None if collect_type == HOTSPOTS => {
            format!("sampling: hotspots' default, user-mode every {DEFAULT_MS} ms")
        }
        None => format!(
            "sampling: the {collect_type} analysis's own settings; --frequency is not passed to \
             vtune, and windows are sized for it as if it held"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(hz: u64) -> CollectOptions {
        let mut o = CollectOptions::default();
        o.frequency_hz = Some(hz);
        o
    }

    #[test]
    fn the_mode_follows_the_interval() {
        let s = Sampling::for_options(HOTSPOTS, &at(100)).unwrap();
        assert_eq!((s.hardware, s.interval_ms), (false, 10.0));
        assert_eq!(
            s.knobs(),
            ["-knob", "sampling-mode=sw", "-knob", "sampling-interval=10"]
        );
        let s = Sampling::for_options(HOTSPOTS, &at(1000)).unwrap();
        assert_eq!((s.hardware, s.interval_ms), (false, 1.0));
        let s = Sampling::for_options(HOTSPOTS, &at(4000)).unwrap();
        assert_eq!((s.hardware, s.interval_ms), (true, 0.25));
        assert_eq!(s.knobs()[1], "sampling-mode=hw");
        // Clamped to what either mode takes.
        let s = Sampling::for_options(HOTSPOTS, &at(1_000_000)).unwrap();
        assert_eq!(s.interval_ms, HARDWARE_MIN_MS);
        let s = Sampling::for_options(HOTSPOTS, &at(3)).unwrap();
        assert_eq!(s.interval_ms, 333.333);
    }

    #[test]
    fn other_analyses_and_no_frequency_keep_the_tools_settings() {
        assert_eq!(Sampling::for_options("uarch-exploration", &at(4000)), None);
        assert_eq!(interval_in_force("uarch-exploration", &at(4000)), None);
        let none = CollectOptions::default();
        assert_eq!(Sampling::for_options(HOTSPOTS, &none), None);
        assert_eq!(
            interval_in_force(HOTSPOTS, &none),
            Some(Duration::from_millis(10))
        );
        assert_eq!(
            interval_in_force(HOTSPOTS, &at(4000)),
            Some(Duration::from_micros(250))
        );
    }
}
