//! Where AMD uProf's profile-control library (`libAMDProfileController.so`)
//! is loaded from, and where uProf is installed.
//!
//! The profiled process opens the library (this crate's uProf calls, in
//! the profiled process) to resume and pause the uProf
//! collection around an op; the lotus process (the uProf backend's probe)
//! only looks for it, to say whether windows can open and where from.
//! Both follow the order below, so it is kept here, beside the loader,
//! and the backend depends on this crate for it (never the reverse: the
//! control library links no backend). A file found by searching (not
//! named by [`ENV_LIBRARY`]) is loaded only when no other user can have
//! put it there (`lotus_sys::trust::check_file`); the backend's probe says
//! the same.
//!
//! 1. [`ENV_LIBRARY`] (`LOTUS_UPROF_CONTROL_LIB`): a full path; when set,
//!    nothing else is tried.
//! 2. `$AMDUPROF_HOME/lib/x64/shared/`, then `$AMDUPROF_HOME/lib/x64/`.
//! 3. The usual install folders: `/opt/AMDuProf*` (the newest version
//!    first, e.g. `/opt/AMDuProf_5.1-701`) and `/opt/amd/uprof`, each with
//!    the same sub-folders.
//! 4. The dynamic library path (`LD_LIBRARY_PATH`, the loader's cache):
//!    the bare file name [`LIBRARY`].
//!
//! This module uses only the standard library.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// The environment variable naming uProf's install folder.
pub const ENV_UPROF_HOME: &str = "AMDUPROF_HOME";

/// The profile-control library's file name.
pub const LIBRARY: &str = "libAMDProfileController.so";

/// The environment variable naming the profile-control library's full path
/// (for tests and unusual installs); when set, no other place is tried.
pub const ENV_LIBRARY: &str = "LOTUS_UPROF_CONTROL_LIB";

/// Where the library lies below an install folder, in the order tried.
pub const INSTALL_SUBDIRS: &[&str] = &["lib/x64/shared", "lib/x64"];

/// Folders below which uProf installs when no home is named: every
/// `AMDuProf*` folder in `/opt`, and these.
const FIXED_HOMES: &[&str] = &["/opt/amd/uprof"];

/// Where to look for the library.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Search {
    /// [`ENV_LIBRARY`] names this file: use it and nothing else.
    Override(PathBuf),
    /// Try these files in order, then the bare name on the dynamic library
    /// path.
    Candidates(Vec<PathBuf>),
}

/// The places to look, read from this process's environment.
pub fn search() -> Search {
    match std::env::var_os(ENV_LIBRARY) {
        Some(path) if !path.is_empty() => Search::Override(PathBuf::from(path)),
        _ => Search::Candidates(candidates(
            std::env::var_os(ENV_UPROF_HOME)
                .map(PathBuf::from)
                .as_deref(),
            Path::new("/opt"),
        )),
    }
}

/// uProf's install folders: `home` (from `$AMDUPROF_HOME`) first, then the
/// `AMDuProf*` folders in `opt` (newest version first), then the fixed
/// ones.
pub fn install_homes(home: Option<&Path>, opt: &Path) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = home.map(Path::to_path_buf).into_iter().collect();
    let mut found: Vec<PathBuf> = std::fs::read_dir(opt)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("AMDuProf"))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    found.sort_by(|a, b| natural_cmp(&b.to_string_lossy(), &a.to_string_lossy()));
    homes.extend(found);
    homes.extend(FIXED_HOMES.iter().map(PathBuf::from));
    homes.dedup();
    homes
}

/// The library files to try, in order, for `home` and the install folders
/// in `opt`.
pub fn candidates(home: Option<&Path>, opt: &Path) -> Vec<PathBuf> {
    install_homes(home, opt)
        .iter()
        .flat_map(|h| INSTALL_SUBDIRS.iter().map(move |s| h.join(s).join(LIBRARY)))
        .collect()
}

/// The first candidate file that exists (the override whether or not it
/// does); `None` when only the dynamic library path is left to try.
pub fn find_file() -> Option<PathBuf> {
    match search() {
        Search::Override(path) => Some(path),
        Search::Candidates(files) => files.into_iter().find(|p| p.is_file()),
    }
}

/// Compares names with runs of digits as numbers (`AMDuProf_10.0` after
/// `AMDuProf_5.1`).
fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let da = a.iter().take_while(|c| c.is_ascii_digit()).count();
                let db = b.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (trim_zeros(&a[..da]), trim_zeros(&b[..db]));
                let order = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb));
                if order != Ordering::Equal {
                    return order;
                }
                a = &a[da..];
                b = &b[db..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&c| c == b'0').count();
    &digits[zeros..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert_eq!(
            natural_cmp("AMDuProf_10.0-1", "AMDuProf_5.1-701"),
            Ordering::Greater
        );
        assert_eq!(
            natural_cmp("AMDuProf_4.2-850", "AMDuProf_4.2-99"),
            Ordering::Greater
        );
        assert_eq!(natural_cmp("a01", "a1"), Ordering::Equal);
    }

    #[test]
    fn home_first_then_newest_install() {
        let opt = tempfile::tempdir().expect("temp dir");
        for name in ["AMDuProf_4.2-850", "AMDuProf_5.1-701", "other"] {
            std::fs::create_dir(opt.path().join(name)).expect("mkdir");
        }
        std::fs::write(opt.path().join("AMDuProf_9.9-1"), b"a file").expect("write");
        let home = Path::new("/my/uprof");
        let files = candidates(Some(home), opt.path());
        let expect: Vec<PathBuf> = [
            home.to_path_buf(),
            opt.path().join("AMDuProf_5.1-701"),
            opt.path().join("AMDuProf_4.2-850"),
            PathBuf::from("/opt/amd/uprof"),
        ]
        .iter()
        .flat_map(|h| {
            [
                h.join("lib/x64/shared").join(LIBRARY),
                h.join("lib/x64").join(LIBRARY),
            ]
        })
        .collect();
        assert_eq!(files, expect);
    }
}
