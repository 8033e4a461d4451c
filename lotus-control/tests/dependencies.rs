//! The control crate is what other tools link: it must not bring the
//! command line's dependencies (the reason it left `lotus-cli`).

use std::process::Command;

/// Crates of the `lotus` command line that a tool linking the control
/// library must not get (`anyhow` is not among them: `ittapi` uses it).
const CLI_CRATES: &[&str] = &["lotus-cli", "clap", "plotters", "indicatif", "comfy-table"];

#[test]
fn the_control_crate_depends_on_no_command_line_crate() {
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
    let names: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names.first(), Some(&"lotus-control"), "{stdout}");
    let cli: Vec<&&str> = names.iter().filter(|n| CLI_CRATES.contains(n)).collect();
    assert!(
        cli.is_empty(),
        "lotus-control depends on {cli:?}:\n{stdout}"
    );
}
