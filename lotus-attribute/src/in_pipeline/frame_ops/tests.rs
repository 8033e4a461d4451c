use super::*;
use crate::in_pipeline::tests::sample_at;
use lotus_samples::{Sample, StackNode, Symbol};
use lotus_testkit::sampled::write_stacked_samples;

const TV: &str = "/venv/lib/python3.12/site-packages/torchvision/transforms/transforms.py";
const DATA: &str = "/venv/lib/python3.12/site-packages/torch/utils/data";
const JOB: &str = "/app/train.py";

/// A folder's symbols by name, its stacks made as samples need them, and
/// its samples in time order (every 100 ns).
#[derive(Default)]
struct Folder {
    symbols: Vec<(u32, Symbol)>,
    by_name: HashMap<String, u32>,
    nodes: Vec<StackNode>,
    stack_ids: HashMap<(u32, u32), u32>,
    samples: Vec<Sample>,
    stacks: Vec<u32>,
    time: u64,
}

impl Folder {
    /// The symbol `function` (a `py::` frame or a native one), its
    /// module given the first time.
    fn sym(&mut self, function: &str, module: &str) -> u32 {
        if let Some(&id) = self.by_name.get(function) {
            return id;
        }
        let id = self.symbols.len() as u32;
        self.symbols.push((id, Symbol::new(function, module)));
        self.by_name.insert(function.to_string(), id);
        id
    }

    /// `n` samples of thread `tid` of `pid` with the stack `frames`
    /// (function, module; outermost first).
    fn add(&mut self, pid: u32, tid: u32, n: u64, frames: &[(&str, &str)]) {
        let mut parent = 0;
        let mut leaf = 0;
        for (function, module) in frames {
            leaf = self.sym(function, module);
            parent = match self.stack_ids.get(&(parent, leaf)) {
                Some(&id) => id,
                None => {
                    let id = self.nodes.len() as u32 + 1;
                    self.nodes.push(StackNode::new(id, parent, leaf));
                    self.stack_ids.insert((parent, leaf), id);
                    id
                }
            };
        }
        for _ in 0..n {
            self.samples.push(Sample {
                time_ns: self.time,
                pid,
                tid,
                symbol: leaf,
                kernel: false,
                counters: Default::default(),
            });
            self.stacks.push(parent);
            self.time += 100;
        }
    }

    fn write(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tmp");
        write_stacked_samples(
            dir.path(),
            &self.symbols,
            &self.nodes,
            &self.samples,
            &self.stacks,
        );
        dir
    }
}

fn data(file: &str) -> String {
    format!("{DATA}/{file}")
}

/// A worker's frames down to a fetch, then `more`.
fn in_fetch<'a>(more: &[(&'a str, &'a str)], files: &'a [String; 2]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("py::<module>", JOB),
        (
            "py::BaseProcess._bootstrap",
            "/usr/lib/python3.12/multiprocessing/process.py",
        ),
        ("py::_worker_loop", files[0].as_str()),
        ("py::_MapDatasetFetcher.fetch", files[1].as_str()),
    ];
    v.extend_from_slice(more);
    v
}

