//! The command line's manners, checked on every command found by walking
//! `lotus help` recursively: `--format` on each command that prints data,
//! `--out -` as standard output, exit status 2 for usage errors lotus
//! finds itself, the environment variables in each command's help, shell
//! completions, the man page, `--quiet` and `--version` with the commit.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{fixture, lotus, lotus_ok, lotus_usage_error, root};
use serde_json::Value;

/// Commands whose output is data (a table, JSON, CSV): each has `--format`.
const DATA_COMMANDS: &[&str] = &[
    "backends",
    "map",
    "show",
    "profile",
    "attribute",
    "trace view",
    "trace stats",
    "compare",
    "report",
    "predict",
    "export",
];

/// Commands that print no data of their own, and why.
const OTHER_COMMANDS: &[(&str, &str)] = &[
    ("trace", "a group of commands"),
    (
        "trace run",
        "writes its trace into a folder; prints notes only",
    ),
    (
        "trace attach",
        "writes a running job's samples into a folder; prints notes only",
    ),
    (
        "top",
        "prints views of a job's ops as it runs, for a person (the folder it keeps with --out is what `attribute DIR --format` reads)",
    ),
    (
        "completions",
        "prints a shell script, whose shell is its argument",
    ),
    ("man", "prints roff"),
    (
        "tune",
        "runs the job's trials into trace folders; prints its trials and the best setting (lotus.tune/1 with --format json)",
    ),
];

/// Environment variables that lotus sets for the processes it starts (or
/// that its children read), never read from the user's environment: not
/// listed in help.
const SET_BY_LOTUS: &[&str] = &[
    "LOTUS_BACKEND",
    "LOTUS_CONTROL_FDS",
    "LOTUS_HARNESS_ONLY_OP",
    "LOTUS_PY_FRAMES",
    "LOTUS_TRACE_DIR",
    "LOTUS_TRACE_ITT",
    "LOTUS_TRACE_LOTUS",
    "LOTUS_TRACE_OPS",
    "LOTUS_TRACE_PARENT",
    "LOTUS_TRACE_PREFIX",
    "LOTUS_TRACE_REPORT_FD",
    "LOTUS_TRACE_ROLE",
    "LOTUS_TRACE_RUN",
    "LOTUS_TRACE_STATUS",
    "LOTUS_TRACE_TORCH",
    "LOTUS_WINDOW_STAMPS",
];

/// What each command's help must list under "Environment:".
const ENV_BY_COMMAND: &[(&str, &[&str])] = &[
    (
        "backends",
        &[
            "VTUNE_PROFILER_DIR",
            "AMDUPROF_HOME",
            "LOTUS_UPROF_CONTROL_LIB",
        ],
    ),
    (
        "map",
        &[
            "LOTUS_PYTHON",
            "VIRTUAL_ENV",
            "LOTUS_CONTROL_LIB",
            "VTUNE_PROFILER_DIR",
            "AMDUPROF_HOME",
            "LOTUS_UPROF_CONTROL_LIB",
            "INTEL_LIBITTNOTIFY64",
            "TMPDIR",
        ],
    ),
    (
        "profile",
        &[
            "LOTUS_CONTROL_LIB",
            "VTUNE_PROFILER_DIR",
            "AMDUPROF_HOME",
            "PYTHONPATH",
            "TMPDIR",
        ],
    ),
    ("attribute", &["LOTUS_SORT_BUFFER", "TMPDIR"]),
    (
        "trace run",
        &[
            "PYTHONPATH",
            "LOTUS_CONTROL_LIB",
            "INTEL_LIBITTNOTIFY64",
            "TMPDIR",
        ],
    ),
    ("trace view", &["LOTUS_SORT_BUFFER", "TMPDIR"]),
    ("export", &["LOTUS_SORT_BUFFER", "TMPDIR"]),
    ("trace stats", &["LOTUS_SORT_BUFFER", "TMPDIR"]),
];

fn words(path: &str) -> Vec<&str> {
    path.split_whitespace().collect()
}

/// `lotus <path> --help`.
fn help(path: &str) -> String {
    let mut args = words(path);
    args.push("--help");
    lotus_ok(&args)
}

/// The subcommands a help text lists under "Commands:" (not `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Every command path (`map`, `trace view`, ...), found by walking the
/// help recursively from `lotus help`.
fn all_commands() -> Vec<String> {
    let top = lotus_ok(&["help"]);
    let mut todo: Vec<String> = subcommands(&top);
    assert!(!todo.is_empty(), "lotus help lists no commands:\n{top}");
    let mut all = Vec::new();
    while let Some(path) = todo.pop() {
        for sub in subcommands(&help(&path)) {
            todo.push(format!("{path} {sub}"));
        }
        all.push(path);
    }
    all.sort();
    all
}

