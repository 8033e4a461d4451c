//! The op path one call stack's Python frames show (ops from frames:
//! [`super::frame_ops`]), named as `lotus_trace`'s torch hooks name their
//! spans (`lotus-tracer/python/lotus_trace/_torch.py`), so that rows from
//! frames and rows from a traced run line up:
//!
//! - a fetcher's `fetch` (`_MapDatasetFetcher.fetch`,
//!   `_IterableDatasetFetcher.fetch`) calls the dataset, then the collate
//!   function: its callee (comprehensions passed through) that is a
//!   `__getitem__`, `__getitems__`, `__iter__` or `__next__` is the
//!   dataset's op, named after the class that defines it (through
//!   `Subset` and `TracedDataset`, the wrapped dataset's, as the tracer
//!   does); so is any callee of an iterable dataset's fetch but torch's
//!   collate code (its iterator's generator, whatever its name); any
//!   other callee is `Collation`;
//! - under torchvision's `DatasetFolder.__getitem__` (ImageFolder's), its
//!   image load (the callee that is no transform) is `Loader`;
//! - under any other dataset op, each Python function its own code calls
//!   is a child op named as the tracer's finer spans name it
//!   (`lotus_trace/_finer.py`): by its qualified name, a class's
//!   construction or an object's call by the class (a C function it
//!   calls has no Python frame: its time stays the dataset's, where the
//!   tracer gives it a row);
//! - under an op, a `__call__` or `forward` frame of a class (neither
//!   torch's own code nor the standard library's) is a transform, named
//!   after its class; where that class is a base that defines the call
//!   for its subclasses (torchvision v2's `Transform`, albumentations'
//!   `BasicTransform`, kornia's bases) the subclass's own method below it
//!   names it (`RandomResizedCrop._transform`). A `Compose` is a
//!   container: its transforms are ops of their own where it stands,
//!   and it is an op (`Compose`) only where a Compose or a wrapper
//!   (`RandomApply`, ...) runs it;
//! - a DataLoader worker's `worker_init_fn` (what `_worker_loop` calls
//!   that is neither torch's nor the standard library's) is an op named
//!   after it;
//! - a Python thread pool's task (`ThreadPoolExecutor`) in a DataLoader
//!   worker is read as inside its dataset op (the op its submitter had
//!   open, as the tracer credits a task), as a cut stack is ([`loose`]);
//! - the markers of where a sample is that is in no op: a worker's loop
//!   (`_worker_loop`), a fetch, the main process in `next(loader)`
//!   (`_BaseDataLoaderIter.__next__`, `_next_data`), starting or stopping
//!   workers, the DataLoader's own threads (a queue's feeder, the
//!   pin-memory thread, the resource sharer).
//!
//! The kernel keeps the innermost 127 entries of a call chain: a deep
//! stack (a forked worker under a deep training loop, on Python 3.12+
//! where each Python call is several native frames) loses its outer
//! frames, its worker loop and fetch among them. A stack that reaches no
//! frame placing it (its thread's entry, `<module>`, a worker's loop, a
//! fetch) is *cut*; in a DataLoader worker it is read as inside a dataset
//! op ([`loose`]).
//!
//! Python 3.8 to 3.10 frames (read from the interpreter) carry a
//! function's name, not its qualified name: their transforms and datasets
//! are named `name@file.py` ([`Shape::bare`]).
//!
//! A traced job's stacks (`lotus trace run --sample`, read with frames to
//! compare) hold the tracer's own frames (`lotus_trace/`): the functions
//! it puts in place of torch's and torchvision's (its fetch, Compose,
//! DatasetFolder and v1 wrappers) are read as the ones they replace, the
//! callable its `call_op` runs (an op it wraps: `lotus_trace.wrap`,
//! `--op`, v2 transforms, kornia's) is an op named as it names it, its
//! other frames are passed through, and a sample whose innermost Python
//! frame is the tracer's is its cost ([`Shape::tracer`]: "lotus hooks").

use std::collections::HashSet;

use super::MAX_DEPTH;

/// One Python frame: its qualified name (`Class.method`; a bare name on
/// Python 3.8 to 3.10) and its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PyFrame<'a> {
    pub(super) qual: &'a str,
    pub(super) file: &'a str,
}

