//! The model: a DataLoader run replayed as a simulation of the processes
//! that share the machine's CPUs.
//!
//! **What runs.** The main process, per epoch: it starts the workers
//! (where they are not kept from an earlier epoch), then for each batch
//! in order asks for it, waits until a worker has finished it and handed
//! it over, and runs the training step on it; at the epoch's end it
//! stops the workers (where they are not persistent). Each worker starts
//! up (imports, `worker_init_fn`), then prepares the batches it is sent,
//! in order. As PyTorch's `_MultiProcessingDataLoaderIter` does, batch
//! `j` goes to worker `j % workers`, and it is sent once batch
//! `j - prefetch * workers` has been taken (the first `prefetch *
//! workers` at once). With no workers the main process prepares each
//! batch itself before its step.
//!
//! **What each piece of work costs** is what the traced run measured for
//! it: its time alone (its wall time less the time its thread waited for
//! a CPU, where the log says) and the CPU its process used meanwhile, so
//! that work which sleeps or waits for I/O asks for no CPU while it does.
//!
//! **How the CPUs are shared**: at each moment the pieces of work running
//! share the CPUs max-min fairly: each gets what it asks for where that
//! fits, and those asking more share the rest equally (as the kernel's
//! fair scheduler shares a CPU between runnable threads). A piece of work
//! given less CPU than it asks for runs slower in proportion.

/// A piece of work: how long it takes when it has every CPU it asks for,
/// and the CPU its process uses in that time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Work {
    /// Its time alone, ns.
    pub wall_ns: f64,
    /// The CPU its process uses meanwhile, ns (more than `wall_ns` where
    /// several threads work).
    pub cpu_ns: f64,
}

/// The most CPUs one piece of work is taken to ask for at once (a
/// process's thread pools).
const MAX_DEMAND: f64 = 64.0;

impl Work {
    /// Work of `wall_ns` using `cpu_ns`.
    pub fn new(wall_ns: f64, cpu_ns: f64) -> Work {
        Work {
            wall_ns: wall_ns.max(0.0),
            cpu_ns: cpu_ns.max(0.0),
        }
    }

    /// The CPUs it asks for while it runs.
    fn demand(self) -> f64 {
        if self.wall_ns <= 0.0 {
            0.0
        } else {
            (self.cpu_ns / self.wall_ns).clamp(0.0, MAX_DEMAND)
        }
    }

    /// This work less `part` (an op taken out), never below nothing.
    pub(crate) fn less(self, part: Work) -> Work {
        Work::new(self.wall_ns - part.wall_ns, self.cpu_ns - part.cpu_ns)
    }

    /// The sum of two pieces of work.
    pub(crate) fn plus(self, other: Work) -> Work {
        Work::new(self.wall_ns + other.wall_ns, self.cpu_ns + other.cpu_ns)
    }

    /// This work scaled by `k`.
    pub(crate) fn scaled(self, k: f64) -> Work {
        Work::new(self.wall_ns * k, self.cpu_ns * k)
    }
}

/// One batch as the traced run prepared it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// The whole batch (fetching its samples and collating them).
    pub work: Work,
    /// The ops run for it, by index into [`Inputs::ops`]: each op's
    /// outermost spans in the batch, summed.
    pub ops: Vec<(usize, Work)>,
    /// Its garbage collections (the tracer's `gc` spans).
    pub gc: Work,
    /// Its process's CPU in the kernel (page faults, system calls), where
    /// the trace says: what a worker pays for memory that is fresh to it
    /// (each batch collated into new shared memory, a forked heap) and a
    /// warm main process loading its batches itself mostly does not.
    pub kernel: Work,
    /// The main process's training step after taking it (up to its next
    /// request).
    pub step: Work,
}

/// One epoch (one `iter(loader)`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Epoch {
    /// Its batches, in the order the main process took them.
    pub batches: Vec<Batch>,
    /// The main process before the epoch: from the end of the previous
    /// epoch (its workers stopped) to this epoch's `iter(loader)`.
    pub before: Work,
}

