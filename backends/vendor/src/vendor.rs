//! A vendor tool's collection, as the VTune and uProf backends run it: the
//! tool's collect command in a process group of its own with its output
//! (and the target's) in `collect.log`; waiting, stopping and reaping it;
//! then the tool's report command with its output in `report.log`. Errors
//! name the command and quote the end of its log. [`VendorCollection`] is
//! the [`Collection`] both backends return; each supplies only its
//! [`VendorReport`] step (its folders and its report reader).

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use lotus_core::{Collection, Error as CoreError, Finish, Finished, Report, Target};
use lotus_sys::process;

/// How many of a command's last output lines go into an error message.
const TAIL_LINES: usize = 20;

/// How long a report command may run before it is stopped: VTune and uProf
/// take minutes on long collections, never hours.
pub const REPORT_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The variable that sets another report limit, in seconds.
pub const REPORT_LIMIT_VAR: &str = "LOTUS_REPORT_TIMEOUT";

/// The report limit: `LOTUS_REPORT_TIMEOUT` seconds where set to a
/// positive number, else [`REPORT_LIMIT`].
pub fn report_limit() -> Duration {
    std::env::var(REPORT_LIMIT_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(REPORT_LIMIT, Duration::from_secs_f64)
}

/// Which tool, for commands and messages.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// The backend's name (`vtune`, `uprof`), in errors.
    pub backend: &'static str,
    /// The program's name as users know it (`vtune`, `AMDuProfCLI`).
    pub name: &'static str,
    /// How long a stop lets the tool end its collection on SIGINT before
    /// SIGKILL.
    pub stop_grace: Duration,
}

impl Tool {
    /// An error of this backend.
    pub fn error(&self, message: impl Into<String>) -> CoreError {
        CoreError::Other {
            backend: self.backend.into(),
            message: message.into(),
        }
    }
}

/// An I/O error with what was being done.
pub fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> CoreError {
    let context = context.into();
    move |source| CoreError::Io { context, source }
}

/// A collect command running; stopped and reaped when dropped.
#[derive(Debug)]
pub struct VendorRun {
    tool: Tool,
    program: PathBuf,
    child: Child,
    pid: u32,
    collect_line: String,
    logs: PathBuf,
    exit: Option<ExitStatus>,
    killed: bool,
}

impl VendorRun {
    /// Starts `program args` (the collect command, ending with the target's
    /// command) with `target`'s environment, its output in
    /// `logs/collect.log`.
    pub fn spawn(
        tool: Tool,
        program: &Path,
        args: &[OsString],
        target: &Target,
        logs: &Path,
    ) -> Result<VendorRun, CoreError> {
        let collect_line = crate::command_line(program, args);
        let log_path = logs.join("collect.log");
        let (out, err) = process::log_pair(&log_path)
            .map_err(io_error(format!("creating {}", log_path.display())))?;
        let mut cmd = crate::command_for(program, args, target);
        cmd.stdout(Stdio::from(out)).stderr(Stdio::from(err));
        let child = cmd.spawn().map_err(|source| CoreError::Spawn {
            program: program.display().to_string(),
            source,
        })?;
        Ok(VendorRun {
            tool,
            program: program.to_path_buf(),
            pid: child.id(),
            child,
            collect_line,
            logs: logs.to_path_buf(),
            exit: None,
            killed: false,
        })
    }

    /// The tool's process id (the target is its child).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The collect command, as a shell would show it.
    pub fn collect_line(&self) -> &str {
        &self.collect_line
    }

    /// The end of what the collect command printed, indented.
    pub fn collect_tail(&self) -> String {
        process::tail(&self.logs.join("collect.log"), TAIL_LINES)
    }

