//! Credit by cause: what a helper thread's samples say it is and does.
//!
//! A helper thread (one with no op spans of its own) is a parallel
//! runtime's pool thread when its stack says so: the function it was
//! started in (the frame under `start_thread`) belongs to an OpenMP
//! runtime (`libgomp`, `libiomp5`, `libomp`: named or not, as in the
//! stripped `libgomp` torch ships), to OpenBLAS (`blas_thread_server`),
//! oneTBB, or it runs rayon's or torch's own pool loop
//! (`rayon_core::registry::main_loop`, `c10::ThreadPool::main_loop`).
//! Those runtimes work for a caller that waits: the thread that hands a
//! pool its work stays inside the call (`GOMP_parallel`, `exec_blas`, ...)
//! until the pool has done it. So a pool thread's sample that is *working*
//! (its innermost frame of user code is not the runtime waiting) was
//! caused by whatever the process's op thread was running at that time;
//! and a sample where it *waits* (spins, yields, sleeps in the runtime) is
//! the spin after the last work it was handed: credited to that work's
//! op, as that op's spin once the op has returned.
//!
//! Why frames and not rates: the rate rule (how much more a thread runs
//! while an op is open) flipped between runs of one job for OpenBLAS's
//! threads, whose spin after each call straddles the next op; the frames
//! of a sample do not depend on the machine's load.

use std::collections::HashMap;
use std::rc::Rc;

use lotus_samples::{StackTable, SymbolTable};
use lotus_trace::Role;

use super::{Open, Target};

/// How helper threads (threads of a traced process with no op spans of
/// their own) are credited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HelperRule {
    /// By cause: a parallel runtime's pool thread, known by its frames,
    /// is credited sample by sample to the op that handed it its work
    /// (its spin after that op returned to a row of its own); other
    /// helper threads by [`HelperRule::Timing`].
    #[default]
    Cause,
    /// By timing alone (the earlier rule, kept for comparison): a
    /// helper thread that runs (much) more while its process's main thread
    /// is inside an op is that op's pool, every sample of it inside an op
    /// credited to the op open then.
    Timing,
}

/// A parallel runtime whose threads work for a waiting caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Runtime {
    /// GNU, Intel or LLVM OpenMP.
    OpenMp,
    /// OpenBLAS's own threads.
    OpenBlas,
    /// oneTBB's workers.
    Tbb,
    /// rayon's workers (Hugging Face tokenizers, polars...).
    Rayon,
    /// torch's own thread pool (`c10::ThreadPool`).
    TorchPool,
}

impl Runtime {
    /// The runtime's name, as notes give it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Runtime::OpenMp => "OpenMP",
            Runtime::OpenBlas => "OpenBLAS",
            Runtime::Tbb => "oneTBB",
            Runtime::Rayon => "rayon",
            Runtime::TorchPool => "torch's thread pool",
        }
    }
}

/// What one sample's frames say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Reading {
    /// The runtime whose pool the sampled thread is, where its frames
    /// show it (the function it was started in).
    pub(crate) pool: Option<Runtime>,
    /// Whether the thread waits in a runtime here (spins, yields or
    /// sleeps for work), rather than working.
    pub(crate) waits: bool,
    /// The runtime the sampled thread is handing work to here, where it
    /// is inside such a call (`GOMP_parallel`, `exec_blas`, ...).
    pub(crate) hands_to: Option<Runtime>,
}

/// `function` without the angle brackets Rust's demangler puts around a
/// type path (`<rayon_core::registry::ThreadBuilder>::run`): the name
/// the rules below match, whichever demangling style named it.
fn plain(function: &str) -> std::borrow::Cow<'_, str> {
    if function.contains(['<', '>']) {
        function.replace(['<', '>'], "").into()
    } else {
        function.into()
    }
}

/// The base name of a module path.
fn base(module: &str) -> &str {
    module.rsplit('/').next().unwrap_or(module)
}

/// Whether a module is an OpenMP runtime (`libgomp`, `libiomp5`,
/// `libomp`), whose own functions only manage threads: what a thread runs
/// there, named or not (`func@0x1de20` in a stripped libgomp), is waiting
/// for work or handing it out (the work runs in the caller's library).
pub(crate) fn is_openmp_module(module: &str) -> bool {
    let b = base(module);
    ["libgomp", "libiomp", "libomp"]
        .iter()
        .any(|m| b.starts_with(m))
}

