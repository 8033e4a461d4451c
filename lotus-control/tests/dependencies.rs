//! The control crate is what other tools link, and what the profiled
//! process loads: it must not bring the command line's dependencies (the
//! reason it left `lotus-cli`), nor any backend (a backend may depend on
//! it, never the reverse: what both need, such as where uProf's
//! profile-control library is loaded from, lives here).

use std::process::Command;

/// Crates of the `lotus` command line that a tool linking the control
/// library must not get (`anyhow` is not among them: `ittapi` uses it).
const CLI_CRATES: &[&str] = &["lotus-cli", "clap", "plotters", "indicatif", "comfy-table"];

/// The crates lotus-control depends on (normal edges, transitively), itself
/// first.
fn dependencies() -> Vec<String> {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    // Offline: the outer build has fetched every package already.
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}", "--manifest-path", manifest])
        .args(["-p", "lotus-control"])
        .output()
        .expect("run cargo tree");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert_eq!(
        names.first().map(String::as_str),
        Some("lotus-control"),
        "{stdout}"
    );
    names
}

#[test]
fn the_control_crate_depends_on_no_command_line_crate() {
    let names = dependencies();
    let cli: Vec<&String> = names
        .iter()
        .filter(|n| CLI_CRATES.contains(&n.as_str()))
        .collect();
    assert!(
        cli.is_empty(),
        "lotus-control depends on {cli:?}:\n{names:?}"
    );
}

#[test]
fn the_control_crate_depends_on_no_backend() {
    let names = dependencies();
    let backends: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("lotus-backend-"))
        .collect();
    assert!(
        backends.is_empty(),
        "lotus-control depends on {backends:?} (a backend may depend on lotus-control, never the reverse):\n{names:?}"
    );
}
