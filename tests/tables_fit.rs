//! Answers at a glance (issue 25): every command that prints a table fits
//! `COLUMNS` (80 and 120; 100 where neither `COLUMNS` nor a terminal says
//! a width), names the module of each function, honours `--top`, and
//! offers csv/md/json (`trace stats`, `profile`, `compare`, `backends`
//! gained them); `--backend` defaults to the one usable backend;
//! `profile` prints a table where asked (a terminal's default); `trace
//! run` ends with a "next:" hint. The inputs are real: a sampled run of
//! fixtures/trace/kernel_pipeline.py, the study's VTune reports, the torch
//! mapping of fixtures/names/, a live perf mapping.

use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use crate::common::sampled::kernel_pipeline;
use crate::common::{fixture, lotus_env, lotus_ok, python, s, GOOD_OP};
use serde_json::Value;

/// `lotus ARGS` with `COLUMNS` set (`None`: unset), which must succeed:
/// its stdout.
fn at(columns: Option<usize>, args: &[&str]) -> String {
    let text = columns.map(|c| c.to_string());
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(args);
    match &text {
        Some(c) => cmd.env("COLUMNS", c),
        None => cmd.env_remove("COLUMNS"),
    };
    let out = cmd.output().expect("run lotus");
    assert!(
        out.status.success(),
        "lotus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `lotus ARGS` with `COLUMNS` unset, its standard output piped and its
/// standard error a pseudo-terminal `cols` wide (`lotus ... | less` in a
/// terminal), which must succeed: its stdout.
fn piped_beside_a_terminal(cols: u16, args: &[&str]) -> String {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    use std::os::unix::ffi::OsStrExt;
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(OsStr::from_bytes(name.as_bytes()))
        .expect("the pseudo-terminal");
    let size = rustix::termios::Winsize {
        ws_row: 40,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&terminal, size).expect("its width");
    // What lotus writes to the terminal is read as it comes (a full
    // terminal would block it); the read ends once no one holds the
    // terminal's side.
    let reader = std::thread::spawn(move || {
        let mut said = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = rustix::io::read(&master, &mut buf) {
            if n == 0 {
                break;
            }
            said.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&said).into_owned()
    });
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(args)
        .env_remove("COLUMNS")
        .stdin(std::process::Stdio::null())
        .stderr(terminal);
    let out = cmd.output().expect("run lotus");
    drop(cmd);
    let said = reader.join().expect("the terminal's reader");
    assert!(out.status.success(), "lotus {args:?}: {said}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Fails where a line of `text` is wider than `width` (every character
/// lotus draws, box lines, `…`, `λ`, `±`, takes one column).
fn assert_fits(text: &str, width: usize, what: &str) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= width,
            "{what} at {width} columns: a line of {}:\n{line}\n\n{text}",
            line.chars().count()
        );
    }
}

/// Every command's table, at 80 and 120 columns.
fn fits_at_80_and_120(args: &[&str], what: &str) -> [String; 2] {
    [80, 120].map(|w| {
        let text = at(Some(w), args);
        assert_fits(&text, w, what);
        text
    })
}

/// The cells of the table lines of `text` (`│ a ┆ b │` → [a, b]).
fn cells(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with('│'))
        .map(|l| {
            l.trim_start_matches('│')
                .trim_end_matches('│')
                .split('┆')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn attribute_of_a_sampled_run_fits_names_modules_and_honours_top() {
    let run = kernel_pipeline("fork", &[]);
    let dir = s(&run.dir);
    for top in ["3", "5"] {
        let [t80, t120] = fits_at_80_and_120(&["attribute", dir, "--top", top], "attribute DIR");
        for t in [&t80, &t120] {
            // Each function has its module beside it, the blur kernel's
            // its library, the others theirs ([kernel], libpython...).
            let rows = cells(t);
            let blur = rows
                .iter()
                .find(|r| r.iter().any(|c| c == "lotus_fixture_blur"))
                .unwrap_or_else(|| panic!("no lotus_fixture_blur row:\n{t}"));
            let at = blur.iter().position(|c| c == "lotus_fixture_blur").unwrap();
            assert!(
                blur[at + 1].starts_with("liblotus_fixtur"),
                "module of lotus_fixture_blur: {blur:?}\n{t}"
            );
            assert!(!t.contains("func@0x") || t.contains(".so"), "{t}");
        }
        // --top N: the PoolBlur row lists N functions (it has more).
        let json: Value = serde_json::from_str(&at(
            None,
            &["attribute", dir, "--top", top, "--format", "json"],
        ))
        .expect("json");
        let row = json["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r["name"] == "PoolBlur")
            .expect("PoolBlur row")
            .clone();
        let n = row["top_functions"].as_array().expect("top").len();
        let want: usize = top.parse().expect("n");
        assert_eq!(n, want, "JSON top functions of PoolBlur");
        // Its lines in the table that lists the functions (their shares
        // in the last column).
        let mut shares = 0;
        let mut inside = false;
        for r in cells(&t120) {
            let share = r.last().is_some_and(|c| c.ends_with('%'));
            match r[0].as_str() {
                "PoolBlur" => inside = share,
                "" => {}
                _ => inside = false,
            }
            if inside && share {
                shares += 1;
            }
        }
        assert_eq!(shares, want, "--top {top}: functions of PoolBlur:\n{t120}");
    }
    // Unset COLUMNS, not a terminal: the documented default, 100.
    let plain = at(None, &["attribute", dir]);
    assert_fits(&plain, 100, "attribute DIR");
    // Piped, read in a terminal of 64 columns (its standard error): the
    // terminal's width, not the default.
    let piped = piped_beside_a_terminal(64, &["attribute", dir]);
    assert_fits(&piped, 64, "attribute DIR | less in 64 columns");
    let widest = |t: &str| t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest(&plain) > 64, "the default is wider: {plain}");
    // Markdown: every line of the table has the header's columns, the
    // functions with their modules.
    let md = at(None, &["attribute", dir, "--format", "md"]);
    let bars: Vec<usize> = md
        .lines()
        .filter(|l| l.starts_with("| "))
        .map(|l| l.matches(" | ").count())
        .collect();
    assert!(bars.len() > 2 && bars.iter().all(|b| *b == bars[0]), "{md}");
    assert!(
        md.contains("| top functions |") && md.contains("(liblotus_fixture"),
        "{md}"
    );

    // trace stats: tables fit; csv and md too.
    fits_at_80_and_120(&["trace", "stats", dir], "trace stats");
    let csv = at(None, &["trace", "stats", dir, "--format", "csv"]);
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let header = reader.headers().expect("header").clone();
    assert_eq!(&header[1], "section", "{csv}");
    let records: Vec<csv::StringRecord> = reader.records().map(|r| r.expect("row")).collect();
    for op in ["Dot", "PoolBlur"] {
        assert!(
            records.iter().any(|r| &r[1] == "op" && &r[2] == op),
            "{op} in the CSV:\n{csv}"
        );
    }
    let md = at(None, &["trace", "stats", dir, "--format", "md"]);
    assert!(
        md.contains("| op | count |") && md.contains("| PoolBlur |"),
        "{md}"
    );
}

#[test]
fn attribute_with_a_mapping_show_and_map_fit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mapping = tmp.path().join("mapping.json");
    let reports = fixture("reports/vtune/hotspots");
    let map = [
        "map",
        "--backend",
        "vtune",
        "--from-reports",
        s(&reports),
        "--top",
        "0",
    ];
    fits_at_80_and_120(&map, "map --from-reports");
    lotus_ok(&[&map[..], &["--out", s(&mapping)]].concat());
    let uarch = fixture("reports/vtune/uarch");
    let profiles: Vec<String> = ["b1024_gpu4_dataloader8", "b1024_gpu4_dataloader16"]
        .iter()
        .map(|p| uarch.join(format!("{p}.csv")).display().to_string())
        .collect();
    let mut args = vec!["attribute", "--mapping", s(&mapping)];
    for p in &profiles {
        args.extend(["--profile", p.as_str()]);
    }
    let [by_op, _] = fits_at_80_and_120(&args, "attribute --mapping");
    assert!(
        by_op.contains("RandomHorizontalFlip"),
        "op names whole:\n{by_op}"
    );
    args.extend(["--by", "function"]);
    let [by_function, _] = fits_at_80_and_120(&args, "attribute --by function");
    // C names whole, torch kernels by their own names, modules by file.
    for name in [
        "__memmove_avx_unaligned_erms",
        "direct_copy_kernel::λ3",
        "add_kernel",
    ] {
        assert!(by_function.contains(name), "{name}:\n{by_function}");
    }
    assert!(by_function.contains("libtorch_cpu.so"), "{by_function}");
    assert!(
        !by_function.contains("…e_avx"),
        "cut from the left:\n{by_function}"
    );

    // show, its golden at 80 columns, and show --against.
    let torch = fixture("names/torch_mapping.json");
    let [show80, _] = fits_at_80_and_120(&["show", s(&torch), "--top", "0"], "show");
    let golden = std::fs::read_to_string(common::root().join("tests/golden/show_torch_80.txt"))
        .expect("golden");
    assert_eq!(show80, golden, "show at 80 columns changed");
    let mut half: Value =
        serde_json::from_str(&std::fs::read_to_string(&torch).expect("read")).expect("json");
    for op in half["ops"].as_array_mut().expect("ops") {
        let kept: Vec<Value> = op["functions"]
            .as_array()
            .expect("functions")
            .iter()
            .step_by(2)
            .cloned()
            .collect();
        op["functions"] = Value::from(kept);
    }
    let half_path = tmp.path().join("half.json");
    std::fs::write(&half_path, half.to_string()).expect("write");
    for top in ["2", "5"] {
        let [_, t120] = fits_at_80_and_120(
            &["show", s(&half_path), "--against", s(&torch), "--top", top],
            "show --against",
        );
        // --top N missed functions per op (6 are missed in each).
        let missed = cells(&t120)
            .iter()
            .filter(|r| r.last().map(String::as_str) == Some("missed"))
            .count();
        let want: usize = top.parse().expect("n");
        assert_eq!(missed, 2 * want, "--top {top}:\n{t120}");
    }
}

#[test]
fn profile_prints_a_fitted_table_csv_and_md_with_the_one_usable_backend() {
    let py = python();
    let code = "import numpy as np\nx = np.random.rand(200, 200)\nfor _ in range(40):\n    x = (x @ x) / 200.0\n";
    let run = |columns: usize, extra: &[&str]| -> std::process::Output {
        let mut args = vec!["profile"];
        args.extend_from_slice(extra);
        args.extend(["--", s(&py), "-c", code]);
        lotus_env(&args, &[("COLUMNS", OsStr::new(&columns.to_string()))])
    };
    // No --backend: perf is the one backend that can run here, and a
    // note says it is used.
    for w in [80, 120] {
        let out = run(w, &["--format", "table", "--top", "7"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("using the perf backend"), "{stderr}");
        let table = String::from_utf8(out.stdout).expect("utf-8");
        assert_fits(&table, w, "profile");
        let rows = cells(&table);
        assert_eq!(rows.len(), 1 + 7, "--top 7 and the header:\n{table}");
        assert!(rows[0].contains(&"module".to_string()), "{table}");
        assert!(
            table.contains("libpython") || table.contains(".so"),
            "{table}"
        );
    }
    let csv = run(100, &["--format", "csv"]);
    let csv = String::from_utf8(csv.stdout).expect("utf-8");
    assert!(csv.starts_with("function,module,samples,share"), "{csv}");
    let md = run(100, &["--format", "md", "--top", "3"]);
    let md = String::from_utf8(md.stdout).expect("utf-8");
    assert!(
        md.contains("| function | module | samples | share |"),
        "{md}"
    );
    // Into a pipe with no --format: the JSON scripts read, as before.
    let json = run(100, &[]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON into a pipe");
    assert_eq!(v["schema"], "lotus.profile/1");
    assert_eq!(v["backend"], "perf");
}

#[test]
fn compare_fits_and_map_takes_the_one_usable_backend() {
    let tmp = tempfile::tempdir().expect("tmp");
    let op = tmp.path().join("Sort.py");
    std::fs::write(&op, GOOD_OP).expect("write");
    let a = tmp.path().join("here.json");
    let py = python();
    // No --backend: perf, the one that can run here, said in a note.
    let out = lotus_env(
        &[
            "map",
            "--runs",
            "1",
            "--no-baseline",
            "--python",
            s(&py),
            "--out",
            s(&a),
            s(&op),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("using the perf backend"), "{stderr}");
    let mut other: Value =
        serde_json::from_str(&std::fs::read_to_string(&a).expect("read")).expect("json");
    other["environment"]["host"] = "a-much-longer-host-name.example.org".into();
    other["environment"]["cpu_model"] =
        "Some Vendor(R) Processor Model 9000 with a long name @ 3.00GHz".into();
    let b = tmp.path().join("there.json");
    std::fs::write(&b, other.to_string()).expect("write");
    fits_at_80_and_120(&["compare", s(&a), s(&b)], "compare");
    let md = at(None, &["compare", s(&a), s(&b), "--format", "md"]);
    assert!(
        md.contains("| mapping | host | CPU model |") && md.contains("| Sort |"),
        "{md}"
    );
}

#[test]
fn backends_fit_and_come_as_csv_and_md() {
    fits_at_80_and_120(&["backends"], "backends");
    let csv = at(None, &["backends", "--format", "csv"]);
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    assert_eq!(
        reader.headers().expect("header").iter().collect::<Vec<_>>(),
        [
            "name",
            "available",
            "version",
            "description",
            "reason",
            "notes"
        ]
    );
    let names: Vec<String> = reader
        .records()
        .map(|r| r.expect("row")[0].to_string())
        .collect();
    assert_eq!(names, ["perf", "uprof", "vtune"], "{csv}");
    let md = at(None, &["backends", "--format", "md"]);
    assert!(
        md.starts_with("| name | available |") && md.contains("| perf |"),
        "{md}"
    );
}

#[test]
fn trace_run_ends_with_what_to_run_next_unless_quiet() {
    let tmp = tempfile::tempdir().expect("tmp");
    let py = python();
    let script = fixture("trace/kernel_pipeline.py");
    let reports = tmp.path().join("reports");
    std::fs::create_dir(&reports).expect("reports");
    let args = [
        script.as_os_str(),
        OsStr::new("--report-dir"),
        reports.as_os_str(),
        OsStr::new("--batches"),
        OsStr::new("2"),
    ];
    let hint = |dir: &Path, extra: &[&str]| -> Option<String> {
        let out = common::trace_logs::trace_run(dir, extra, &py, &args);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("next: ")).collect();
        assert!(lines.len() <= 1, "{stderr}");
        lines.first().map(|l| l.to_string())
    };
    let sampled = tmp.path().join("sampled");
    let line = hint(&sampled, &["--sample"]).expect("a next: line");
    assert_eq!(
        line,
        format!(
            "next: lotus attribute {0}    (then lotus report --trace {0} --out report.html)",
            sampled.display()
        )
    );
    let plain = tmp.path().join("plain");
    let line = hint(&plain, &[]).expect("a next: line");
    assert!(
        line.starts_with(&format!("next: lotus trace stats {}", plain.display())),
        "{line}"
    );
    assert!(!line.contains("attribute"), "{line}");
    let quiet = tmp.path().join("quiet");
    assert_eq!(hint(&quiet, &["-q"]), None);
}

/// The torchvision pipeline of tests/attribute_torch.rs (one epoch): its
/// attribution's tables fit 80 and 120 columns, torch's kernels read by
/// their own names, JPEG decoding by its library.
#[test]
fn attribute_of_the_torch_pipeline_fits() {
    let Some(py) = common::torch::torch_python("attribute_of_the_torch_pipeline_fits") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("trace");
    let timers = tmp.path().join("timers");
    std::fs::create_dir(&timers).expect("timers");
    let data = tmp.path().join("data");
    let mut args = common::torch::jpeg_pipeline_args(&data, 1);
    args.extend(["--model", "--op-cpu"].map(Into::into));
    args.push(timers.clone().into_os_string());
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let out = common::trace_logs::trace_run(&dir, &["--sample"], &py, &args);
    common::trace_logs::assert_ok(&out, "trace run --sample");
    let d = s(&dir);
    let [t80, t120] = fits_at_80_and_120(&["attribute", d], "attribute DIR (torch)");
    for t in [&t80, &t120] {
        assert!(t.contains("libtorch_cpu.so"), "{t}");
        assert!(
            t.contains("_kernel::λ"),
            "torch kernels by their own names:\n{t}"
        );
        assert!(!t.contains("void "), "return types kept:\n{t}");
        assert!(t.contains("└ Loader"), "{t}");
    }
    fits_at_80_and_120(&["trace", "stats", d], "trace stats (torch)");
}

/// On a terminal (a pseudo-terminal from util-linux `script`), `lotus
/// profile` with no `--format` prints the table, not the JSON.
#[test]
fn profile_on_a_terminal_prints_a_table() {
    let Ok(script) = which_script() else {
        println!("skipped: profile_on_a_terminal_prints_a_table: no `script` (util-linux) to make a terminal");
        return;
    };
    let py = python();
    let command = format!(
        "{} -q profile --top 3 -- {} -c 'sum(range(3000000))'",
        env!("CARGO_BIN_EXE_lotus"),
        py.display()
    );
    let out = std::process::Command::new(script)
        .args(["-qec", &command, "/dev/null"])
        .env("COLUMNS", "80")
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(out.status.success(), "{text}");
    assert!(text.contains("lotus profile: perf backend"), "{text}");
    assert!(text.contains("│ function"), "a table:\n{text}");
    assert!(!text.contains("\"schema\""), "JSON on a terminal:\n{text}");
    assert_fits(&text, 80, "profile on a terminal");
}

/// util-linux `script`, where installed.
fn which_script() -> Result<std::path::PathBuf, ()> {
    ["/usr/bin/script", "/bin/script"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .ok_or(())
}
