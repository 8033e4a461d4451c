//! Live collection through `AMDuProfCLI`.
//!
//! One collection is one run of
//!
//! ```text
//! AMDuProfCLI collect -e event=timer,interval=MS --start-paused -o D <target command>
//! ```
//!
//! (`--config CONFIG` in place of `-e ...` for configs other than `tbp`, or
//! without a frequency)
//!
//! with the target's environment (which names the uProf backend, so the
//! profiled process opens uProf's profile-control library and resumes and
//! pauses the collection itself: the lotus process switches nothing). The
//! session lands in a sub-folder of `D` that AMDuProfCLI names
//! (`AMDuProf-<program>-<CONFIG>_<date>`); [`lotus_core::Collection::finish`] finds
//! it, runs
//!
//! ```text
//! AMDuProfCLI report -i SESSION --report-output F -f csv --cutoff N
//! ```
//!
//! and reads `F` with [`crate::report::read_report`].
//!
//! Everything lives in one temporary folder (deleted when the collection
//! is dropped): `raw/` (= `D`), `report.csv` (= `F`), and the output of
//! both commands (`collect.log`, `report.log`), whose last lines go into
//! error messages. With [`CollectOptions::keep_raw`], `D` is a new folder
//! `uprof-XXXXXX` inside the given one, and `F` is written into it; both
//! stay.
//!
//! AMDuProfCLI runs in its own process group, so [`lotus_core::Collection::kill`]
//! reaches the target and anything it started.

use std::ffi::OsString;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use lotus_core::shell_quote;
use lotus_core::{CollectOptions, CollectPlan, Error as CoreError, Report, Target};
use lotus_sys::PrivateDir;
use lotus_vendor as common;
use lotus_vendor::{io_error, Tool, VendorCollection, VendorReport, VendorRun};

use crate::report::read_report;

const BACKEND: &str = "uprof";

/// The analysis run when [`CollectOptions::collect_type`] names none:
/// time-based profiling (a timer sample every millisecond by default).
pub const DEFAULT_CONFIG: &str = "tbp";

/// The prefix of the session folders AMDuProfCLI creates.
pub(crate) const SESSION_PREFIX: &str = "AMDuProf";

/// The prefix of the folder made per collection under `--keep-raw`.
const KEPT_PREFIX: &str = "uprof-";

/// AMDuProfCLI, for commands and messages; [`Collection::kill`] lets it
/// stop its collection on SIGINT for 2 s before SIGKILL.
const TOOL: Tool = Tool {
    backend: BACKEND,
    name: "AMDuProfCLI",
    stop_grace: Duration::from_secs(2),
};

/// The `collect` command's arguments after the program: everything up to
/// the target command.
pub fn collect_args(config: &str, raw: &Path) -> Vec<OsString> {
    vec![
        "collect".into(),
        "--config".into(),
        config.into(),
        "--start-paused".into(),
        "-o".into(),
        raw.as_os_str().to_owned(),
    ]
}

/// The least timer interval lotus asks of time-based profiling, ms: the
/// tool's own default. AMD's user guide documents the timer event's
/// `interval=` key (uProf 5.1: `-e event=timer,interval=<ms>`) but no
/// finer bound lotus could check, so lotus samples no finer than that.
pub const TIMER_MIN_MS: f64 = 1.0;
/// The tbp config's own timer interval, ms.
pub const TIMER_DEFAULT_MS: f64 = 1.0;
/// The greatest timer interval lotus asks for, ms.
pub const TIMER_MAX_MS: f64 = 1000.0;

/// `AMDuProfCLI report --cutoff`: how many functions (and processes,
/// modules, threads) the report lists. The tool's default is a handful (10
/// in uProf 5.1), which silently drops the rest of a mapping; this is
/// above any realistic count of sampled functions.
pub const REPORT_CUTOFF: u32 = 1_000_000;

/// The timer interval, ms, that a time-based profile with `options` is
/// given: `--frequency` as an interval within [`TIMER_MIN_MS`] and
/// [`TIMER_MAX_MS`]; `None` for other configs or without a frequency.
pub fn timer_interval_ms(options: &CollectOptions) -> Option<f64> {
    if config(options) != DEFAULT_CONFIG {
        return None;
    }
    let hz = options.frequency_hz.filter(|&hz| hz > 0)?;
    let ms = (1000.0 / hz as f64).clamp(TIMER_MIN_MS, TIMER_MAX_MS);
    Some((ms * 1000.0).round() / 1000.0)
}