/// A main process (pid 10) with a feeder thread (11), and a worker
/// (pid 20) with a native helper thread (21): every shape of the rules.
pub(in crate::in_pipeline) fn pipeline() -> tempfile::TempDir {
    let files = [data("_utils/worker.py"), data("_utils/fetch.py")];
    let (collate, loader, nn) = (
        data("_utils/collate.py"),
        data("dataloader.py"),
        "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
    );
    let eval = ("_PyEval_EvalFrameDefault", "/usr/bin/python3.12");
    let mut f = Folder::default();
    // The main process starts.
    f.add(
        10,
        10,
        4,
        &[("py::<module>", JOB), ("py::train", JOB), eval],
    );
    // The worker starts, then runs two batches.
    let start = [
        ("py::<module>", JOB),
        (
            "py::BaseProcess._bootstrap",
            "/usr/lib/python3.12/multiprocessing/process.py",
        ),
        eval,
    ];
    f.add(20, 20, 5, &start);
    for batch in 0..2 {
        let item = ("py::Images.__getitem__", JOB);
        f.add(
            20,
            20,
            5,
            &in_fetch(&[item, ("decode_mcu", "/lib/libjpeg.so.8")], &files),
        );
        f.add(
            20,
            20,
            2,
            &in_fetch(&[item, ("py::Compose.__call__", TV)], &files),
        );
        f.add(
            20,
            20,
            10,
            &in_fetch(
                &[
                    item,
                    ("py::Compose.__call__", TV),
                    ("py::Module._wrapped_call_impl", nn),
                    ("py::RandomResizedCrop.forward", TV),
                    ("ImagingResample", "/PIL/_imaging.so"),
                ],
                &files,
            ),
        );
        f.add(
            20,
            20,
            4,
            &in_fetch(
                &[
                    item,
                    ("py::Compose.__call__", TV),
                    ("py::ToTensor.__call__", TV),
                    ("memcpy", "/lib/libc.so.6"),
                ],
                &files,
            ),
        );
        // Cut stacks: under Compose, their dataset's frame lost.
        f.add(
            20,
            20,
            3 + batch,
            &[
                ("py::Compose.__call__", TV),
                ("py::Module._wrapped_call_impl", nn),
                ("py::Normalize.forward", TV),
                ("memcpy", "/lib/libc.so.6"),
            ],
        );
        f.add(
            20,
            20,
            3,
            &in_fetch(
                &[
                    ("py::default_collate", &collate),
                    ("memcpy", "/lib/libc.so.6"),
                ],
                &files,
            ),
        );
        // The fetch's own code: in a batch, in no op.
        f.add(20, 20, 1, &in_fetch(&[eval], &files));
        f.add(
            20,
            21,
            2,
            &[
                ("start_thread", "/lib/libc.so.6"),
                ("worker", "/lib/libx.so"),
            ],
        );
        // Between batches: the worker waits for an index; the main
        // process waits in next(), its feeder sends, its model trains.
        f.add(
            20,
            20,
            2,
            &[
                ("py::<module>", JOB),
                (
                    "py::BaseProcess._bootstrap",
                    "/usr/lib/python3.12/multiprocessing/process.py",
                ),
                ("py::_worker_loop", &files[0]),
                (
                    "py::Queue.get",
                    "/usr/lib/python3.12/multiprocessing/queues.py",
                ),
            ],
        );
        f.add(
            10,
            10,
            3,
            &[
                ("py::<module>", JOB),
                ("py::train", JOB),
                ("py::_BaseDataLoaderIter.__next__", &loader),
                ("py::_MultiProcessingDataLoaderIter._next_data", &loader),
                eval,
            ],
        );
        f.add(
            10,
            11,
            2,
            &[
                ("py::Thread._bootstrap", "/usr/lib/python3.12/threading.py"),
                (
                    "py::Queue._feed",
                    "/usr/lib/python3.12/multiprocessing/queues.py",
                ),
            ],
        );
        f.add(
            10,
            10,
            5,
            &[
                ("py::<module>", JOB),
                ("py::train", JOB),
                ("py::Module._wrapped_call_impl", nn),
                ("py::Net.forward", JOB),
            ],
        );
    }
    // The end: the worker exits, the main process evaluates.
    f.add(20, 20, 3, &start);
    f.add(
        10,
        10,
        6,
        &[("py::<module>", JOB), ("py::evaluate", JOB), eval],
    );
    f.write()
}

fn row<'a>(a: &'a InPipelineAttribution, path: &str) -> &'a AttributedRow {
    a.rows
        .iter()
        .find(|r| r.path == path)
        .unwrap_or_else(|| panic!("no row {path}: {a:#?}"))
}