/// What the model knows of a traced run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// The epochs, in order.
    pub epochs: Vec<Epoch>,
    /// The op names [`Batch::ops`] points into.
    pub ops: Vec<String>,
    /// Per op, whether its spans hold other ops' (a dataset's
    /// `__getitem__` around its transforms): taking it out takes them out
    /// too.
    pub holds_ops: Vec<bool>,
    /// The main process starting `workers` workers (`iter(loader)`), as
    /// traced (`None` where no worker was started).
    pub start: Option<Work>,
    /// The main process stopping them.
    pub stop: Option<Work>,
    /// Each worker's start-up, as traced (empty without workers): from
    /// the start of `iter(loader)` to the start of its first batch, and
    /// what its first batch cost past the median batch (what a fresh
    /// process pays once: lazy imports, caches, the first collections of
    /// the heap it inherited).
    pub startup: Vec<Work>,
    /// The collections of the oldest generation in each start-up (as
    /// [`Inputs::startup`]; empty where none were seen).
    pub startup_gc: Vec<Work>,
    /// From a worker finishing a batch to the main process having taken
    /// it, where the main process waited for it, ns.
    pub handover_ns: f64,
    /// The main process taking a batch that was there already, ns.
    pub ready_ns: f64,
    /// The setting the run was traced with.
    pub traced: Setting,
    /// The CPU of the ops' helper pools over the run, where its samples
    /// say (`None` without samples): what a limit of one thread per pool
    /// changes.
    pub pools: Option<Pools>,
}

impl Inputs {
    /// The CPU of every batch the loop took, ns.
    pub(crate) fn batch_cpu_ns(&self) -> f64 {
        self.epochs
            .iter()
            .flat_map(|e| &e.batches)
            .map(|b| b.work.cpu_ns)
            .sum()
    }

    /// The ops' pools' spinning and the ops' waiting for them, as a share
    /// of the batches' CPU (`None` without samples).
    pub(crate) fn pool_spin_share(&self) -> Option<f64> {
        let p = self.pools?;
        Some((p.spin_ns + p.waiting_ns) / self.batch_cpu_ns().max(1.0))
    }
}

/// The CPU of the ops' helper pools (OpenMP, OpenBLAS, MKL, rayon...)
/// over the run, read from its samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pools {
    /// Their threads' work for the ops, ns.
    pub work_ns: f64,
    /// Their threads' spinning or waiting for work, during the ops and
    /// after, ns.
    pub spin_ns: f64,
    /// The ops' own threads' spinning while they wait for their pools
    /// (at a barrier, for a part), ns.
    pub waiting_ns: f64,
}

/// A DataLoader setting and machine, as simulated.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    /// `num_workers`.
    pub workers: u32,
    /// `prefetch_factor`.
    pub prefetch: u32,
    /// `persistent_workers`.
    pub persistent: bool,
    /// The CPUs the job has.
    pub cpus: f64,
    /// Ops whose work is taken out, by index into [`Inputs::ops`].
    pub without: Vec<usize>,
    /// Garbage collections of the oldest generation taken out
    /// (`gc.freeze()` before the workers start).
    pub no_gc: bool,
    /// Each helper pool limited to one thread (`OMP_NUM_THREADS=1`...):
    /// [`Inputs::pools`]'s work runs on the op's own thread, in turn, and
    /// its spinning stops.
    pub one_thread: bool,
}

impl Default for Setting {
    fn default() -> Setting {
        Setting {
            workers: 0,
            prefetch: 2,
            persistent: false,
            cpus: 1.0,
            without: Vec::new(),
            no_gc: false,
            one_thread: false,
        }
    }
}

/// What a simulation gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// The training loop, ns: from starting the first epoch's workers (or
    /// its first request) to the last batch taken, with the workers'
    /// stopping after it where they are not persistent.
    pub loop_ns: f64,
    /// The main process's time waiting for batches in it, ns.
    pub wait_ns: f64,
    /// The CPU time the job used in it, ns.
    pub cpu_ns: f64,
}

