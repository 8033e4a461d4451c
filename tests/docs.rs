//! The documentation's own checks: README.md is a guide of at most 300
//! lines, every relative link and `#anchor` in README.md and the book's
//! chapters (`docs/src/**/*.md`) resolves, the book's links stay inside the
//! book (they must work in the built HTML too), and nothing points at a
//! folder outside the repository (`../shared` above all, which a user's
//! clone does not have). mdbook itself does not fail on a broken relative
//! link, so this test is what makes CI fail on one.
//!
//! Links are found by a small hand-written scanner rather than a Markdown
//! crate: the docs use only inline links `[text](target)`, reference
//! definitions `[name]: target` and `{{#include path}}`, and none of the
//! workspace's dependencies parses Markdown.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lotus-cli has a parent folder")
        .to_path_buf()
}

/// The Markdown files checked: README.md and every chapter of the book.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut out = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs/src")];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// Removes inline code spans, so that `[a](b)` written as code is no link.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push('`');
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The anchor mdBook and GitHub give a heading: lower case, letters,
/// digits, `-` and `_` kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    // A link in a heading counts by its text only.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// Every anchor a document's headings define (a repeated heading gets
/// `-1`, `-2`, ... as on GitHub and in mdBook).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes + 1..]);
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
    }
    out
}

/// The link targets of one line: inline links, reference definitions and
/// mdBook includes.
fn targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') {
        if let Some(close) = trimmed.find("]:") {
            if let Some(t) = trimmed[close + 2..].split_whitespace().next() {
                out.push(t.to_string());
            }
        }
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &after[end..];
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("{{#include ") {
        let after = &rest[at + "{{#include ".len()..];
        let end = after.find("}}").unwrap_or(after.len());
        let path = after[..end].trim().split(':').next().unwrap_or("");
        out.push(format!("include:{path}"));
        rest = &after[end..];
    }
    out
}

