//! Predictions: the traced run's loop scaled by what the model says a
//! change does to it, with an interval.
//!
//! **The point prediction** is the measured loop times the ratio of the
//! simulated loop under the change to the simulated loop as traced, both
//! on the CPUs the job could get. Those are the machine's CPUs, unless
//! the simulation of the run as traced is faster than the run was: then
//! the machine was busy with other work (or the model misses a cost), and
//! the CPUs are lowered until the simulation takes as long as the run
//! did ("effective CPUs").
//!
//! **The interval** holds three things: the spread of the batches'
//! costs (the 5th to 95th percentile of the prediction over [`RESAMPLES`]
//! resamplings of the batches, with replacement), the model's own error
//! ([`MODEL_MARGIN`], from `bench/predict.py`), and the machine's
//! business during the run (half the share of CPUs it did not give the
//! job: a rerun may find it busier or idler).

use serde::Serialize;

use crate::model::{simulate, Epoch, Inputs, Setting};
use crate::observe::Observed;
use crate::PredictError;

/// Resamplings of the batches behind each interval.
pub const RESAMPLES: usize = 60;
/// The model's own relative error, on each side of a prediction: the
/// 80th percentile of its error on the pipelines of `bench/predict.py`.
pub const MODEL_MARGIN: f64 = 0.12;
/// A run up to this much longer than the model makes of it on the
/// machine's CPUs is taken as explained (no effective CPUs, no noise).
const GAP_TOLERANCE: f64 = 0.03;
/// The most batches a resampling draws: a longer run's resamplings draw
/// fewer than it has, in proportion per epoch, and their spread is scaled
/// to the whole run's (the m-out-of-n bootstrap), so that its predictions
/// cost what a run of this many batches does (some thousand simulations)
/// however long it was. Runs up to this long are resampled whole.
pub const MAX_RESAMPLED_BATCHES: usize = 600;
/// The most workers proposed when ranking changes.
const MAX_WORKERS: u32 = 32;
/// An op is proposed for removal from this share of the batches' CPU on.
const OP_SHARE: f64 = 0.05;
/// `gc.freeze()` is proposed from this share of the batches' CPU on.
const GC_SHARE: f64 = 0.02;
/// From this share of the batches' CPU spent spinning in the ops' pools,
/// the predictions say that the model keeps it as traced.
const POOL_NOTE_SHARE: f64 = 0.10;
/// One thread per helper pool is proposed from this share of the
/// batches' CPU spent spinning on.
const SPIN_SHARE: f64 = 0.02;

/// A change to the traced run's setting.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Change {
    /// `num_workers`.
    pub workers: Option<u32>,
    /// `prefetch_factor`.
    pub prefetch: Option<u32>,
    /// `persistent_workers=True`.
    pub persistent: bool,
    /// `pin_memory=True`.
    pub pin_memory: bool,
    /// Ops that cost nothing (removed, cached, or moved off the CPU).
    pub without: Vec<String>,
    /// The CPUs of the machine.
    pub cpus: Option<f64>,
    /// `gc.freeze()` before the workers start.
    pub gc_freeze: bool,
    /// Each helper pool's threads limited to this many (only 1 is
    /// modelled: `OMP_NUM_THREADS=1`...).
    pub threads: Option<u32>,
}

impl Change {
    /// No change.
    pub fn new() -> Change {
        Change::default()
    }

    /// `num_workers=n`.
    pub fn workers(mut self, n: u32) -> Change {
        self.workers = Some(n);
        self
    }

    /// `prefetch_factor=k`.
    pub fn prefetch(mut self, k: u32) -> Change {
        self.prefetch = Some(k);
        self
    }

    /// `persistent_workers=True`.
    pub fn persistent(mut self) -> Change {
        self.persistent = true;
        self
    }

    /// `pin_memory=True`.
    pub fn pin_memory(mut self) -> Change {
        self.pin_memory = true;
        self
    }

    /// `op` costs nothing.
    pub fn without(mut self, op: impl Into<String>) -> Change {
        self.without.push(op.into());
        self
    }

    /// A machine of `n` CPUs.
    pub fn cpus(mut self, n: f64) -> Change {
        self.cpus = Some(n);
        self
    }

    /// `gc.freeze()` before the workers start.
    pub fn gc_freeze(mut self) -> Change {
        self.gc_freeze = true;
        self
    }

    /// Each helper pool limited to `n` threads (only 1 is modelled).
    pub fn threads(mut self, n: u32) -> Change {
        self.threads = Some(n);
        self
    }

    /// The change as `lotus predict`'s flags (`--workers 4
    /// --persistent-workers`), or `gc.freeze()`.
    pub fn label(&self) -> String {
        let mut out = Vec::new();
        if let Some(n) = self.workers {
            out.push(format!("--workers {n}"));
        }
        if let Some(k) = self.prefetch {
            out.push(format!("--prefetch-factor {k}"));
        }
        if self.persistent {
            out.push("--persistent-workers".into());
        }
        if self.pin_memory {
            out.push("--pin-memory".into());
        }
        for op in &self.without {
            out.push(format!("--without {op}"));
        }
        if let Some(c) = self.cpus {
            out.push(format!("--cpus {c}"));
        }
        if self.gc_freeze {
            out.push("--gc-freeze".into());
        }
        if let Some(n) = self.threads {
            out.push(format!("--threads {n}"));
        }
        if out.is_empty() {
            "as traced".into()
        } else {
            out.join(" ")
        }
    }
}

/// One change's predicted loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Scenario {
    /// The change, as `lotus predict`'s flags.
    pub change: String,
    /// The predicted training loop, s.
    pub loop_s: f64,
    /// The 90% interval's low end, s.
    pub low_s: f64,
    /// Its high end, s.
    pub high_s: f64,
    /// The measured loop less the predicted, s (positive: faster).
    pub gain_s: f64,
    /// Whether the whole interval is below the measured loop: the change
    /// helps, whatever the noise.
    pub helps: bool,
    /// The share of the loop training would wait for data.
    pub wait_share: f64,
    /// The CPUs the job would use on average.
    pub cpus_used: f64,
    /// Why, in a sentence.
    pub reason: String,
}

