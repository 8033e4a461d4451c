//! Finding a stripped library's split debug file, whose `.symtab` names
//! what the library's own tables no longer do (libc on Debian).

use std::path::{Path, PathBuf};

use object::Object;

/// Where split debug files live (Debian, Fedora and others).
const DEBUG_ROOT: &str = "/usr/lib/debug";

/// The split debug file of `obj` (at `path`): by build ID under
/// [`DEBUG_ROOT`], else by debug link beside the file, in its `.debug`
/// folder or under [`DEBUG_ROOT`]. Paths under [`DEBUG_ROOT`] are the
/// system's; one beside the library is as trusted as the library.
pub fn debug_file<'data, O: Object<'data>>(obj: &O, path: &Path) -> Option<PathBuf> {
    if let Ok(Some(id)) = obj.build_id() {
        if id.len() > 1 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let p = Path::new(DEBUG_ROOT)
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let (link, _crc) = obj.gnu_debuglink().ok()??;
    let link = std::str::from_utf8(link).ok()?;
    // A debug link is a file name (gdb takes it so); one with a path in it
    // could lead this root process to files outside those folders.
    if link.is_empty() || link.contains('/') || link == ".." {
        return None;
    }
    let dir = path.parent()?;
    let rel = dir.strip_prefix("/").unwrap_or(dir);
    [
        dir.join(link),
        dir.join(".debug").join(link),
        Path::new(DEBUG_ROOT).join(rel).join(link),
    ]
    .into_iter()
    .find(|p| p != path && p.is_file())
}