fn is_tbb_module(module: &str) -> bool {
    base(module).starts_with("libtbb")
}

/// Whether `function` (of `module`) spins, yields or sleeps waiting for
/// work: any function of an OpenMP runtime or oneTBB; OpenBLAS's
/// `blas_thread_server` loop; MKL's `mkl_serv_*yield*`; `sched_yield`,
/// `pthread_spin_*`, condition-variable and futex waits, sleeps; rayon's
/// sleep and steal loop; torch's pool loop itself.
pub(crate) fn is_wait(function: &str, module: &str) -> bool {
    if is_openmp_module(module) || is_tbb_module(module) {
        return true;
    }
    let f = plain(function);
    let f = f.trim_start_matches('_');
    f.starts_with("gomp_")
        || f.starts_with("GOMP_")
        || f.starts_with("kmp_")
        || f.starts_with("sched_yield")
        || f.starts_with("GI___sched_yield")
        || f.starts_with("pthread_spin")
        || f.starts_with("pthread_cond_wait")
        || f.starts_with("pthread_cond_timedwait")
        || f.starts_with("futex_abstimed_wait")
        || f.starts_with("lll_lock_wait")
        || f.starts_with("nanosleep")
        || f.starts_with("clock_nanosleep")
        || f.contains("blas_thread_server")
        // OpenBLAS's level-3 driver and its caller wait for the other
        // threads' parts in loops of their own (their kernels and copies
        // are functions apart).
        || (module.contains("openblas") && (f == "inner_thread" || f.starts_with("exec_blas")))
        || (f.starts_with("mkl_serv") && f.contains("yield"))
        || f.starts_with("rayon_core::sleep::")
        || f.starts_with("rayon_core::registry::WorkerThread::wait_until")
        || f.starts_with("rayon_core::registry::WorkerThread::find_work")
        || f.starts_with("crossbeam_deque::")
        || f.starts_with("std::thread::yield_now")
        || f.starts_with("c10::ThreadPool::main_loop")
        || f.starts_with("std::condition_variable::wait")
}

/// The runtime a function or module proves a thread a pool of, when the
/// thread was started in it (or, for the loops named, runs it anywhere).
fn pool_of(function: &str, module: &str, entry: bool) -> Option<Runtime> {
    let f = plain(function);
    let f = f.trim_start_matches('_');
    if f.starts_with("gomp_thread_start") || f.starts_with("kmp_launch_worker") {
        return Some(Runtime::OpenMp);
    }
    if f.contains("blas_thread_server") {
        return Some(Runtime::OpenBlas);
    }
    if f.starts_with("rayon_core::registry::main_loop")
        || f.starts_with("rayon_core::registry::ThreadBuilder::run")
    {
        return Some(Runtime::Rayon);
    }
    if f.starts_with("c10::ThreadPool::main_loop") {
        return Some(Runtime::TorchPool);
    }
    if entry && is_openmp_module(module) {
        return Some(Runtime::OpenMp);
    }
    if entry && is_tbb_module(module) {
        return Some(Runtime::Tbb);
    }
    if entry && base(module).contains("openblas") {
        return Some(Runtime::OpenBlas);
    }
    None
}

/// The runtime a caller hands work to inside `function` (of `module`).
fn hands_to(function: &str, module: &str) -> Option<Runtime> {
    let f = plain(function);
    let f = f.trim_start_matches('_');
    if is_openmp_module(module) || f.starts_with("GOMP_parallel") || f.starts_with("kmpc_fork") {
        return Some(Runtime::OpenMp);
    }
    if f == "exec_blas" || f.starts_with("exec_blas_async") {
        return Some(Runtime::OpenBlas);
    }
    if f.starts_with("rayon_core::registry::Registry::in_worker") {
        return Some(Runtime::Rayon);
    }
    if f.starts_with("at::internal::invoke_parallel") || f.starts_with("c10::ThreadPool::run") {
        return Some(Runtime::TorchPool);
    }
    if is_tbb_module(module) {
        return Some(Runtime::Tbb);
    }
    None
}

/// What handed a pool thread its work: the op open on its process's main
/// thread then, or nothing there (the process outside every op: the
/// training step of a main process, a worker's machinery).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cause {
    target: Target,
    span: Option<u64>,
    /// When that op's span ends.
    end: u64,
}

