//! One name shortener and one width rule (issue 36): every table lotus
//! prints (the binary's, the report page's cells, `lotus_map::output`'s)
//! shortens function names and fits its width through `lotus-core`'s
//! `names` module. There were two shorteners (lotus-map's and the
//! binary's) with two default widths (120 and 100), and a third cut in
//! `lotus attribute`; a second one appearing fails here.

use std::path::Path;

use super::{non_test_lines, repo, rust_files, workspace};

/// The one home of the rule.
const HOME: &str = "lotus-core/src/names.rs";

/// Functions (by name prefix) and constants (by name) that make a name
/// rule or a width rule: only [`HOME`] defines them.
const FN_PREFIXES: &[&str] = &[
    "shorten",
    "short_name",
    "cut_right",
    "cut_middle",
    "display_width",
    "module_name",
    "table_width",
];
const CONSTS: &[&str] = &["DEFAULT_WIDTH", "MIN_NAME_WIDTH"];

/// The name-rule items `text` defines outside its unit tests, as
/// `line: item`.
fn rule_items(path: &Path, text: &str) -> Vec<String> {
    let n = non_test_lines(path, text);
    let mut found = Vec::new();
    for (i, line) in text.lines().take(n).enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let words: Vec<&str> = code
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            let hit = match pair[0] {
                "fn" => FN_PREFIXES.iter().any(|p| pair[1].starts_with(p)),
                "const" | "static" => CONSTS.contains(&pair[1]),
                _ => false,
            };
            if hit {
                found.push(format!("{}: {} {}", i + 1, pair[0], pair[1]));
            }
        }
    }
    found
}

#[test]
fn one_name_shortener_and_one_width_rule_in_lotus_core() {
    let home = repo().join(HOME);
    let mut elsewhere = Vec::new();
    for krate in workspace().values() {
        for f in rust_files(&krate.dir.join("src")) {
            if f == home {
                continue;
            }
            let text = std::fs::read_to_string(&f).expect("read source");
            for item in rule_items(&f, &text) {
                elsewhere.push(format!("{}:{item}", f.display()));
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "a name shortener or width rule outside {HOME} (call lotus_core::short_names, \
         short_name, cut_right, display_width, module_name, table_width instead):\n{}",
        elsewhere.join("\n")
    );
    // The home is where the rule is (a rename there must update HOME).
    let text = std::fs::read_to_string(&home).expect("the rule's home");
    let items = rule_items(&home, &text);
    for item in ["fn short_names", "fn table_width", "const DEFAULT_WIDTH"] {
        assert!(
            items.iter().any(|i| i.ends_with(item)),
            "{HOME} defines no {item}: {items:?}"
        );
    }
}

#[test]
fn the_rule_check_sees_definitions_not_calls_nor_unit_tests() {
    let p = Path::new("x.rs");
    let text = "pub fn shorten_all(a: &[&str]) {}\n\
                fn f() { let s = lotus_core::short_names(&[], 10); }\n\
                pub(crate) fn short_name(n: &str) {}\n\
                pub const DEFAULT_WIDTH: usize = 120;\n\
                // fn shorten(x) in a comment\n\
                fn shortfall_note() {}\n\
                #[cfg(test)]\nmod tests {\n    fn shorten_test() {}\n}\n";
    assert_eq!(
        rule_items(p, text),
        [
            "1: fn shorten_all",
            "3: fn short_name",
            "4: const DEFAULT_WIDTH"
        ]
    );
}
