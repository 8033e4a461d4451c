//! The CLI's floor plan, kept by tests that read its sources (issue 26;
//! they were the binary's unit tests, `lotus-cli/src/layout_tests.rs`,
//! until 2026-11-28, and sit with the workspace's other layout rules now):
//! no file under `src/` over [`MAX_LINES`] lines, no command module
//! naming another command module (what two commands share lives outside
//! `cmd/`, in a shared module or a renderer), and no module outside
//! `cmd/` but `main.rs` naming a command.

use std::path::{Path, PathBuf};

/// The most lines a source file may have (its unit tests included: they
/// may go to a `tests.rs` beside it).
const MAX_LINES: usize = 600;

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("list a source folder") {
            let path = entry.expect("a source folder entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module path of a source file below `src/`: `cmd/trace/run.rs` is
/// `["cmd", "trace", "run"]`, `cmd/trace/mod.rs` is `["cmd", "trace"]`.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

/// The paths a line names from the crate's root, with `super::` chains
/// resolved against `module` (the module the line is written in).
/// Comments are skipped.
fn named_paths(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '$'))
        .filter(|w| w.contains("::"))
        .collect();
    for word in words {
        let mut segments: Vec<&str> = word.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = match segments.first() {
            Some(&"crate") | Some(&"$crate") => {
                segments.remove(0);
                Vec::new()
            }
            Some(&"super") => {
                let mut m = module.to_vec();
                while segments.first() == Some(&"super") {
                    segments.remove(0);
                    m.pop();
                }
                m
            }
            _ => continue,
        };
        base.extend(segments.iter().map(|s| s.to_string()));
        out.push(base);
    }
    out
}

#[test]
fn no_source_file_is_over_the_limit() {
    let root = src();
    let long: Vec<String> = sources(&root)
        .iter()
        .filter_map(|p| {
            let lines = std::fs::read_to_string(p).expect("read").lines().count();
            (lines > MAX_LINES).then(|| {
                format!(
                    "{} ({lines} lines)",
                    p.strip_prefix(&root).expect("below src").display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines (split them; unit tests may go to a tests.rs beside the file): {long:?}"
    );
}

#[test]
fn no_command_names_another_command() {
    let root = src();
    let mut crossings = Vec::new();
    for path in sources(&root.join("cmd")) {
        let relative = path.strip_prefix(&root).expect("below src");
        let module = module_of(relative);
        // `cmd/mod.rs` declares the commands; every other file belongs to
        // one command, `cmd/<name>.rs` or `cmd/<name>/...`.
        let Some(own) = module.get(1) else { continue };
        let text = std::fs::read_to_string(&path).expect("read");
        // An inline module at the file's top level (`mod tests {` to its
        // closing `}` in column 0) is one level further down.
        let mut inline: Option<String> = None;
        for (n, line) in text.lines().enumerate() {
            if let Some(name) = line
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(" {"))
            {
                inline = Some(name.to_string());
            } else if line == "}" {
                inline = None;
            }
            let mut here = module.clone();
            here.extend(inline.clone());
            for named in named_paths(line, &here) {
                // `cmd` itself (`crate::cmd::{a, b}`, `super::{...}` from
                // cmd/<name>.rs) or another command below it.
                let crosses = named.first().is_some_and(|s| s == "cmd")
                    && named.get(1).is_none_or(|s| s != own);
                if crosses {
                    crossings.push(format!("{}:{}: {}", relative.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        crossings.is_empty(),
        "a command names another command (move what they share out of cmd/):\n{}",
        crossings.join("\n")
    );
}

#[test]
fn shared_modules_name_no_command() {
    let root = src();
    let mut named = Vec::new();
    for path in sources(&root) {
        let relative = path.strip_prefix(&root).expect("below src");
        if relative.starts_with("cmd") || relative == Path::new("main.rs") {
            continue;
        }
        let module = module_of(relative);
        let text = std::fs::read_to_string(&path).expect("read");
        for (n, line) in text.lines().enumerate() {
            if named_paths(line, &module)
                .iter()
                .any(|p| p.first().is_some_and(|s| s == "cmd"))
            {
                named.push(format!("{}:{}: {}", relative.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        named.is_empty(),
        "a shared module or renderer names a command (commands use them, not the other way):\n{}",
        named.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    let module: Vec<String> = ["cmd", "report", "samples"].map(String::from).into();
    assert_eq!(
        named_paths("use crate::cmd::attribute::load_mapping;", &module),
        vec![["cmd", "attribute", "load_mapping"]
            .map(String::from)
            .to_vec()]
    );
    assert_eq!(
        named_paths(
            "    super::super::trace::Computed::new(x) // crate::cmd::map",
            &module
        ),
        vec![["cmd", "trace", "Computed", "new"]
            .map(String::from)
            .to_vec()]
    );
    assert_eq!(
        named_paths("use std::path::Path;", &module),
        Vec::<Vec<String>>::new()
    );
    assert_eq!(
        module_of(Path::new("cmd/trace/mod.rs")),
        ["cmd", "trace"].map(String::from).to_vec()
    );
    assert!(sources(&src()).iter().any(|p| p.ends_with("main.rs")));
}
