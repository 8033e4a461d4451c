//! The inputs of a mapping-based attribution, shared by `lotus attribute`
//! and `lotus report`: the mapping, the profiles (read by
//! [`lotus_attribute::load_profile`], their warnings said) and the ops'
//! own times.

use std::fs::File;
use std::path::Path;

use anyhow::{bail, Context, Result};
pub use lotus_attribute::{name_profiles, LoadedProfile};
use lotus_attribute::{LoadedAttribution, OpTimes};
use lotus_core::{Error as CoreError, Mapping};

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

/// Reads `--op-times` ([`OpTimes::read_path`]), saying the bad lines of
/// a trace folder's logs.
pub(crate) fn load_op_times(path: &Path) -> Result<OpTimes> {
    let (times, warnings) = OpTimes::read_path(path)?;
    if let Some(w) = warnings {
        crate::traces::report_warnings(&w);
    }
    Ok(times)
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