/// A default for a worker's start-up, where the traced run started none
/// (it loaded its batches in the main process): a forked worker, 50 ms.
const DEFAULT_STARTUP: Work = Work {
    wall_ns: 50e6,
    cpu_ns: 20e6,
};
/// A default for starting one worker (the main process's part), 10 ms.
const DEFAULT_START_PER_WORKER: Work = Work {
    wall_ns: 10e6,
    cpu_ns: 8e6,
};
/// A default for the handover of a batch where no worker handed one
/// over in the traced run, ns.
const DEFAULT_HANDOVER_NS: f64 = 1e6;

/// The events a simulation waits for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Next {
    /// The main process's current piece of work ends.
    MainDone,
    /// Worker `w`'s current piece of work ends.
    WorkerDone(usize),
    /// Batch `j` reaches the main process.
    Arrives(usize),
    /// The main process begins worker `w`.
    Begins(usize),
}

/// What the main process is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum MainAt {
    /// The gap before epoch `e`.
    Before(usize),
    /// Starting the workers of epoch `e`.
    Starting(usize),
    /// Waiting for batch `i` of the epoch (blocked).
    Waiting(usize),
    /// Taking batch `i`, which was there already.
    Taking(usize),
    /// Preparing batch `i` itself (no workers).
    Loading(usize),
    /// The step after batch `i`.
    Step(usize),
    /// Stopping the workers after epoch `e`.
    Stopping(usize),
    /// Done.
    Done,
}

/// A piece of work in progress: what is left of its time alone, and the
/// CPUs it asks for.
#[derive(Debug, Clone, Copy)]
struct Running {
    left: f64,
    demand: f64,
}

impl Running {
    fn of(w: Work) -> Running {
        Running {
            left: w.wall_ns,
            demand: w.demand(),
        }
    }
}

/// One simulation (see the module documentation).
struct Sim<'a> {
    inputs: &'a Inputs,
    setting: &'a Setting,
    now: f64,
    epoch: usize,
    main_at: MainAt,
    main: Option<Running>,
    workers: Vec<Option<Running>>,
    /// Batches sent to each worker and not yet begun, in order.
    queues: Vec<std::collections::VecDeque<usize>>,
    /// The batch each worker is preparing (None: starting up or idle).
    doing: Vec<Option<usize>>,
    /// Whether each worker has started up.
    up: Vec<bool>,
    /// When each batch of the epoch reached the main process.
    arrived: Vec<Option<f64>>,
    /// Batches on their way to the main process: (when, batch).
    in_flight: Vec<(f64, usize)>,
    /// Workers not yet begun by the main process: (when, worker).
    begins: Vec<(f64, usize)>,
    sent: usize,
    loop_start: Option<f64>,
    loop_end: f64,
    wait_ns: f64,
    wait_since: f64,
    cpu_ns: f64,
    /// [`Inputs::pools`] as shares of the batches' CPU.
    pool_shares: Option<Pools>,
    /// Scratch of [`Sim::rates`], kept between steps: allocating them at
    /// every step was a third of `trace stats`' time on a long trace
    /// (its advice simulates the run some thousand times).
    demands: Vec<(f64, usize)>,
    /// The rate of the main process (`[0]`) and of each worker (`[w + 1]`)
    /// in the step being made.
    rate: Vec<f64>,
}

/// [`Inputs::pools`] as shares of the batches' CPU, the spinning at most
/// 95% of it.
fn pool_shares(inputs: &Inputs) -> Option<Pools> {
    let p = inputs.pools?;
    let cpu = inputs.batch_cpu_ns();
    if cpu <= 0.0 {
        return None;
    }
    let spin = ((p.spin_ns + p.waiting_ns) / cpu).clamp(0.0, 0.95);
    let own = (p.waiting_ns / cpu).max(0.0).min(spin);
    Some(Pools {
        work_ns: (p.work_ns / cpu).max(0.0),
        spin_ns: spin - own,
        waiting_ns: own,
    })
}