/// The interval in force for `options`: the one passed, the tool's 1 ms
/// for a time-based profile without one, `None` for other configs (their
/// intervals count events, not time).
pub fn interval_in_force(options: &CollectOptions) -> Option<Duration> {
    match timer_interval_ms(options) {
        Some(ms) => Some(Duration::from_secs_f64(ms / 1000.0)),
        None if config(options) == DEFAULT_CONFIG => {
            Some(Duration::from_secs_f64(TIMER_DEFAULT_MS / 1000.0))
        }
        None => None,
    }
}

/// The `collect` arguments for `options`: a time-based profile at another
/// interval than tbp's own is asked for as the timer event with that
/// interval instead of `--config tbp` (which takes none); without
/// `--start-paused` when the whole program is measured.
fn collect_args_for(options: &CollectOptions, raw: &Path) -> Vec<OsString> {
    let mut args = collect_args(config(options), raw);
    // At tbp's own interval, the config as it is.
    if let Some(ms) = timer_interval_ms(options).filter(|&ms| ms != TIMER_DEFAULT_MS) {
        args.splice(
            1..3,
            ["-e".into(), format!("event=timer,interval={ms}").into()],
        );
    }
    if options.whole_program {
        args.retain(|a| a != "--start-paused");
    }
    args
}

/// The `report` command's arguments after the program: every function
/// sampled ([`REPORT_CUTOFF`]).
pub fn report_args(session: &Path, output: &Path) -> Vec<OsString> {
    vec![
        "report".into(),
        "-i".into(),
        session.as_os_str().to_owned(),
        "--report-output".into(),
        output.as_os_str().to_owned(),
        "-f".into(),
        "csv".into(),
        "--cutoff".into(),
        REPORT_CUTOFF.to_string().into(),
    ]
}

fn config(options: &CollectOptions) -> &str {
    options.collect_type.as_deref().unwrap_or(DEFAULT_CONFIG)
}

/// What [`crate::UProf`]'s `plan` says: the commands with placeholders for
/// the folders made at run time.
pub fn plan(cli: Option<&Path>, target: &Target, options: &CollectOptions) -> CollectPlan {
    let program = cli.unwrap_or(Path::new("AMDuProfCLI"));
    let (raw, report, where_note) = match &options.keep_raw {
        Some(keep) => {
            let raw = keep.join(format!("{KEPT_PREFIX}XXXXXX"));
            let report = raw.join("report.csv");
            (
                raw,
                report,
                format!(
                    "{}: a new folder per run, kept (--keep-raw); the report is written into it",
                    keep.join(format!("{KEPT_PREFIX}XXXXXX")).display()
                ),
            )
        }
        None => {
            let work = std::env::temp_dir().join("lotus-uprof-XXXXXX");
            (
                work.join("raw"),
                work.join("report.csv"),
                format!(
                    "{}: a new temporary folder per run, deleted once the report is read (--keep-raw DIR keeps it)",
                    work.display()
                ),
            )
        }
    };
    let mut collect = collect_args_for(options, &raw);
    collect.push(target.program.clone().into_os_string());
    collect.extend(target.args.iter().cloned());
    let session = format!(
        "{}/<session>",
        shell_quote(&raw.to_string_lossy()).trim_end_matches('/')
    );
    let report_line = format!(
        "{} report -i {session} --report-output {} -f csv --cutoff {REPORT_CUTOFF}",
        shell_quote(&program.to_string_lossy()),
        shell_quote(&report.to_string_lossy())
    );
    let mut notes = Vec::new();
    if cli.is_none() {
        notes.push("AMDuProfCLI was not found: the commands name it bare".to_string());
    }
    notes.push(where_note);
    notes.push(format!(
        "<session>: the {SESSION_PREFIX}-* folder AMDuProfCLI creates inside {}",
        raw.display()
    ));
    notes.push(
        "the profiled process resumes and pauses the collection itself, through uProf's profile-control library (libAMDProfileController.so)".to_string(),
    );
    notes.push(match (timer_interval_ms(options), options.frequency_hz) {
        (Some(ms), Some(hz)) if ms > 1000.0 / hz as f64 => format!(
            "sampling: the timer every {ms} ms (--frequency {hz} asks for finer; lotus asks \
             uProf for no less than {TIMER_MIN_MS} ms, and sizes windows by it)"
        ),
        (Some(ms), _) => format!("sampling: the timer every {ms} ms (--frequency)"),
        (None, _) if config(options) == DEFAULT_CONFIG => {
            "sampling: the tbp config's own timer, every 1 ms".to_string()
        }
        (None, _) => format!(
            "sampling: the {} config's own intervals; --frequency is not passed to AMDuProfCLI",
            config(options)
        ),
    });
    CollectPlan {
        commands: vec![common::command_line(program, &collect), report_line],
        env: target.env_lossy(),
        notes,
    }
}