impl Cause {
    /// The cause of work handed while `open` (the innermost op span open
    /// on the main thread, if any) runs, in a process of `role`.
    pub(crate) fn of(open: Option<Open>, role: Role) -> Cause {
        match open {
            Some(o) => Cause {
                target: Target::Op(o.path),
                span: Some(o.id),
                end: o.end,
            },
            None => Cause {
                target: Target::Outside(role),
                span: None,
                end: 0,
            },
        }
    }

    /// Where a pool thread's sample inside a task this caused is credited:
    /// the op (`true`: a pool sample of it), whether or not it has
    /// returned (the task is its work, not a spin), else the row of the
    /// process's time outside ops.
    pub(crate) fn credit_task(&self) -> (Target, Option<u64>, bool) {
        match self.target {
            Target::Op(p) => (Target::Op(p), self.span, true),
            other => (other, None, false),
        }
    }

    /// Whether this is the work of span `id`.
    pub(crate) fn is_span(&self, id: u64) -> bool {
        self.span == Some(id)
    }

    /// Where a pool sample at `t` caused by this is credited: the op while
    /// its call lasts (`true`: a pool's sample in its op), its spin row
    /// after, else the row of the process's time outside ops. A sample
    /// stands for its thread's CPU since its previous one (at `previous`),
    /// and a thread runs in the moments before it is sampled: one that
    /// straddles the call's end is the call's when it came less than `half`
    /// an interval after the end (as at the start).
    pub(crate) fn credit(
        &self,
        t: u64,
        previous: Option<u64>,
        half: u64,
    ) -> (Target, Option<u64>, bool) {
        let straddles = previous.is_some_and(|p| p < self.end) && t.saturating_sub(self.end) < half;
        match self.target {
            Target::Op(p) if t < self.end || straddles => (Target::Op(p), self.span, true),
            Target::Op(p) => (Target::Spin(p), self.span, false),
            other => (other, None, false),
        }
    }
}

/// The latest work each pool thread was seen doing, and the latest
/// hand-over to each runtime seen on its callers' side, per process.
#[derive(Debug, Default)]
pub(crate) struct Causes {
    by_thread: HashMap<(u32, u32), (u64, Cause)>,
    by_runtime: HashMap<(u32, Runtime), (u64, Cause)>,
    /// Each pool thread's previous sample's time.
    previous: HashMap<(u32, u32), u64>,
}

impl Causes {
    /// Pool thread `tid` of `pid` was sampled at `t`.
    pub(crate) fn sampled(&mut self, pid: u32, tid: u32, t: u64) {
        self.previous.insert((pid, tid), t);
    }

    /// When pool thread `tid` of `pid` was sampled last.
    pub(crate) fn previous(&self, pid: u32, tid: u32) -> Option<u64> {
        self.previous.get(&(pid, tid)).copied()
    }

    /// A thread of `pid` was inside a call handing `rt`'s pool work at `t`.
    pub(crate) fn handed(&mut self, pid: u32, rt: Runtime, t: u64, c: Cause) {
        self.by_runtime.insert((pid, rt), (t, c));
    }

    /// Pool thread `tid` of `pid` was working at `t`, for `c`.
    pub(crate) fn worked(&mut self, pid: u32, tid: u32, t: u64, c: Cause) {
        self.by_thread.insert((pid, tid), (t, c));
    }

    /// The cause of pool thread `tid` of `pid`'s own last working sample
    /// (what it was last seen working for, whatever its callers did
    /// since).
    pub(crate) fn own_last(&self, pid: u32, tid: u32) -> Option<Cause> {
        self.by_thread.get(&(pid, tid)).map(|x| x.1)
    }

    /// The cause of the last work pool thread `tid` (of runtime `rt`) of
    /// `pid` was seen handed: its own last working sample's, or a later
    /// hand-over seen on the callers' side.
    pub(crate) fn last(&self, pid: u32, tid: u32, rt: Runtime) -> Option<Cause> {
        let own = self.by_thread.get(&(pid, tid));
        let handed = self.by_runtime.get(&(pid, rt));
        match (own, handed) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b.1 } else { a.1 }),
            (a, b) => a.or(b).map(|x| x.1),
        }
    }
}