#[test]
fn every_command_is_classified_and_data_commands_take_format() {
    let all = all_commands();
    for path in &all {
        let data = DATA_COMMANDS.contains(&path.as_str());
        let other = OTHER_COMMANDS.iter().any(|(p, _)| p == path);
        assert!(
            data ^ other,
            "`lotus {path}` is new: list it in DATA_COMMANDS (it prints data: give it --format) or OTHER_COMMANDS"
        );
        let text = help(path);
        if data {
            assert!(
                text.contains("--format <FORMAT>"),
                "lotus {path} --help:\n{text}"
            );
        }
        assert!(text.contains("-q, --quiet"), "lotus {path} --help:\n{text}");
    }
    for listed in DATA_COMMANDS {
        assert!(all.iter().any(|p| p == listed), "{listed} is gone: {all:?}");
    }
}

#[test]
fn json_is_kept_as_an_alias_of_format_json() {
    let by_flag: Value = serde_json::from_str(&lotus_ok(&["backends", "--json"])).expect("json");
    let by_format: Value =
        serde_json::from_str(&lotus_ok(&["backends", "--format", "json"])).expect("json");
    // Availability is probed anew each time; the names are stable.
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("array")
            .iter()
            .map(|b| b["name"].to_string())
            .collect()
    };
    assert_eq!(names(&by_flag), names(&by_format));
    let dir = fixture("traces/original");
    let dir = dir.to_str().expect("utf-8");
    let a: Value = serde_json::from_str(&lotus_ok(&["trace", "stats", dir, "--json"])).expect("j");
    let b: Value = serde_json::from_str(&lotus_ok(&["trace", "stats", dir, "--format", "json"]))
        .expect("json");
    assert_eq!(a["schema"], "lotus.trace-stats/2");
    assert_eq!(a, b);
    let table = lotus_ok(&["trace", "stats", dir, "--format", "table"]);
    assert!(serde_json::from_str::<Value>(&table).is_err(), "{table}");
}

/// Runs lotus in `cwd`.
fn lotus_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run lotus")
}

/// Runs `args` (with `--out -`) in a fresh folder; returns stdout after
/// checking success and that no file named `-` appeared.
fn out_to_stdout(args: &[&str]) -> String {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = lotus_in(tmp.path(), args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "lotus {args:?}: {stderr}");
    assert!(
        !tmp.path().join("-").exists(),
        "lotus {args:?} wrote a file named '-'"
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn json(text: &str, what: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}):\n{text}"))
}