/// A target running under `AMDuProfCLI collect`.
pub(crate) type UProfCollection = VendorCollection<UProfFiles>;

/// A uProf collection's folders.
#[derive(Debug)]
pub(crate) struct UProfFiles {
    /// Logs, and (without keep_raw) `D` and `F`; deleted on drop (after the
    /// collect command is stopped).
    _work: PrivateDir,
    /// `D`.
    raw: PathBuf,
    /// `F`.
    report_file: PathBuf,
}

/// Starts `AMDuProfCLI collect` on `target` (`cli` is the AMDuProfCLI
/// found by the probe).
pub(crate) fn start(
    cli: &Path,
    target: &Target,
    options: &CollectOptions,
) -> Result<UProfCollection, CoreError> {
    let work = PrivateDir::new("lotus-uprof-")
        .map_err(|e| io_error("cannot create a temporary folder for AMDuProfCLI")(e.into()))?;
    let (raw, report_file) = match &options.keep_raw {
        Some(keep) => {
            let raw = PrivateDir::new_in(keep, KEPT_PREFIX)
                .map_err(|e| io_error(format!("--keep-raw {}", keep.display()))(e.into()))?
                .keep();
            let report = raw.join("report.csv");
            (raw, report)
        }
        None => {
            let raw = work
                .create_dir(Path::new("raw"))
                .map_err(|e| io_error("creating the raw folder")(e.into()))?;
            (raw, work.path().join("report.csv"))
        }
    };

    let mut args = collect_args_for(options, &raw);
    args.push(target.program.clone().into_os_string());
    args.extend(target.args.iter().cloned());
    let run = VendorRun::spawn(TOOL, cli, &args, target, work.path())?;
    Ok(VendorCollection::new(
        run,
        UProfFiles {
            _work: work,
            raw,
            report_file,
        },
    ))
}

impl UProfFiles {
    /// Finds the session folder AMDuProfCLI made in `D`: the newest
    /// `AMDuProf*` sub-folder.
    fn find_session(&self, run: &VendorRun) -> Result<PathBuf, CoreError> {
        find_session(&self.raw).map_err(|why| {
            TOOL.error(format!(
                "{why}; `{}` said:\n{}",
                run.collect_line(),
                run.collect_tail()
            ))
        })
    }
}

impl VendorReport for UProfFiles {
    fn read(&mut self, run: &VendorRun) -> Result<Report, CoreError> {
        let session = self.find_session(run)?;
        let file = run.report(&report_args(&session, &self.report_file), &self.report_file)?;
        let name = self.report_file.display().to_string();
        read_report(&mut BufReader::new(file), &name)
    }
}

