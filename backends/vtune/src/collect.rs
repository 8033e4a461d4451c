//! Live collection through the `vtune` command.
//!
//! One collection is one run of
//!
//! ```text
//! vtune -collect hotspots -knob sampling-mode=M -knob sampling-interval=MS -start-paused -result-dir D -- <target command>
//! ```
//!
//! with the target's environment (`LOTUS_BACKEND=vtune`: the profiled
//! process resumes and pauses the collection itself through ITT; `vtune`
//! sets `INTEL_LIBITTNOTIFY64` so its ITT calls reach VTune's collector).
//! [`lotus_core::Collection::finish`] waits for it, then runs
//!
//! ```text
//! vtune -report hotspots -result-dir D -format csv -csv-delimiter comma -report-output F
//! ```
//!
//! and reads `F` with [`crate::report::read_hotspots`].
//!
//! Everything lives in one folder per collection: `result/` (= `D`, which
//! `vtune` creates), `hotspots.csv` (= `F`) and what each command printed
//! (`collect.log`, `report.log`; their last lines go into error messages,
//! and the target's own output lands there too). The folder is temporary
//! and deleted with the collection, unless [`CollectOptions::keep_raw`]
//! names a folder: then it is a new `vtune-XXXXXX` folder in there, kept.
//!
//! `vtune` runs in its own process group, so [`lotus_core::Collection::kill`] reaches
//! the target and everything it started.

use std::ffi::OsString;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lotus_core::{CollectOptions, CollectPlan, Error as CoreError, Report, Target};
use lotus_vendor as common;
use lotus_vendor::{io_error, Tool, VendorCollection, VendorReport, VendorRun};

use crate::report::read_hotspots;
use crate::sampling::{self, Sampling};

const BACKEND: &str = "vtune";

/// The analysis run when [`CollectOptions::collect_type`] names none.
pub const DEFAULT_COLLECT_TYPE: &str = "hotspots";

/// The result folder's name inside the collection's folder (`D`).
pub(crate) const RESULT_DIR: &str = "result";
/// The report's file name inside the collection's folder (`F`).
pub(crate) const REPORT_FILE: &str = "hotspots.csv";
/// The prefix of the folder made per collection under `--keep-raw`.
pub const KEPT_PREFIX: &str = "vtune-";

/// `vtune`, for commands and messages; [`Collection::kill`] lets it stop
/// on SIGINT for 2 s before SIGKILL.
const TOOL: Tool = Tool {
    backend: BACKEND,
    name: "vtune",
    stop_grace: Duration::from_secs(2),
};

/// The `-collect` command's arguments after the program, up to and
/// including the `--` before the target command.
pub fn collect_args(collect_type: &str, result_dir: &Path) -> Vec<OsString> {
    vec![
        "-collect".into(),
        collect_type.into(),
        "-start-paused".into(),
        "-result-dir".into(),
        result_dir.as_os_str().to_owned(),
        "--".into(),
    ]
}

/// The `-collect` arguments for `options`: the sampling knobs after the
/// analysis type (see [`Sampling`]); without `-start-paused` when the whole
/// program is measured.
fn collect_args_for(options: &CollectOptions, result_dir: &Path) -> Vec<OsString> {
    let mut args = collect_args(collect_type(options), result_dir);
    if let Some(sampling) = Sampling::for_options(collect_type(options), options) {
        args.splice(2..2, sampling.knobs());
    }
    if options.whole_program {
        args.retain(|a| a != "-start-paused");
    }
    args
}

/// The `-report` command's arguments after the program.
pub fn report_args(result_dir: &Path, output: &Path) -> Vec<OsString> {
    vec![
        "-report".into(),
        "hotspots".into(),
        "-result-dir".into(),
        result_dir.as_os_str().to_owned(),
        "-format".into(),
        "csv".into(),
        "-csv-delimiter".into(),
        "comma".into(),
        "-report-output".into(),
        output.as_os_str().to_owned(),
    ]
}

/// The analysis `options` name, else [`DEFAULT_COLLECT_TYPE`].
pub(crate) fn collect_type(options: &CollectOptions) -> &str {
    options
        .collect_type
        .as_deref()
        .unwrap_or(DEFAULT_COLLECT_TYPE)
}

/// The collect command for `target`, after the program.
fn full_collect_args(target: &Target, options: &CollectOptions, result: &Path) -> Vec<OsString> {
    let mut args = collect_args_for(options, result);
    args.push(target.program.clone().into_os_string());
    args.extend(target.args.iter().cloned());
    args
}