#[test]
fn out_dash_is_standard_output_for_every_command_with_out() {
    let reports = fixture("reports/vtune/hotspots");
    let reports = reports.to_str().expect("utf-8");
    let trace = fixture("traces/original");
    let trace = trace.to_str().expect("utf-8");
    let commands_with_out: BTreeSet<String> = all_commands()
        .into_iter()
        .filter(|p| help(p).contains("--out <"))
        .collect();
    let mut checked = BTreeSet::new();

    let mapping = out_to_stdout(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        reports,
        "--out",
        "-",
    ]);
    assert_eq!(json(&mapping, "map --out -")["schema"], "lotus.mapping/1");
    // --format still applies to standard output.
    let csv = out_to_stdout(&[
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        reports,
        "--out",
        "-",
        "--format",
        "csv",
    ]);
    assert!(csv.starts_with("op,function,module,"), "{csv}");
    checked.insert("map");

    let tmp = tempfile::tempdir().expect("tmp");
    let mapping_file = tmp.path().join("mapping.json");
    std::fs::write(&mapping_file, &mapping).expect("write");
    let attribution = out_to_stdout(&[
        "attribute",
        "--mapping",
        mapping_file.to_str().expect("utf-8"),
        "--profile",
        fixture("attribute/profile_samples.json")
            .to_str()
            .expect("utf-8"),
        "--format",
        "json",
        "--out",
        "-",
    ]);
    assert_eq!(
        json(&attribution, "attribute --out -")["schema"],
        "lotus.attribution/1"
    );
    checked.insert("attribute");

    let view = out_to_stdout(&["trace", "view", trace, "--out", "-"]);
    assert!(
        json(&view, "trace view --out -")["traceEvents"].is_array(),
        "{view}"
    );
    checked.insert("trace view");

    let html = out_to_stdout(&["report", "--trace", trace, "--out", "-"]);
    assert!(
        html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"),
        "{html}"
    );
    checked.insert("report");

    // A pprof profile (gzip) alone on stdout, of a synthetic sampled folder.
    let sampled = tempfile::tempdir().expect("tmp");
    let symbols = [(0, lotus_samples::Symbol::new("main", "/bin/x"))];
    let stacks = [lotus_samples::StackNode::new(1, 0, 0)];
    let (spans, path) = (&[("A", 1000, 1000, "kind=op")], sampled.path());
    lotus_testkit::sampled::worker_folder(path, spans, &symbols, &stacks, |_| (0, false, 1), &[]);
    let out = lotus(&["export", common::s(path), "--out", "-"]);
    assert!(out.status.success() && out.stdout.starts_with(&[0x1f, 0x8b]));
    checked.insert("export");

    let page = out_to_stdout(&["man", "--out", "-"]);
    assert!(page.contains(".TH lotus 1"), "{page}");
    checked.insert("man");

    // The program's own output goes to stderr, the profile alone to stdout.
    let profile = out_to_stdout(&[
        "profile",
        "--backend",
        "perf",
        "--out",
        "-",
        "--",
        "sh",
        "-c",
        "echo PROGRAM-$((6*7)); i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done",
    ]);
    // (The command line itself is in the profile; what it prints is not.)
    assert!(!profile.contains("PROGRAM-42"), "{profile}");
    assert_eq!(
        json(&profile, "profile --out -")["schema"],
        "lotus.profile/1"
    );
    checked.insert("profile");

    // A trace folder cannot be standard output: a usage error, and no file.
    let tmp = tempfile::tempdir().expect("tmp");
    let out = lotus_in(tmp.path(), &["trace", "run", "--out", "-", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!tmp.path().join("-").exists());
    checked.insert("trace run");
    let out = lotus_in(tmp.path(), &["trace", "attach", "1", "--out", "-"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!tmp.path().join("-").exists());
    checked.insert("trace attach");
    let out = lotus_in(tmp.path(), &["top", "--out", "-", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!tmp.path().join("-").exists());
    checked.insert("top");
    // Nor a tune's trials.
    let out = lotus_in(tmp.path(), &["tune", "--out", "-", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!tmp.path().join("-").exists());
    checked.insert("tune");

    let checked: BTreeSet<String> = checked.into_iter().map(String::from).collect();
    assert_eq!(
        commands_with_out, checked,
        "every command with --out must be checked with --out - here"
    );
}

#[test]
fn usage_errors_found_by_lotus_exit_2() {
    let reports = fixture("reports/vtune/hotspots");
    let reports = reports.to_str().expect("utf-8");
    let op = fixture("ops/RandomHorizontalFlip.py");
    let op = op.to_str().expect("utf-8");
    let trace = fixture("traces/original");
    let trace = trace.to_str().expect("utf-8");
    let tmp = tempfile::tempdir().expect("tmp");
    let scratch = tmp.path().to_str().expect("utf-8");
    let cases: &[(&[&str], &str)] = &[
        (&["map", "--backend", "nope", op], "unknown backend 'nope'"),
        (&["map", "--backend", "perf"], "nothing to map"),
        (
            &["map", "--backend", "vtune", "--from-reports", reports, op],
            "not both",
        ),
        (
            &["map", "--backend", "perf", "--from-reports", reports],
            "--backend vtune",
        ),
        (
            &["profile", "--backend", "nope", "--", "true"],
            "unknown backend 'nope'",
        ),
        (
            &["trace", "run", "--out", "-", "--", "true"],
            "standard output",
        ),
        (&["trace", "stats", trace, "--op-times", "-"], "--op-times"),
        (
            &[
                "trace", "run", "--out", scratch, "--prefix", "a/b", "--", "true",
            ],
            "--prefix",
        ),
        // clap's own, for comparison.
        (
            &["backends", "--json", "--format", "table"],
            "cannot be used",
        ),
        (&["map", "--backend", "perf", "-F", "0", op], "--frequency"),
    ];
    for (args, says) in cases {
        let stderr = lotus_usage_error(args);
        assert!(stderr.contains(says), "lotus {args:?}: {stderr}");
        assert!(stderr.contains("error"), "lotus {args:?}: {stderr}");
    }
}

#[test]
fn frequency_has_f_and_a_documented_default_per_command() {
    for (cmd, default) in [
        ("map", "Default under perf: 10000"),
        ("profile", "[default: 1000]"),
    ] {
        let text = help(cmd);
        assert!(text.contains("-F, --frequency"), "{text}");
        // map's default under perf depends on what a sample costs here,
        // so clap shows none and the help text says it.
        assert!(text.contains(default), "{cmd}: {text}");
    }
}

/// The environment variables the workspace's sources read: string
/// literals given to `env::var`/`env::var_os` and `ENV` constants.
fn env_vars_read_in_sources() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![
        root().join("lotus-cli/src"),
        root().join("lotus-map/src"),
        root().join("lotus-core/src"),
        // What lotus-core held before its split (traces, attribution,
        // samples, the sorter, the control protocol, input and process
        // helpers).
        root().join("lotus-trace/src"),
        root().join("lotus-attribute/src"),
        root().join("lotus-samples/src"),
        root().join("lotus-sort/src"),
        root().join("lotus-protocol/src"),
        root().join("lotus-sys/src"),
    ];
    for b in std::fs::read_dir(root().join("backends")).expect("backends") {
        dirs.push(b.expect("entry").path().join("src"));
    }
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().and_then(|x| x.to_str()) != Some("rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                let reads = code.contains("env::var") || code.contains("const ENV");
                if !reads {
                    continue;
                }
                for (i, quoted) in code.split('"').enumerate() {
                    let is_name = i % 2 == 1
                        && quoted.len() > 2
                        && quoted
                            .bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
                    if is_name {
                        found.insert(quoted.to_string());
                    }
                }
            }
        }
    }
    found
}