#[test]
fn each_sample_goes_to_the_ops_its_frames_show() {
    let dir = pipeline();
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    assert_eq!(a.ops_from, OpsFrom::Frames);
    let rows: Vec<(&str, u64, u64)> = a
        .rows
        .iter()
        .map(|r| (r.path.as_str(), r.samples, r.inclusive_samples))
        .collect();
    assert_eq!(
        rows,
        [
            // The dataset: its own 5 + 2 (Compose's own code) per batch.
            ("Images", 14, 14 + 20 + 8 + 7),
            ("Images/RandomResizedCrop", 20, 20),
            ("Images/ToTensor", 8, 8),
            // Its cut stacks (3, then 4), credited under the dataset.
            ("Images/Normalize", 7, 7),
            ("Collation", 6, 6),
            ("DataLoader threads (main)", 4, 4),
            ("other threads, cause unknown (worker)", 4, 4),
            ("start-up and imports (worker)", 5, 5),
            // The fetch's own code (2), the wait between batches (the
            // first batch's 2: the second's is after its last batch).
            ("outside any op (worker)", 4, 4),
            ("shutdown and exit (worker)", 5, 5),
            ("start-up and imports (main)", 4, 4),
            (NEXT_ROW, 6, 6),
            ("training loop, outside the DataLoader (main)", 5, 5),
            ("after the last batch (main)", 11, 11),
        ],
        "{a:#?}"
    );
}

#[test]
fn op_rows_say_their_sampled_cpu_and_no_calls_or_wall_time() {
    let dir = pipeline();
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    let crop = row(&a, "Images/RandomResizedCrop");
    assert_eq!(
        (crop.name.as_str(), crop.parent.as_deref(), crop.depth),
        ("RandomResizedCrop", Some("Images"), 1)
    );
    assert_eq!((crop.cpu_ns, crop.inclusive_cpu_ns), (2000, 2000));
    assert_eq!(crop.uncertainty_ns, sampled_uncertainty_ns(20, 100));
    assert_eq!(crop.cpu_source, CpuSource::Sampled);
    assert_eq!(crop.top_functions[0].function, "ImagingResample");
    assert_eq!(crop.top_functions[0].cpu_ns, 2000);
    let images = row(&a, "Images");
    assert_eq!((images.cpu_ns, images.inclusive_cpu_ns), (1400, 4900));
    assert_eq!(
        images.inclusive_uncertainty_ns,
        sampled_uncertainty_ns(49, 100)
    );
    for r in &a.rows {
        assert_eq!(
            (r.calls, r.cpu_per_call_ns, r.wall_ns, r.exclusive_wall_ns),
            (None, None, None, None),
            "{}",
            r.path
        );
    }
    // The rows add up to every sample.
    assert_eq!(
        a.rows.iter().map(|r| r.samples).sum::<u64>(),
        a.total_samples
    );
    assert_eq!(a.total_cpu_ns, a.total_samples * 100);
    assert!((a.rows.iter().map(|r| r.share).sum::<f64>() - 1.0).abs() < 1e-9);
    assert!((row(&a, "Collation").share - 600.0 / a.total_cpu_ns as f64).abs() < 1e-12);
    assert_eq!(a.independent_threads, ["20/21"]);
    let notes = a.notes.join("\n");
    assert!(
        notes.contains("ops from the samples' Python frames, not from the tracer's spans")
            && notes.contains("7 samples of DataLoader workers had their stacks cut")
            && notes.contains("7 of them showing no frame of it"),
        "{notes}"
    );
    // Said in the document too.
    let doc = serde_json::to_value(&a).expect("json");
    assert_eq!(doc["ops_from"], "frames");
}

#[test]
fn a_folder_of_samples_alone_has_a_verdict_of_its_ops() {
    let dir = pipeline();
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    let v = crate::Verdict::of_sampled_folder(dir.path(), &a, Budget::new(64)).expect("verdict");
    assert_eq!(v.waiting_share, None);
    let heaviest = v.heaviest_op.expect("heaviest op");
    assert_eq!(heaviest.name, "Images/RandomResizedCrop", "{heaviest:?}");
}

