//! One output writer and one private-folder maker: every file lotus writes
//! goes through `lotus_sys::OutputFile` (or `write_file`, `create_dir_all`)
//! and every temporary folder or file through `lotus_sys::PrivateDir` (or
//! `temp_file`). This test reads the tracked Rust sources (not tests,
//! benches, examples, nor `#[cfg(test)]` modules) and fails on any other
//! way to create a file or folder, outside `lotus-sys` and the short list
//! below, each with its reason.
//!
//! Not Rust, so not scanned: the tracer's Python (`lotus_trace/_core.py`)
//! creates the trace logs inside the job, as the job's user, with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` in the folder `trace run` checked; the
//! harness (`lotus_harness.py`) writes its result file in the harness's
//! private folder.

use crate::common;

use std::process::Command;

/// What creates a file or folder by name.
const CREATORS: &[&str] = &[
    "tempfile::",
    "fs::create_dir",
    "File::create",
    "fs::write",
    ".create(true)",
    ".create_new(true)",
    "DirBuilder",
    "O_CREAT",
    "O_TMPFILE",
    "mkdtemp",
    "mkdirat",
    ".persist(",
];

/// (file, creator, why it may): the places allowed besides lotus-sys.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "lotus-control/src/itt_tasks/log.rs",
        "O_CREAT",
        "ITT task logs, created inside the job as its user, O_EXCL|O_NOFOLLOW, in the folder `trace run` checked",
    ),
    (
        "lotus-control/src/itt_tasks/log.rs",
        ".create_new(true)",
        "the same logs' status note, O_EXCL, in the tracer's PrivateDir status folder",
    ),
    (
        "lotus-samples/src/samples.rs",
        ".create_new(true)",
        "sample and symbol streams appended while sampling, O_EXCL|O_NOFOLLOW, in the trace folder `trace run` checked",
    ),
    (
        "lotus-map/src/op_harness.rs",
        ".create_new(true)",
        "the control library copy, O_EXCL|O_NOFOLLOW mode 0500, in the harness's PrivateDir",
    ),
    (
        "lotus-map/src/live.rs",
        ".create_new(true)",
        "an empty gate file, O_EXCL, in the harness's PrivateDir",
    ),
];

/// Whether `line` uses `creator` (`File::create` not as the end of
/// `OutputFile::create`).
fn uses(line: &str, creator: &str) -> bool {
    line.match_indices(creator).any(|(at, _)| {
        !creator.starts_with(|c: char| c.is_ascii_alphabetic())
            || line[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// The lines of `text` outside `#[cfg(test)] mod ... { }` blocks and
/// comments, with their numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|n| n.contains("mod ") && n.trim_end().ends_with('{'))
        {
            // Skip to the brace that closes the module (braces counted
            // naively: test modules hold no unbalanced brace in strings).
            let mut depth = 0i64;
            i += 1;
            while i < lines.len() {
                depth += lines[i].matches('{').count() as i64;
                depth -= lines[i].matches('}').count() as i64;
                i += 1;
                if depth <= 0 {
                    break;
                }
            }
            continue;
        }
        let t = line.trim_start();
        if !t.starts_with("//") {
            out.push((i + 1, line));
        }
        i += 1;
    }
    out
}

#[test]
fn no_file_or_folder_is_created_outside_the_one_writer_and_the_private_folder_maker() {
    let root = common::root();
    let listed = Command::new("git")
        .args(["ls-files", "-z", "--", "*.rs"])
        .current_dir(&root)
        .output()
        .expect("git ls-files");
    if !listed.status.success() {
        eprintln!(
            "skipped: no_file_or_folder_is_created_outside_the_one_writer_and_the_private_folder_maker: not a git checkout ({})",
            String::from_utf8_lossy(&listed.stderr).trim()
        );
        return;
    }
    let files: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .split('\0')
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect();
    assert!(
        files.iter().any(|f| f == "lotus-sys/src/output.rs"),
        "the scan sees the sources"
    );
    let mut found = Vec::new();
    let mut used_allowances = vec![false; ALLOWED.len()];
    for file in &files {
        let parts: Vec<&str> = file.split('/').collect();
        // Tests, benches and examples are not lotus (nor lotus-testkit,
        // the tests' helpers); nor is the bench folder's examples, nor the
        // writer itself.
        // A module's unit tests in a file of their own (`#[cfg(test)] mod
        // tests;` beside it: `tests.rs`, `layout_tests.rs`) are tests too.
        let unit_tests = file.ends_with("/tests.rs") || file.ends_with("_tests.rs");
        if parts
            .iter()
            .any(|p| matches!(*p, "tests" | "benches" | "examples"))
            || unit_tests
            || parts[0] == "bench"
            || parts[0] == "lotus-sys"
            || parts[0] == "lotus-testkit"
        {
            continue;
        }
        let text = std::fs::read_to_string(root.join(file)).expect("read source");
        for (n, line) in code_lines(&text) {
            for creator in CREATORS {
                if !uses(line, creator) {
                    continue;
                }
                match ALLOWED
                    .iter()
                    .position(|(f, c, _)| f == file && c == creator)
                {
                    Some(k) => used_allowances[k] = true,
                    None => found.push(format!("{file}:{n}: {creator}: {}", line.trim())),
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "files or folders created outside lotus_sys (use OutputFile / write_file / create_dir_all, or PrivateDir / temp_file):\n{}",
        found.join("\n")
    );
    // An allowance no longer needed is removed, not kept open.
    for (k, used) in used_allowances.iter().enumerate() {
        assert!(used, "allowance not needed any more: {:?}", ALLOWED[k]);
    }
}

#[test]
fn the_scan_sees_a_creator_and_skips_test_modules() {
    let text = "fn a() {\n    std::fs::write(p, b);\n}\n// std::fs::write in a comment\n#[cfg(test)]\nmod tests {\n    fn b() { std::fs::create_dir(p); }\n}\nfn c() { lotus_sys::OutputFile::create(p); File::create(q); }\n";
    let lines = code_lines(text);
    let hits: Vec<(usize, &str)> = lines
        .iter()
        .flat_map(|(n, l)| {
            CREATORS
                .iter()
                .filter(|c| uses(l, c))
                .map(move |c| (*n, *c))
        })
        .collect();
    assert_eq!(hits, [(2, "fs::write"), (9, "File::create")]);
}