/// What [`crate::VTune`]'s `plan` says: both commands, with the folder made
/// at run time shown as a pattern. `vtune` is the program found, or the
/// bare name with a note when there is none.
pub fn plan(vtune: Option<&Path>, target: &Target, options: &CollectOptions) -> CollectPlan {
    let program = vtune.unwrap_or(Path::new("vtune"));
    let (folder, where_note) = match &options.keep_raw {
        Some(keep) => {
            let folder = keep.join(format!("{KEPT_PREFIX}XXXXXX"));
            let note = format!(
                "{}: a new folder per run, kept (--keep-raw): the result ({RESULT_DIR}/), the report and both commands' output",
                folder.display()
            );
            (folder, note)
        }
        None => {
            let folder = std::env::temp_dir().join("lotus-vtune-XXXXXX");
            let note = format!(
                "{}: a new temporary folder per run, deleted once the report is read (--keep-raw DIR keeps it)",
                folder.display()
            );
            (folder, note)
        }
    };
    let result = folder.join(RESULT_DIR);
    let report = folder.join(REPORT_FILE);
    let mut notes = Vec::new();
    if vtune.is_none() {
        notes.push(format!(
            "vtune was not found (not on PATH, nor under ${}/bin64): the commands name it bare",
            crate::probe::ENV_VTUNE_DIR
        ));
    }
    notes.push(where_note);
    notes.push(
        "the profiled process resumes and pauses the collection itself through ITT (__itt_resume / __itt_pause); vtune sets INTEL_LIBITTNOTIFY64 to its collector"
            .to_string(),
    );
    notes.push(sampling::note(collect_type(options), options));
    CollectPlan {
        commands: vec![
            common::command_line(program, &full_collect_args(target, options, &result)),
            common::command_line(program, &report_args(&result, &report)),
        ],
        env: target.env_lossy(),
        notes,
    }
}

/// The collection's folder: temporary (deleted on drop) or kept.
#[derive(Debug)]
enum Folder {
    Temporary(lotus_sys::PrivateDir),
    Kept(PathBuf),
}

impl Folder {
    fn path(&self) -> &Path {
        match self {
            Folder::Temporary(dir) => dir.path(),
            Folder::Kept(path) => path,
        }
    }
}

/// A target running under `vtune -collect`.
pub(crate) type VTuneCollection = VendorCollection<VTuneFiles>;

/// A VTune collection's folder: `D` and `F` in it.
#[derive(Debug)]
pub(crate) struct VTuneFiles {
    folder: Folder,
}

/// Starts `vtune -collect` on `target`; `vtune` is the program to run.
pub(crate) fn start(
    vtune: &Path,
    target: &Target,
    options: &CollectOptions,
) -> Result<VTuneCollection, CoreError> {
    let folder = match &options.keep_raw {
        Some(keep) => {
            let dir = lotus_sys::PrivateDir::new_in(keep, KEPT_PREFIX)
                .map_err(|e| io_error(format!("--keep-raw {}", keep.display()))(e.into()))?;
            Folder::Kept(dir.keep())
        }
        None => Folder::Temporary(
            lotus_sys::PrivateDir::new("lotus-vtune-")
                .map_err(|e| io_error("cannot create a temporary folder for vtune")(e.into()))?,
        ),
    };
    let result = folder.path().join(RESULT_DIR);
    let args = full_collect_args(target, options, &result);
    let run = VendorRun::spawn(TOOL, vtune, &args, target, folder.path())?;
    Ok(VendorCollection::new(run, VTuneFiles { folder }))
}

impl VTuneFiles {
    /// `D`: the result folder `vtune` writes.
    fn result_dir(&self) -> PathBuf {
        self.folder.path().join(RESULT_DIR)
    }

    /// `F`: where the CSV report is written.
    fn report_file(&self) -> PathBuf {
        self.folder.path().join(REPORT_FILE)
    }
}

impl VendorReport for VTuneFiles {
    fn read(&mut self, run: &VendorRun) -> Result<Report, CoreError> {
        let report_file = self.report_file();
        let file = run.report(&report_args(&self.result_dir(), &report_file), &report_file)?;
        let name = report_file.display().to_string();
        read_hotspots(&mut BufReader::new(file), &name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        {
            let mut target = Target::new("/usr/bin/python3");
            target.args = vec!["h.py".into(), "--op-file".into(), "my op.py".into()];
            target.env = vec![("LOTUS_BACKEND".into(), "vtune".into())];
            target
        }
    }

    #[test]
    fn plans_both_commands_with_the_program_found() {
        let mut options = CollectOptions::default();
        options.keep_raw = Some("/keep".into());
        let plan = plan(
            Some(Path::new("/opt/vtune/bin64/vtune")),
            &target(),
            &options,
        );
        assert_eq!(
            plan.commands,
            [
                "/opt/vtune/bin64/vtune -collect hotspots -start-paused -result-dir /keep/vtune-XXXXXX/result -- /usr/bin/python3 h.py --op-file 'my op.py'",
                "/opt/vtune/bin64/vtune -report hotspots -result-dir /keep/vtune-XXXXXX/result -format csv -csv-delimiter comma -report-output /keep/vtune-XXXXXX/hotspots.csv",
            ]
        );
        assert_eq!(
            plan.env,
            [("LOTUS_BACKEND".to_string(), "vtune".to_string())]
        );
        assert!(!plan.notes.iter().any(|n| n.contains("not found")));
    }

    #[test]
    fn plans_with_the_bare_name_and_a_note_when_vtune_is_missing() {
        let mut options = CollectOptions::default();
        options.collect_type = Some("uarch-exploration".into());
        let plan = plan(None, &target(), &options);
        assert!(
            plan.commands[0]
                .starts_with("vtune -collect uarch-exploration -start-paused -result-dir "),
            "{:?}",
            plan.commands
        );
        assert!(plan.commands[1].starts_with("vtune -report hotspots -result-dir "));
        assert!(
            plan.notes[0].contains("vtune was not found"),
            "{:?}",
            plan.notes
        );
    }
}