#[test]
fn a_main_process_running_the_loader_itself_has_its_ops() {
    // num_workers=0: the main process fetches in next().
    let (dl, fetch) = (data("dataloader.py"), data("_utils/fetch.py"));
    let next = [
        ("py::<module>", JOB),
        ("py::_BaseDataLoaderIter.__next__", dl.as_str()),
        ("py::_SingleProcessDataLoaderIter._next_data", dl.as_str()),
    ];
    let mut f = Folder::default();
    let with = |more: &[(&str, &str)]| -> Vec<(String, String)> {
        next.iter()
            .chain(more)
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let mut add = |n: u64, frames: Vec<(String, String)>| {
        let frames: Vec<(&str, &str)> = frames
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        f.add(1, 1, n, &frames);
    };
    add(
        3,
        with(&[
            ("py::_MapDatasetFetcher.fetch", &fetch),
            ("py::Tokens.__getitem__", JOB),
        ]),
    );
    add(
        2,
        with(&[("py::_MapDatasetFetcher.fetch", &fetch), ("py::pad", JOB)]),
    );
    add(1, with(&[("py::_MapDatasetFetcher.fetch", &fetch)]));
    add(4, with(&[("py::_next_index", dl.as_str())]));
    let dir = f.write();
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    let rows: Vec<(&str, u64)> = a
        .rows
        .iter()
        .map(|r| (r.path.as_str(), r.samples))
        .collect();
    assert_eq!(
        rows,
        [("Tokens", 3), ("Collation", 2), (NEXT_ROW, 5)],
        "{a:#?}"
    );
    // Of its 6 samples in a batch, one in no op: past 5%, said.
    assert_eq!(a.unseen.len(), 1, "{:?}", a.unseen);
    assert_eq!((a.unseen[0].role, a.unseen[0].samples), (Role::Main, 1));
}

#[test]
fn the_source_of_the_ops_is_the_logs_where_there_are_some_unless_asked() {
    let dir = pipeline();
    let from = |ops: Option<OpsFrom>| {
        attribute_folder_from(
            dir.path(),
            "lotus",
            Budget::new(64),
            TOP_FUNCTIONS,
            HelperRule::Cause,
            ops,
        )
        .expect("attribute")
    };
    assert_eq!(from(None).ops_from, OpsFrom::Frames);
    // A tracer's log beside the samples: its spans, unless frames are
    // asked for.
    let log = format!(
        "#lotus-trace v1 role=worker pid=20 wall_ns={off} monotonic_ns=0\nSImages,{},1000,kind=op\n# lotus-trace: clock wall_ns={} monotonic_ns=20000\n",
        1000 + 1_000_000,
        20_000 + 1_000_000,
        off = 1_000_000
    );
    std::fs::write(dir.path().join("lotus_worker_pid_20"), log).expect("log");
    let spans = from(None);
    assert_eq!(spans.ops_from, OpsFrom::Spans);
    assert_eq!(row(&spans, "Images").samples, 10);
    assert_eq!(from(Some(OpsFrom::Frames)).ops_from, OpsFrom::Frames);
    assert_eq!(row(&from(Some(OpsFrom::Frames)), "Images").samples, 14);
}

#[test]
fn samples_without_stacks_are_refused_and_without_python_frames_said() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut w = lotus_samples::SamplesWriter::create(dir.path(), "lotus").expect("w");
    lotus_samples::SampleSink::symbols(&mut w, &[(0, Symbol::new("f", "/k.so"))]).expect("s");
    lotus_samples::SampleSink::samples(&mut w, &[sample_at(5, 1, 0)]).expect("samples");
    lotus_samples::SampleSink::finish(&mut w).expect("finish");
    let err = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect_err("no stacks");
    assert!(matches!(err, Error::NoStacks { .. }), "{err}");
    assert!(err.to_string().contains("--stacks"), "{err}");

    let mut f = Folder::default();
    f.add(1, 1, 3, &[("main", "/bin/job"), ("work", "/bin/job")]);
    let dir = f.write();
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    let rows: Vec<(&str, u64)> = a
        .rows
        .iter()
        .map(|r| (r.path.as_str(), r.samples))
        .collect();
    assert_eq!(rows, [("outside any op (main)", 3)]);
    assert!(
        a.notes[0].contains("no sample has Python frames"),
        "{:?}",
        a.notes
    );
}