#[test]
fn environment_variables_are_listed_in_help() {
    let mut all_help = String::new();
    for path in all_commands() {
        all_help += &help(&path);
    }
    let read = env_vars_read_in_sources();
    // The scan finds what lotus reads (a sanity check of the scan itself).
    for known in ["LOTUS_PYTHON", "LOTUS_SORT_BUFFER", "VTUNE_PROFILER_DIR"] {
        assert!(read.contains(known), "{read:?}");
    }
    for var in &read {
        if SET_BY_LOTUS.contains(&var.as_str()) {
            continue;
        }
        assert!(
            all_help.contains(&format!("  {var} ")),
            "{var} is read by lotus but no command's --help lists it (usage::env_help), or list it in SET_BY_LOTUS"
        );
    }
    for (cmd, vars) in ENV_BY_COMMAND {
        let text = help(cmd);
        let env = text
            .split("Environment:")
            .nth(1)
            .unwrap_or_else(|| panic!("lotus {cmd} --help has no Environment section:\n{text}"));
        for var in *vars {
            assert!(env.contains(var), "lotus {cmd} --help lacks {var}:\n{text}");
        }
    }
}

/// Whether `program` runs here.
fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn completions_generate_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let script = lotus_ok(&["completions", shell]);
        for cmd in ["map", "attribute", "trace", "stats", "frequency"] {
            assert!(script.contains(cmd), "{shell}: no {cmd}");
        }
        // Checked by the shell itself where it is installed.
        if have(shell) {
            let tmp = tempfile::NamedTempFile::new().expect("tmp");
            std::fs::write(tmp.path(), &script).expect("write");
            let out = Command::new(shell)
                .arg("-n")
                .arg(tmp.path())
                .output()
                .expect("run shell");
            assert!(
                out.status.success(),
                "{shell} -n: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    lotus_usage_error(&["completions", "tcsh"]);
}

#[test]
fn man_pages_cover_every_command_and_render() {
    let page = lotus_ok(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH lotus 1"),
        "{page}"
    );
    let top: Vec<String> = subcommands(&lotus_ok(&["help"]));
    for cmd in &top {
        assert!(
            page.contains(&format!("lotus\\-{cmd}")),
            "lotus.1 lacks {cmd}"
        );
    }
    let dir = tempfile::tempdir().expect("tmp");
    let out = lotus(&["man", "--out", dir.path().to_str().expect("utf-8")]);
    assert!(out.status.success());
    let can_render = have("man");
    let mut pages = vec!["lotus".to_string()];
    pages.extend(
        all_commands()
            .iter()
            .map(|p| format!("lotus-{}", p.replace(' ', "-"))),
    );
    for name in &pages {
        let file = dir.path().join(format!("{name}.1"));
        let roff = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("no man page {}: {e}", file.display()));
        assert!(roff.contains(&format!(".TH {name} 1")), "{roff}");
        if can_render {
            let out = Command::new("man")
                .arg("-l")
                .arg(&file)
                .env("MANPAGER", "cat")
                .env("MANWIDTH", "100")
                .output()
                .expect("man -l");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("SYNOPSIS"),
                "{name}: {text}"
            );
        }
    }
    // A command's page carries what its help says, environment included.
    let map = std::fs::read_to_string(dir.path().join("lotus-map.1")).expect("map page");
    assert!(map.contains("LOTUS_PYTHON") && map.contains("\\-\\-frequency"));
}