/// The traced run as measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Measured {
    /// The training loop (the verdict's window), s.
    pub loop_s: f64,
    /// The share of it the main process waited for data.
    pub wait_share: f64,
    /// `num_workers`.
    pub workers: u32,
    /// `prefetch_factor`.
    pub prefetch: u32,
    /// `persistent_workers`.
    pub persistent: bool,
    /// Epochs (`iter(loader)` calls) in the loop.
    pub epochs: usize,
    /// Batches taken.
    pub batches: usize,
    /// The machine's CPUs.
    pub cpus: f64,
}

/// How the model fits the traced run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Fit {
    /// The run as traced, simulated on the machine's CPUs, s.
    pub simulated_s: f64,
    /// The CPUs the job could get (see the module documentation).
    pub cpus_effective: f64,
    /// The model's own error margin ([`MODEL_MARGIN`]).
    pub margin: f64,
    /// The interval's extra width for the machine's business.
    pub noise: f64,
}

/// What the model took from the run, in ms (means over the loop).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Taken {
    /// A batch's time alone.
    pub batch_ms: f64,
    /// The CPU its worker's process used meanwhile.
    pub batch_cpu_ms: f64,
    /// The training step's time alone.
    pub step_ms: f64,
    /// Its CPU.
    pub step_cpu_ms: f64,
    /// A worker's start-up (time alone), where the run started workers.
    pub startup_ms: Option<f64>,
    /// Its CPU.
    pub startup_cpu_ms: Option<f64>,
    /// The main process starting the workers, each time.
    pub start_ms: Option<f64>,
    /// The main process stopping them, each time.
    pub stop_ms: Option<f64>,
    /// A batch's handover to the main process.
    pub handover_ms: f64,
    /// The main process between epochs (all of it).
    pub between_epochs_ms: f64,
}

impl Taken {
    fn of(i: &Inputs) -> Taken {
        let batches: Vec<&crate::model::Batch> = i.epochs.iter().flat_map(|e| &e.batches).collect();
        let n = batches.len().max(1) as f64;
        let mean = |f: &dyn Fn(&crate::model::Batch) -> f64| {
            batches.iter().map(|b| f(b)).sum::<f64>() / n / 1e6
        };
        let su = i.startup.len().max(1) as f64;
        Taken {
            batch_ms: mean(&|b| b.work.wall_ns),
            batch_cpu_ms: mean(&|b| b.work.cpu_ns),
            step_ms: mean(&|b| b.step.wall_ns),
            step_cpu_ms: mean(&|b| b.step.cpu_ns),
            startup_ms: (!i.startup.is_empty())
                .then(|| i.startup.iter().map(|w| w.wall_ns).sum::<f64>() / su / 1e6),
            startup_cpu_ms: (!i.startup.is_empty())
                .then(|| i.startup.iter().map(|w| w.cpu_ns).sum::<f64>() / su / 1e6),
            start_ms: i.start.map(|w| w.wall_ns / 1e6),
            stop_ms: i.stop.map(|w| w.wall_ns / 1e6),
            handover_ms: i.handover_ns / 1e6,
            between_epochs_ms: i.epochs.iter().map(|e| e.before.wall_ns).sum::<f64>() / 1e6,
        }
    }
}

/// `lotus predict`'s answer (`lotus.predict/1`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Prediction {
    /// `lotus.predict/1`.
    pub schema: &'static str,
    /// The run as traced.
    pub measured: Measured,
    /// How the model fits it.
    pub model: Fit,
    /// What the model took from the run.
    pub taken: Taken,
    /// The changes, as asked, or ranked (fastest first).
    pub scenarios: Vec<Scenario>,
    /// What the model assumed or left out.
    pub notes: Vec<String>,
}

/// The schema name of [`Prediction`].
pub const SCHEMA: &str = "lotus.predict/1";

/// The setting `change` makes of the traced one; errors name an unknown
/// op.
fn setting_of(obs: &Observed, change: &Change, cpus: f64) -> Result<Setting, PredictError> {
    let inputs = &obs.inputs;
    let mut s = inputs.traced.clone();
    s.cpus = cpus;
    if let Some(n) = change.workers {
        if n > 1024 {
            return Err(PredictError::BadChange(format!(
                "--workers {n}: more than 1024 workers is not a DataLoader setting lotus models"
            )));
        }
        s.workers = n;
    }
    if let Some(k) = change.prefetch {
        if k == 0 {
            return Err(PredictError::BadChange(
                "--prefetch-factor 0: the DataLoader needs at least 1".into(),
            ));
        }
        s.prefetch = k;
    }
    if change.persistent {
        s.persistent = true;
    }
    if let Some(c) = change.cpus {
        if !(c > 0.0 && c.is_finite()) {
            return Err(PredictError::BadChange(format!(
                "--cpus {c}: give a positive number of CPUs"
            )));
        }
        s.cpus = c * cpus / inputs.traced.cpus.max(0.01);
    }
    if change.gc_freeze {
        s.no_gc = true;
    }
    match change.threads {
        None => {}
        Some(1) if inputs.pools.is_some() => s.one_thread = true,
        Some(1) => {
            return Err(PredictError::BadChange(
                "--threads 1: what the helper pools did is read from the run's samples, and this trace has none: trace the job with `lotus trace run --sample`".into(),
            ))
        }
        Some(n) => {
            return Err(PredictError::BadChange(format!(
                "--threads {n}: only --threads 1 (one thread per helper pool) is modelled: how a pool's work scales with its threads is not in the trace"
            )))
        }
    }
    for op in &change.without {
        let found: Vec<usize> = inputs
            .ops
            .iter()
            .enumerate()
            .filter(|(_, n)| names_op(op, n))
            .map(|(i, _)| i)
            .collect();
        if found.is_empty() {
            let mut known: Vec<&str> = op_costs(obs).into_iter().map(|(n, _)| n).collect();
            known.truncate(12);
            return Err(PredictError::UnknownOp {
                op: op.clone(),
                known: known.join(", "),
            });
        }
        s.without.extend(found);
    }
    Ok(s)
}