impl<'a> Sim<'a> {
    fn batches(&self) -> &'a [Batch] {
        &self.inputs.epochs[self.epoch].batches
    }

    /// Batch `j`'s work under the setting.
    fn batch_work(&self, j: usize) -> Work {
        let b = &self.batches()[j];
        let mut w = b.work;
        for (op, part) in &b.ops {
            if self.setting.without.contains(op) {
                w = w.less(*part);
            }
        }
        if self.setting.no_gc {
            w = w.less(b.gc);
        }
        if self.setting.workers == 0 && self.inputs.traced.workers > 0 {
            w = w.less(b.kernel);
        }
        if let (true, Some(p)) = (self.setting.one_thread, self.pool_shares) {
            // The pools' shares of this batch's CPU: their work in turn on
            // the op's thread (longer, no more CPU), their spin and the
            // op's waiting for them gone.
            let cpu = b.work.cpu_ns;
            w = Work::new(
                w.wall_ns + (p.work_ns - p.waiting_ns) * cpu,
                w.cpu_ns - (p.spin_ns + p.waiting_ns) * cpu,
            );
        }
        w
    }

    fn startup(&self, k: usize) -> Work {
        let s = &self.inputs.startup;
        if s.is_empty() {
            return DEFAULT_STARTUP;
        }
        let w = s[k % s.len()];
        match self.inputs.startup_gc.get(k % s.len()) {
            Some(gc) if self.setting.no_gc => w.less(*gc),
            _ => w,
        }
    }

    /// The main process's part of starting the setting's workers.
    fn start_work(&self) -> Work {
        let traced = self.inputs.traced.workers.max(1) as f64;
        let per = self
            .inputs
            .start
            .map_or(DEFAULT_START_PER_WORKER, |s| s.scaled(1.0 / traced));
        per.scaled(self.setting.workers as f64)
    }

    fn stop_work(&self) -> Work {
        let traced = self.inputs.traced.workers.max(1) as f64;
        let per = self.inputs.stop.unwrap_or_default().scaled(1.0 / traced);
        per.scaled(self.setting.workers as f64)
    }

    fn handover(&self) -> f64 {
        if self.inputs.traced.workers == 0 {
            DEFAULT_HANDOVER_NS
        } else {
            self.inputs.handover_ns
        }
    }

    /// Sends the epoch's next batch to its worker, where there is one.
    fn send_next(&mut self) {
        let n = self.batches().len();
        if self.sent < n {
            let w = self.sent % self.workers.len();
            self.queues[w].push_back(self.sent);
            self.sent += 1;
            self.begin_worker(w);
        }
    }

    /// Starts worker `w`'s next batch where it is up and idle.
    fn begin_worker(&mut self, w: usize) {
        if !self.up[w] || self.workers[w].is_some() {
            return;
        }
        if let Some(j) = self.queues[w].pop_front() {
            self.doing[w] = Some(j);
            self.workers[w] = Some(Running::of(self.batch_work(j)));
        }
    }

    fn set_main(&mut self, at: MainAt, work: Option<Work>) {
        self.main_at = at;
        self.main = work.map(Running::of);
    }

    /// Epoch `e` begins (after its gap).
    fn begin_epoch_proper(&mut self, e: usize) {
        let n = self.inputs.epochs[e].batches.len();
        self.arrived = vec![None; n];
        self.in_flight.clear();
        self.sent = 0;
        if self.setting.workers == 0 {
            self.loop_start.get_or_insert(self.now);
            self.request(0);
            return;
        }
        let fresh = e == 0 || !self.setting.persistent;
        if fresh {
            self.loop_start.get_or_insert(self.now);
            let k = self.setting.workers as usize;
            self.workers = vec![None; k];
            self.queues = vec![Default::default(); k];
            self.doing = vec![None; k];
            self.up = vec![false; k];
            // The main process starts them one after another over its
            // start: worker w is begun w/k of the way through (its time
            // alone, as if nothing slowed it).
            let start = self.start_work();
            self.begins.clear();
            for w in 0..k {
                let at = self.now + start.wall_ns * w as f64 / k as f64;
                if w == 0 {
                    self.workers[w] = Some(Running::of(self.startup(w)));
                } else {
                    self.begins.push((at, w));
                }
            }
            self.set_main(MainAt::Starting(e), Some(start));
        } else {
            for q in &mut self.queues {
                q.clear();
            }
            self.after_start();
        }
    }

    /// The workers are started (or kept): the first batches are sent and
    /// the first requested.
    fn after_start(&mut self) {
        let first = (self.setting.prefetch.max(1) as usize) * self.workers.len();
        for _ in 0..first {
            self.send_next();
        }
        self.loop_start.get_or_insert(self.now);
        self.request(0);
    }

    /// The main process asks for batch `i` of the epoch.
    fn request(&mut self, i: usize) {
        if i >= self.batches().len() {
            self.end_epoch();
            return;
        }
        if self.setting.workers == 0 {
            let w = self.batch_work(i);
            self.wait_since = self.now;
            self.set_main(MainAt::Loading(i), Some(w));
            return;
        }
        match self.arrived[i] {
            Some(_) => {
                let w = Work::new(self.inputs.ready_ns, self.inputs.ready_ns);
                self.set_main(MainAt::Taking(i), Some(w));
            }
            None => {
                self.wait_since = self.now;
                self.set_main(MainAt::Waiting(i), None);
            }
        }
    }

    /// The main process has taken batch `i`.
    fn taken(&mut self, i: usize) {
        self.loop_end = self.now;
        if self.setting.workers > 0 {
            self.send_next();
        }
        let last_epoch = self.epoch + 1 == self.inputs.epochs.len();
        let last = i + 1 == self.batches().len();
        if last && last_epoch && (self.setting.persistent || self.setting.workers == 0) {
            // The loop ends at the last batch taken; no stop follows.
            self.set_main(MainAt::Done, None);
            return;
        }
        let step = self.batches()[i].step;
        self.set_main(MainAt::Step(i), Some(step));
    }

    fn end_epoch(&mut self) {
        if self.setting.workers > 0 && !self.setting.persistent {
            let stop = self.stop_work();
            self.set_main(MainAt::Stopping(self.epoch), Some(stop));
        } else {
            self.next_epoch();
        }
    }

    fn next_epoch(&mut self) {
        if self.epoch + 1 >= self.inputs.epochs.len() {
            self.set_main(MainAt::Done, None);
            return;
        }
        self.epoch += 1;
        let before = self.inputs.epochs[self.epoch].before;
        self.set_main(MainAt::Before(self.epoch), Some(before));
    }

    fn main_done(&mut self) {
        match self.main_at {
            MainAt::Before(e) => self.begin_epoch_proper(e),
            MainAt::Starting(_) => self.after_start(),
            MainAt::Taking(i) => self.taken(i),
            MainAt::Loading(i) => {
                self.wait_ns += self.now - self.wait_since;
                self.taken(i)
            }
            MainAt::Step(i) => self.request(i + 1),
            MainAt::Stopping(_) => {
                self.loop_end = self.now;
                for w in &mut self.workers {
                    *w = None;
                }
                self.next_epoch()
            }
            MainAt::Waiting(_) | MainAt::Done => {}
        }
    }

    fn worker_done(&mut self, w: usize) {
        self.workers[w] = None;
        match self.doing[w].take() {
            None => self.up[w] = true,
            Some(j) => {
                let at = self.now + self.handover();
                self.in_flight.push((at, j));
            }
        }
        self.begin_worker(w);
    }

    fn arrives(&mut self, j: usize) {
        self.in_flight.retain(|&(_, b)| b != j);
        self.arrived[j] = Some(self.now);
        if self.main_at == MainAt::Waiting(j) {
            self.wait_ns += self.now - self.wait_since;
            self.taken(j);
        }
    }

    /// Each running piece of work's rate (its time alone per ns), the
    /// CPUs shared max-min fairly (see the module documentation), into
    /// `self.rate`; returns the CPUs used.
    fn rates(&mut self) -> f64 {
        let demands = &mut self.demands;
        demands.clear();
        if let Some(m) = self.main {
            demands.push((m.demand, 0));
        }
        for (w, r) in self.workers.iter().enumerate() {
            if let Some(r) = r {
                demands.push((r.demand, w + 1));
            }
        }
        demands.sort_by(|a, b| a.0.total_cmp(&b.0));
        let rate = &mut self.rate;
        rate.clear();
        rate.resize(self.workers.len() + 1, 1.0);
        let mut left = self.setting.cpus.max(0.01);
        let mut n = demands.len();
        for &(d, who) in demands.iter() {
            let share = left / n as f64;
            let given = d.min(share);
            if d > 0.0 {
                rate[who] = given / d;
            }
            left -= given;
            n -= 1;
        }
        self.setting.cpus.max(0.01) - left
    }

    /// Runs to the end: the loop's time.
    fn run(mut self) -> Outcome {
        self.begin_epoch_proper(0);
        // Every step ends a piece of work or delivers a batch: bounded by
        // the work there is (a guard against a model error looping).
        let bound = 16
            * (self
                .inputs
                .epochs
                .iter()
                .map(|e| e.batches.len())
                .sum::<usize>()
                + 8)
            * (self.setting.workers as usize + 2);
        for _ in 0..bound {
            if self.main_at == MainAt::Done {
                break;
            }
            let used = self.rates();
            let (main_rate, rates) = (self.rate[0], &self.rate[1..]);
            let mut next: Option<(f64, Next)> = None;
            let mut consider = |dt: f64, what: Next| {
                if next.is_none_or(|(t, _)| dt < t) {
                    next = Some((dt, what));
                }
            };
            if let Some(m) = self.main {
                consider(m.left / main_rate.max(1e-9), Next::MainDone);
            }
            for (w, r) in self.workers.iter().enumerate() {
                if let Some(r) = r {
                    consider(r.left / rates[w].max(1e-9), Next::WorkerDone(w));
                }
            }
            for &(at, j) in &self.in_flight {
                consider((at - self.now).max(0.0), Next::Arrives(j));
            }
            for &(at, w) in &self.begins {
                consider((at - self.now).max(0.0), Next::Begins(w));
            }
            let Some((dt, what)) = next else {
                // Nothing runs and nothing comes: the main process waits
                // for a batch no worker was sent (cannot happen with a
                // consistent setting); end here.
                break;
            };
            self.now += dt;
            self.cpu_ns += dt * used;
            if let Some(m) = &mut self.main {
                m.left -= dt * main_rate;
            }
            for (w, r) in self.workers.iter_mut().enumerate() {
                if let Some(r) = r {
                    r.left -= dt * rates[w];
                }
            }
            match what {
                Next::MainDone => self.main_done(),
                Next::WorkerDone(w) => self.worker_done(w),
                Next::Arrives(j) => self.arrives(j),
                Next::Begins(w) => {
                    self.begins.retain(|&(_, x)| x != w);
                    self.workers[w] = Some(Running::of(self.startup(w)));
                }
            }
        }
        Outcome {
            loop_ns: self.loop_end - self.loop_start.unwrap_or(0.0),
            wait_ns: self.wait_ns,
            cpu_ns: self.cpu_ns,
        }
    }
}

