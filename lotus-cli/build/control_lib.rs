//! Builds the control library (crate `lotus-control`) for the `lotus`
//! binary to carry: `src/control_lib.rs` embeds the file this leaves at
//! `$OUT_DIR/liblotus_control.so` with `include_bytes!`, so a copied or
//! `cargo install`ed `lotus` needs nothing beside it.
//!
//! Cargo has no stable way for a binary to depend on a `cdylib`
//! (artifact dependencies, `-Z bindeps`, are unstable), so this runs a
//! nested `cargo build` of the library, the way crates that ship a built
//! artifact do:
//!
//! - its own target folder (`<profile>/build/lotus-control-embedded`,
//!   beside the outer build's `OUT_DIR`s): the outer cargo holds the lock
//!   of its own target (and build) folder for the whole build, and a
//!   nested build there would wait for it forever. The folder stays
//!   between builds, so the nested build is incremental; this script
//!   reruns only when a source of the library changes (the paths come from
//!   the nested build's own dep-info file), or the lock file;
//! - the same cargo (`$CARGO`), rustc, target and profile, `--locked
//!   --offline`: the outer build has fetched every package the library
//!   needs (lotus-cli depends on lotus-control), and a build script must
//!   not reach the network or rewrite `Cargo.lock`; it shares the outer
//!   build's jobserver (`CARGO_MAKEFLAGS`), so it does not oversubscribe
//!   the CPUs;
//! - no debug info (symbols kept): the debug build's library is 36 MB
//!   with it, and lotus writes its copy once per run; no incremental
//!   caches (they tripled the nested folder's size).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The library's file name, in the nested target folder and in `OUT_DIR`.
const LIBRARY: &str = "liblotus_control.so";

/// Builds the control library and leaves it at `$OUT_DIR/liblotus_control.so`;
/// panics (fails the build) saying why when it cannot.
pub fn build(workspace: &Path) {
    let env = |k: &str| std::env::var_os(k).unwrap_or_else(|| panic!("cargo sets {k}"));
    let out_dir = PathBuf::from(env("OUT_DIR"));
    let manifest = workspace.join("lotus-control/Cargo.toml");
    if !manifest.is_file() {
        panic!(
            "{} is missing: lotus-cli embeds liblotus_control.so, built from the lotus-control crate \
             beside it in the lotus workspace; build or install from a checkout of the workspace \
             (cargo install --locked --path lotus-cli)",
            manifest.display()
        );
    }
    let target = env("TARGET");
    let profile_dir = profile_dir(&out_dir);
    // Cargo names the dev profile's folder `debug`; other profiles' folders
    // carry their names.
    let profile = if profile_dir == "debug" {
        "dev".to_string()
    } else {
        profile_dir.clone()
    };
    let target_dir = nested_target_dir(&out_dir);
    let profile_var = format!("CARGO_PROFILE_{}", profile.to_uppercase().replace('-', "_"));
    let out = Command::new(env("CARGO"))
        .args([
            "build",
            "--lib",
            "--locked",
            "--offline",
            "--message-format",
            "short",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .arg("--target")
        .arg(&target)
        .args(["--profile", &profile])
        // A build folder set in the user's configuration would be the outer
        // build's, whose lock it holds.
        .env("CARGO_BUILD_BUILD_DIR", &target_dir)
        // The copy carries symbols but no debug info, so none is made;
        // incremental caches would triple the folder for a small crate.
        .env(format!("{profile_var}_DEBUG"), "false")
        .env(format!("{profile_var}_STRIP"), "debuginfo")
        .env("CARGO_INCREMENTAL", "0")
        // `cargo clippy` sets this for the outer build; the library is
        // linted as a workspace member there, not here.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the control library: {e}"));
    if !out.status.success() {
        panic!(
            "building the control library (cargo build -p lotus-control --locked --offline \
             --target-dir {}) failed; a checkout whose Cargo.lock does not match its manifests \
             needs `cargo update -p lotus-control` first, and an install needs --locked:\n{}",
            target_dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let built = target_dir.join(&target).join(&profile_dir);
    let library = built.join(LIBRARY);
    std::fs::copy(&library, out_dir.join(LIBRARY))
        .unwrap_or_else(|e| panic!("cannot copy {} into OUT_DIR: {e}", library.display()));
    rerun_if_sources_change(workspace, &built.join("liblotus_control.d"));
}

/// The nested build's target folder: one per profile folder
/// (`<profile>/build/lotus-control-embedded`), not one per `OUT_DIR`:
/// `cargo build`, `clippy`, `doc` and `test` run this script with
/// different hashes, and each would keep its own 100 MB copy of the same
/// build. Two outer builds never use it at once: each holds the lock of
/// the outer target folder while it runs.
fn nested_target_dir(out_dir: &Path) -> PathBuf {
    match out_dir.ancestors().nth(2) {
        Some(build) if build.file_name() == Some("build".as_ref()) => {
            build.join("lotus-control-embedded")
        }
        _ => out_dir.join("control-target"),
    }
}

/// The name of the profile folder this build writes to (`debug`,
/// `release`, a custom profile's name): `OUT_DIR` is
/// `<target>/[<triple>/]<profile>/build/<package>-<hash>/out`.
fn profile_dir(out_dir: &Path) -> String {
    out_dir
        .ancestors()
        .nth(3)
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .or_else(|| std::env::var("PROFILE").ok())
        .unwrap_or_else(|| "debug".into())
}

/// Tells cargo to rerun this script when a source of the library inside
/// the workspace changes (the nested build's dep-info lists them), when a
/// manifest of theirs changes, or when the lock file does. Sources from
/// the registry only change with the lock file.
fn rerun_if_sources_change(workspace: &Path, dep_info: &Path) {
    let text = std::fs::read_to_string(dep_info)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dep_info.display()));
    let mut watch = vec![workspace.join("Cargo.lock"), workspace.join("Cargo.toml")];
    for path in dep_info_paths(&text) {
        if !path.starts_with(workspace) {
            continue;
        }
        if let Some(manifest) = path
            .ancestors()
            .skip(1)
            .take_while(|d| d.starts_with(workspace))
            .map(|d| d.join("Cargo.toml"))
            .find(|m| m.is_file())
        {
            watch.push(manifest);
        }
        watch.push(path);
    }
    watch.sort();
    watch.dedup();
    for path in watch {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// The prerequisites of a make-style dep-info file (`target: a b\ c`):
/// spaces inside a path are escaped with a backslash.
fn dep_info_paths(text: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for line in text.lines() {
        let Some((_, deps)) = line.split_once(": ") else {
            continue;
        };
        let mut current = String::new();
        let mut chars = deps.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => current.extend(chars.next()),
                ' ' => {
                    if !current.is_empty() {
                        paths.push(PathBuf::from(std::mem::take(&mut current)));
                    }
                }
                _ => current.push(c),
            }
        }
        if !current.is_empty() {
            paths.push(PathBuf::from(current));
        }
    }
    paths
}