/// Whether `--without asked` names the op `name` of the trace: the same
/// name, or a path whose last part it is (`Compose/Crop` names `Crop`).
/// The one rule for every use of `--without`'s op.
fn names_op(asked: &str, name: &str) -> bool {
    asked == name || asked.rsplit('/').next() == Some(name)
}

/// Each op's CPU in the batches the loop took, most first.
fn op_costs(obs: &Observed) -> Vec<(&str, f64)> {
    let mut cost = vec![0.0; obs.inputs.ops.len()];
    for e in &obs.inputs.epochs {
        for b in &e.batches {
            for &(op, w) in &b.ops {
                cost[op] += w.cpu_ns;
            }
        }
    }
    let mut out: Vec<(&str, f64)> = obs
        .inputs
        .ops
        .iter()
        .map(String::as_str)
        .zip(cost)
        .filter(|(n, c)| *c > 0.0 && *n != "gc")
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    out
}

/// The CPU of the collections the run recorded: in its batches and in
/// its workers' start-ups, ns.
fn gc_cpu(inputs: &Inputs) -> f64 {
    let batches: f64 = inputs
        .epochs
        .iter()
        .flat_map(|e| &e.batches)
        .map(|b| b.gc.cpu_ns)
        .sum();
    batches + inputs.startup_gc.iter().map(|w| w.cpu_ns).sum::<f64>()
}

/// A resampling of the batches within each epoch (and of the workers'
/// start-ups), with replacement: `counts[e]` batches drawn for epoch `e`
/// (its own count for a resampling of the whole run).
fn resample(inputs: &Inputs, rng: &mut fastrand::Rng, counts: &[usize]) -> Inputs {
    // Every batch is drawn: the run's own are not copied first (a long
    // run's thousands of batches, for each of the resamplings). Written
    // out field by field, so that a new field of `Inputs` is a compile
    // error here rather than one left at its default.
    let Inputs {
        epochs,
        ops,
        holds_ops,
        start,
        stop,
        startup,
        startup_gc,
        handover_ns,
        ready_ns,
        traced,
        pools,
    } = inputs;
    let mut out = Inputs {
        epochs: epochs
            .iter()
            .zip(counts)
            .map(|(e, &n)| Epoch {
                batches: Vec::with_capacity(n),
                before: e.before,
            })
            .collect(),
        ops: ops.clone(),
        holds_ops: holds_ops.clone(),
        start: *start,
        stop: *stop,
        startup: startup.clone(),
        startup_gc: startup_gc.clone(),
        handover_ns: *handover_ns,
        ready_ns: *ready_ns,
        traced: traced.clone(),
        pools: *pools,
    };
    draw(inputs, rng, counts, |slot| match slot {
        Draw::Batch { epoch, batch, from } => {
            let to = &mut out.epochs[epoch].batches;
            // The draws fill each epoch's slots in order.
            debug_assert_eq!(to.len(), batch);
            to.push(inputs.epochs[epoch].batches[from].clone());
        }
        Draw::Startup { worker, from } => {
            out.startup[worker] = inputs.startup[from];
            if let (Some(to), Some(f)) =
                (out.startup_gc.get_mut(worker), inputs.startup_gc.get(from))
            {
                *to = *f;
            }
        }
    });
    out
}

/// One draw of a resampling: the batch or start-up put in a slot.
enum Draw {
    /// Batch `batch` of epoch `epoch` is that epoch's batch `from`.
    Batch {
        epoch: usize,
        batch: usize,
        from: usize,
    },
    /// Worker `worker`'s start-up is worker `from`'s.
    Startup { worker: usize, from: usize },
}

/// The draws of one resampling of `inputs`, in the order they are made
/// from `rng`: the one place that order is written, so that
/// [`resample`] and the generator's advance in [`resampled_ratios`]
/// (which builds nothing) take the same draws.
fn draw(inputs: &Inputs, rng: &mut fastrand::Rng, counts: &[usize], mut each: impl FnMut(Draw)) {
    for (epoch, (src, &n)) in inputs.epochs.iter().zip(counts).enumerate() {
        for batch in 0..n {
            let from = rng.usize(..src.batches.len());
            each(Draw::Batch { epoch, batch, from });
        }
    }
    for worker in 0..inputs.startup.len() {
        let from = rng.usize(..inputs.startup.len());
        each(Draw::Startup { worker, from });
    }
}

/// `f` of each of `items`, in their order, on up to one thread per CPU
/// (at most 8), each taking the next item: the model's simulations are
/// independent of each other, and a long trace's take tens of ms each.
/// An item whose thread panicked (a model error) is made again here, so
/// that the panic reaches the caller as it would without threads.
/// Written here rather than with a crate: the scoped threads of `std`
/// and one atomic counter are all it needs.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, 8)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let f = &f;
    let done: Vec<Vec<(usize, R)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return mine;
                        };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut by_item: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    for (i, r) in done.into_iter().flatten() {
        by_item[i] = Some(r);
    }
    by_item
        .into_iter()
        .zip(items)
        .map(|(r, item)| r.unwrap_or_else(|| f(item)))
        .collect()
}

