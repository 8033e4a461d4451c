//! Command-line manners shared by every subcommand: usage errors (exit
//! status 2, as clap's own), `--quiet`, `--out -`, and the environment
//! variables each command's help lists.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use lotus_sys::OutputFile;

/// A mistake in how lotus was called that lotus, not clap, finds (an
/// unknown backend, nothing to map, options that exclude each other). The
/// binary exits with status 2 for it, as for clap's own usage errors; every
/// other error exits with 1.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A [`UsageError`] as the `anyhow` error the commands return.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// Looks up a backend by name; an unknown name is a usage error.
pub fn backend(name: &str) -> anyhow::Result<Box<dyn lotus_core::Profiler>> {
    lotus_core::backend(name).map_err(|e| usage(e.to_string()))
}

/// The backend `--backend` names, or, where it was left out, the one
/// that can run here (said in a note); several that can: a usage error
/// listing them; none: an error saying why each cannot (as `lotus
/// backends` does). Returns its name too.
pub fn backend_or_usable(
    name: Option<&str>,
) -> anyhow::Result<(String, Box<dyn lotus_core::Profiler>)> {
    if let Some(name) = name {
        return Ok((name.to_string(), backend(name)?));
    }
    let probes: Vec<(Box<dyn lotus_core::Profiler>, lotus_core::Probe)> = lotus_core::backends()
        .into_iter()
        .map(|b| {
            let p = b.probe();
            (b, p)
        })
        .collect();
    let usable: Vec<&str> = probes
        .iter()
        .filter(|(_, p)| p.available)
        .map(|(b, _)| b.name())
        .collect();
    match usable.as_slice() {
        [one] => {
            let one = one.to_string();
            note!(
                "lotus: using the {one} backend, the one that can run here (--backend to choose)"
            );
            Ok((one.clone(), backend(&one)?))
        }
        [] => {
            let why: Vec<String> = probes
                .iter()
                .map(|(b, p)| {
                    format!(
                        "{}: {}",
                        b.name(),
                        p.reason.as_deref().unwrap_or("not available")
                    )
                })
                .collect();
            anyhow::bail!(
                "no profiler backend can run here ({}); `lotus backends` says more",
                why.join("; ")
            )
        }
        several => Err(usage(several_usable(several))),
    }
}

/// The usage error where `--backend` is left out and several can run.
fn several_usable(names: &[&str]) -> String {
    format!(
        "several backends can run here ({}): choose one with --backend (e.g. --backend {})",
        names.join(", "),
        names[0]
    )
}

#[cfg(test)]
mod backend_tests {
    #[test]
    fn several_usable_backends_are_listed_for_the_user_to_choose() {
        assert_eq!(
            super::several_usable(&["perf", "vtune"]),
            "several backends can run here (perf, vtune): choose one with --backend (e.g. --backend perf)"
        );
    }
}

/// The exit status for `error`: 2 for a usage error, 1 otherwise.
pub fn exit_status(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<UsageError>().is_some() {
        2
    } else {
        1
    }
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns `--quiet` on: no progress and no notes; warnings and errors are
/// still printed.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `--quiet` was given.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Prints a note (`lotus: ...` on stderr: what was written, what was done)
/// unless `--quiet` was given.
macro_rules! note {
    ($($arg:tt)*) => {
        if !$crate::usage::quiet() {
            $crate::usage::say!($($arg)*);
        }
    };
}
pub(crate) use note;

/// Prints a line to stderr (`eprintln!`'s arguments) that may quote data
/// (names, paths, a tool's words): control characters are shown escaped
/// ([`lotus_sys::text::printable`]), never sent raw to the terminal.
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("{}", lotus_sys::text::printable(&format!($($arg)*)))
    };
}
pub(crate) use say;

