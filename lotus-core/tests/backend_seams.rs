//! The seams around the backends, kept as tests: the map engine and the
//! command line find backends through this crate's registry and ask the
//! trait for what a backend offers (`Profiler::calibration`, `streaming`,
//! `report_format`, `Collection::sampling_control`, ...), so that neither
//! depends on a backend crate by name. A third backend, here or in a tool
//! that links lotus, then gets every feature it offers through the trait.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lotus-core sits in the workspace")
        .to_path_buf()
}

/// Whether `name` (a package or a crate name, `-` or `_`) is a backend.
/// `lotus-backend-common` is not one: it holds helpers the backends share
/// (the process helpers it has are moving to lotus-sys).
fn is_backend(name: &str) -> bool {
    let name = name.replace('_', "-");
    name.starts_with("lotus-backend-") && name != "lotus-backend-common"
}

/// The backends among `package`'s normal (not dev or build) dependencies,
/// as `cargo metadata` reads the manifests.
fn backend_dependencies(package: &str) -> Vec<String> {
    // Offline: the outer build has fetched every package already.
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let pkg = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == package)
        .unwrap_or_else(|| panic!("{package} is not a workspace member"));
    pkg["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .filter(|d| d["kind"].is_null())
        .filter_map(|d| d["name"].as_str())
        .filter(|n| is_backend(n))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_map_engine_depends_on_no_backend_crate() {
    let backends = backend_dependencies("lotus-map");
    assert!(
        backends.is_empty(),
        "lotus-map's [dependencies] name backend crates {backends:?}: find the backend with \
         lotus_core::backend and ask the trait for what it offers (lotus_core::Profiler::\
         calibration, Collection::sampling_control, ...); tests and examples may \
         dev-depend on backends"
    );
}

/// Whether `line` (of lotus-cli's main.rs) is one of the lines that link a
/// backend for the registry: `use lotus_backend_x as _;`.
fn links_for_the_registry(line: &str) -> bool {
    line.trim()
        .strip_prefix("use ")
        .and_then(|l| l.strip_suffix(" as _;"))
        .is_some_and(|krate| {
            is_backend(krate) && krate.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the folder") {
        let path = entry.expect("folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The backend crates named in the code of `text` (of file `main`:
/// whether it is the binary's main.rs), by line: any `lotus_backend_x`
/// outside comments (a crate doc's example may show how a caller links
/// one) other than the registry lines of main.rs.
fn backends_named(text: &str, main: bool) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if main && links_for_the_registry(line) {
            continue;
        }
        let mut rest = line.split("//").next().unwrap_or("");
        while let Some(at) = rest.find("lotus_backend_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if is_backend(&name) {
                found.push((n + 1, line.trim().to_string()));
                break;
            }
            rest = &rest[at + name.len()..];
        }
    }
    found
}

/// Where `dir`'s sources name a backend crate in code (`main`: the
/// binary's main.rs, whose registry lines are allowed).
fn named_in(dir: &str, main: Option<&str>) -> Vec<String> {
    let src = root().join(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 3, "sources not found in {src:?}");
    let mut named = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let is_main = main.is_some_and(|m| file == &src.join(m));
        for (line, text) in backends_named(&text, is_main) {
            named.push(format!("{}:{line}: {text}", file.display()));
        }
    }
    named
}

#[test]
fn the_command_line_names_no_backend_crate_but_to_link_it() {
    let named = named_in("lotus-cli/src", Some("main.rs"));
    assert!(
        named.is_empty(),
        "lotus-cli names backend crates outside main.rs's `use lotus_backend_x as _;` lines \
         (find the backend with lotus_core::backend and ask the trait for the capability):\n{}",
        named.join("\n")
    );
}

#[test]
fn the_map_engine_names_no_backend_crate_in_code() {
    let named = named_in("lotus-map/src", None);
    assert!(
        named.is_empty(),
        "lotus-map names backend crates in code, tests included (a caller links the \
         backends; a unit test uses a stand-in Profiler):\n{}",
        named.join("\n")
    );
}

#[test]
fn the_scan_finds_a_backend_named_in_code_and_lets_the_registry_lines_be() {
    let main = "use lotus_backend_perf as _;\nuse lotus_backend_common::reaper;\n";
    assert!(backends_named(main, true).is_empty());
    assert_eq!(backends_named(main, false).len(), 1, "outside main.rs");
    let code = "let c = lotus_backend_perf::sampling_cost();\n//! use lotus_backend_vtune as _;\nuse lotus_backend_uprof::report; // x\n";
    assert_eq!(
        backends_named(code, true)
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>(),
        [1, 3],
        "code is named, comments are not"
    );
}