#[test]
fn a_workers_thread_pool_tasks_are_its_datasets() {
    let files = [data("_utils/worker.py"), data("_utils/fetch.py")];
    let mut f = Folder::default();
    f.add(
        20,
        20,
        2,
        &in_fetch(
            &[
                ("py::Images.__getitem__", JOB),
                (
                    "py::Future.result",
                    "/usr/lib/python3.12/concurrent/futures/_base.py",
                ),
            ],
            &files,
        ),
    );
    let task = [
        ("py::Thread._bootstrap", "/usr/lib/python3.12/threading.py"),
        (
            "py::_worker",
            "/usr/lib/python3.12/concurrent/futures/thread.py",
        ),
        (
            "py::_WorkItem.run",
            "/usr/lib/python3.12/concurrent/futures/thread.py",
        ),
        ("py::read_image", JOB),
    ];
    f.add(20, 22, 3, &task);
    let mut crop = task.to_vec();
    crop.push(("py::CenterCrop.forward", TV));
    f.add(20, 22, 4, &crop);
    let dir = f.write();
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    let rows: Vec<(&str, u64)> = a
        .rows
        .iter()
        .map(|r| (r.path.as_str(), r.samples))
        .collect();
    assert_eq!(
        rows,
        [
            ("Images", 3),
            ("Images/CenterCrop", 4),
            ("Images/Future.result", 2)
        ],
        "{a:#?}"
    );
    assert!(
        a.notes[0].contains("7 samples of Python thread pool tasks"),
        "{:?}",
        a.notes
    );
}

/// Frames read from the interpreter come from snapshots, each standing
/// for the samples around it: an op row's `±` counts the snapshots.
#[test]
fn the_interval_of_rows_from_snapshots_counts_the_snapshots() {
    let dir = pipeline();
    let sampling = dir.path().join("lotus.sampling");
    let mut text = std::fs::read_to_string(&sampling).expect("sampling");
    text += "python_frames=interpreter\npython_frames_samples=1600\npython_frames_reads=100\n";
    std::fs::write(&sampling, text).expect("sampling");
    let a = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    let crop = row(&a, "Images/RandomResizedCrop");
    // 16 samples a snapshot: four times the samples' own interval.
    assert_eq!(crop.uncertainty_ns, sampled_uncertainty_ns(20 * 16, 100));
    assert!(crop.uncertainty_ns >= 4 * sampled_uncertainty_ns(20, 100) - 4);
    let notes = a.notes.join("\n");
    assert!(
        notes.contains("each snapshot standing for about 16 samples"),
        "{notes}"
    );
}

#[test]
fn a_folder_of_samples_alone_is_attributed_and_folded_in_one_call_as_from_its_frames() {
    // What `lotus report` reads of a folder without tracer logs.
    let dir = pipeline();
    let (a, f) = crate::attribute_and_fold(dir.path(), "lotus", Budget::new(64), TOP_FUNCTIONS)
        .expect("attribute and fold");
    let frames = attribute_frames(dir.path(), "lotus", TOP_FUNCTIONS).expect("attribute");
    assert_eq!(a, frames);
    let f = f.expect("folded");
    assert!(f.with_stacks);
    assert_eq!(f.samples, a.total_samples);
    for r in a.rows.iter().filter(|r| r.kind == RowKind::Op) {
        let root = f.op_root(&r.path).expect("an op's stacks");
        assert_eq!(f.lines_under(&[&root]).1, r.inclusive_samples, "{}", r.path);
    }
}