impl<'a> PyFrame<'a> {
    /// The Python frame of a symbol (`py::<qualname>`, its file as
    /// module, with the line its function begins on where it was read:
    /// `file.py:42`), `None` for a native one.
    pub(super) fn of(function: &'a str, module: &'a str) -> Option<PyFrame<'a>> {
        let file = match module.rsplit_once(':') {
            Some((file, line)) if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => {
                file
            }
            _ => module,
        };
        function
            .strip_prefix("py::")
            .map(|qual| PyFrame { qual, file })
    }

    fn method(&self) -> &'a str {
        self.qual.rsplit('.').next().unwrap_or(self.qual)
    }

    /// The class of a method (`A.B.m`: `B`), not of a function's local
    /// (`f.<locals>.g`).
    fn class(&self) -> Option<&'a str> {
        let mut parts = self.qual.rsplit('.');
        parts.next();
        parts.next().filter(|c| !c.starts_with('<'))
    }

    /// A bare name (no `.`): Python 3.8 to 3.10's frames.
    fn bare(&self) -> bool {
        !self.qual.contains('.')
    }

    fn in_file(&self, tail: &str) -> bool {
        self.file.ends_with(tail)
    }

    /// Torch's own code (`.../torch/...`).
    fn torch(&self) -> bool {
        self.file.contains("/torch/") || self.file.starts_with("torch/")
    }

    /// The standard library's code (`.../lib/python3.X/...` outside
    /// `site-packages`, frozen modules).
    fn stdlib(&self) -> bool {
        if self.file.starts_with("<frozen") {
            return true;
        }
        let Some(i) = self.file.find("/lib/python") else {
            return false;
        };
        let rest = &self.file[i + "/lib/python".len()..];
        let rest = rest.split_once('/').map_or("", |(_, r)| r);
        !(rest.starts_with("site-packages") || rest.starts_with("dist-packages"))
    }

    /// An op's name for this frame's class, or for a bare frame
    /// `name@file.py`.
    fn op_name(&self) -> String {
        match self.class() {
            Some(c) => c.to_string(),
            None => {
                let base = self.file.rsplit('/').next().unwrap_or(self.file);
                format!("{}@{base}", self.method())
            }
        }
    }

    fn comprehension(&self) -> bool {
        ["<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>"].contains(&self.method())
    }
}

/// The file of torch's fetchers, DataLoader, worker loop and collate.
const FETCH_PY: &str = "torch/utils/data/_utils/fetch.py";
const DATALOADER_PY: &str = "torch/utils/data/dataloader.py";
const WORKER_PY: &str = "torch/utils/data/_utils/worker.py";
const COLLATE_PY: &str = "torch/utils/data/_utils/collate.py";
const DATASET_PY: &str = "torch/utils/data/dataset.py";
const FOLDER_PY: &str = "torchvision/datasets/folder.py";

/// The name of the collate function's op, as the tracer writes it.
pub(super) const COLLATION: &str = "Collation";
/// The name of `DatasetFolder`'s image load, as the tracer writes it.
pub(super) const LOADER: &str = "Loader";

/// Classes whose `__call__` or `forward` their subclasses inherit: the
/// subclass's own method below it names the op.
const BASES: [&str; 12] = [
    "Transform",
    "_RandomApplyTransform",
    "Module",
    "BasicTransform",
    "DualTransform",
    "ImageOnlyTransform",
    "_BasicAugmentationBase",
    "_AugmentationBase",
    "AugmentationBase2D",
    "GeometricAugmentationBase2D",
    "IntensityAugmentationBase2D",
    "RigidAffineAugmentationBase2D",
];

/// The methods of a subclass that name it under its base's call.
const SUBCLASS_METHODS: [&str; 8] = [
    "_transform",
    "transform",
    "_get_params",
    "make_params",
    "get_params",
    "apply",
    "apply_transform",
    "generate_parameters",
];

/// Containers and wrappers: a `Compose` they run is an op of its own.
const WRAPPERS: [&str; 9] = [
    "Compose",
    "RandomApply",
    "RandomChoice",
    "RandomOrder",
    "OneOf",
    "SomeOf",
    "OneOrOther",
    "Sequential",
    "AugmentationSequential",
];

/// A dataset's methods the fetcher calls.
const DATASET_METHODS: [&str; 4] = ["__getitem__", "__getitems__", "__iter__", "__next__"];

/// Frames that begin a process's or thread's Python stack.
const ROOTS: [&str; 5] = [
    "<module>",
    "_run_module_as_main",
    "_bootstrap",
    "Thread._bootstrap",
    "BaseProcess._bootstrap",
];

/// The op that stands for a dataset op a cut stack lost (never a row's
/// name: replaced or dropped).
const LOST: &str = "\0lost dataset";

/// What one stack's Python frames show.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(super) struct Shape {
    /// The op path, outermost first (empty: no op).
    pub(super) ops: Vec<String>,
    /// The dataset op's place in `ops`, where the stack shows one.
    pub(super) dataset: Option<usize>,
    /// Whether the stack reaches a frame that places it (see the module
    /// doc): where not, it was cut, and `ops` is empty until [`loose`]
    /// reads it.
    pub(super) anchored: bool,
    /// Read by [`loose`]: `ops` lie under a dataset op whose frame the
    /// stack lost (its process's dataset is theirs).
    pub(super) under_lost_dataset: bool,
    /// A DataLoader worker's loop (`_worker_loop`) is in it.
    pub(super) worker: bool,
    /// A fetcher's `fetch` is in it (a batch at work).
    pub(super) fetch: bool,
    /// The main process's `next(loader)` is in it.
    pub(super) next: bool,
    /// The DataLoader starting or stopping its workers.
    pub(super) workers: bool,
    /// A thread of the DataLoader's machinery: a queue's feeder, the
    /// pin-memory thread, the resource sharer.
    pub(super) machinery: bool,
    /// An op was named from a frame with no qualified name (Python 3.8
    /// to 3.10).
    pub(super) bare: bool,
    /// A Python thread pool's task (`ThreadPoolExecutor`'s `_WorkItem.run`).
    pub(super) task: bool,
    /// The stack has Python frames.
    pub(super) python: bool,
    /// Its innermost Python frame is the tracer's own code.
    pub(super) tracer: bool,
}

