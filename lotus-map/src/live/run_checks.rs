//! What a finished run is checked for before it counts: the op names a
//! script opened windows under (each becomes its own op), and whether the
//! run measured anything at all (a run whose windows never opened, or held
//! no samples, fails with its likely cause). Also the op-file check made
//! before anything runs.

use std::path::Path;

use lotus_core::Profiler;

use super::{OpSpec, RunOutput};
use crate::error::{MapError, Result};
use crate::op_harness::{self as harness, HarnessResult};
use crate::output::one_line;

/// The op names a script's first run opened windows under, in first-seen
/// order, an unnamed window (`lotus.resume()`) taking the file's op name.
pub(super) fn window_names(result: &HarnessResult) -> Vec<String> {
    if result.mode != Some(harness::HarnessMode::Script) {
        return Vec::new();
    }
    // A set beside the list: a script may give thousands of names (one per
    // batch), and a scan of the list per name would take their square.
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut names: Vec<String> = Vec::new();
    for (name, _) in &result.windows {
        let name = if name.is_empty() { &result.name } else { name };
        if seen.insert(name.as_str()) {
            names.push(name.clone());
        }
    }
    names
}

/// Why a run that exited cleanly measured nothing, if it did: no window
/// opened (where lotus switches the windows, it sees each one), or windows
/// that held no samples. `None` for a run with samples.
pub(super) fn empty_run(
    backend: &dyn Profiler,
    spec: &OpSpec,
    only: Option<&str>,
    out: &RunOutput,
) -> Option<String> {
    let script = out.result.mode == Some(harness::HarnessMode::Script);
    if backend.switches_windows() && out.windows.count == 0 {
        let empty_file = std::fs::read_to_string(spec.file)
            .map(|t| {
                t.lines()
                    .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
            })
            .unwrap_or(false);
        let why = if empty_file {
            "no measurement window opened: the op file is empty; define `op` (a callable; `setup()` optional) or write a script that calls lotus.resume(\"Op\") before the code to measure and lotus.pause() after it".to_string()
        } else if let Some(name) = only {
            format!(
                "no measurement window opened: the script opened no window named '{}' in this run (it did in the first run)",
                one_line(name)
            )
        } else if out.result.program {
            "no measurement window opened: the program never called lotus_resume (lotus.h); link it with -llotus_control and open a window before the code to measure, lotus_pause() after it".to_string()
        } else if script {
            let seen: u64 = out.result.windows.iter().map(|(_, n)| n).sum();
            if seen > 0 {
                format!("no measurement window reached lotus, though the script called lotus.resume() {seen} time(s) (from a process lotus did not start?)")
            } else {
                "no measurement window opened: the script never called lotus.resume(\"Op\") (nor ittapi.resume()); open a window before the code to measure and close it with lotus.pause() after (pausing alone measures nothing)".to_string()
            }
        } else {
            "no measurement window opened".to_string()
        };
        return Some(why);
    }
    let samples = out.windows.samples;
    let nothing = if out.windows.count == 0 {
        out.report.rows.is_empty() || out.report.total() <= 0.0
    } else {
        samples == 0 || out.report.rows.is_empty()
    };
    if nothing && !backend.switches_windows() && script && out.result.windows.is_empty() {
        // The vendor's tool switches the windows: lotus cannot tell a window
        // that never opened from an idle one, but the script never called
        // lotus.resume (ITT calls go straight to the vendor).
        return Some(format!(
            "the {} report holds no samples: no measurement window opened (the script never called lotus.resume(\"Op\"), and any ittapi.resume() reached no collector), or the code inside did not run on the CPU",
            backend.name()
        ));
    }
    if nothing {
        let windows = if out.windows.count == 0 {
            String::from("its measurement window(s)")
        } else {
            format!("its {} measurement window(s)", out.windows.count)
        };
        return Some(format!(
            "{windows} held no samples: the code inside did not run on the CPU (does it only sleep or wait, or do its work in another process?); measure code that computes{}",
            if script {
                ", between lotus.resume(\"Op\") and lotus.pause()"
            } else {
                ""
            }
        ));
    }
    None
}