    /// The tool's exit status, if it has ended.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, CoreError> {
        if self.exit.is_some() {
            return Ok(self.exit);
        }
        let status = self.child.try_wait().map_err(io_error(format!(
            "checking on {} (pid {})",
            self.tool.name, self.pid
        )))?;
        self.exit = status;
        Ok(status)
    }

    /// Stops the run: SIGINT to the tool's group (it ends its collection),
    /// SIGKILL after the grace period to whatever is left, reaped. Once the
    /// tool has ended, whatever is left of its group (the target may
    /// outlive it) gets SIGKILL.
    pub fn kill(&mut self) -> Result<(), CoreError> {
        if self.exit.is_some() {
            return process::signal_group(self.pid, libc::SIGKILL)
                .map_err(io_error(format!("signalling process group {}", self.pid)));
        }
        self.killed = true;
        let status = process::stop_group(&mut self.child, self.tool.stop_grace).map_err(
            io_error(format!("stopping {} (pid {})", self.tool.name, self.pid)),
        )?;
        self.exit = Some(status);
        Ok(())
    }

    /// Waits for the collect command; an error when it was stopped or
    /// failed (with the end of its output).
    pub fn finished(&mut self) -> Result<(), CoreError> {
        let status = match self.exit {
            Some(status) => status,
            None => {
                let status = self.child.wait().map_err(io_error(format!(
                    "waiting for {} (pid {})",
                    self.tool.name, self.pid
                )))?;
                self.exit = Some(status);
                status
            }
        };
        if self.killed {
            return Err(self.tool.error(format!(
                "the collection was stopped before it finished (`{}`)",
                self.collect_line
            )));
        }
        if !status.success() {
            return Err(self.tool.error(format!(
                "`{}` failed ({status}):\n{}",
                self.collect_line,
                self.collect_tail()
            )));
        }
        Ok(())
    }

    /// Runs the report command `program args`, its output in
    /// `logs/report.log`, and opens the report it wrote at `output`. An
    /// error names the command and quotes what it said.
    pub fn report(&self, args: &[OsString], output: &Path) -> Result<File, CoreError> {
        let report_line = crate::command_line(&self.program, args);
        let log_path = self.logs.join("report.log");
        let (out, err) = process::log_pair(&log_path)
            .map_err(io_error(format!("creating {}", log_path.display())))?;
        // Its own group, so that a report stopped for taking too long is
        // stopped with whatever it started.
        let mut child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .map_err(|source| CoreError::Spawn {
                program: self.program.display().to_string(),
                source,
            })?;
        let tail = || process::tail(&log_path, TAIL_LINES);
        let limit = report_limit();
        let waited = process::wait_for(&mut child, limit)
            .map_err(io_error(format!("waiting for `{report_line}`")))?;
        let Some(status) = waited else {
            let _ = process::stop_group(&mut child, self.tool.stop_grace);
            return Err(self.tool.error(format!(
                "`{report_line}` did not finish in {:.0} s and was stopped (set {REPORT_LIMIT_VAR}=SECONDS to allow longer); it said:\n{}",
                limit.as_secs_f64(),
                tail()
            )));
        };
        if !status.success() {
            return Err(self
                .tool
                .error(format!("`{report_line}` failed ({status}):\n{}", tail())));
        }
        File::open(output).map_err(|e| {
            self.tool.error(format!(
                "`{report_line}` succeeded but {} cannot be read ({e}); it said:\n{}",
                output.display(),
                tail()
            ))
        })
    }
}

impl Drop for VendorRun {
    fn drop(&mut self) {
        // Never leave the tool or the target running, or unreaped.
        if self.exit.is_none() {
            let _ = self.kill();
        }
    }
}

/// A vendor backend's own part of a collection: its folders, and how its
/// report is made and read once the collect command has finished.
pub trait VendorReport: Send {
    /// Runs the tool's report command (through [`VendorRun::report`]) and
    /// reads what it wrote.
    fn read(&mut self, run: &VendorRun) -> Result<Report, CoreError>;
}

/// A collection through a vendor tool. The profiled process opens and
/// closes windows itself (through ITT, or uProf's profile-control API), so
/// [`Collection::resume`] and [`Collection::pause`] do nothing here.
#[derive(Debug)]
pub struct VendorCollection<R> {
    // Dropped first: the tool is stopped before its folders are removed.
    run: VendorRun,
    report: R,
}

impl<R: VendorReport> VendorCollection<R> {
    /// A collection of `run`, reported by `report`.
    pub fn new(run: VendorRun, report: R) -> Self {
        VendorCollection { run, report }
    }
}

impl<R: VendorReport> Collection for VendorCollection<R> {
    /// The tool's process id (the target is its child).
    fn pid(&self) -> u32 {
        self.run.pid()
    }

    /// A no-op: the profiled process resumes the collection itself.
    fn resume(&mut self) -> Result<(), CoreError> {
        Ok(())
    }

    /// A no-op: the profiled process pauses the collection itself.
    fn pause(&mut self) -> Result<(), CoreError> {
        Ok(())
    }

    fn try_wait(&mut self) -> Result<Option<ExitStatus>, CoreError> {
        self.run.try_wait()
    }

    /// SIGINT to the tool's process group (it stops its collection), then
    /// SIGKILL after the tool's grace period.
    fn kill(&mut self) -> Result<(), CoreError> {
        self.run.kill()
    }

    /// Waits for the collect command, then runs and reads the report (all
    /// windows in one: the tool cannot tell them apart).
    fn finish(mut self: Box<Self>, how: Finish) -> Result<Finished, CoreError> {
        if how == Finish::PerWindow {
            return Err(CoreError::Other {
                backend: "lotus".into(),
                message: "this backend reports all windows together".into(),
            });
        }
        self.run.finished()?;
        Ok(Finished::new(
            vec![self.report.read(&self.run)?],
            Vec::new(),
        ))
    }
}