/// Whether an `--out` path means standard output (`-`, as in perf, samply
/// and hyperfine's exports).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// The environment variables lotus reads, one help line each. Each
/// command's help lists those that apply to it (`after_help`); the
/// conventions test checks every variable read in the workspace is listed
/// by some command.
pub mod env_help {
    /// The heading of the list.
    const HEAD: &str = "Environment:";
    /// `LOTUS_PYTHON`.
    pub const PYTHON: &str = "  LOTUS_PYTHON             the Python interpreter for ops (when --python is not given)\n  VIRTUAL_ENV              its python is used when neither --python nor LOTUS_PYTHON is given";
    /// `LOTUS_CONTROL_LIB`.
    pub const CONTROL_LIB: &str = "  LOTUS_CONTROL_LIB        the control library (liblotus_control.so) to load, in place of the copy lotus carries";
    /// `VTUNE_PROFILER_DIR`.
    pub const VTUNE: &str = "  VTUNE_PROFILER_DIR       where VTune is installed (its bin64/vtune), when vtune is not on PATH";
    /// `AMDUPROF_HOME`, `LOTUS_UPROF_CONTROL_LIB`.
    pub const UPROF: &str = "  AMDUPROF_HOME            where AMD uProf is installed (its bin/AMDuProfCLI), when it is not on PATH\n  LOTUS_UPROF_CONTROL_LIB  AMD's profile-control library (libAMDProfileController.so) for uProf windows";
    /// `LOTUS_REPORT_TIMEOUT`.
    pub const REPORT_TIMEOUT: &str = "  LOTUS_REPORT_TIMEOUT     seconds a vendor tool's report command (vtune -report, AMDuProfCLI report) may run before it is stopped (default 1800)";
    /// `INTEL_LIBITTNOTIFY64`.
    pub const ITT: &str = "  INTEL_LIBITTNOTIFY64     an ITT collector (oneAPI sets VTune's); under --backend perf lotus puts its own in its place, and says so";
    /// `INTEL_LIBITTNOTIFY64` for `lotus trace run`.
    pub const ITT_TRACE: &str = "  INTEL_LIBITTNOTIFY64     an ITT collector (VTune's): kept, and each op is marked as an ITT task (domain lotus) for it; unset, lotus's own collector writes the job's ITT tasks into the trace";
    /// `PATH`.
    pub const PATH: &str =
        "  PATH                     where the program, python3 and the vendor tools are looked up";
    /// `PYTHONPATH`.
    pub const PYTHONPATH: &str = "  PYTHONPATH               kept, after lotus's own Python folder (the lotus / lotus_trace module)";
    /// `LOTUS_SORT_BUFFER`.
    pub const SORT_BUFFER: &str = "  LOTUS_SORT_BUFFER        bytes kept in memory per sort before spilling to files (default 16m; 64m, up to 64g)";
    /// `COLUMNS`.
    pub const COLUMNS: &str = "  COLUMNS                  the width tables fit (else the terminal's, piped too, else 100; --wide: full names)";
    /// The thread-count variables of the op's process.
    pub const THREADS: &str = "  OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS\n                           when any is set, the ops' thread counts are left to them (else 1, as in a DataLoader worker; --threads N wins)";
    /// `TMPDIR`.
    pub const TMPDIR: &str = "  TMPDIR                   where temporary files go (harness, spilled sorts); default /tmp";

    /// The `after_help` text listing `vars`.
    pub fn list(vars: &[&str]) -> String {
        let mut s = String::from(HEAD);
        for v in vars {
            s.push('\n');
            s.push_str(v);
        }
        s
    }

    /// `lotus backends`.
    pub fn backends() -> String {
        list(&[VTUNE, UPROF, PATH])
    }

    /// `lotus map`.
    pub fn map() -> String {
        list(&[
            PYTHON,
            CONTROL_LIB,
            VTUNE,
            UPROF,
            REPORT_TIMEOUT,
            ITT,
            THREADS,
            COLUMNS,
            TMPDIR,
            PATH,
        ])
    }

    /// `lotus show`.
    pub fn show() -> String {
        list(&[COLUMNS])
    }

    /// `lotus profile`.
    pub fn profile() -> String {
        list(&[
            CONTROL_LIB,
            VTUNE,
            UPROF,
            REPORT_TIMEOUT,
            PYTHONPATH,
            COLUMNS,
            TMPDIR,
            PATH,
        ])
    }

    /// `lotus compare`.
    pub fn compare() -> String {
        list(&[COLUMNS])
    }

    /// `lotus trace stats`.
    pub fn trace_stats() -> String {
        list(&[SORT_BUFFER, COLUMNS, TMPDIR])
    }

    /// `lotus attribute` (a trace folder given to --op-times is sorted).
    pub fn attribute() -> String {
        list(&[SORT_BUFFER, COLUMNS, TMPDIR])
    }

    /// `lotus trace run`.
    pub fn trace_run() -> String {
        list(&[PYTHONPATH, CONTROL_LIB, ITT_TRACE, TMPDIR, PATH])
    }

    /// `lotus trace view` and `lotus trace stats`.
    pub fn trace_read() -> String {
        list(&[SORT_BUFFER, TMPDIR])
    }
}

/// `--rule`'s parser (`lotus map`, `lotus show`).
pub fn parse_rule(s: &str) -> Result<lotus_core::MergeRule, String> {
    s.parse().map_err(|e: lotus_core::Error| e.to_string())
}

/// Writes to stdout, saying so when that fails (a closed pipe included).
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .context("cannot write to standard output")
}

/// Where a view or profile (`what`) goes: an unnamed file until it is
/// complete and committed (nothing is left behind if lotus is killed), or
/// standard output (`-`); buffered.
pub fn sink(out: &Path, what: &str) -> anyhow::Result<(Option<OutputFile>, Box<dyn Write>)> {
    if is_stdout(out) {
        let w = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
        return Ok((None, Box::new(w)));
    }
    let file = OutputFile::create(out)?;
    let copy = file.file().try_clone();
    let w = BufWriter::with_capacity(
        1 << 20,
        copy.with_context(|| format!("cannot write the {what}"))?,
    );
    Ok((Some(file), Box::new(w)))
}