/// The newest `AMDuProf*` folder in `raw`, or why there is none.
pub(crate) fn find_session(raw: &Path) -> Result<PathBuf, String> {
    let entries =
        std::fs::read_dir(raw).map_err(|e| format!("cannot list {}: {e}", raw.display()))?;
    let mut names = Vec::new();
    let mut sessions: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", raw.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_dir = path.is_dir();
        if is_dir && name.starts_with(SESSION_PREFIX) {
            let modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            sessions.push((modified, path));
        }
        names.push(if is_dir { format!("{name}/") } else { name });
    }
    sessions.sort();
    match sessions.pop() {
        Some((_, path)) => Ok(path),
        None => {
            names.sort();
            Err(format!(
                "AMDuProfCLI left no session folder ({SESSION_PREFIX}-*) in {}: {}",
                raw.display(),
                if names.is_empty() {
                    "it is empty".to_string()
                } else {
                    format!("it holds {}", names.join(", "))
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_session_folder_wins() {
        let d = tempfile::tempdir().expect("temp dir");
        let old = d.path().join("AMDuProf-python-TBP_May-28-2024_01-39-24");
        let new = d.path().join("AMDuProf-python-TBP_May-28-2024_01-39-25");
        std::fs::create_dir(&old).expect("mkdir");
        std::fs::create_dir(d.path().join("something-else")).expect("mkdir");
        std::fs::write(d.path().join("AMDuProf-a-file"), b"x").expect("write");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::create_dir(&new).expect("mkdir");
        assert_eq!(find_session(d.path()), Ok(new));
    }

    #[test]
    fn no_session_lists_what_is_there() {
        let d = tempfile::tempdir().expect("temp dir");
        let why = find_session(d.path()).unwrap_err();
        assert!(why.contains("it is empty"), "{why}");
        std::fs::create_dir(d.path().join("junk")).expect("mkdir");
        std::fs::write(d.path().join("notes.txt"), b"x").expect("write");
        let why = find_session(d.path()).unwrap_err();
        assert!(why.contains("AMDuProf-*"), "{why}");
        assert!(why.contains("it holds junk/, notes.txt"), "{why}");
    }

    #[test]
    fn plans_name_every_flag_and_the_session_placeholder() {
        let mut target = Target::new("/usr/bin/python3");
        target.args = vec!["h.py".into(), "--op-file".into(), "my op.py".into()];
        target.env = vec![("LOTUS_BACKEND".into(), "uprof".into())];
        let mut options = CollectOptions::default();
        options.keep_raw = Some("/keep".into());
        let plan = plan(None, &target, &options);
        assert_eq!(
            plan.commands,
            [
                "AMDuProfCLI collect --config tbp --start-paused -o /keep/uprof-XXXXXX /usr/bin/python3 h.py --op-file 'my op.py'",
                "AMDuProfCLI report -i /keep/uprof-XXXXXX/<session> --report-output /keep/uprof-XXXXXX/report.csv -f csv --cutoff 1000000",
            ]
        );
        assert_eq!(
            plan.env,
            [("LOTUS_BACKEND".to_string(), "uprof".to_string())]
        );
        assert!(
            plan.notes[0].contains("AMDuProfCLI was not found"),
            "{:?}",
            plan.notes
        );
    }

    #[test]
    fn the_timer_interval_follows_the_frequency_within_bounds() {
        let at = |hz| {
            let mut o = CollectOptions::default();
            o.frequency_hz = Some(hz);
            o
        };
        assert_eq!(timer_interval_ms(&at(100)), Some(10.0));
        assert_eq!(timer_interval_ms(&at(4000)), Some(TIMER_MIN_MS));
        assert_eq!(timer_interval_ms(&at(3)), Some(333.333));
        assert_eq!(interval_in_force(&at(100)), Some(Duration::from_millis(10)));
        assert_eq!(
            interval_in_force(&CollectOptions::default()),
            Some(Duration::from_millis(1))
        );
        let mut ibs = at(100);
        ibs.collect_type = Some("ibs".into());
        assert_eq!(timer_interval_ms(&ibs), None);
        assert_eq!(interval_in_force(&ibs), None);
        let args = collect_args_for(&at(100), Path::new("/raw"));
        assert_eq!(
            args,
            [
                "collect",
                "-e",
                "event=timer,interval=10",
                "--start-paused",
                "-o",
                "/raw"
            ]
        );
        // tbp's own interval: the config as it is.
        let args = collect_args_for(&at(1000), Path::new("/raw"));
        assert_eq!(args[1..3], ["--config", "tbp"]);
        let plan = plan(None, &Target::default(), &at(4000));
        assert!(
            plan.notes.iter().any(|n| n.contains("no less than 1 ms")),
            "{:?}",
            plan.notes
        );
    }
}