/// Each of `settings`' loop over the loop as `traced`, on each of
/// [`RESAMPLES`] resamplings of the batches: `ratios[k][i]` for setting
/// `k` on resampling `i`.
///
/// The resamplings are drawn in turn from one seeded generator, so the
/// figures are the same on every run and machine; their simulations (all
/// but a few of the whole prediction's, some thousand on a long trace)
/// run on up to one thread per CPU, each taking the next resampling,
/// which it draws again from the generator's state kept for it.
fn resampled_ratios(
    inputs: &Inputs,
    traced: &Setting,
    settings: &[Setting],
    most: usize,
) -> Vec<Vec<f64>> {
    let counts = resampled_counts(inputs, most);
    let mut rng = fastrand::Rng::with_seed(0x006c_6f74_7573);
    // The generator's state at the start of each resampling: drawing one
    // resampling advances it by as many draws as the next one needs.
    let starts: Vec<fastrand::Rng> = (0..RESAMPLES)
        .map(|_| {
            let start = rng.clone();
            draw(inputs, &mut rng, &counts, |_| ());
            start
        })
        .collect();
    let one = |i: &usize| -> Vec<f64> {
        let r = resample(inputs, &mut starts[*i].clone(), &counts);
        let b = simulate(&r, traced).loop_ns.max(1.0);
        settings
            .iter()
            .map(|s| simulate(&r, s).loop_ns / b)
            .collect()
    };
    let indices: Vec<usize> = (0..RESAMPLES).collect();
    let mut ratios: Vec<Vec<f64>> = vec![Vec::with_capacity(RESAMPLES); settings.len()];
    for r in parallel_map(&indices, one) {
        for (k, v) in r.into_iter().enumerate() {
            ratios[k].push(v);
        }
    }
    ratios
}

/// The batches each resampling draws per epoch: each epoch's own count,
/// up to `most` ([`MAX_RESAMPLED_BATCHES`]) in all; past it, each epoch's
/// count cut in proportion (at least one), so that a long trace's
/// intervals cost what a short one's do ([`spread_scale`] scales their
/// spread back to the whole run's).
fn resampled_counts(inputs: &Inputs, most: usize) -> Vec<usize> {
    let total: usize = inputs.epochs.iter().map(|e| e.batches.len()).sum();
    inputs
        .epochs
        .iter()
        .map(|e| {
            let n = e.batches.len();
            if total <= most {
                n
            } else {
                (n * most).div_ceil(total).clamp(1.min(n), n)
            }
        })
        .collect()
}

/// How much a resampled ratio's distance from the resamplings' median is
/// scaled to stand for the whole run's: 1 where the resamplings drew every
/// batch; √(drawn / all) where they drew fewer (the spread of a sum's
/// share of `m` draws against `n` shrinks as √(m/n): the m-out-of-n
/// bootstrap).
fn spread_scale(inputs: &Inputs, most: usize) -> Option<f64> {
    let total: usize = inputs.epochs.iter().map(|e| e.batches.len()).sum();
    let drawn: usize = resampled_counts(inputs, most).iter().sum();
    (drawn < total).then(|| (drawn as f64 / total as f64).sqrt())
}

