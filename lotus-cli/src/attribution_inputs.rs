//! The inputs of a mapping-based attribution, shared by `lotus attribute`
//! and `lotus report`: the mapping, the profiles (read by
//! [`lotus_attribute::load_profile`], their warnings said) and the ops'
//! own times.

use std::path::Path;

use anyhow::Result;
pub use lotus_attribute::{name_profiles, LoadedProfile};
use lotus_attribute::{LoadedAttribution, OpTimes};
use lotus_core::Mapping;

/// Reads the mapping ([`Mapping::read_file`]: what the file is, when it
/// is not one).
pub(crate) fn load_mapping(path: &Path) -> Result<Mapping> {
    Mapping::read_file(path).map_err(|e| anyhow::anyhow!("--mapping {e}"))
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