/// What one function says, read once per symbol id: whether it is libc's
/// `start_thread`, the pool it proves a thread of (as the thread's entry,
/// or anywhere), whether it is the kernel's, a wait, a hand-over.
#[derive(Debug, Clone, Copy, Default)]
struct Class {
    start_thread: bool,
    entry_pool: Option<Runtime>,
    any_pool: Option<Runtime>,
    kernel: bool,
    waits: bool,
    hands_to: Option<Runtime>,
}

fn classify(s: &lotus_samples::Symbol) -> Class {
    let (f, m) = (s.function.as_str(), s.module.as_str());
    Class {
        start_thread: f == "start_thread",
        entry_pool: pool_of(f, m, true),
        any_pool: pool_of(f, m, false),
        kernel: m == "[kernel]",
        waits: is_wait(f, m),
        hands_to: hands_to(f, m),
    }
}

/// Reads samples' frames, once per distinct stack (and each function
/// once: a trace of deep stacks holds a few thousand functions in a
/// hundred thousand stacks).
pub(crate) struct Frames {
    stacks: Option<Rc<StackTable>>,
    cache: HashMap<(u32, u32), Reading>,
    classes: HashMap<u32, Class>,
    frames: Vec<u32>,
}

impl Frames {
    /// A reader of the stacks in `stacks` (`None`: the samples carry no
    /// stacks, and each is read by its own function alone).
    pub(crate) fn new(stacks: Option<Rc<StackTable>>) -> Frames {
        Frames {
            stacks,
            cache: HashMap::new(),
            classes: HashMap::new(),
            frames: Vec::new(),
        }
    }

    /// What the sample of stack id `stack` (0: none) and function id
    /// `leaf` says.
    pub(crate) fn read(&mut self, symbols: &SymbolTable, stack: u32, leaf: u32) -> Reading {
        if let Some(r) = self.cache.get(&(stack, leaf)) {
            return *r;
        }
        let have = stack != 0
            && self
                .stacks
                .as_ref()
                .is_some_and(|t| t.frames(stack, &mut self.frames));
        if !have {
            self.frames.clear();
            self.frames.push(leaf);
        }
        let classes = &mut self.classes;
        let r = reading(&self.frames, &mut |id| {
            *classes
                .entry(id)
                .or_insert_with(|| classify(symbols.get(id)))
        });
        self.cache.insert((stack, leaf), r);
        r
    }
}