/// The resamplings' ratios around `ratio` (the whole run's): where they
/// drew fewer batches than the run has, each one's distance from their
/// median, scaled by [`spread_scale`]; else as they are.
fn centred(mut rs: Vec<f64>, ratio: f64, scale: Option<f64>) -> Vec<f64> {
    if let Some(k) = scale {
        let mid = quantile(&mut rs, 0.5);
        for r in &mut rs {
            *r = ratio + (*r - mid) * k;
        }
    }
    rs
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

/// The CPUs the job could get: the machine's, lowered until the run as
/// traced takes as long simulated as it did (see the module
/// documentation).
fn effective_cpus(inputs: &Inputs, measured_ns: f64, simulated_ns: f64) -> f64 {
    let cpus = inputs.traced.cpus;
    let at = |c: f64| {
        let mut s = inputs.traced.clone();
        s.cpus = c;
        simulate(inputs, &s).loop_ns
    };
    // Within GAP_TOLERANCE the run is what its demand explains.
    if simulated_ns * (1.0 + GAP_TOLERANCE) >= measured_ns {
        return cpus;
    }
    let (mut lo, mut hi) = (cpus / 64.0, cpus);
    if at(lo) < measured_ns {
        return lo;
    }
    for _ in 0..30 {
        let mid = (lo + hi) / 2.0;
        if at(mid) > measured_ns {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// Predicts each of `changes` from the traced run `obs`.
pub fn predict(obs: &Observed, changes: &[Change]) -> Result<Prediction, PredictError> {
    predict_with(obs, changes, Intervals::All)
}

/// Which changes' intervals [`predict_with`] draws from resamplings.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Intervals {
    /// Every change's.
    All,
    /// Only those of the changes that could help: whose point prediction,
    /// widened by the margin, is under the loop as measured (a change's
    /// interval holds its point prediction, so no other can help), and
    /// that are not a machine's (`--cpus`, never advised). The others get
    /// their point prediction as their interval: for advice only.
    WhereAdviceNeeds,
}

/// [`predict`], each change's interval drawn as `intervals` says.
fn predict_with(
    obs: &Observed,
    changes: &[Change],
    intervals: Intervals,
) -> Result<Prediction, PredictError> {
    let inputs = &obs.inputs;
    let machine = inputs.traced.cpus;
    let measured = obs.loop_ns;
    let mut traced = inputs.traced.clone();
    let as_traced = simulate(inputs, &traced);
    let simulated = as_traced.loop_ns;
    let eff = effective_cpus(inputs, measured, simulated);
    // The run as traced, on the effective CPUs: simulated already where
    // they are the machine's.
    let base = if eff == traced.cpus {
        as_traced
    } else {
        traced.cpus = eff;
        simulate(inputs, &traced)
    };
    // The share of the run its own demand does not explain, halved: a
    // rerun may find the machine busier or idler by as much.
    let gap = measured / simulated.max(1.0) - 1.0;
    let noise = if gap > GAP_TOLERANCE {
        (gap / 2.0).min(0.3)
    } else {
        0.0
    };
    let settings: Vec<Setting> = changes
        .iter()
        .map(|c| setting_of(obs, c, eff))
        .collect::<Result<_, _>>()?;
    let outs = parallel_map(&settings, |s| simulate(inputs, s));
    let ratio_of = |out: &crate::model::Outcome| out.loop_ns / base.loop_ns.max(1.0);
    // The resampled runs: each change's ratio to the run as traced (each
    // resampling is drawn alike whichever changes it simulates).
    let drawn: Vec<usize> = (0..changes.len())
        .filter(|&k| {
            intervals == Intervals::All
                || (advisable(&changes[k].label())
                    && measured * ratio_of(&outs[k]) * (1.0 + MODEL_MARGIN + noise) < measured)
        })
        .collect();
    let subset: Vec<Setting> = drawn.iter().map(|&k| settings[k].clone()).collect();
    let mut ratios: Vec<Option<Vec<f64>>> = vec![None; changes.len()];
    if !subset.is_empty() {
        let drawn_ratios = resampled_ratios(inputs, &traced, &subset, MAX_RESAMPLED_BATCHES);
        for (&k, rs) in drawn.iter().zip(drawn_ratios) {
            ratios[k] = Some(rs);
        }
    }
    let scale = spread_scale(inputs, MAX_RESAMPLED_BATCHES);
    let wait0 = obs.wait_ns / measured.max(1.0);
    let mut scenarios = Vec::new();
    for (((change, setting), rs), out) in changes.iter().zip(&settings).zip(ratios).zip(outs) {
        let ratio = ratio_of(&out);
        let mut rs = match rs {
            Some(rs) => centred(rs, ratio, scale),
            None => vec![ratio],
        };
        let loop_ns = measured * ratio;
        let lo = quantile(&mut rs, 0.05).min(ratio) * measured;
        let hi = quantile(&mut rs, 0.95).max(ratio) * measured;
        let low = lo * (1.0 - MODEL_MARGIN - noise);
        let high = hi * (1.0 + MODEL_MARGIN + noise);
        let wait_share = if out.loop_ns > 0.0 {
            out.wait_ns / out.loop_ns
        } else {
            0.0
        };
        let cpus_used = if out.loop_ns > 0.0 {
            out.cpu_ns / out.loop_ns
        } else {
            0.0
        };
        scenarios.push(Scenario {
            change: change.label(),
            loop_s: loop_ns / 1e9,
            low_s: low.max(0.0) / 1e9,
            high_s: high / 1e9,
            gain_s: (measured - loop_ns) / 1e9,
            helps: high < measured,
            wait_share,
            cpus_used,
            reason: reason(obs, change, setting, wait0, wait_share, cpus_used),
        });
    }
    let mut notes = obs.notes.clone();
    let spun = inputs.pool_spin_share().unwrap_or(0.0);
    if spun >= POOL_NOTE_SHARE {
        notes.push(format!(
            "the ops' helper pools spun or waited {} of the batches' CPU: every change but --threads 1 keeps that share as traced, which holds only where the pools' threads do not outnumber the CPUs; where they do, predict from a run with one thread per pool (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1...)",
            pct(spun)
        ));
    }
    if noise > 0.05 {
        notes.push(format!(
            "the run took {:.0}% longer than its own demand for {machine} CPUs explains: as if it had {eff:.1} of them (other work on the machine, or a cost the model misses); intervals are {:.0}% wider on each side for it",
            gap * 100.0,
            noise * 100.0
        ));
    }
    Ok(Prediction {
        schema: SCHEMA,
        measured: Measured {
            loop_s: measured / 1e9,
            wait_share: wait0,
            workers: inputs.traced.workers,
            prefetch: inputs.traced.prefetch,
            persistent: inputs.traced.persistent,
            epochs: inputs.epochs.len(),
            batches: obs.batches,
            cpus: machine,
        },
        model: Fit {
            simulated_s: simulated / 1e9,
            cpus_effective: eff,
            margin: MODEL_MARGIN,
            noise,
        },
        taken: Taken::of(inputs),
        scenarios,
        notes,
    })
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Why the change gives what it gives, in a sentence.
fn reason(
    obs: &Observed,
    change: &Change,
    s: &Setting,
    wait0: f64,
    wait: f64,
    cpus_used: f64,
) -> String {
    let inputs = &obs.inputs;
    let mut what = Vec::new();
    if let Some(n) = change.workers {
        what.push(if n == 0 {
            "the main process would prepare every batch itself".to_string()
        } else {
            format!(
                "{n} worker{} instead of {}",
                if n == 1 { "" } else { "s" },
                inputs.traced.workers
            )
        });
    }
    if change.persistent {
        let starts = inputs.epochs.len();
        what.push(if inputs.traced.persistent {
            "the workers are persistent already".to_string()
        } else if starts == 1 {
            "the workers would not be stopped in the loop (one epoch: started once anyway)"
                .to_string()
        } else {
            format!(
                "the workers would start once, not {starts} time{}, and not be stopped in the loop",
                if starts == 1 { "" } else { "s" }
            )
        });
    }
    if let Some(k) = change.prefetch {
        what.push(format!(
            "{k} batches in flight per worker instead of {}",
            inputs.traced.prefetch
        ));
    }
    if change.pin_memory {
        what.push("pin_memory only speeds up copies to an accelerator, which this trace does not show: its cost and gain are not modelled".into());
    }
    let total = inputs.batch_cpu_ns().max(1.0);
    for op in &change.without {
        let cost: f64 = inputs
            .epochs
            .iter()
            .flat_map(|e| &e.batches)
            .flat_map(|b| &b.ops)
            .filter(|(i, _)| s.without.contains(i) && names_op(op, &inputs.ops[*i]))
            .map(|(_, w)| w.cpu_ns)
            .sum();
        let held = inputs
            .ops
            .iter()
            .zip(&inputs.holds_ops)
            .any(|(n, h)| *h && names_op(op, n));
        what.push(format!(
            "{op} costs {} of the batches' CPU{}",
            pct(cost / total),
            if held {
                ", the ops it runs included"
            } else {
                ""
            }
        ));
    }
    if change.gc_freeze {
        what.push(format!(
            "the collector's passes over the heap the workers inherit took {:.0} ms of CPU ({} of the batches')",
            gc_cpu(inputs) / 1e6,
            pct(gc_cpu(inputs) / total)
        ));
    }
    if let Some(c) = change.cpus {
        what.push(format!("{c} CPUs instead of {}", inputs.traced.cpus));
    }
    if let (Some(_), Some(p), Some(spun)) = (change.threads, inputs.pools, inputs.pool_spin_share())
    {
        what.push(format!(
            "one thread per helper pool (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, MKL_NUM_THREADS=1, RAYON_NUM_THREADS=1): their spinning, {} of the batches' CPU, stops and their work, {}, runs in turn on the op's thread",
            pct(spun),
            pct(p.work_ns / total)
        ));
    }
    format!(
        "{}: training would wait {} of its loop (now {}), the job using {:.1} of {:.1} CPUs",
        what.join("; "),
        pct(wait),
        pct(wait0),
        cpus_used,
        s.cpus
    )
}

/// The changes worth trying on the traced run: other worker counts, a
/// larger prefetch, persistent workers, each op of at least 5% of the
/// batches' CPU taken out, `gc.freeze()` where collections cost 2%, one
/// thread per helper pool where their spinning costs 2%, and twice the
/// CPUs; none the run already has.
pub fn candidates(obs: &Observed) -> Vec<Change> {
    let t = &obs.inputs.traced;
    let mut out = Vec::new();
    let most = (2 * t.workers)
        .max(t.cpus.ceil() as u32 + 1)
        .clamp(2, MAX_WORKERS);
    for n in 0..=most {
        if n != t.workers {
            out.push(Change::new().workers(n));
        }
    }
    if t.workers > 0 {
        out.push(Change::new().prefetch(t.prefetch * 2));
        if !t.persistent {
            out.push(Change::new().persistent());
        }
    }
    let total = obs.inputs.batch_cpu_ns().max(1.0);
    let holds = |op: &str| {
        obs.inputs
            .ops
            .iter()
            .zip(&obs.inputs.holds_ops)
            .any(|(n, h)| n == op && *h)
    };
    for (op, cost) in op_costs(obs) {
        // An op that holds others (a dataset's item) is the data itself,
        // not a change to propose; asked for, it is predicted all the same.
        if cost / total >= OP_SHARE && !holds(op) {
            out.push(Change::new().without(op));
        }
    }
    if gc_cpu(&obs.inputs) / total >= GC_SHARE {
        out.push(Change::new().gc_freeze());
    }
    if pools_spin(obs) {
        out.push(Change::new().threads(1));
    }
    out.push(Change::new().cpus(t.cpus * 2.0));
    out
}

/// Whether one thread per pool is worth proposing: the ops' pools spun
/// [`SPIN_SHARE`] of the batches' CPU, and the run did not limit them
/// already.
fn pools_spin(obs: &Observed) -> bool {
    let i = &obs.inputs;
    !i.traced.one_thread && i.pool_spin_share().is_some_and(|s| s >= SPIN_SHARE)
}

/// The DataLoader settings `lotus tune` can apply, as changes from the
/// traced run: each worker count from 0 to twice the traced one (or the
/// CPUs and one), each with the traced prefetch and twice it, each with
/// persistent workers as traced and on; where the ops' pools spun (a
/// sampled run), each of those and the run's own setting with one thread
/// per pool too; the traced setting apart.
pub fn grid(obs: &Observed) -> Vec<Change> {
    let t = &obs.inputs.traced;
    let most = (2 * t.workers)
        .max(t.cpus.ceil() as u32 + 1)
        .clamp(2, MAX_WORKERS);
    let mut out = Vec::new();
    for n in 0..=most {
        for k in [t.prefetch, t.prefetch * 2] {
            for p in [t.persistent, true] {
                if n == 0 && (k != t.prefetch || (p && !t.persistent)) {
                    // No workers: nothing to prefetch or keep.
                    continue;
                }
                if n == t.workers && k == t.prefetch && p == t.persistent {
                    continue;
                }
                let mut c = Change::new().workers(n);
                if k != t.prefetch {
                    c = c.prefetch(k);
                }
                if p && !t.persistent {
                    c = c.persistent();
                }
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
    }
    if pools_spin(obs) {
        let limited: Vec<Change> = out.iter().map(|c| c.clone().threads(1)).collect();
        out.push(Change::new().threads(1));
        out.extend(limited);
    }
    out
}

/// Every candidate change predicted, fastest first.
pub fn ranked(obs: &Observed) -> Result<Prediction, PredictError> {
    let mut p = predict(obs, &candidates(obs))?;
    fastest_first(&mut p);
    Ok(p)
}

/// Sorts `p`'s scenarios by their predicted loop, then by name.
fn fastest_first(p: &mut Prediction) {
    p.scenarios.sort_by(|a, b| {
        a.loop_s
            .total_cmp(&b.loop_s)
            .then_with(|| a.change.cmp(&b.change))
    });
}

/// [`advice`] of [`ranked`] (the same sentences), where only the changes
/// that could help have their intervals drawn: what the verdict needs,
/// without some thousand simulations where no change can help.
pub fn ranked_advice(obs: &Observed, n: usize) -> Result<Vec<String>, PredictError> {
    let mut p = predict_with(obs, &candidates(obs), Intervals::WhereAdviceNeeds)?;
    fastest_first(&mut p);
    Ok(advice(&p, n))
}

/// Whether the change labelled `label` is one the advice may propose: a
/// machine's (`--cpus`) is never (the job cannot choose its machine).
fn advisable(label: &str) -> bool {
    !label.starts_with("--cpus")
}

/// The advice of a ranked prediction: the changes that help whatever the
/// noise (a machine change apart), best first, at most `n`, one sentence
/// each with the predicted loop and interval.
pub fn advice(p: &Prediction, n: usize) -> Vec<String> {
    p.scenarios
        .iter()
        .filter(|s| s.helps && advisable(&s.change))
        .take(n)
        .map(|s| {
            format!(
                "{}: the loop {:.1} s -> {:.1} s ({:.1}-{:.1} s, {:+.0}%); {}",
                s.change,
                p.measured.loop_s,
                s.loop_s,
                s.low_s,
                s.high_s,
                (s.loop_s / p.measured.loop_s.max(1e-9) - 1.0) * 100.0,
                s.reason
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Batch, Epoch, Work};

    /// A long run's intervals from resamplings of 600 of its 3,000
    /// batches, their spread scaled by √(600/3000), are about as wide as
    /// from resamplings of all of them (unscaled they would be 2.2 times
    /// wider); the point predictions come from the whole run either way.
    #[test]
    fn a_long_runs_interval_from_fewer_draws_is_about_the_whole_runs() {
        let ms = 1e6;
        let mut rng = fastrand::Rng::with_seed(7);
        let mut epoch = || Epoch {
            batches: (0..1000)
                .map(|_| {
                    let w = (5.0 + 40.0 * rng.f64() * rng.f64()) * ms;
                    Batch {
                        work: Work::new(w, w),
                        ops: Vec::new(),
                        gc: Work::default(),
                        kernel: Work::default(),
                        step: Work::new(6.0 * ms, 6.0 * ms),
                    }
                })
                .collect(),
            before: Work::default(),
        };
        let inputs = Inputs {
            epochs: vec![epoch(), epoch(), epoch()],
            startup: vec![Work::new(30.0 * ms, 30.0 * ms); 2],
            traced: Setting {
                workers: 2,
                prefetch: 2,
                cpus: 4.0,
                ..Setting::default()
            },
            ..Inputs::default()
        };
        let settings: Vec<Setting> = [1, 4]
            .map(|w| Setting {
                workers: w,
                ..inputs.traced.clone()
            })
            .to_vec();
        let base = simulate(&inputs, &inputs.traced).loop_ns;
        let width = |most: usize| -> Vec<f64> {
            let ratios = resampled_ratios(&inputs, &inputs.traced, &settings, most);
            let scale = spread_scale(&inputs, most);
            ratios
                .into_iter()
                .zip(&settings)
                .map(|(rs, s)| {
                    let mut rs = centred(rs, simulate(&inputs, s).loop_ns / base, scale);
                    quantile(&mut rs, 0.95) - quantile(&mut rs, 0.05)
                })
                .collect()
        };
        assert_eq!(spread_scale(&inputs, usize::MAX), None);
        assert_eq!(resampled_counts(&inputs, 600), vec![200, 200, 200]);
        let (whole, few) = (width(usize::MAX), width(600));
        for (k, (w, f)) in whole.iter().zip(&few).enumerate() {
            assert!(*w > 0.0, "setting {k}: no spread");
            assert!(
                (0.6..=1.6).contains(&(f / w)),
                "setting {k}: {f} from 600 draws against {w} from all 3,000"
            );
        }
    }

    /// A run of `epochs` epochs of 40 CPU-bound batches of 20 ms (half of
    /// each in op `Crop`), steps of 5 ms, two workers on two CPUs; its
    /// loop measured as `slower` times what the model makes of it.
    fn observed(epochs: usize, slower: f64) -> Observed {
        let ms = 1e6;
        let batch = Batch {
            work: Work::new(20.0 * ms, 20.0 * ms),
            ops: vec![(0, Work::new(10.0 * ms, 10.0 * ms))],
            gc: Work::new(2.0 * ms, 2.0 * ms),
            kernel: Work::default(),
            step: Work::new(5.0 * ms, 5.0 * ms),
        };
        let inputs = Inputs {
            epochs: vec![
                Epoch {
                    batches: vec![batch; 40],
                    before: Work::default(),
                };
                epochs
            ],
            ops: vec!["Crop".into()],
            holds_ops: vec![false],
            start: Some(Work::new(4.0 * ms, 4.0 * ms)),
            stop: Some(Work::new(2.0 * ms, 0.0)),
            startup: vec![Work::new(30.0 * ms, 30.0 * ms); 2],
            startup_gc: Vec::new(),
            handover_ns: 0.2 * ms,
            ready_ns: 0.05 * ms,
            traced: Setting {
                workers: 2,
                prefetch: 2,
                persistent: false,
                cpus: 2.0,
                ..Setting::default()
            },
            pools: None,
        };
        let loop_ns = simulate(&inputs, &inputs.traced).loop_ns * slower;
        Observed {
            inputs,
            loop_ns,
            batches: 40 * epochs,
            ..Observed::default()
        }
    }

    /// The verdict's advice, with intervals drawn only for the changes
    /// that could help, is the advice of every change's prediction: on a
    /// run where more workers help (two workers, CPU-bound, on four CPUs)
    /// and on one where nothing can (its training step ten times a
    /// batch's work: training never waits).
    #[test]
    fn advice_from_the_intervals_that_could_help_is_the_whole_predictions() {
        let mut helped = observed(2, 1.0);
        helped.inputs.traced.cpus = 4.0;
        helped.loop_ns = simulate(&helped.inputs, &helped.inputs.traced).loop_ns;
        let mut stuck = observed(2, 1.0);
        for b in stuck.inputs.epochs.iter_mut().flat_map(|e| &mut e.batches) {
            b.step = Work::new(200.0 * 1e6, 200.0 * 1e6);
        }
        stuck.loop_ns = simulate(&stuck.inputs, &stuck.inputs.traced).loop_ns;
        for (name, obs, helps) in [("helped", &helped, true), ("stuck", &stuck, false)] {
            let whole = advice(&ranked(obs).unwrap(), 3);
            assert_eq!(!whole.is_empty(), helps, "{name}: {whole:?}");
            assert_eq!(ranked_advice(obs, 3).unwrap(), whole, "{name}");
        }
    }

    #[test]
    fn the_run_as_traced_predicts_itself_and_a_busy_machine_widens_intervals() {
        let quiet = observed(2, 1.0);
        let p = predict(&quiet, &[Change::new().workers(2)]).unwrap();
        let s = &p.scenarios[0];
        assert!((s.loop_s / p.measured.loop_s - 1.0).abs() < 1e-6, "{s:?}");
        assert!(
            s.low_s < s.loop_s && s.loop_s < s.high_s && !s.helps,
            "{s:?}"
        );
        assert_eq!(p.model.cpus_effective, 2.0);
        let busy = observed(2, 1.6);
        let b = predict(&busy, &[Change::new().workers(2)]).unwrap();
        assert!(b.model.cpus_effective < 1.6, "{:?}", b.model);
        assert!(b.model.noise > 0.05 && b.notes.iter().any(|n| n.contains("as if it had")));
        let width = |s: &Scenario| (s.high_s - s.low_s) / s.loop_s;
        assert!(width(&b.scenarios[0]) > width(s), "{b:?}");
    }

    #[test]
    fn ranked_changes_put_what_helps_first_and_never_the_run_as_traced() {
        let obs = observed(3, 1.0);
        let p = ranked(&obs).unwrap();
        assert!(p.scenarios.windows(2).all(|w| w[0].loop_s <= w[1].loop_s));
        assert!(!p.scenarios.iter().any(|s| s.change == "--workers 2"));
        // Batches of 20 ms against steps of 5: no workers is slower,
        // persistent workers save two start-ups, Crop is half the work.
        let get = |c: &str| p.scenarios.iter().find(|s| s.change == c).unwrap();
        // (25 ms of CPU a batch: on two CPUs 12.5 ms, alone 25.)
        assert!(get("--workers 0").loop_s > 1.6 * p.measured.loop_s);
        assert!(get("--without Crop").helps && get("--persistent-workers").gain_s > 0.0);
        assert!(get("--gc-freeze").gain_s > 0.0);
        let advice = advice(&p, 3);
        assert!(!advice.is_empty() && advice.len() <= 3);
        assert!(advice
            .iter()
            .all(|a| !a.starts_with("--workers 0") && !a.starts_with("--cpus")));
        // The grid never holds the traced setting, and each of its
        // changes is distinct.
        let g = grid(&obs);
        assert!(!g.contains(&Change::new().workers(2)));
        assert!(g.iter().enumerate().all(|(i, c)| !g[..i].contains(c)));
    }

    /// Batches of 20 ms on the op's thread plus 20 ms on a pool (10 of
    /// work, 10 spinning): two workers ask for four CPUs. On two, one
    /// thread per pool (30 ms a batch, one CPU) is faster; on eight, the
    /// pool's parallel work was worth its spin and one thread is slower.
    #[test]
    fn one_thread_per_pool_trades_the_spin_for_the_pools_work_in_turn() {
        let ms = 1e6;
        let with_pools = |cpus: f64| {
            let mut obs = observed(1, 1.0);
            let i = &mut obs.inputs;
            i.traced.cpus = cpus;
            for b in &mut i.epochs[0].batches {
                b.work = Work::new(20.0 * ms, 40.0 * ms);
            }
            i.pools = Some(crate::model::Pools {
                work_ns: 40.0 * 10.0 * ms,
                spin_ns: 40.0 * 10.0 * ms,
                waiting_ns: 0.0,
            });
            obs.loop_ns = simulate(i, &i.traced).loop_ns;
            obs
        };
        let two = predict(&with_pools(2.0), &[Change::new().threads(1)]).unwrap();
        let s = &two.scenarios[0];
        assert!(s.loop_s < 0.85 * two.measured.loop_s, "{two:#?}");
        assert!(
            s.reason.contains("OMP_NUM_THREADS=1") && s.reason.contains("25%"),
            "{s:?}"
        );
        assert!(candidates(&with_pools(2.0)).contains(&Change::new().threads(1)));
        let eight = predict(&with_pools(8.0), &[Change::new().threads(1)]).unwrap();
        assert!(
            eight.scenarios[0].loop_s > 1.2 * eight.measured.loop_s,
            "{eight:#?}"
        );
        // Without samples, or another count: said, not guessed.
        let e = predict(&observed(1, 1.0), &[Change::new().threads(1)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--sample"), "{e}");
        let e = predict(&with_pools(2.0), &[Change::new().threads(2)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("only --threads 1"), "{e}");
        assert!(!candidates(&observed(1, 1.0))
            .iter()
            .any(|c| c.threads.is_some()));
    }

    #[test]
    fn bad_changes_are_clear_errors() {
        let obs = observed(1, 1.0);
        let e = predict(&obs, &[Change::new().without("Blur")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--without Blur") && e.contains("Crop"), "{e}");
        let e = predict(&obs, &[Change::new().prefetch(0)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("prefetch-factor 0"), "{e}");
        let e = predict(&obs, &[Change::new().cpus(-1.0)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--cpus -1"), "{e}");
        // A path's last part names the op.
        assert!(predict(&obs, &[Change::new().without("Compose/Crop")]).is_ok());
    }
}
