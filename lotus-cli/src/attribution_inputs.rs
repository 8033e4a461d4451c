//! The inputs of a mapping-based attribution, shared by `lotus attribute`
//! and `lotus report`: the mapping, the profiles (read by
//! [`lotus_attribute::load_profile`], their warnings said) and the ops'
//! own times.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use anyhow::{bail, Context, Result};
pub use lotus_attribute::{name_profiles, LoadedProfile};
use lotus_attribute::{LoadedAttribution, OpTimes};
use lotus_core::{Error as CoreError, Mapping};

/// The file a trace folder gives op times in.
pub const TRACE_OP_TIMES: &str = "op_times.csv";

/// Reads the mapping, saying what the file is when it is not one.
pub(crate) fn load_mapping(path: &Path) -> Result<Mapping> {
    let name = path.display().to_string();
    if path.is_dir() {
        bail!("--mapping {name}: is a folder; give a mapping file (lotus map --out FILE)");
    }
    let mut file = lotus_sys::input::open_regular(path)
        .with_context(|| format!("cannot read mapping {name}"))?;
    // The first bytes tell a CSV or text report given by mistake.
    let mut head = [0u8; 64];
    let n =
        read_head(&mut file, &mut head).with_context(|| format!("cannot read mapping {name}"))?;
    let head_text = String::from_utf8_lossy(&head[..n]);
    let first = head_text.trim_start_matches('\u{feff}').trim_start();
    let looks_like_json = first.is_empty() || first.starts_with('{');
    // Streamed: the file is never held as text nor as a JSON tree.
    Mapping::from_reader(file, &name).map_err(|e| {
        let hint = match &e {
            CoreError::Json { .. } | CoreError::InvalidMapping { .. } | CoreError::NotAMapping { .. }
                if !looks_like_json =>
            {
                " (this looks like a CSV or text report, not a mapping: pass profiles with --profile, mappings come from `lotus map`)"
            }
            CoreError::UnknownMappingSchema { found, .. } if found.contains("lotus.profile/") => {
                " (this is a profile: pass it with --profile)"
            }
            _ => "",
        };
        anyhow::anyhow!("--mapping {e}{hint}")
    })
}

/// Reads up to `buf.len()` bytes from the start of `file`, then rewinds it.
fn read_head(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::{Read, Seek};
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    file.rewind()?;
    Ok(n)
}

/// Reads `--op-times`: a CSV, or a trace folder (its logs, read through
/// `lotus_trace`: each op's total time; else its `op_times.csv`).
pub(crate) fn load_op_times(path: &Path) -> Result<OpTimes> {
    let file = if path.is_dir() {
        if let Some((times, warnings)) = OpTimes::read_trace_dir(path)? {
            for bad in &warnings.shown {
                crate::usage::say!("lotus: warning: {bad} (line skipped)");
            }
            if warnings.not_shown() > 0 {
                crate::usage::say!(
                    "lotus: warning: {} more bad line(s) skipped, not shown",
                    warnings.not_shown()
                );
            }
            return Ok(times);
        }
        let f = path.join(TRACE_OP_TIMES);
        if f.symlink_metadata().is_err() {
            bail!(
                "--op-times {}: a folder is read as a lotus trace (its <prefix>_main_pid_<pid> / <prefix>_worker_pid_<pid> logs, or an {TRACE_OP_TIMES}), and this one has none; give a CSV of op,seconds (one line per op) instead",
                path.display()
            );
        }
        // A file of the trace folder: opened inside it, as its logs are
        // (no link out of the folder, regular files only, bounded).
        let name = f.display().to_string();
        let opened = lotus_sys::input::Folder::open(path)
            .and_then(|dir| dir.open_file(Path::new(TRACE_OP_TIMES)))
            .with_context(|| format!("cannot open --op-times {name}"))?;
        return Ok(OpTimes::read_csv(&mut BufReader::new(opened), &name)?);
    } else {
        path.to_path_buf()
    };
    let name = file.display().to_string();
    let f = lotus_sys::input::open_regular(&file)
        .with_context(|| format!("cannot open --op-times {name}"))?;
    Ok(OpTimes::read_csv(&mut BufReader::new(f), &name)?)
}

/// Reads one profile and attributes it ([`lotus_attribute::load_profile`]),
/// saying its warnings (a partial profile) as they come.
pub fn load_profile(
    path: &Path,
    mapping: &Mapping,
    options: &lotus_attribute::Options,
    mapping_name: &str,
    functions: Option<&lotus_attribute::FunctionMapping>,
) -> Result<LoadedAttribution> {
    let mut warn = |w: String| crate::usage::say!("lotus: warning: {w}");
    Ok(lotus_attribute::load_profile(
        path,
        mapping,
        options,
        mapping_name,
        functions,
        &mut warn,
    )?)
}
