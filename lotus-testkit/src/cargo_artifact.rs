//! The executable cargo built, from `cargo build --message-format json`.
//! Shared by the end-to-end tests and the perf backend's.

use std::path::PathBuf;

/// The executable of the example `name` in cargo's JSON messages
/// `stdout`. Cargo's JSON escapes nothing in a plain path, so a string
/// search is enough here.
pub fn example_executable(stdout: &str, name: &str) -> PathBuf {
    let named = format!("\"name\":\"{name}\"");
    let line = stdout
        .lines()
        .find(|l| l.contains("\"compiler-artifact\"") && l.contains(&named))
        .unwrap_or_else(|| panic!("cargo names the artifact of example {name}"));
    let key = "\"executable\":\"";
    let start = line.find(key).expect("an executable") + key.len();
    let end = start + line[start..].find('"').expect("closing quote");
    PathBuf::from(&line[start..end])
}