/// What a frame of the tracer's is read as.
enum Tracer<'a> {
    /// Not the tracer's.
    Not,
    /// The function it replaces.
    As(PyFrame<'a>),
    /// Passed through: the tracer's own work.
    Skip,
    /// Passed through: the job's work, as the tracer runs it.
    Pass,
    /// The tracer's call of an op it wraps (`lotus_trace.wrap`, `--op`,
    /// a v2 transform, kornia's): the next frame is that op.
    CallOp,
    /// The tracer's fetch calling the dataset (`_dataset_op`'s call), or
    /// the collate function (`BatchSpan.run_collate`).
    Fetched(Fetched),
}

/// What a fetch calls next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fetched {
    /// Not known: the dataset where the callee is one of its methods
    /// (or, for an iterable dataset's fetch, anything but torch's collate
    /// code), else the collate function.
    Map,
    Iterable,
    /// The dataset (the tracer says so).
    Dataset,
    /// The collate function (the tracer says so).
    Collate,
}

/// How frame `f` is read where it is the tracer's: its replacements of
/// torch's and torchvision's functions (`lotus_trace/_torch.py`) as
/// those, the rest passed through.
fn tracer_frame<'a>(f: &PyFrame<'a>) -> Tracer<'a> {
    if !f.file.contains("/lotus_trace/") {
        return Tracer::Not;
    }
    const TRANSFORMS: &str = "torchvision/transforms/transforms.py";
    let (qual, file) = match f.qual {
        "_patch_map_fetch.<locals>.fetch" | "_collate_swapping_fetch.<locals>.fetch" => {
            ("_MapDatasetFetcher.fetch", FETCH_PY)
        }
        "_patch_fetch.<locals>.fetch" => ("_IterableDatasetFetcher.fetch", FETCH_PY),
        "_dataset_op.<locals>.call" => return Tracer::Fetched(Fetched::Dataset),
        "BatchSpan.run_collate" => return Tracer::Fetched(Fetched::Collate),
        "_patch_folder.<locals>.__getitem__" => ("DatasetFolder.__getitem__", FOLDER_PY),
        // DatasetFolder's own work, as the tracer runs it.
        "_patch_folder.<locals>.item" => return Tracer::Pass,
        "_call_op_of.<locals>.call_op" | "_Op.__call__" => return Tracer::CallOp,
        "_patch_compose.<locals>.__call__" => ("Compose.__call__", TRANSFORMS),
        "_patch_compose_v2.<locals>.forward" => {
            ("Compose.forward", "torchvision/transforms/v2/_container.py")
        }
        "_patch_v1_wrappers.<locals>.forward" => ("RandomApply.forward", TRANSFORMS),
        "_patch_v1_wrappers.<locals>.order_call" => ("RandomOrder.__call__", TRANSFORMS),
        "_patch_v1_wrappers.<locals>.choice_call" => ("RandomChoice.__call__", TRANSFORMS),
        _ => return Tracer::Skip,
    };
    Tracer::As(PyFrame { qual, file })
}

/// The walk over a stack's Python frames, outermost first.
#[derive(Default)]
struct Walk<'a> {
    shape: Shape,
    /// The last frame was a fetch (or a comprehension in it, or the
    /// tracer's frames): the next one is the dataset or the collate
    /// function.
    after_fetch: Option<Fetched>,
    /// The last frame was the worker loop: the next one may be its
    /// `worker_init_fn`.
    after_worker_loop: bool,
    /// The dataset op is a `Subset`'s (or `TracedDataset`'s), to be named
    /// by the dataset it wraps.
    wrapped: bool,
    /// The last frame was `DatasetFolder.__getitem__`: the next one may
    /// be its image load.
    after_folder: bool,
    /// The last frame was a dataset's own code: the next one is a call
    /// it makes, an op of its own (the tracer's finer spans).
    after_dataset: bool,
    /// The last frame was the tracer calling an op it wraps: the next
    /// one (past nn.Module's call) is that op.
    after_call_op: bool,
    /// Nothing below is an op (the image load, a `worker_init_fn`).
    leaf: bool,
    /// The class of the innermost transform or container passed.
    last_transform: Option<&'a str>,
    /// The place in `ops` of a transform named by its base class, for
    /// its subclass to name.
    base: Option<usize>,
    /// Cut-stack reading: dataset names a `__getitem__` frame may take.
    known: Option<&'a HashSet<String>>,
}

impl<'a> Walk<'a> {
    fn push(&mut self, name: String, frame: &PyFrame<'_>) {
        if self.shape.ops.len() < MAX_DEPTH as usize {
            self.shape.bare |= frame.bare();
            self.shape.ops.push(name);
        }
    }

    /// Whether `f` is a transform's call: `__call__` or `forward` of a
    /// class outside torch and the standard library.
    fn transform(f: &PyFrame<'_>) -> bool {
        matches!(f.method(), "__call__" | "forward")
            && (f.class().is_some() || f.bare())
            && !f.torch()
            && !f.stdlib()
    }