/// Git's answer in the workspace, when git runs and the workspace is its
/// checkout's top.
fn git_head() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root())
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let top = git(&["rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != root().canonicalize().ok()? {
        return None;
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}

#[test]
fn version_shows_the_commit() {
    let version = lotus_ok(&["--version"]);
    let commit = version
        .trim()
        .strip_prefix(concat!("lotus ", env!("CARGO_PKG_VERSION"), " (commit "))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{version}"));
    match git_head() {
        Some(head) => assert!(
            commit == head || commit == format!("{head}-dirty"),
            "{commit} is not HEAD {head}"
        ),
        None => assert_eq!(commit, "unknown"),
    }
}

#[test]
fn quiet_drops_notes_but_not_errors() {
    let trace = fixture("traces/original");
    let trace = trace.to_str().expect("utf-8");
    let tmp = tempfile::tempdir().expect("tmp");
    let view = tmp.path().join("view.json");
    let view = view.to_str().expect("utf-8");
    let loud = lotus(&["trace", "view", trace, "--out", view]);
    assert!(String::from_utf8_lossy(&loud.stderr).contains("lotus: wrote"));
    for flag in ["--quiet", "-q"] {
        let quiet = lotus(&["trace", "view", trace, "--out", view, flag]);
        assert!(quiet.status.success());
        assert_eq!(String::from_utf8_lossy(&quiet.stderr), "", "{flag}");
    }
    // Global: before the command too.
    let quiet = lotus(&["-q", "trace", "view", trace, "--out", view]);
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");
    let missing = tmp.path().join("missing");
    let failed = lotus(&["-q", "show", missing.to_str().expect("utf-8")]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("lotus: error:"));
}

#[test]
fn quiet_live_map_prints_no_progress_and_out_dash_gives_its_json() {
    let python = common::python();
    let op = fixture("ops/RandomHorizontalFlip.py");
    let args = |quiet: bool| {
        let mut a = vec![
            "map".to_string(),
            "--backend".into(),
            "perf".into(),
            op.to_str().expect("utf-8").into(),
            "--runs".into(),
            "1".into(),
            "--min-samples".into(),
            "200".into(),
            "--no-baseline".into(),
            "--python".into(),
            python.to_str().expect("utf-8").into(),
            "--out".into(),
            "-".into(),
        ];
        if quiet {
            a.push("-q".into());
        }
        a
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let run = |quiet: bool| {
        let a = args(quiet);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = lotus_in(tmp.path(), &a);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "lotus {a:?}: {stderr}");
        assert!(!tmp.path().join("-").exists(), "a file named '-'");
        let mapping = json(&String::from_utf8_lossy(&out.stdout), "map --out -");
        assert_eq!(mapping["ops"][0]["name"], "RandomHorizontalFlip");
        stderr
    };
    let loud = run(false);
    assert!(loud.contains("run 1/1"), "{loud}");
    // Warnings are still printed (a busy machine may drop samples).
    let quiet = run(true);
    for line in quiet.lines() {
        assert!(line.contains("warning"), "--quiet printed {line:?}");
    }
}

/// What a backend cannot do is refused by what it can do, naming the one
/// that can (capabilities, not names: `tests/architecture.rs`): perf
/// reads no vendor reports; a trace's samples and `--stacks` come from
/// the backend that streams its samples, which VTune does not.
#[test]
fn a_backend_without_the_capability_is_refused_naming_the_one_with_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_str().expect("utf-8");
    for (args, says) in [
        (
            vec!["map", "--backend", "perf", "--from-reports", d],
            "perf reads none: it maps live",
        ),
        (
            vec!["map", "--backend", "vtune", "--from-trace", d],
            "taken by the perf backend, not vtune",
        ),
        (
            vec![
                "profile",
                "--backend",
                "vtune",
                "--stacks",
                "dwarf",
                "--",
                "true",
            ],
            "use --backend perf",
        ),
    ] {
        let out = common::lotus(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
