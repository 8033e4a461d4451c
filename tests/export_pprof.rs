//! `lotus export --format pprof` end to end: a small sampled job
//! (`tests/stacks.rs`'s C loop inside an op span) exported, and the
//! profile read back by an independent reader: Python's `protobuf` with
//! google/pprof's schema (`tests/fixtures/profile.proto`) compiled by
//! `grpcio-tools` at test time. Its totals are `lotus attribute DIR
//! --format json`'s, per `op` label too.
//!
//! Python: $LOTUS_PYTHON, else the repository's .venv; without
//! `protobuf` and `grpcio-tools` there the test says it is skipped, or
//! fails with $LOTUS_REQUIRE_PIPELINE_PACKAGES=1.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{lotus_env, python, root, s};
use serde_json::Value;

/// Compiles the schema into the folder of argv[1], reads the gzipped
/// profile argv[2] and prints it as JSON.
const READER: &str = r#"
import gzip, json, os, sys
from grpc_tools import protoc
out, profile, proto = sys.argv[1], sys.argv[2], sys.argv[3]
folder, name = os.path.split(proto)
if protoc.main(["protoc", "-I" + folder, "--python_out=" + out, name]) != 0:
    sys.exit("protoc failed")
sys.path.insert(0, out)
import profile_pb2
p = profile_pb2.Profile()
p.ParseFromString(gzip.decompress(open(profile, "rb").read()))
st = list(p.string_table)
json.dump({
    "strings0": st[0] if st else None,
    "sample_type": [[st[v.type], st[v.unit]] for v in p.sample_type],
    "period_type": [st[p.period_type.type], st[p.period_type.unit]],
    "period": p.period,
    "locations": [l.id for l in p.location],
    "functions": {f.id: [st[f.name], st[f.filename]] for f in p.function},
    "location_functions": {l.id: [x.function_id for x in l.line] for l in p.location},
    "samples": [{"locations": list(s.location_id), "values": list(s.value),
                 "labels": {st[l.key]: st[l.str] for l in s.label}} for s in p.sample],
}, sys.stdout)
"#;