/// `path` with `.` and `..` folded away, without touching the disk.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn broken_links() -> Vec<String> {
    let root = repo();
    let book = root.join("docs/src");
    let mut problems = Vec::new();
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut anchors_of = |path: &Path| -> Option<BTreeSet<String>> {
        if let Some(a) = anchor_cache.get(path) {
            return Some(a.clone());
        }
        let text = std::fs::read_to_string(path).ok()?;
        let a = anchors(&text);
        anchor_cache.insert(path.to_path_buf(), a.clone());
        Some(a)
    };
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("a readable document");
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        let in_book = doc.starts_with(&book);
        for (n, line) in text.lines().enumerate() {
            if line.contains("../shared") || line.contains("shared/DESIGN") {
                problems.push(format!(
                    "{name}:{}: points at ../shared, which a clone does not have: {line}",
                    n + 1
                ));
            }
        }
        for (n, line) in prose_lines(&text) {
            for target in targets(line) {
                let (target, include) = match target.strip_prefix("include:") {
                    Some(t) => (t.to_string(), true),
                    None => (target, false),
                };
                if target.is_empty()
                    || target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target.as_str(), None),
                };
                let here = doc.parent().expect("a document's folder");
                let resolved = if file.is_empty() {
                    doc.clone()
                } else {
                    normal(&here.join(file))
                };
                let bad = |why: &str| format!("{name}:{n}: link `{target}`: {why}");
                if !resolved.starts_with(&root) {
                    problems.push(bad("points outside the repository"));
                    continue;
                }
                if in_book && !include && !resolved.starts_with(&book) {
                    problems.push(bad(
                        "leaves docs/src (it would break in the built book; link the chapter or name the file as code)",
                    ));
                    continue;
                }
                if !resolved.exists() {
                    problems.push(bad("no such file"));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let is_md = resolved.extension().is_some_and(|x| x == "md");
                    if !is_md {
                        continue;
                    }
                    match anchors_of(&resolved) {
                        Some(set) if set.contains(anchor) => {}
                        _ => problems.push(bad("no heading has that anchor")),
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let problems = broken_links();
    assert!(
        problems.is_empty(),
        "{} broken link(s) in the docs:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn readme_is_a_guide_of_at_most_300_lines() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines; at most 300");
    // The first screen: the pip install and the two checkout commands.
    let head: String = readme.lines().take(40).collect::<Vec<_>>().join("\n");
    for needle in [
        "pip install",
        "bash scripts/demo.sh",
        "bash scripts/test.sh",
    ] {
        assert!(
            head.contains(needle),
            "README.md's first 40 lines lack `{needle}`"
        );
    }
    // The quick start on one's own script within the first 80 lines.
    let quick: String = readme.lines().take(80).collect::<Vec<_>>().join("\n");
    for needle in [
        "lotus trace run",
        "--sample",
        "lotus attribute",
        "lotus report",
    ] {
        assert!(
            quick.contains(needle),
            "README.md's first 80 lines lack `{needle}`"
        );
    }
}

#[test]
fn every_chapter_is_in_the_summary() {
    let src = repo().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("docs/src/SUMMARY.md");
    for doc in documents() {
        let Ok(rel) = doc.strip_prefix(&src) else {
            continue;
        };
        let rel = rel.display().to_string();
        if rel != "SUMMARY.md" {
            assert!(
                summary.contains(&format!("]({rel})")),
                "docs/src/{rel} is not in docs/src/SUMMARY.md (mdbook would not build it)"
            );
        }
    }
}

#[test]
fn the_checker_finds_what_it_must() {
    assert_eq!(slug("`lotus map`: the contract"), "lotus-map-the-contract");
    assert_eq!(
        slug("The mapping schema (`lotus.mapping/1`, JSON)"),
        "the-mapping-schema-lotusmapping1-json"
    );
    let a = anchors("# A\n```\n# not a heading\n```\n## A\n");
    assert_eq!(a, BTreeSet::from(["a".to_string(), "a-1".to_string()]));
    assert_eq!(
        targets("see [x](a.md#b) and `[y](code.md)` and [z](c.md)"),
        vec!["a.md#b", "c.md"]
    );
    assert_eq!(targets("[ref]: ../x.md"), vec!["../x.md"]);
    assert_eq!(
        targets("{{#include ../../bench/README.md:2:}}"),
        vec!["include:../../bench/README.md"]
    );
}

/// The repository paths a document names in code spans (`lotus-core/src/x.rs`),
/// that do not exist; patterns (`*`, `{a,b}`, `<name>`) are skipped.
fn missing_paths(text: &str, root: &Path) -> Vec<String> {
    // Paths from the repository's root (`include/` and `templates/` are
    // named relative to their crate).
    const TOPS: [&str; 8] = [
        "lotus-",
        "backends/",
        "tests/",
        "fixtures/",
        "bench/",
        "scripts/",
        "docs/",
        ".ci/",
    ];
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, span) in line.split('`').enumerate() {
            // Odd pieces are inside a code span.
            if i % 2 == 0 || !span.contains('/') || span.contains(' ') {
                continue;
            }
            let path = span.trim_end_matches([':', ',', '.']);
            let top_level = TOPS
                .iter()
                .any(|t| path.starts_with(t) && (t.ends_with('/') || path.contains('/')));
            if !top_level
                || path.contains(['*', '{', '<', '$', '='])
                || path.starts_with("lotus-trace:")
            {
                continue;
            }
            if !root.join(path).exists() {
                out.push(format!("line {}: {path}", n + 1));
            }
        }
    }
    out
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let root = repo();
    let mut docs = documents();
    docs.push(root.join("ARCHITECTURE.md"));
    docs.push(root.join("bench/README.md"));
    for entry in std::fs::read_dir(&root).expect("the repository").flatten() {
        let readme = entry.path().join("README.md");
        if entry.path().is_dir() && readme.is_file() {
            docs.push(readme);
        }
    }
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("read a document");
        for m in missing_paths(&text, &root) {
            missing.push(format!("{}: {m}", doc.display()));
        }
    }
    assert!(
        missing.is_empty(),
        "paths the docs name that do not exist:\n{}",
        missing.join("\n")
    );
    // The check finds what it must.
    assert_eq!(
        missing_paths(
            "see `lotus-core/src/no_such_file.rs` and `lotus-core/src/lib.rs`",
            &root
        ),
        vec!["line 1: lotus-core/src/no_such_file.rs".to_string()]
    );
}
