//! `lotus top`: a job's ops live, summed over its workers, in a pipe (one
//! view after another) and in a pseudo-terminal (redrawn in place, cut to
//! its height), the last view the whole run (issue 37).

use std::path::Path;
use std::process::Command;

use crate::common::{self, s};

/// `lotus top -n 0.5 --out DIR` of the kernel pipeline (two workers, about
/// 2.5 s of their CPU), run through `wrapper` when given (the
/// pseudo-terminal's): its stdout, with the pipeline's reports in
/// `reports`.
fn top_of_kernel_pipeline(tmp: &Path, wrapper: &[&str]) -> (String, std::path::PathBuf) {
    let (out, reports) = (tmp.join("trace"), tmp.join("reports"));
    std::fs::create_dir(&reports).expect("reports");
    let script = common::fixture("trace/kernel_pipeline.py");
    let lotus = env!("CARGO_BIN_EXE_lotus");
    let py = common::python();
    let mut args: Vec<&str> = wrapper.to_vec();
    args.extend([
        lotus,
        "top",
        "-n",
        "0.5",
        "--out",
        s(&out),
        "--",
        s(&py),
        s(&script),
        "--report-dir",
        s(&reports),
        "--batches",
        "40",
        "--dot-ms",
        "20",
    ]);
    let run = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run lotus top");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "lotus top: {}\n{stderr}", run.status);
    (String::from_utf8_lossy(&run.stdout).into_owned(), reports)
}

/// The views `lotus top` printed into a pipe (no terminal codes): the
/// last, which must be the whole run, and those while the job ran.
fn piped_views(text: &str) -> (&str, Vec<&str>) {
    assert!(
        !text.contains('\x1b'),
        "no terminal codes in a pipe:\n{text}"
    );
    let mut views: Vec<&str> = text.split("lotus top: ").skip(1).collect();
    let last = views.pop().expect("views");
    assert!(last.starts_with("the whole run"), "{text}");
    (last, views)
}

/// The CPU ms of the row named `name` in a view's table, if it has one.
fn cpu_ms(view: &str, name: &str) -> Option<f64> {
    column_ms(view, name, 2)
}

/// The figure in column `column` of the row named `name` in a view's
/// table (2: its own CPU ms, 4: with the ops inside it), if it has one.
fn column_ms(view: &str, name: &str, column: usize) -> Option<f64> {
    view.lines().find_map(|l| {
        let cells: Vec<&str> = l
            .trim_matches(|c| c == '│' || c == ' ' || c == '\r')
            .split('┆')
            .map(str::trim)
            .collect();
        (cells.first() == Some(&name))
            .then(|| cells.get(column)?.split_whitespace().next()?.parse().ok())
            .flatten()
    })
}

#[test]
fn top_in_a_pipe_prints_a_view_each_interval_and_the_whole_run_at_the_end() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (text, reports) = top_of_kernel_pipeline(tmp.path(), &[]);
    let (last, running) = piped_views(&text);
    // Views while the job ran: partial, the op's CPU growing.
    let seen: Vec<f64> = running.iter().filter_map(|v| cpu_ms(v, "Dot")).collect();
    assert!(
        !seen.is_empty(),
        "no view showed Dot while the job ran:\n{text}"
    );
    assert!(
        running
            .iter()
            .filter(|v| cpu_ms(v, "Dot").is_some())
            .all(|v| v.contains("PARTIAL")),
        "{text}"
    );
    let whole = cpu_ms(last, "Dot").expect("Dot in the last view");
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]) && seen.iter().all(|&v| v <= whole),
        "{seen:?} then {whole}"
    );
    // The last view is the whole run: the pipeline's own timers, and
    // what `lotus attribute DIR` says of the folder kept.
    let own = common::sampled::timers(&reports, "worker_").ops["Dot"] as f64 / 1e6;
    assert!(
        (whole - own).abs() <= own * 0.1,
        "Dot: {whole} ms in lotus top, {own} ms by its own timers"
    );
    let v = common::sampled::attribute_json(&tmp.path().join("trace"));
    let rows = v["rows"].as_array().expect("rows");
    let dot = rows.iter().find(|r| r["name"] == "Dot").expect("Dot row");
    let attributed = dot["cpu_ns"].as_u64().expect("cpu_ns") as f64 / 1e6;
    assert!(
        (whole - attributed).abs() < 0.1,
        "{whole} against {attributed}"
    );
}

/// A pseudo-terminal of 30 rows and 120 columns around the command that
/// follows: its output written to the file first named.
const PTY_PY: &str = r#"
import fcntl, os, pty, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
out = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
_, status = os.waitpid(pid, 0)
open(sys.argv[1], "wb").write(out)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

