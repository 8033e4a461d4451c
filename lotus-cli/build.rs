//! Puts the commit lotus is built from into `lotus --version`
//! (`LOTUS_GIT_COMMIT`: the short hash, `-dirty` when tracked files
//! differ from it, `unknown` without git or outside this repository's
//! checkout: a source tarball, a vendored copy), and builds the control
//! library the binary carries (`build/control_lib.rs`).

use std::path::Path;
use std::process::Command;

#[path = "build/control_lib.rs"]
mod control_lib;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let workspace = Path::new(&manifest).parent().unwrap_or(Path::new("."));
    let commit = commit(workspace).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LOTUS_GIT_COMMIT={commit}");
    control_lib::build(workspace);
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/control_lib.rs");
}

/// Runs git in `dir`; its trimmed stdout when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn commit(workspace: &Path) -> Option<String> {
    // Only this repository's own checkout counts: a tarball unpacked
    // inside some other git repository must not take that one's commit.
    let top = git(workspace, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), workspace) {
        return None;
    }
    // Rebuilt when HEAD moves (a checkout, a commit on the branch), the
    // index changes (staging) or the sources here change. The paths come
    // from git: in a worktree .git is a file and the refs are elsewhere.
    // Only paths that exist are named: cargo takes a missing one as changed
    // and would rebuild lotus on every build. (Not the refs folder: other
    // worktrees' commits would rebuild lotus here. A loose ref that
    // reappears after `git pack-refs` is seen through the index, which a
    // commit rewrites.)
    let mut watch = vec!["HEAD".to_string(), "index".into(), "packed-refs".into()];
    if let Some(head_ref) = git(workspace, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(head_ref);
    }
    for rel in &watch {
        if let Some(p) = git(workspace, &["rev-parse", "--git-path", rel]) {
            let path = workspace.join(p);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=build.rs");
    let hash = git(workspace, &["rev-parse", "--short=12", "HEAD"])?;
    // Untracked files do not make a build dirty (scratch files, .venv).
    let dirty = git(
        workspace,
        &["status", "--porcelain", "--untracked-files=no"],
    )
    .is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}
