//! Trace folders received from another machine (or planted by another
//! user): every command that reads one (`lotus attribute`, `lotus map
//! --from-trace`, `lotus report --trace`, `lotus trace view`, `lotus trace
//! stats`) reads only regular files inside the folder, never more than
//! their size, never quotes a file outside it nor raw control characters,
//! and ends in bounded time with a clear message naming the file.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::s;
use lotus_samples::{
    write_sampling, CounterValues, Sample, SampleFiles, SampleSink, SamplesWriter, Symbol,
};

const NOBODY: u32 = 65534;

fn skip(test: &str, reason: &str) {
    eprintln!("skipped: {test}: {reason}");
}

/// What a run of lotus left.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// Its peak resident memory, KiB (its own, from wait4).
    maxrss_kib: i64,
}

impl Run {
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Runs lotus with `args`, killing it after `limit` (the test then fails:
/// the command blocked or read without end); stdout and stderr go to files,
/// so a chatty child never blocks on a pipe.
fn lotus_within(args: &[&str], limit: Duration) -> Run {
    let tmp = tempfile::tempdir().expect("tmp");
    let (out, err) = (tmp.path().join("out"), tmp.path().join("err"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lotus"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).expect("out"))
        .stderr(fs::File::create(&err).expect("err"));
    // A reader that would run out of memory stops at 1 GiB of address
    // space instead of taking the machine's memory with it.
    const LIMIT: libc::rlim_t = 1 << 30;
    // SAFETY: the hook only calls setrlimit(2), async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: LIMIT,
                rlim_max: LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped below by wait4 (for its own peak memory), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("run lotus");
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: zeroed rusage is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our own child; both pointers are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            return Run {
                code,
                stdout: String::from_utf8_lossy(&fs::read(&out).expect("out")).into_owned(),
                stderr: String::from_utf8_lossy(&fs::read(&err).expect("err")).into_owned(),
                maxrss_kib: usage.ru_maxrss,
            };
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > limit {
            // SAFETY: kill and reap our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!(
                "lotus {args:?} still running after {limit:?}: it blocks or reads without end\n{}",
                String::from_utf8_lossy(&fs::read(&err).unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const LIMIT: Duration = Duration::from_secs(120);

/// A sampled trace folder at `dir`: a worker (pid 10) whose main thread
/// runs op `Blur` over [1 ms, 2 ms) and `Flip` over [3 ms, 4 ms)
/// (monotonic), a sample every 10 µs, and symbols 0 (`blur_kernel`), 1
/// (`flip_kernel`) and 2 (`loop`). With `counters`, records carry two
/// counters named so in `lotus.sampling`.
fn sampled_folder(dir: &Path, counters: Option<&str>) {
    fs::create_dir_all(dir).expect("mkdir");
    let off = 1_000_000_000u64;
    const MS: u64 = 1_000_000;
    let log = format!(
        "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
         SBlur,{},{MS},kind=op\nSFlip,{},{MS},kind=op\n\
         # lotus-trace: clock wall_ns={} monotonic_ns={}\n",
        off + MS,
        off + 3 * MS,
        off + 5 * MS,
        5 * MS
    );
    fs::write(dir.join("lotus_worker_pid_10"), log).expect("log");
    let n = u64::from(counters.is_some()) * 2;
    let mut w = SamplesWriter::create_with_counters(dir, "lotus", n as usize).expect("samples");
    w.symbols(&[
        (0, Symbol::new("blur_kernel", "/lib/libk.so")),
        (1, Symbol::new("flip_kernel", "/lib/libk.so")),
        (2, Symbol::new("loop", "/usr/bin/python")),
    ])
    .expect("symbols");
    let samples: Vec<Sample> = (0..500u64)
        .map(|i| {
            let t = i * 10_000;
            let symbol = if (MS..2 * MS).contains(&t) {
                0
            } else if (3 * MS..4 * MS).contains(&t) {
                1
            } else {
                2
            };
            Sample {
                time_ns: t,
                pid: 10,
                tid: 10,
                symbol,
                kernel: false,
                counters: if counters.is_some() {
                    CounterValues::new(&[100, 40]).expect("counters")
                } else {
                    CounterValues::default()
                },
            }
        })
        .collect();
    w.samples(&samples).expect("write samples");
    w.finish().expect("finish");
    sampling(dir, "10000", counters);
}

/// Writes `lotus.sampling` with `interval_ns` (and `counters=`).
fn sampling(dir: &Path, interval_ns: &str, counters: Option<&str>) {
    let path = SampleFiles::of(dir, "lotus").sampling;
    let _ = fs::remove_file(&path);
    let mut meta = vec![
        ("backend", "perf".to_string()),
        ("status", "complete".into()),
        ("frequency_hz", "100000".into()),
        ("interval_ns", interval_ns.into()),
        ("clock", "monotonic".into()),
    ];
    if let Some(c) = counters {
        meta.push(("counters", c.into()));
    }
    write_sampling(&path, &meta).expect("sampling");
}

/// The commands that read a trace folder, with `scratch` for their
/// outputs: (name, arguments).
fn readers(dir: &Path, scratch: &Path) -> Vec<(&'static str, Vec<String>)> {
    let d = s(dir).to_string();
    let out = |name: &str| scratch.join(name).display().to_string();
    vec![
        ("attribute", vec!["attribute".into(), d.clone()]),
        (
            "attribute json",
            vec![
                "attribute".into(),
                d.clone(),
                "--format".into(),
                "json".into(),
            ],
        ),
        (
            "map --from-trace",
            vec!["map".into(), "--from-trace".into(), d.clone()],
        ),
        (
            "report",
            vec![
                "report".into(),
                "--out".into(),
                out("report.html"),
                "--trace".into(),
                d.clone(),
            ],
        ),
        (
            "trace view",
            vec![
                "trace".into(),
                "view".into(),
                d.clone(),
                "--out".into(),
                out("view.json"),
            ],
        ),
        ("trace stats", vec!["trace".into(), "stats".into(), d]),
    ]
}

fn run_args(args: &[String]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    lotus_within(&args, LIMIT)
}

/// Everything a run left in `scratch` (report, view), as text.
fn outputs(scratch: &Path) -> String {
    let mut text = String::new();
    for e in fs::read_dir(scratch).expect("scratch").flatten() {
        if e.path().is_file() {
            text += &String::from_utf8_lossy(&fs::read(e.path()).unwrap_or_default());
        }
    }
    text
}

/// A secret of root's (mode 0600, outside the folder) whose lines look
/// like garbled log lines, symbol lines and sampling keys.
const SECRET: &str = "SECRET-7f3a";

fn secret_file(dir: &Path) -> PathBuf {
    let p = dir.join("shadow");
    fs::write(
        &p,
        format!(
            "{SECRET} root:$6$hash:19000\nS{SECRET},1,2\n0\t{SECRET}\t/lib/{SECRET}.so\ncounters={SECRET}\nreason={SECRET}\nstatus=unavailable\n"
        ),
    )
    .expect("secret");
    fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    p
}

/// Runs `cmd` as nobody.
fn as_nobody(cmd: &mut Command) -> &mut Command {
    cmd.uid(NOBODY).gid(NOBODY).env("HOME", "/nonexistent")
}

/// nobody plants, in a folder of its own, a sampled trace whose `name`
/// (a log, `lotus.symbols` or `lotus.sampling`) is a link to root's
/// secret: root's lotus refuses the link by name (copy the real file
/// in), and no line of the secret appears in anything any reader writes.
#[test]
fn a_file_linked_out_of_the_folder_is_refused_and_never_quoted() {
    let test = "a_file_linked_out_of_the_folder_is_refused_and_never_quoted";
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip(test, "not root: cannot act as another user");
    }
    let tmp = tempfile::tempdir().expect("tmp");
    fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let secret = secret_file(tmp.path());
    for name in ["lotus_main_pid_9", "lotus.symbols", "lotus.sampling"] {
        let dir = tmp.path().join(format!("planted-{name}"));
        sampled_folder(&dir, None);
        let _ = fs::remove_file(dir.join(name));
        // nobody owns the folder and makes the link in it.
        let chown = Command::new("chown")
            .args(["-R", "65534:65534", s(&dir)])
            .status()
            .expect("chown");
        assert!(chown.success());
        let made = as_nobody(
            Command::new("ln")
                .arg("-s")
                .arg(&secret)
                .arg(dir.join(name)),
        )
        .status()
        .expect("ln");
        if !made.success() {
            return skip(test, "nobody cannot make a link here");
        }
        let scratch = tmp.path().join(format!("out-{name}"));
        fs::create_dir_all(&scratch).expect("scratch");
        // Every reader runs before any is judged: the secret is looked
        // for in all of their outputs first.
        let runs: Vec<(&str, Run)> = readers(&dir, &scratch)
            .into_iter()
            .map(|(what, args)| (what, run_args(&args)))
            .collect();
        let all: String =
            runs.iter().map(|(_, run)| run.all()).collect::<String>() + &outputs(&scratch);
        assert!(
            !all.contains(SECRET),
            "{name}: a reader quoted a file outside the folder:\n{all}"
        );
        for (what, run) in runs {
            // The samples are read by all but `trace stats`; a log by all.
            let reads_it = name.starts_with("lotus_") || what != "trace stats";
            if !reads_it {
                continue;
            }
            assert!(
                run.stderr.contains(name)
                    && run.stderr.contains("leads out of the folder")
                    && run.stderr.contains("copy the real file in"),
                "{name}: {what} does not say why the file is refused:\n{}",
                run.stderr
            );
            if what != "trace view" {
                assert_eq!(run.code, Some(1), "{name}: {what}:\n{}", run.stderr);
            }
        }
    }
}

/// A fifo, and a link to `/dev/zero`, as `lotus.samples`, `lotus.symbols`
/// or `lotus.sampling`: every reader ends at once with an error naming the
/// file and what it is (or, `trace view`, leaves the samples out saying
/// why), never blocking or reading without end.
#[test]
fn fifos_and_endless_files_as_sample_files_end_in_bounded_time() {
    let tmp = tempfile::tempdir().expect("tmp");
    for name in ["lotus.samples", "lotus.symbols", "lotus.sampling"] {
        for kind in ["fifo", "/dev/zero"] {
            let dir = tmp
                .path()
                .join(format!("{name}-{}", kind.replace('/', "_")));
            sampled_folder(&dir, None);
            let path = dir.join(name);
            fs::remove_file(&path).expect("rm");
            if kind == "fifo" {
                let ok = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
                assert!(ok.success());
            } else {
                symlink(kind, &path).expect("link");
            }
            let scratch = dir.join("out");
            fs::create_dir_all(&scratch).expect("scratch");
            for (what, args) in readers(&dir, &scratch) {
                if what == "trace stats" {
                    continue;
                }
                let run = run_args(&args);
                let why = if kind == "fifo" {
                    "fifo"
                } else {
                    "leads out of the folder"
                };
                assert!(
                    run.stderr.contains(name) && run.stderr.contains(why),
                    "{name} as {kind}: {what} does not say what it is:\n{}",
                    run.stderr
                );
                let expected = if what == "trace view" { 0 } else { 1 };
                assert_eq!(
                    run.code,
                    Some(expected),
                    "{name} as {kind}: {what}:\n{}",
                    run.stderr
                );
            }
        }
    }
}

/// One 39-byte symbols line with id 20,000,000 costs nothing: an id is
/// never a number of slots (before, 945 MB); the line is skipped, named.
#[test]
fn a_huge_symbol_id_costs_no_memory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    sampled_folder(&dir, None);
    let line = "20000000\tbig_function_name\t/lib/xyz.so\n";
    assert_eq!(line.len(), 39);
    let symbols = SampleFiles::of(&dir, "lotus").symbols;
    let mut text = fs::read_to_string(&symbols).expect("symbols");
    text += line;
    fs::write(&symbols, text).expect("write");
    let run = lotus_within(&["attribute", s(&dir), "--format", "json"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.maxrss_kib < 100 * 1024,
        "peak memory {} KiB for a 39-byte symbols line",
        run.maxrss_kib
    );
    assert!(
        run.stderr.contains("lotus.symbols") && run.stderr.contains("line 5"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("blur_kernel"), "{}", run.stdout);
}

/// A symbols line that is not UTF-8 text (and one with a terminal escape
/// where its id should be) is skipped with a warning naming the file and
/// line, control characters escaped; a cut last line is dropped without a
/// word; the rest of the folder is attributed.
#[test]
fn a_bad_symbols_line_is_skipped_by_name_and_a_cut_last_line_dropped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    sampled_folder(&dir, None);
    let symbols = SampleFiles::of(&dir, "lotus").symbols;
    // Header, then 0 and 1 good, 2 garbled, an escape, and a cut line.
    let bytes = b"#lotus-symbols v1\n0\tblur_kernel\t/lib/libk.so\n1\tflip_kernel\t/lib/libk.so\n2\tlo\xff\xfeop\t/usr/bin/python\n\x1b[31m7\tx\ty\n3\tcut_funct".to_vec();
    fs::write(&symbols, &bytes).expect("write");
    for args in [
        vec!["attribute", s(&dir), "--format", "json"],
        vec!["map", "--from-trace", s(&dir)],
    ] {
        let run = lotus_within(&args, LIMIT);
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("lotus.symbols")
                && run.stderr.contains("line 4: not UTF-8 text")
                && run.stderr.contains("line 5")
                && run.stderr.contains("2 line(s) skipped"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(!run.all().contains('\u{1b}'), "raw escape: {}", run.all());
        assert!(run.stderr.contains("\\x1b"), "{}", run.stderr);
        assert!(!run.stderr.contains("cut_funct"), "{}", run.stderr);
        assert!(run.stdout.contains("flip_kernel"), "{}", run.stdout);
    }
}

/// An `interval_ns` so large that samples times it overflows is refused,
/// naming the file and the field (before, the CPU times wrapped, or a
/// debug build panicked).
#[test]
fn a_hostile_interval_is_refused_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    sampled_folder(&dir, None);
    sampling(&dir, &u64::MAX.to_string(), None);
    let scratch = tmp.path().join("out");
    fs::create_dir_all(&scratch).expect("scratch");
    for (what, args) in readers(&dir, &scratch) {
        if what == "trace stats" || what == "trace view" {
            continue;
        }
        let run = run_args(&args);
        assert_eq!(run.code, Some(1), "{what}: {}", run.stderr);
        assert!(
            run.stderr.contains("lotus.sampling")
                && run.stderr.contains(&format!("interval_ns={}", u64::MAX)),
            "{what}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{what}: {}", run.stderr);
    }
}

/// A counter named twice in `lotus.sampling` is an error naming it:
/// merged, its two columns would be summed into one in silence.
#[test]
fn a_counter_named_twice_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    sampled_folder(&dir, Some("cycles,cycles"));
    for args in [
        vec!["attribute", s(&dir)],
        vec!["map", "--from-trace", s(&dir)],
    ] {
        let run = lotus_within(&args, LIMIT);
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("lotus.sampling") && run.stderr.contains("'cycles' is named twice"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // Named once each, the same folder is read.
    sampling(&dir, "10000", Some("cycles,instructions"));
    let run = lotus_within(&["attribute", s(&dir)], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// Empty logs (a disk-full trace, a process killed before it wrote) are
/// skipped with a note naming them and why; the rest is analysed by every
/// reader. "An older lotus" is said only of a log whose header is an old
/// one's, and a log in the original format (`--format original`) says
/// exactly that and what to do.
#[test]
fn empty_logs_are_skipped_and_the_format_is_named_where_it_is_the_cause() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    sampled_folder(&dir, None);
    fs::write(dir.join("lotus_main_pid_9"), "").expect("empty log");
    fs::write(dir.join("lotus_worker_pid_11"), "").expect("empty log");
    let scratch = tmp.path().join("out");
    fs::create_dir_all(&scratch).expect("scratch");
    for (what, args) in readers(&dir, &scratch) {
        let run = run_args(&args);
        assert_eq!(run.code, Some(0), "{what}: {}", run.stderr);
        assert!(
            !run.stderr.contains("older lotus"),
            "{what}: {}",
            run.stderr
        );
        // The report says so on the page.
        let said = if what == "report" {
            outputs(&scratch)
        } else {
            run.all()
        };
        for log in ["lotus_main_pid_9", "lotus_worker_pid_11"] {
            assert!(
                said.contains(&format!("{log}: empty: the process wrote nothing")),
                "{what}: {said}"
            );
        }
    }
    // A log of the original format: no header, no clock pairs.
    fs::write(dir.join("lotus_main_pid_9"), "SBatchWait_0,1000,5\n").expect("original");
    let run = lotus_within(&["attribute", s(&dir)], LIMIT);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("lotus_main_pid_9")
            && run.stderr.contains("--format original")
            && !run.stderr.contains("older lotus"),
        "{}",
        run.stderr
    );
    // A header of an older lotus (no clock pair): that is what it says.
    fs::write(
        dir.join("lotus_main_pid_9"),
        "#lotus-trace v1 role=main pid=9\nSWait,1000,5,kind=wait\n",
    )
    .expect("old");
    let run = lotus_within(&["attribute", s(&dir)], LIMIT);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("older lotus"), "{}", run.stderr);
}

/// Names from a received folder (a function in `lotus.symbols`, a
/// counter, a log line) holding terminal escapes are shown escaped: a
/// folder cannot drive the user's terminal.
#[test]
fn terminal_escapes_in_a_folder_are_shown_escaped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    sampled_folder(&dir, Some("cycles,\u{1b}]0;owned\u{7}"));
    let log = dir.join("lotus_worker_pid_10");
    let text = fs::read_to_string(&log).expect("log");
    fs::write(&log, text.replace("SBlur,", "SBl\u{1b}[2Jur,")).expect("log");
    let symbols = SampleFiles::of(&dir, "lotus").symbols;
    let text = fs::read_to_string(&symbols).expect("symbols");
    fs::write(
        &symbols,
        text.replace("flip_kernel", "flip\u{1b}[31m_kernel"),
    )
    .expect("symbols");
    let run = lotus_within(&["attribute", s(&dir)], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.all().contains('\u{1b}'), "raw escape:\n{}", run.all());
    assert!(
        run.stdout.contains("flip\\x1b[31m_kernel") && run.stdout.contains("\\x1b]0;owned\\x07"),
        "{}",
        run.stdout
    );
    // The log line with an escape in its op's name is skipped and counted
    // (not quoted) by attribute, and quoted escaped by trace stats.
    assert!(
        run.stdout.contains("1 log lines could not be read"),
        "{}",
        run.stdout
    );
    let run = lotus_within(&["trace", "stats", s(&dir)], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.all().contains('\u{1b}'), "raw escape:\n{}", run.all());
}

/// `--op-times DIR` reads the `op_times.csv` of a trace folder inside
/// the folder too: a link out of it is refused by name, never quoted.
#[test]
fn an_op_times_csv_linked_out_of_a_trace_folder_is_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let secret = secret_file(tmp.path());
    let dir = tmp.path().join("t");
    fs::create_dir(&dir).expect("mkdir");
    symlink(&secret, dir.join("op_times.csv")).expect("link");
    let mapping = tmp.path().join("m.json");
    fs::write(
        &mapping,
        r#"{"schema": "lotus.mapping/1", "backend": "perf", "settings": {"rule": "union"},
  "unit": "samples", "shared": [],
  "ops": [
    {"name": "Loader", "runs": 1, "samples": 10, "functions": [
      {"function": "decode_mcu", "module": "libjpeg.so.9", "samples": 10, "share": 1.0, "runs_seen": 1}]}
  ]}"#,
    )
    .expect("mapping");
    let profile = common::fixture("attribute/profile_samples.json");
    let run = lotus_within(
        &[
            "attribute",
            "--mapping",
            s(&mapping),
            "--profile",
            s(&profile),
            "--op-times",
            s(&dir),
        ],
        LIMIT,
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(!run.all().contains(SECRET), "{}", run.all());
    assert!(
        run.stderr.contains("op_times.csv") && run.stderr.contains("leads out of the folder"),
        "{}",
        run.stderr
    );
}

/// A 1 TiB sparse file (a few bytes of data, the rest holes) as
/// `lotus.samples`, `lotus.symbols`, `lotus.stacks` or a log: a received
/// file's size is no proof of its content, and each reader ends at once
/// with an error (or, where the rest can be analysed, a warning) naming
/// the file as sparse, instead of reading zeros for hours.
#[test]
fn a_sparse_terabyte_file_in_a_folder_is_refused_at_once_by_name() {
    let tmp = tempfile::tempdir().expect("tmp");
    for name in [
        "lotus.samples",
        "lotus.symbols",
        "lotus.stacks",
        "lotus_worker_pid_10",
    ] {
        let dir = tmp.path().join(name.replace('.', "_"));
        sampled_folder(&dir, None);
        let path = dir.join(name);
        // The real file, then holes to 1 TiB: its start reads as it should.
        if !path.exists() {
            fs::write(&path, b"").expect("stacks");
        }
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        f.set_len(1 << 40).expect("a 1 TiB sparse file");
        drop(f);
        let scratch = dir.join("out");
        fs::create_dir_all(&scratch).expect("scratch");
        for (what, args) in readers(&dir, &scratch) {
            let run = run_args(&args);
            assert_ne!(
                run.code,
                Some(101),
                "{name}: {what} panicked:\n{}",
                run.stderr
            );
            if name == "lotus.stacks" && !run.stderr.contains(name) {
                // A reader that does not read the stacks file.
                continue;
            }
            assert!(
                run.stderr.contains(name) && run.stderr.contains("sparse"),
                "{name} sparse: {what} does not name it:\n{}",
                run.stderr
            );
        }
    }
}

/// A 15 MB folder whose stacks are 254 frames of 60 KB names each over
/// 150 distinct leaves (every folded line would be 15 MB: 2.6 GB in all)
/// costs lotus memory in proportion to the folder, not to its lines:
/// `attribute --format folded`, `--flamegraph` and `report` end well under
/// 300 MB (each run is capped at 1 GiB of address space), the long names
/// cut and said so.
#[test]
fn stacks_of_huge_names_are_folded_within_bounded_memory() {
    use lotus_samples::StackNode;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("huge");
    fs::create_dir_all(&dir).expect("mkdir");
    let off = 1_000_000_000u64;
    const MS: u64 = 1_000_000;
    let log = format!(
        "#lotus-trace v1 role=worker pid=10 wall_ns={off} monotonic_ns=0\n\
         SDecode,{},{},kind=op\n\
         # lotus-trace: clock wall_ns={} monotonic_ns={}\n",
        off,
        4 * MS,
        off + 5 * MS,
        5 * MS
    );
    fs::write(dir.join("lotus_worker_pid_10"), log).expect("log");
    const CHAIN: u32 = 254;
    const LEAVES: u32 = 150;
    let symbols: Vec<(u32, Symbol)> = (0..CHAIN)
        .map(|i| {
            (
                i,
                Symbol::new(&format!("f{i}_{}", "x".repeat(60_000)), "/lib/libhuge.so"),
            )
        })
        .chain((0..LEAVES).map(|j| {
            (
                CHAIN + j,
                Symbol::new(&format!("leaf{j}"), "/lib/libhuge.so"),
            )
        }))
        .collect();
    // Node k+1 is symbol k under node k; leaves under the chain's end.
    let mut stacks: Vec<StackNode> = (0..CHAIN).map(|k| StackNode::new(k + 1, k, k)).collect();
    stacks.extend((0..LEAVES).map(|j| StackNode::new(CHAIN + 1 + j, CHAIN, CHAIN + j)));
    let samples: Vec<Sample> = (0..LEAVES)
        .map(|j| Sample {
            time_ns: u64::from(j) * 20_000 + 1000,
            pid: 10,
            tid: 10,
            symbol: CHAIN + j,
            kernel: false,
            counters: CounterValues::default(),
        })
        .collect();
    let ids: Vec<u32> = (0..LEAVES).map(|j| CHAIN + 1 + j).collect();
    lotus_testkit::sampled::write_stacked_samples(&dir, &symbols, &stacks, &samples, &ids);
    let d = s(&dir).to_string();
    let svg = tmp.path().join("flame.svg").display().to_string();
    let page = tmp.path().join("report.html").display().to_string();
    for (what, args) in [
        ("folded", vec!["attribute", &d, "--format", "folded"]),
        ("flamegraph", vec!["attribute", &d, "--flamegraph", &svg]),
        ("report", vec!["report", "--out", &page, "--trace", &d]),
    ] {
        let run = lotus_within(&args, LIMIT);
        assert_eq!(run.code, Some(0), "{what}:\n{}", run.stderr);
        assert!(
            run.maxrss_kib < 300 * 1024,
            "{what}: lotus peaked at {} MiB",
            run.maxrss_kib / 1024
        );
        if what == "folded" {
            assert_eq!(
                run.stdout.lines().count(),
                LEAVES as usize,
                "{}",
                &run.stderr
            );
            assert!(run.stdout.contains(lotus_samples::FRAME_CUT));
            assert!(
                run.stderr.contains("are cut in these lines"),
                "{}",
                run.stderr
            );
        }
    }
}