    /// The dataset op opened by `f` (a dataset's method the fetcher
    /// called), at `at` in `ops` (a lost one replaced).
    fn dataset(&mut self, f: &PyFrame<'_>, at: Option<usize>) {
        let name = f.op_name();
        let name = if f.in_file(FOLDER_PY) && f.bare() {
            "DatasetFolder".to_string()
        } else {
            name
        };
        self.wrapped = f.in_file(DATASET_PY) && matches!(f.class(), Some("Subset"))
            || f.class() == Some("TracedDataset");
        self.after_folder = f.in_file(FOLDER_PY) && f.method() == "__getitem__";
        self.after_dataset = !self.after_folder && !self.wrapped;
        match at {
            Some(i) => {
                self.shape.bare |= f.bare();
                self.shape.ops[i] = name;
                self.shape.dataset = Some(i);
            }
            None => {
                self.shape.dataset = Some(self.shape.ops.len());
                self.push(name, f);
            }
        }
    }

    fn step(&mut self, f: &PyFrame<'a>) {
        let frame = match tracer_frame(f) {
            Tracer::Not => *f,
            Tracer::As(g) => g,
            Tracer::Skip | Tracer::Pass => return,
            Tracer::CallOp => {
                self.after_call_op = true;
                return;
            }
            Tracer::Fetched(what) => {
                if self.after_fetch.is_some() {
                    self.after_fetch = Some(what);
                }
                return;
            }
        };
        let f = &frame;
        let (method, after_loop) = (f.method(), std::mem::take(&mut self.after_worker_loop));
        // The markers, wherever they are.
        if method == "fetch" && f.in_file(FETCH_PY) {
            self.shape.fetch = true;
            self.shape.anchored = true;
            self.after_fetch = Some(match f.class() {
                Some("_IterableDatasetFetcher") => Fetched::Iterable,
                _ => Fetched::Map,
            });
            return;
        }
        if f.qual == "_worker_loop" && f.in_file(WORKER_PY) {
            // A forked worker's stack holds its parent's above its loop
            // (the main process starting the workers): only its own
            // frames say where it is.
            *self = Walk {
                known: self.known,
                ..Walk::default()
            };
            self.shape.worker = true;
            self.shape.anchored = true;
            self.after_worker_loop = true;
            return;
        }
        if f.in_file(DATALOADER_PY) {
            match method {
                "__next__" | "_next_data" => {
                    self.shape.next = true;
                    self.shape.anchored = true;
                }
                "_shutdown_workers" => self.shape.workers = true,
                "__init__" if f.bare() || f.class() == Some("_MultiProcessingDataLoaderIter") => {
                    self.shape.workers = true
                }
                _ => {}
            }
            return;
        }
        if (method == "_feed" && f.in_file("multiprocessing/queues.py"))
            || (method == "_serve" && f.in_file("multiprocessing/resource_sharer.py"))
            || (method == "_pin_memory_loop" && f.in_file("torch/utils/data/_utils/pin_memory.py"))
        {
            self.shape.machinery = true;
        }
        if f.qual == "_WorkItem.run" && f.in_file("concurrent/futures/thread.py") {
            self.shape.task = true;
        }
        if self.leaf {
            return;
        }
        if after_loop && self.shape.ops.is_empty() && !f.torch() && !f.stdlib() {
            // What the worker loop calls of the job's own: its
            // worker_init_fn, named as the tracer names a callable.
            self.push(f.qual.to_string(), f);
            self.leaf = true;
            return;
        }
        if self.after_call_op && self.after_fetch.is_none() && !f.comprehension() {
            if f.torch() && f.class() == Some("Module") {
                // nn.Module's call: its forward next.
                return;
            }
            self.after_call_op = false;
            self.after_dataset = false;
            // A policy's op is named by its argument: not seen here.
            if !matches!(f.method(), "_apply_op" | "_apply_image_or_video_transform") {
                self.base = None;
                self.last_transform = f.class();
                if f.class().is_some_and(|c| BASES.contains(&c)) {
                    self.base = Some(self.shape.ops.len());
                }
                self.push(callable_name(f), f);
            }
            return;
        }
        if let Some(what) = self.after_fetch {
            if f.comprehension() {
                return;
            }
            self.after_fetch = None;
            if matches!(
                method,
                "__getattr__" | "__getattribute__" | "__len__" | "__bool__"
            ) {
                // `hasattr(dataset, "__getitems__")` and the like.
                return;
            }
            let dataset = match what {
                Fetched::Dataset => true,
                Fetched::Collate => false,
                _ if DATASET_METHODS.contains(&method) => true,
                Fetched::Iterable => !f.in_file(COLLATE_PY),
                Fetched::Map => false,
            };
            if dataset {
                self.dataset(f, None);
            } else {
                self.push(COLLATION.to_string(), f);
            }
            return;
        }
        let at_lost = self.shape.ops.len() == 1 && self.shape.ops[0] == LOST;
        if at_lost && matches!(method, "__getitem__" | "__getitems__") {
            // A cut stack's dataset frame: one of the datasets seen in
            // whole stacks (not any `__getitem__` inside one).
            let name = if f.in_file(FOLDER_PY) && f.bare() {
                "DatasetFolder".to_string()
            } else {
                f.op_name()
            };
            let wrapper = matches!(f.class(), Some("Subset" | "TracedDataset"));
            if wrapper || self.known.is_some_and(|k| k.contains(&name)) {
                self.dataset(f, Some(0));
                return;
            }
        }
        if at_lost && f.in_file(COLLATE_PY) {
            self.shape.ops[0] = COLLATION.to_string();
            return;
        }
        if self.wrapped && matches!(method, "__getitem__" | "__getitems__") {
            // The dataset a Subset wraps names its op.
            if let Some(i) = self.shape.dataset {
                self.dataset(f, Some(i));
            }
            return;
        }
        if std::mem::take(&mut self.after_folder) && !Self::transform(f) && !f.torch() {
            // DatasetFolder's image load.
            self.push(LOADER.to_string(), f);
            self.leaf = true;
            return;
        }
        if self.after_dataset && !f.comprehension() {
            self.after_dataset = false;
            let machinery = f.torch() && f.class() == Some("Module");
            if !Self::transform(f) && !machinery {
                // A call the dataset's own code makes: named as the
                // tracer's finer spans name it.
                self.push(callable_name(f), f);
                return;
            }
        }
        if self.shape.ops.is_empty() {
            return;
        }
        if let (Some(i), Some(class)) = (self.base, f.class()) {
            if !BASES.contains(&class) && SUBCLASS_METHODS.contains(&method) {
                self.shape.ops[i] = class.to_string();
                self.base = None;
                return;
            }
        }
        if !Self::transform(f) {
            return;
        }
        let name = f.op_name();
        if f.class() == Some("Compose") {
            // A container: an op of its own only where a container or
            // a wrapper runs it.
            if self.last_transform.is_some_and(|c| WRAPPERS.contains(&c)) {
                self.push(name, f);
            }
            self.last_transform = Some("Compose");
            return;
        }
        self.base = None;
        let class = f.class();
        self.last_transform = class;
        if class.is_some_and(|c| BASES.contains(&c)) {
            self.base = Some(self.shape.ops.len());
        }
        self.push(name, f);
    }
}