/// What frames `ids` (outermost first, the sampled function last) say,
/// each function's [`Class`] from `class`.
fn reading(ids: &[u32], class: &mut impl FnMut(u32) -> Class) -> Reading {
    let classes: Vec<Class> = ids.iter().map(|&id| class(id)).collect();
    // The thread's entry: the frame under libc's `start_thread`, where
    // the stack reaches it.
    let entry = classes
        .iter()
        .position(|c| c.start_thread)
        .map(|i| i + 1)
        .filter(|&i| i < classes.len());
    let pool = entry
        .and_then(|i| classes[i].entry_pool)
        .or_else(|| classes.iter().find_map(|c| c.any_pool));
    // The innermost frame of user code (the kernel's frames say what the
    // kernel did for it: a fault is the work's, a yield the wait's).
    let waits = classes
        .iter()
        .rev()
        .find(|c| !c.kernel)
        .is_some_and(|c| c.waits);
    let hands = classes[entry.unwrap_or(0).min(classes.len())..]
        .iter()
        .rev()
        .find_map(|c| c.hands_to);
    Reading {
        pool,
        waits,
        hands_to: hands,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_samples::{SampleSink, Symbol};

    fn table(names: &[(&str, &str)]) -> SymbolTable {
        let dir = tempfile::tempdir().expect("dir");
        let mut w = lotus_samples::SamplesWriter::create(dir.path(), "lotus").expect("w");
        let symbols: Vec<(u32, Symbol)> = names
            .iter()
            .enumerate()
            .map(|(i, (f, m))| (i as u32, Symbol::new(f, m)))
            .collect();
        w.symbols(&symbols).expect("symbols");
        w.finish().expect("finish");
        lotus_samples::SampleFiles::open(dir.path(), "lotus")
            .and_then(|f| f.read_symbols())
            .expect("read")
    }

    const GOMP: &str = "/x/torch/lib/libgomp.so.1";
    const BLAS: &str = "/x/numpy.libs/libscipy_openblas64_-32a4b2a6.so";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    const TORCH: &str = "/x/torch/lib/libtorch_cpu.so";

    #[test]
    fn pool_threads_are_known_by_their_entry_and_wait_or_work_by_their_innermost_frame() {
        let t = table(&[
            ("clone3", LIBC),                          // 0
            ("start_thread", LIBC),                    // 1
            ("func@0x1b380", GOMP),                    // 2: gomp_thread_start, stripped
            ("func@0x1de20", GOMP),                    // 3: its barrier wait
            ("at::native::add_kernel._omp_fn", TORCH), // 4
            ("blas_thread_server", BLAS),              // 5
            ("exec_threads", BLAS),                    // 6
            ("dgemm_kernel_SKYLAKEX", BLAS),           // 7
            ("clear_page_erms", "[kernel]"),           // 8
            ("__sched_yield", LIBC),                   // 9
            ("do_sched_yield", "[kernel]"),            // 10
            ("thread_run", "/usr/bin/python3.11"),     // 11
            ("exec_blas", BLAS),                       // 12
            ("GOMP_parallel", GOMP),                   // 13
            ("main", "/usr/bin/python3.11"),           // 14
            ("<rayon_core::registry::ThreadBuilder>::run", "/x/tokenizers.abi3.so"), // 15
            ("<rayon_core::registry::WorkerThread>::wait_until_cold", "/x/tokenizers.abi3.so"), // 16
            ("<rayon_core::sleep::Sleep>::sleep", "/x/tokenizers.abi3.so"), // 17
            ("<rayon_core::job::StackJob<rayon_core::latch::LatchRef<rayon_core::latch::LockLatch>, <rayon_core::registry::Registry>::in_worker_cold<F>>>::execute", "/x/tokenizers.abi3.so"), // 18
            ("<rayon_core::registry::Registry>::in_worker_cold::<F, R>", "/x/tokenizers.abi3.so"), // 19
        ]);
        let r = |ids: &[u32]| reading(ids, &mut |id| classify(t.get(id)));
        let omp_wait = r(&[0, 1, 2, 3]);
        assert_eq!(
            (omp_wait.pool, omp_wait.waits),
            (Some(Runtime::OpenMp), true)
        );
        let omp_work = r(&[0, 1, 2, 4]);
        assert_eq!(
            (omp_work.pool, omp_work.waits),
            (Some(Runtime::OpenMp), false)
        );
        let blas_spin = r(&[0, 1, 5]);
        assert_eq!(
            (blas_spin.pool, blas_spin.waits),
            (Some(Runtime::OpenBlas), true)
        );
        let blas_work = r(&[0, 1, 5, 6, 7, 8]);
        assert_eq!(
            (blas_work.pool, blas_work.waits),
            (Some(Runtime::OpenBlas), false)
        );
        let blas_yield = r(&[0, 1, 5, 9, 10]);
        assert_eq!(
            (blas_yield.pool, blas_yield.waits),
            (Some(Runtime::OpenBlas), true)
        );
        // A Python thread is no pool, whatever it calls...
        let py = r(&[0, 1, 11, 12, 7]);
        assert_eq!(py.pool, None);
        // ...but it hands work to OpenBLAS while in exec_blas, as a main
        // thread in GOMP_parallel hands it to OpenMP.
        assert_eq!(py.hands_to, Some(Runtime::OpenBlas));
        assert_eq!(r(&[14, 13, 4]).hands_to, Some(Runtime::OpenMp));
        assert_eq!(r(&[14, 7]).hands_to, None);
        // rayon, in the demangling style that puts type paths in angle
        // brackets: a stack cut short of start_thread still shows the
        // worker's loop; a job run by a worker is work (even one that
        // names in_worker_cold in its type), its sleep a wait; the caller
        // in in_worker_cold hands the pool work.
        let rayon_work = r(&[15, 16, 18, 7]);
        assert_eq!(
            (rayon_work.pool, rayon_work.waits),
            (Some(Runtime::Rayon), false)
        );
        assert_eq!(rayon_work.hands_to, None);
        assert!(r(&[15, 16, 17]).waits);
        assert_eq!(r(&[14, 19]).hands_to, Some(Runtime::Rayon));
        // Without a stack, the sampled function alone.
        assert_eq!(r(&[5]).pool, Some(Runtime::OpenBlas));
        assert_eq!(r(&[7]).pool, None);
    }
}