/// Refuses an op file that is missing or not a regular file (a fifo would
/// hang the harness's read), saying which.
pub fn check_op_file(op: &Path) -> Result<()> {
    let refuse = |why: String| MapError::OpFile {
        path: op.to_path_buf(),
        shown: one_line(&op.display().to_string()),
        why,
    };
    let meta = match std::fs::metadata(op) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse("no such file".into()))
        }
        Err(e) => return Err(refuse(e.to_string())),
    };
    if let Some(what) = lotus_sys::input::not_regular(meta.file_type()) {
        return Err(refuse(format!("is {what}, not a regular file")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_harness::HarnessResult;
    use lotus_core::Row;
    use lotus_core::{Report, Unit, WindowStats, WindowTotals};

    fn run(mode: harness::HarnessMode, windows: Vec<WindowStats>, rows: Vec<Row>) -> RunOutput {
        RunOutput {
            report: Report {
                stacks: Vec::new(),
                unit: Unit::Samples,
                rows,
            },
            result: HarnessResult {
                name: "Op".into(),
                mode: Some(mode),
                pid: 1,
                op_file: None,
                iterations: None,
                window_ns: None,
                warmup: None,
                setup_ns: None,
                error: None,
                stage: None,
                program: false,
                windows: vec![("Op".into(), 1)],
                server: None,
                runs_made: None,
                child_exit: None,
                child_signal: None,
                child_timeout: false,
                unsampled: None,
                unsampled_error: None,
            },
            windows: windows.iter().fold(WindowTotals::default(), |mut t, w| {
                t.add(w);
                t
            }),
            notes: Vec::new(),
            notes_of: String::new(),
        }
    }

    /// A stand-in for a backend, with what `empty_run` asks of one: its
    /// name, and whether lotus switches its windows (perf) or the profiled
    /// process does through the vendor's API (vtune, uprof). lotus-map's
    /// sources name no backend crate, tests included.
    struct Stand {
        name: &'static str,
        switches: bool,
    }

    impl Stand {
        fn boxed(name: &'static str, switches: bool) -> Box<dyn Profiler> {
            Box::new(Stand { name, switches })
        }
    }

    impl Profiler for Stand {
        fn name(&self) -> &'static str {
            self.name
        }
        fn description(&self) -> &'static str {
            "a stand-in backend"
        }
        fn probe(&self) -> lotus_core::Probe {
            lotus_core::Probe::available(self.name, None)
        }
        fn unit(&self) -> Unit {
            Unit::Samples
        }
        fn collect(
            &self,
            _target: &lotus_core::Target,
            _options: &lotus_core::CollectOptions,
        ) -> std::result::Result<Box<dyn lotus_core::Collection>, lotus_core::Error> {
            Err(lotus_core::Error::Unsupported {
                backend: self.name.into(),
                what: "collecting in a unit test".into(),
            })
        }
        fn switches_windows(&self) -> bool {
            self.switches
        }
    }

    /// Names in first-seen order, once each, the unnamed window under the
    /// file's op name; 100,000 distinct names are listed all.
    #[test]
    fn window_names_are_listed_once_in_first_seen_order() {
        let mut out = run(harness::HarnessMode::Script, Vec::new(), Vec::new());
        out.result.windows = vec![
            ("b".into(), 1),
            (String::new(), 2),
            ("a".into(), 1),
            ("b".into(), 3),
            ("Op".into(), 1),
        ];
        assert_eq!(window_names(&out.result), ["b", "Op", "a"]);
        out.result.windows = (0..100_000).map(|i| (format!("batch{i}"), 1)).collect();
        let names = window_names(&out.result);
        assert_eq!(names.len(), 100_000);
        assert_eq!(names[99_999], "batch99999");
    }

    /// A window that held no samples (the code inside only slept) is a
    /// failure saying so; one with samples is not.
    #[test]
    fn windows_without_samples_are_a_failure_saying_why() {
        let backend = Stand::boxed("perf", true);
        let file = Path::new("Sleepy.py");
        let spec = OpSpec {
            file,
            empty: false,
            label: "Sleepy".into(),
        };
        let idle = WindowStats {
            duration_ns: 300_000_000,
            ..WindowStats::default()
        };
        let out = run(harness::HarnessMode::Script, vec![idle.clone()], Vec::new());
        let why = empty_run(backend.as_ref(), &spec, None, &out).expect("a failure");
        assert!(why.contains("held no samples"), "{why}");
        assert!(why.contains("sleep"), "{why}");
        let busy = WindowStats {
            samples: 40,
            ..idle
        };
        let out = run(
            harness::HarnessMode::Script,
            vec![busy],
            vec![Row::new("f", "m.so", 40.0)],
        );
        assert_eq!(empty_run(backend.as_ref(), &spec, None, &out), None);

        // Under a vendor's tool lotus sees no windows: an empty report of
        // a script that never called lotus.resume names both causes.
        let vtune = Stand::boxed("vtune", false);
        let mut out = run(harness::HarnessMode::Script, Vec::new(), Vec::new());
        out.result.windows.clear();
        let why = empty_run(vtune.as_ref(), &spec, None, &out).expect("a failure");
        assert!(why.contains("no measurement window opened"), "{why}");
        assert!(why.contains("vtune report holds no samples"), "{why}");
    }
}