/// The Python that can read a pprof profile (protobuf, grpcio-tools);
/// `None`, said skipped by name, where it cannot, unless
/// $LOTUS_REQUIRE_PIPELINE_PACKAGES=1.
fn reader_python(test: &str) -> Option<PathBuf> {
    let py = python();
    let ok = Command::new(&py)
        .args(["-c", "import google.protobuf, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    let why = "cannot import google.protobuf and grpc_tools (pip install protobuf grpcio-tools; bash scripts/setup.sh --torch installs them)";
    assert!(
        std::env::var_os("LOTUS_REQUIRE_PIPELINE_PACKAGES").is_none_or(|v| v != "1"),
        "{test}: LOTUS_REQUIRE_PIPELINE_PACKAGES=1 but {} {why}",
        py.display()
    );
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {} {why}", py.display());
    None
}

/// The profile `file`, read back by the independent reader.
fn read_back(py: &Path, tmp: &Path, file: &Path) -> Value {
    let script = tmp.join("read_pprof.py");
    std::fs::write(&script, READER).expect("reader");
    let compiled = tmp.join("compiled");
    std::fs::create_dir_all(&compiled).expect("compiled");
    let proto = root().join("tests/fixtures/profile.proto");
    let out = Command::new(py)
        .args([s(&script), s(&compiled), s(file), s(&proto)])
        .output()
        .expect("run the reader");
    assert!(
        out.status.success(),
        "the pprof reader: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reader JSON")
}

fn ok(args: &[&str]) -> String {
    let o = lotus_env(args, &[]);
    assert!(
        o.status.success(),
        "lotus {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

/// Each `op` label's samples and CPU, and the pids of traced processes.
struct Sums {
    samples: u64,
    cpu_ns: u64,
    by_op: BTreeMap<String, (u64, u64)>,
    traced_pids: BTreeSet<String>,
    folders: BTreeSet<String>,
}

/// The decoded profile's sums, after checking its structure: string 0
/// is "", the value types are pprof's, every location a sample names
/// exists and names functions that exist.
fn sums(p: &Value, interval_ns: u64) -> Sums {
    assert_eq!(p["strings0"], "", "string_table[0]");
    assert_eq!(
        p["sample_type"],
        serde_json::json!([["samples", "count"], ["cpu", "nanoseconds"]])
    );
    assert_eq!(p["period_type"], serde_json::json!(["cpu", "nanoseconds"]));
    assert_eq!(p["period"].as_u64(), Some(interval_ns));
    let locations: BTreeSet<u64> = p["locations"]
        .as_array()
        .expect("locations")
        .iter()
        .map(|v| v.as_u64().expect("id"))
        .collect();
    assert!(!locations.contains(&0), "location ids start at 1");
    let functions = p["functions"].as_object().expect("functions");
    for (l, fs) in p["location_functions"].as_object().expect("lines") {
        for f in fs.as_array().expect("line") {
            assert!(functions.contains_key(&f.to_string()), "location {l}: {f}");
        }
    }
    let mut sums = Sums {
        samples: 0,
        cpu_ns: 0,
        by_op: BTreeMap::new(),
        traced_pids: BTreeSet::new(),
        folders: BTreeSet::new(),
    };
    for sample in p["samples"].as_array().expect("samples") {
        for l in sample["locations"].as_array().expect("locations") {
            let l = l.as_u64().expect("id");
            assert!(locations.contains(&l), "location {l} is not in the profile");
        }
        let v = sample["values"].as_array().expect("values");
        let (n, cpu) = (v[0].as_u64().expect("n"), v[1].as_u64().expect("cpu"));
        assert_eq!(cpu, n * interval_ns, "{sample}");
        sums.samples += n;
        sums.cpu_ns += cpu;
        let labels = &sample["labels"];
        let op = labels["op"].as_str().expect("op label").to_string();
        let e = sums.by_op.entry(op).or_default();
        e.0 += n;
        e.1 += cpu;
        for key in ["process_role", "pid", "tid", "folder"] {
            assert!(labels[key].is_string(), "{key}: {sample}");
        }
        if labels["process_role"] != "untraced" {
            sums.traced_pids
                .insert(labels["pid"].as_str().expect("pid").into());
        }
        sums.folders
            .insert(labels["folder"].as_str().expect("folder").into());
    }
    sums
}

/// The pids of the traced processes of a folder: its logs' names.
fn logged_pids(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("folder")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().to_string_lossy().to_string();
            let (_, pid) = name.split_once("_pid_")?;
            Some(pid.trim_end_matches(".log").to_string())
        })
        .collect()
}

#[test]
fn a_sampled_jobs_pprof_profile_reads_back_with_attributes_totals() {
    let test = "export_pprof::a_sampled_jobs_pprof_profile_reads_back_with_attributes_totals";
    let Some(py) = reader_python(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = crate::stacks::trace(tmp.path(), "fp");
    let a: Value = serde_json::from_str(&ok(&["attribute", &dir, "--format", "json"]))
        .expect("attribute JSON");
    let interval_ns = a["interval_ns"].as_u64().expect("interval");
    let total = a["total_samples"].as_u64().expect("total");
    assert!(total > 0, "{a}");

    let file = tmp.path().join("job.pb.gz");
    ok(&["export", &dir, "--format", "pprof", "--out", s(&file)]);
    let p = read_back(&py, tmp.path(), &file);
    let got = sums(&p, interval_ns);
    assert_eq!(got.samples, total);
    assert_eq!(got.cpu_ns, total * interval_ns);
    // Per op label, attribute's rows: samples, and the CPU of every row
    // whose CPU is its samples times the interval.
    let mut by_op = got.by_op.clone();
    for r in a["rows"].as_array().expect("rows") {
        let path = r["path"].as_str().expect("path");
        let (n, cpu) = by_op.remove(path).unwrap_or_default();
        assert_eq!(n, r["samples"].as_u64().expect("samples"), "row {path}");
        if r["cpu_source"] == "sampled" {
            assert_eq!(cpu, r["cpu_ns"].as_u64().expect("cpu"), "row {path}");
        }
    }
    assert!(by_op.is_empty(), "op labels that are no row: {by_op:?}");
    assert!(got.by_op.contains_key("Spin"), "{:?}", got.by_op);
    assert_eq!(got.traced_pids, logged_pids(Path::new(&dir)));
    assert_eq!(got.folders, BTreeSet::from([dir.clone()]));

    // Two folders: one profile, each sample labelled with its folder.
    let copy = tmp.path().join("copy");
    let cp = Command::new("cp")
        .args(["-r", &dir, s(&copy)])
        .status()
        .expect("cp");
    assert!(cp.success());
    let both = tmp.path().join("both.pb.gz");
    ok(&["export", &dir, s(&copy), "--out", s(&both)]);
    let got = sums(&read_back(&py, tmp.path(), &both), interval_ns);
    assert_eq!(got.samples, 2 * total);
    assert_eq!(
        got.folders,
        BTreeSet::from([dir.clone(), s(&copy).to_string()])
    );
}