#[test]
fn top_on_a_terminal_redraws_in_place_within_its_height() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (wrapper, captured) = (tmp.path().join("in_terminal.py"), tmp.path().join("screen"));
    std::fs::write(&wrapper, PTY_PY).expect("wrapper");
    let py = common::python();
    let (_, reports) = top_of_kernel_pipeline(tmp.path(), &[s(&py), s(&wrapper), s(&captured)]);
    let screen = String::from_utf8_lossy(&std::fs::read(&captured).expect("screen")).into_owned();
    let clear = "\x1b[H\x1b[2J";
    let views: Vec<&str> = screen.split(clear).skip(1).collect();
    assert!(!views.is_empty(), "no view redrawn in place:\n{screen}");
    let (last, running) = views.split_last().expect("views");
    // Each view fits the terminal's 30 rows; the whole run comes after
    // the last one, whole.
    for v in running {
        assert!(v.lines().count() <= 30, "{} lines:\n{v}", v.lines().count());
    }
    let (_, end) = last
        .split_once("lotus top: the whole run")
        .expect("the whole run after the last view");
    let whole = cpu_ms(end, "Dot").expect("Dot in the whole run");
    let own = common::sampled::timers(&reports, "worker_").ops["Dot"] as f64 / 1e6;
    assert!(
        (whole - own).abs() <= own * 0.1,
        "Dot: {whole} ms, {own} ms by its own timers"
    );
}

/// `lotus top --pid PID` of a torchvision job started without lotus (the
/// attach job: a custom Dataset, two workers started anew each epoch
/// after the attach): in a pipe, views while the job runs, each marked
/// partial, then the whole run once the job ends; its ops come from the
/// samples' Python frames, the dataset's own row covers its timers' CPU,
/// and the folder kept says what the last view does.
#[test]
fn top_of_a_running_job_by_pid_shows_its_ops_until_it_ends() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let test = "top_of_a_running_job_by_pid_shows_its_ops_until_it_ends";
    let Some(py) = common::torch::torch_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let (truth, out) = (tmp.path().join("truth"), tmp.path().join("out"));
    std::fs::create_dir(&truth).expect("truth");
    let mut job = Command::new(&py)
        .arg(common::fixture("pipelines/attach_job.py"))
        .env("PYTHONPATH", common::fixture("pipelines"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TRUTH_DIR", &truth)
        .env("PIPE_SAMPLES", "128")
        .env_remove("LOTUS_TRACE_DIR")
        .stdout(Stdio::null())
        .spawn()
        .expect("the job");
    let pid = job.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !truth.join("ready").exists() {
        if let Ok(Some(status)) = job.try_wait() {
            panic!("the job ended before its imports were done: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "the job's imports: not within a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let top = Command::new(env!("CARGO_BIN_EXE_lotus"))
        .args([
            "top",
            "--pid",
            &pid.to_string(),
            "-n",
            "0.5",
            "--out",
            s(&out),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lotus top");
    // The job starts its workers once sampling runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(out.join("lotus.sampling"))
        .is_ok_and(|t| t.contains("status=running"))
    {
        assert!(Instant::now() < deadline, "lotus top did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(truth.join("go"), b"").expect("go");
    let status = job.wait().expect("job");
    assert!(status.success(), "the job: {status}");
    let top = common::faults::wait_bounded(top, Duration::from_secs(120), "lotus top --pid");
    let (text, err) = (
        common::faults::text(&top.stdout),
        common::faults::text(&top.stderr),
    );
    assert!(
        top.status.success(),
        "lotus top --pid: {}\n{err}",
        top.status
    );
    let (last, running) = piped_views(&text);
    assert!(
        running.iter().any(|v| cpu_ms(v, "Crops").is_some())
            && running
                .iter()
                .filter(|v| cpu_ms(v, "Crops").is_some())
                .all(|v| v.contains("PARTIAL")),
        "views while the job ran: {text}"
    );
    // The dataset's row with the ops inside it against its own timers
    // (every worker's), and its own CPU against `lotus attribute` of the
    // folder kept.
    let whole = column_ms(last, "Crops", 4).expect("Crops in the whole run");
    let mut own_ns = 0u64;
    for entry in std::fs::read_dir(&truth).expect("truth") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|x| x == "json") {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).expect("truth"))
                    .expect("JSON");
            own_ns += v["ops"]["Crops"]["cpu_ns"].as_u64().unwrap_or(0);
        }
    }
    let own = own_ns as f64 / 1e6;
    assert!(
        own > 0.0 && (whole - own).abs() <= own * 0.2,
        "Crops: {whole} ms in lotus top, {own} ms by its own timers\n{last}"
    );
    let own_row = cpu_ms(last, "Crops").expect("Crops's own CPU");
    let v = common::sampled::attribute_json(&out);
    let rows = v["rows"].as_array().expect("rows");
    let crops = rows
        .iter()
        .find(|r| r["name"] == "Crops")
        .expect("Crops row");
    let attributed = crops["cpu_ns"].as_u64().expect("cpu_ns") as f64 / 1e6;
    assert!(
        (own_row - attributed).abs() < 0.1,
        "{own_row} against {attributed}"
    );
}