/// The op name of a call, as the tracer names a callable
/// (`_core.callable_name`): an object's call or a class's construction
/// by the class, a function by its qualified name.
fn callable_name(f: &PyFrame<'_>) -> String {
    match (f.method(), f.class()) {
        ("__init__" | "__new__" | "__call__" | "forward", Some(class)) => class.to_string(),
        _ => f.qual.to_string(),
    }
}

/// The shape of the Python frames `frames` (outermost first): their op
/// path where the stack is whole ([`Shape::anchored`]), and the markers
/// of where it is.
pub(super) fn shape(frames: &[PyFrame<'_>]) -> Shape {
    let mut w = Walk::default();
    for f in frames {
        w.step(f);
    }
    w.shape.python = !frames.is_empty();
    w.shape.tracer = frames
        .last()
        .is_some_and(|f| matches!(tracer_frame(f), Tracer::Skip));
    let rooted = frames.first().is_some_and(|f| ROOTS.contains(&f.qual));
    w.shape.anchored |= rooted;
    if !w.shape.anchored {
        w.shape.ops.clear();
        w.shape.dataset = None;
        w.shape.bare = false;
    }
    w.shape
}

/// The shape of a cut stack's frames (one [`shape`] found not anchored),
/// read as inside a DataLoader worker's dataset op: a `__getitem__` frame
/// of a dataset in `known` (seen in whole stacks) is that op, torch's
/// collate code is `Collation`, and the transforms below are its
/// children; with neither, the ops lie under a dataset op the stack lost
/// ([`Shape::under_lost_dataset`]).
pub(super) fn loose(frames: &[PyFrame<'_>], known: &HashSet<String>) -> Shape {
    let mut w = Walk {
        known: Some(known),
        ..Walk::default()
    };
    w.shape.ops.push(LOST.to_string());
    w.shape.dataset = Some(0);
    for f in frames {
        w.step(f);
    }
    w.shape.python = !frames.is_empty();
    w.shape.tracer = frames
        .last()
        .is_some_and(|f| matches!(tracer_frame(f), Tracer::Skip));
    if w.shape.ops.first().map(String::as_str) == Some(LOST) {
        w.shape.ops.remove(0);
        w.shape.dataset = None;
        w.shape.under_lost_dataset = true;
    } else if w.shape.ops.first().map(String::as_str) == Some(COLLATION) {
        w.shape.dataset = None;
    }
    w.shape
}

#[cfg(test)]
mod tests {
    use super::*;

    const TV: &str = "/venv/lib/python3.12/site-packages/torchvision/transforms/transforms.py";
    const TV2: &str = "/venv/lib/python3.12/site-packages/torchvision/transforms/v2/_transform.py";
    const TV2_GEO: &str =
        "/venv/lib/python3.12/site-packages/torchvision/transforms/v2/_geometry.py";
    const NN: &str = "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py";
    const TORCH_DATA: &str = "/venv/lib/python3.12/site-packages/torch/utils/data";
    const JOB: &str = "/app/train.py";

    fn f(qual: &'static str, file: &str) -> PyFrame<'static> {
        PyFrame {
            qual,
            file: Box::leak(file.to_string().into_boxed_str()),
        }
    }

    /// A worker's stack down to its fetch.
    fn worker_to_fetch() -> Vec<PyFrame<'static>> {
        vec![
            f("<module>", JOB),
            f(
                "BaseProcess._bootstrap",
                "/usr/lib/python3.12/multiprocessing/process.py",
            ),
            f("_worker_loop", &format!("{TORCH_DATA}/_utils/worker.py")),
            f(
                "_MapDatasetFetcher.fetch",
                &format!("{TORCH_DATA}/_utils/fetch.py"),
            ),
        ]
    }

    fn with(mut v: Vec<PyFrame<'static>>, more: &[PyFrame<'static>]) -> Vec<PyFrame<'static>> {
        v.extend_from_slice(more);
        v
    }

    fn ops(s: &Shape) -> Vec<&str> {
        s.ops.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_transform_under_an_image_folder_through_compose_and_module_calls() {
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f(
                    "DatasetFolder.__getitem__",
                    &format!("/venv/lib/python3.12/site-packages/{FOLDER_PY}"),
                ),
                f("Compose.__call__", TV),
                f("Module._wrapped_call_impl", NN),
                f("Module._call_impl", NN),
                f("RandomResizedCrop.forward", TV),
                f("RandomResizedCrop.get_params", TV),
            ],
        ));
        assert_eq!(ops(&s), ["DatasetFolder", "RandomResizedCrop"]);
        assert!(s.anchored && s.worker && s.fetch && !s.next);
        assert_eq!(s.dataset, Some(0));
    }

    #[test]
    fn the_image_folders_load_is_loader_and_nothing_below_it_is_an_op() {
        let folder = format!("/venv/lib/python3.12/site-packages/{FOLDER_PY}");
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("DatasetFolder.__getitem__", &folder),
                f("default_loader", &folder),
                f("pil_loader", &folder),
                f(
                    "Decoder.__call__",
                    "/venv/lib/python3.12/site-packages/PIL/Image.py",
                ),
            ],
        ));
        assert_eq!(ops(&s), ["DatasetFolder", "Loader"]);
    }

    #[test]
    fn the_collate_function_and_a_users_dataset() {
        let collate = format!("{TORCH_DATA}/_utils/collate.py");
        let s = shape(&with(
            worker_to_fetch(),
            &[f("default_collate", &collate), f("collate", &collate)],
        ));
        assert_eq!(ops(&s), ["Collation"]);
        assert_eq!(s.dataset, None);
        // A user's collate_fn, and a user's dataset through a list
        // comprehension (3.11 and before).
        let s = shape(&with(worker_to_fetch(), &[f("pad_batch", JOB)]));
        assert_eq!(ops(&s), ["Collation"]);
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f(
                    "_MapDatasetFetcher.fetch.<locals>.<listcomp>",
                    &format!("{TORCH_DATA}/_utils/fetch.py"),
                ),
                f("Images.__getitem__", JOB),
                f("decode", JOB),
                f(
                    "Image.open",
                    "/venv/lib/python3.12/site-packages/PIL/Image.py",
                ),
            ],
        ));
        // What the dataset's own code calls: an op of its own, as the
        // tracer's finer spans make it.
        assert_eq!(ops(&s), ["Images", "decode"]);
    }

    #[test]
    fn an_iterable_datasets_fetch_and_the_tracers_word_on_what_it_calls() {
        let fetch = format!("{TORCH_DATA}/_utils/fetch.py");
        let collate = format!("{TORCH_DATA}/_utils/collate.py");
        let mut frames = worker_to_fetch();
        frames.pop();
        frames.push(f("_IterableDatasetFetcher.fetch", &fetch));
        // Its iterator's generator, whatever its name, is the dataset.
        let s = shape(&with(
            frames.clone(),
            &[f("Stream._records", JOB), f("parse", JOB)],
        ));
        assert_eq!(ops(&s), ["Stream", "parse"]);
        let s = shape(&with(frames, &[f("default_collate", &collate)]));
        assert_eq!(ops(&s), ["Collation"]);
        // `hasattr(dataset, "__getitems__")` through a `__getattr__`.
        let s = shape(&with(worker_to_fetch(), &[f("Wrapper.__getattr__", JOB)]));
        assert!(s.ops.is_empty() && s.fetch);
        // A traced job's fetch says which it calls.
        let tr = "/venv/lib/python3.12/site-packages/lotus_trace/_torch.py";
        let core = "/venv/lib/python3.12/site-packages/lotus_trace/_core.py";
        let mut frames = worker_to_fetch();
        frames.pop();
        frames.push(f("_patch_map_fetch.<locals>.fetch", tr));
        let s = shape(&with(
            frames.clone(),
            &[f("_dataset_op.<locals>.call", tr), f("Rows.load_all", JOB)],
        ));
        assert_eq!(ops(&s), ["Rows"]);
        let s = shape(&with(
            frames,
            &[
                f("BatchSpan.run_collate", core),
                f("Batcher.__getitem__", JOB),
            ],
        ));
        assert_eq!(ops(&s), ["Collation"]);
    }

    #[test]
    fn compose_is_a_container_unless_a_wrapper_runs_it() {
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Images.__getitem__", JOB),
                f("Compose.__call__", TV),
                f("RandomApply.forward", TV),
                f("Compose.__call__", TV),
                f("GaussianBlur.forward", TV),
            ],
        ));
        assert_eq!(
            ops(&s),
            ["Images", "RandomApply", "Compose", "GaussianBlur"]
        );
        // A Compose a user's transform calls: its transforms under it.
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Images.__getitem__", JOB),
                f("Augment.__call__", JOB),
                f("Compose.__call__", TV),
                f("ToTensor.__call__", TV),
            ],
        ));
        assert_eq!(ops(&s), ["Images", "Augment", "ToTensor"]);
    }

    #[test]
    fn a_v2_transform_is_named_by_its_subclass() {
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Images.__getitem__", JOB),
                f("Compose.forward", "/venv/lib/python3.12/site-packages/torchvision/transforms/v2/_container.py"),
                f("Module._wrapped_call_impl", NN),
                f("Transform.forward", TV2),
                f("RandomResizedCrop._transform", TV2_GEO),
                f("Transform._call_kernel", TV2),
                f("resized_crop", "/venv/lib/python3.12/site-packages/torchvision/transforms/v2/functional/_geometry.py"),
            ],
        ));
        assert_eq!(ops(&s), ["Images", "RandomResizedCrop"]);
        // Where no subclass's method is below it: its base.
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Images.__getitem__", JOB),
                f("Transform.forward", TV2),
                f(
                    "tree_flatten",
                    "/venv/lib/python3.12/site-packages/torch/utils/_pytree.py",
                ),
            ],
        ));
        assert_eq!(ops(&s), ["Images", "Transform"]);
    }

    #[test]
    fn calls_of_torch_and_the_standard_library_and_outside_ops_are_no_transforms() {
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Images.__getitem__", JOB),
                f("ToTensor.__call__", TV),
                f(
                    "OpOverloadPacket.__call__",
                    "/venv/lib/python3.12/site-packages/torch/_ops.py",
                ),
                f(
                    "ContextDecorator.__call__",
                    "/usr/lib/python3.12/contextlib.py",
                ),
            ],
        ));
        assert_eq!(ops(&s), ["Images", "ToTensor"]);
        // Called by the dataset's own code, an object's call is named
        // after its class, as any call it makes.
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Images.__getitem__", JOB),
                f(
                    "OpOverloadPacket.__call__",
                    "/venv/lib/python3.12/site-packages/torch/_ops.py",
                ),
            ],
        ));
        assert_eq!(ops(&s), ["Images", "OpOverloadPacket"]);
        // The main process's model: no op.
        let s = shape(&[
            f("<module>", JOB),
            f("train", JOB),
            f("Module._wrapped_call_impl", NN),
            f("Net.forward", JOB),
        ]);
        assert!(s.ops.is_empty() && s.anchored && !s.next);
    }

    #[test]
    fn a_subset_is_named_by_the_dataset_it_wraps() {
        let ds = format!("{TORCH_DATA}/dataset.py");
        let s = shape(&with(
            worker_to_fetch(),
            &[
                f("Subset.__getitems__", &ds),
                f("Subset.__getitems__.<locals>.<listcomp>", &ds),
                f("Images.__getitem__", JOB),
                f("ToTensor.__call__", TV),
            ],
        ));
        assert_eq!(ops(&s), ["Images", "ToTensor"]);
    }

    #[test]
    fn the_main_process_markers_and_a_worker_init_fn() {
        let dl = format!("{TORCH_DATA}/dataloader.py");
        let s = shape(&[
            f("<module>", JOB),
            f("_BaseDataLoaderIter.__next__", &dl),
            f("_MultiProcessingDataLoaderIter._next_data", &dl),
            f(
                "Connection.recv",
                "/usr/lib/python3.12/multiprocessing/connection.py",
            ),
        ]);
        assert!(s.next && s.ops.is_empty() && !s.workers);
        let s = shape(&[
            f("<module>", JOB),
            f("_BaseDataLoaderIter.__next__", &dl),
            f("_MultiProcessingDataLoaderIter._next_data", &dl),
            f("_MultiProcessingDataLoaderIter._shutdown_workers", &dl),
        ]);
        assert!(s.next && s.workers);
        let mut frames = worker_to_fetch();
        frames.pop();
        frames.push(f("seed_worker", JOB));
        frames.push(f("Thing.__call__", JOB));
        assert_eq!(ops(&shape(&frames)), ["seed_worker"]);
        let feeder = shape(&[
            f("Thread._bootstrap", "/usr/lib/python3.12/threading.py"),
            f(
                "Queue._feed",
                "/usr/lib/python3.12/multiprocessing/queues.py",
            ),
        ]);
        assert!(feeder.machinery && feeder.anchored);
    }

    #[test]
    fn a_forked_workers_parent_frames_say_nothing_of_it() {
        let dl = format!("{TORCH_DATA}/dataloader.py");
        let mut frames = vec![
            f("<module>", JOB),
            f("DataLoader.__iter__", &dl),
            f("_MultiProcessingDataLoaderIter.__init__", &dl),
            f(
                "Popen._launch",
                "/usr/lib/python3.12/multiprocessing/popen_fork.py",
            ),
        ];
        frames.extend(worker_to_fetch().into_iter().skip(2));
        frames.push(f("Images.__getitem__", JOB));
        let s = shape(&frames);
        assert_eq!(ops(&s), ["Images"]);
        assert!(s.worker && s.fetch && !s.workers && !s.next);
    }

    #[test]
    fn a_cut_stack_is_read_inside_its_workers_dataset() {
        let frames = [
            f("Compose.__call__", TV),
            f("Module._call_impl", NN),
            f("Normalize.forward", TV),
        ];
        let s = shape(&frames);
        assert!(!s.anchored && s.ops.is_empty());
        let known: HashSet<String> = ["Images".to_string()].into();
        let l = loose(&frames, &known);
        assert_eq!(ops(&l), ["Normalize"]);
        assert!(l.under_lost_dataset);
        // Its dataset's frame kept: that op; another `__getitem__` is not.
        let l = loose(
            &[f("Images.__getitem__", JOB), f("ToTensor.__call__", TV)],
            &known,
        );
        assert_eq!(
            (ops(&l), l.under_lost_dataset),
            (vec!["Images", "ToTensor"], false)
        );
        let l = loose(
            &[f(
                "_iLocIndexer.__getitem__",
                "/venv/lib/python3.12/site-packages/pandas/core/indexing.py",
            )],
            &known,
        );
        assert!(l.ops.is_empty() && l.under_lost_dataset);
        let l = loose(
            &[f("collate", &format!("{TORCH_DATA}/_utils/collate.py"))],
            &known,
        );
        assert_eq!((ops(&l), l.under_lost_dataset), (vec!["Collation"], false));
    }

    /// A traced job's frames: the tracer's fetch, DatasetFolder and
    /// Compose in place of torch's and torchvision's, its wrappers around
    /// each call.
    #[test]
    fn a_traced_jobs_stacks_read_as_the_same_ops() {
        let tr = "/venv/lib/python3.12/site-packages/lotus_trace/_torch.py";
        let core = "/venv/lib/python3.12/site-packages/lotus_trace/_core.py";
        let folder = format!("/venv/lib/python3.12/site-packages/{FOLDER_PY}");
        let mut frames = worker_to_fetch();
        frames.pop();
        let head = with(
            frames,
            &[
                f("_patch_map_fetch.<locals>.fetch", tr),
                f("Tracer.sample_call", core),
                f("_dataset_op.<locals>.call", tr),
                f("_patch_folder.<locals>.__getitem__", tr),
                f("Tracer.sample_call", core),
                f("_patch_folder.<locals>.item", tr),
            ],
        );
        let load = shape(&with(
            head.clone(),
            &[f("default_loader", &folder), f("pil_loader", &folder)],
        ));
        assert_eq!(ops(&load), ["DatasetFolder", "Loader"]);
        assert!(load.fetch && !load.tracer);
        let crop = shape(&with(
            head.clone(),
            &[
                f("_top_level", tr),
                f("_patch_compose.<locals>.__call__", tr),
                f("_apply", tr),
                f("_transform_op", tr),
                f("Module._wrapped_call_impl", NN),
                f("RandomResizedCrop.forward", TV),
            ],
        ));
        assert_eq!(ops(&crop), ["DatasetFolder", "RandomResizedCrop"]);
        // The tracer writing a span: its own cost, in the dataset's op.
        let hook = shape(&with(
            head,
            &[
                f("_top_level", tr),
                f("_patch_compose.<locals>.__call__", tr),
                f("_apply", tr),
                f("_transform_op", tr),
                f("Tracer.op_event", core),
            ],
        ));
        assert_eq!(ops(&hook), ["DatasetFolder"]);
        assert!(hook.tracer);
    }

    /// What the tracer wraps and calls as an op (`lotus_trace.wrap`, a v2
    /// transform's call, kornia's) is that op wherever it runs.
    #[test]
    fn a_traced_jobs_wrapped_calls_are_ops_wherever_they_run() {
        let init = "/venv/lib/python3.12/site-packages/lotus_trace/__init__.py";
        let core = "/venv/lib/python3.12/site-packages/lotus_trace/_core.py";
        let s = shape(&[
            f("<module>", JOB),
            f("train", JOB),
            f("_Op.__call__", init),
            f("Dot.__call__", JOB),
        ]);
        assert_eq!(ops(&s), ["Dot"]);
        let s = shape(&[
            f("<module>", JOB),
            f("train", JOB),
            f(
                "_patch_kornia.<locals>.__call__",
                "/x/lotus_trace/_torch.py",
            ),
            f("_call_op_of.<locals>.call_op", core),
            f("Module._wrapped_call_impl", NN),
            f("Module._call_impl", NN),
            f(
                "_BasicAugmentationBase.forward",
                "/venv/lib/python3.12/site-packages/kornia/augmentation/base.py",
            ),
            f(
                "RandomAffine.apply_transform",
                "/venv/lib/python3.12/site-packages/kornia/augmentation/_2d/geometric/affine.py",
            ),
        ]);
        assert_eq!(ops(&s), ["RandomAffine"]);
        let s = shape(&[
            f("<module>", JOB),
            f("_call_op_of.<locals>.call_op", core),
            f("load_batch", JOB),
        ]);
        assert_eq!(ops(&s), ["load_batch"]);
    }

    #[test]
    fn bare_names_of_older_pythons_are_named_by_their_file() {
        let s = shape(&with(
            worker_to_fetch(),
            &[f("__getitem__", JOB), f("__call__", TV)],
        ));
        assert_eq!(ops(&s), ["__getitem__@train.py", "__call__@transforms.py"]);
        assert!(s.bare);
    }
}