/// The training loop's time under `setting`, from `inputs`.
pub fn simulate(inputs: &Inputs, setting: &Setting) -> Outcome {
    if inputs.epochs.is_empty() {
        return Outcome {
            loop_ns: 0.0,
            wait_ns: 0.0,
            cpu_ns: 0.0,
        };
    }
    let sim = Sim {
        inputs,
        setting,
        now: 0.0,
        epoch: 0,
        main_at: MainAt::Before(0),
        main: None,
        workers: Vec::new(),
        queues: Vec::new(),
        doing: Vec::new(),
        up: Vec::new(),
        arrived: Vec::new(),
        in_flight: Vec::new(),
        begins: Vec::new(),
        sent: 0,
        loop_start: None,
        loop_end: 0.0,
        wait_ns: 0.0,
        wait_since: 0.0,
        cpu_ns: 0.0,
        pool_shares: pool_shares(inputs),
        demands: Vec::new(),
        rate: Vec::new(),
    };
    sim.run()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` batches of `batch_ms` CPU-bound work each, steps of `step_ms`.
    fn inputs(epochs: usize, n: usize, batch_ms: f64, step_ms: f64, workers: u32) -> Inputs {
        let ms = 1e6;
        let batch = Batch {
            work: Work::new(batch_ms * ms, batch_ms * ms),
            ops: vec![(0, Work::new(batch_ms * ms / 2.0, batch_ms * ms / 2.0))],
            gc: Work::default(),
            kernel: Work::default(),
            step: Work::new(step_ms * ms, step_ms * ms),
        };
        Inputs {
            epochs: vec![
                Epoch {
                    batches: vec![batch; n],
                    before: Work::default(),
                };
                epochs
            ],
            ops: vec!["Half".into()],
            holds_ops: vec![false],
            start: Some(Work::new(workers as f64 * ms, workers as f64 * ms)),
            stop: Some(Work::new(ms, 0.0)),
            startup: vec![Work::new(20.0 * ms, 20.0 * ms); workers as usize],
            startup_gc: Vec::new(),
            handover_ns: 0.1 * ms,
            ready_ns: 0.05 * ms,
            traced: Setting {
                workers,
                prefetch: 2,
                persistent: false,
                cpus: 8.0,
                ..Setting::default()
            },
            pools: None,
        }
    }

    fn loop_ms(i: &Inputs, f: impl FnOnce(&mut Setting)) -> f64 {
        let mut s = i.traced.clone();
        f(&mut s);
        simulate(i, &s).loop_ns / 1e6
    }

    #[test]
    fn no_workers_is_every_batch_then_its_step() {
        let i = inputs(1, 10, 10.0, 2.0, 0);
        let t = loop_ms(&i, |_| {});
        // 10 batches and 9 steps (the last batch taken ends the loop).
        assert!((t - 118.0).abs() < 0.01, "{t}");
    }

    #[test]
    fn workers_bound_by_cpus_and_by_the_step() {
        let i = inputs(1, 100, 10.0, 2.0, 2);
        // Eight CPUs: four workers make a batch every 2.5 ms, faster than
        // the step: the loop is the steps'.
        let four = loop_ms(&i, |s| s.workers = 4);
        let one = loop_ms(&i, |s| s.workers = 1);
        // One worker: 10 ms a batch; four: bound by the 2 ms step and the
        // 0.5 ms to take a ready batch.
        assert!(one > 1000.0 && one > 3.5 * four, "{one} vs {four}");
        assert!(four > 100.0 * 2.0 && four < 100.0 * 2.0 + 120.0, "{four}");
        // Two CPUs: four workers and the main process share them: no
        // faster than two CPUs' worth of batches.
        let two_cpus = loop_ms(&i, |s| {
            s.workers = 4;
            s.cpus = 2.0;
        });
        assert!(two_cpus > 100.0 * 12.0 / 2.0 * 0.95, "{two_cpus}");
    }

    #[test]
    fn an_op_taken_out_and_persistent_workers_cut_the_loop() {
        let i = inputs(3, 20, 10.0, 1.0, 1);
        let base = loop_ms(&i, |_| {});
        let half = loop_ms(&i, |s| s.without = vec![0]);
        assert!(half < base * 0.6 && half > base * 0.4, "{half} vs {base}");
        let kept = loop_ms(&i, |s| s.persistent = true);
        // Two start-ups of 20 ms and two stops saved, at least.
        assert!(base - kept > 40.0, "{kept} vs {base}");
    }

    #[test]
    fn sleeping_work_asks_for_no_cpu() {
        let mut i = inputs(1, 40, 10.0, 0.0, 4);
        for b in &mut i.epochs[0].batches {
            b.work = Work::new(10e6, 0.0);
        }
        // One CPU, four workers that sleep: 10 batches each, 10 ms each,
        // after four start-ups of 20 ms of CPU that share the CPU (80 ms).
        let t = loop_ms(&i, |s| s.cpus = 1.0);
        assert!(t > 180.0 && t < 200.0, "{t}");
    }
}
