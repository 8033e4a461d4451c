//! The verdict: a few plain sentences at the head of `lotus attribute DIR`
//! and `lotus trace stats`, read from the trace, saying whether training
//! waited for data and what would help.
//!
//! **What is measured** (from the trace logs alone, with or without
//! samples; [`lotus_trace::loop_figures`]):
//!
//! - *waiting share*: per main process, the time in its `wait` spans (the
//!   DataLoader's `__next__` waiting for a batch; where it loads batches
//!   itself, `num_workers=0`, its own `batch` spans) over the time of its
//!   training loop, from its first batch request (the start of its first
//!   wait or own batch) to its last consumption; summed over main
//!   processes (ranks). The loop also holds the main process starting
//!   its workers before its first request (`iter(loader)`: the tracer's
//!   `start` span) and stopping them after its last batch taken (the last
//!   `next()`: its `stop` span); the last batch's training step comes
//!   after its consumption and is in the loop only where a `stop` follows.
//! - *starting and stopping workers*: per main process, its `start` and
//!   `stop` spans' time within the loop, summed.
//! - *workers' busy share*: the workers' `batch` spans' time over their
//!   time alive (each from its first batch's start to its last batch's
//!   end) within the loop.
//! - *heaviest op*: with samples (`lotus attribute`), the op row of most
//!   CPU (its own, not the ops inside it) and its share of all the CPU
//!   sampled; without, the op of most CPU by its spans' thread clock
//!   (`cpu=`) where every op's spans say it, else of most wall time, and
//!   its share of the ops' summed time.
//! - *threads spinning* (samples only): the CPU of the rows' top functions
//!   that spin or yield waiting for work ([`is_spin_function`]: OpenMP's
//!   `gomp_*` / `__kmp_*`, OpenBLAS's `blas_thread_server`, MKL's,
//!   `sched_yield`, `pthread_spin_*`).
//!
//! **The rules** (each [`Advice`] says which, [`Rule`]):
//!
//! - waiting ≥ [`WAIT_PCT`] and the main process loads batches itself:
//!   [`Rule::LoadInWorkers`];
//! - waiting ≥ [`WAIT_PCT`] and the workers busy ≥ [`BUSY_PCT`]: the
//!   workers are the bottleneck: [`Rule::MoreWorkers`] where fewer
//!   workers ran at once than the CPUs here less one (for the main
//!   process), and [`Rule::HeaviestOp`];
//! - waiting ≥ [`WAIT_PCT`] and the workers busy under [`BUSY_PCT`]:
//!   [`Rule::HandOver`] (the workers had time to spare: the wait is in
//!   handing batches over or starting workers);
//! - starting and stopping workers ≥ [`START_STOP_PCT`] of the loop:
//!   [`Rule::KeepWorkers`] (`persistent_workers=True` where they started
//!   more than once; lighter worker start-up where once);
//! - waiting and starting and stopping workers together under
//!   [`WAIT_PCT`]: [`Rule::NotTheBottleneck`];
//! - spinning functions ≥ [`SPIN_PCT`] of the CPU sampled:
//!   [`Rule::ThreadsSpinning`], with the environment variable that limits
//!   those threads.

use serde::Serialize;

use crate::in_pipeline::{InPipelineAttribution, RowKind};
use lotus_trace::{LoopFigures, NamedSummary};

/// Waiting for data at or above this share of the loop (percent) is worth
/// acting on.
pub const WAIT_PCT: f64 = 10.0;
/// Workers busy at or above this share of their time (percent) are the
/// bottleneck.
pub const BUSY_PCT: f64 = 90.0;
/// Starting and stopping workers at or above this share of the loop
/// (percent) is worth acting on.
pub const START_STOP_PCT: f64 = 5.0;
/// Spinning functions at or above this share of the CPU sampled (percent)
/// are said.
pub const SPIN_PCT: f64 = 5.0;

/// Which rule an [`Advice`] comes from (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Rule {
    /// Training waited and the workers were busy: add workers.
    MoreWorkers,
    /// Training waited and the workers were busy: the op to make cheaper.
    HeaviestOp,
    /// Training waited while the workers had time to spare.
    HandOver,
    /// The main process loads its batches itself (`num_workers=0`) and
    /// waited for them.
    LoadInWorkers,
    /// Starting and stopping workers took much of the loop: keep them
    /// (`persistent_workers=True`) or start them faster.
    KeepWorkers,
    /// Training hardly waited: data loading is not the bottleneck.
    NotTheBottleneck,
    /// Helper threads spent much CPU spinning or yielding.
    ThreadsSpinning,
    /// A change the model predicts to shorten the loop, with its predicted
    /// loop and interval ([`Verdict::with_predictions`]).
    Predicted,
}

/// What would help, as a sentence, and the rule it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Advice {
    /// The rule.
    pub rule: Rule,
    /// The sentence.
    pub text: String,
}

/// What a [`HeaviestOp`]'s time is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Basis {
    /// The attribution's exclusive CPU (samples, or the spans' clock).
    CpuSampled,
    /// The spans' own-thread CPU clock (`cpu=`), no samples.
    CpuSpans,
    /// The spans' durations (wall time), no samples.
    WallSpans,
}

/// The op that costs most.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HeaviestOp {
    /// Its name (its path where nested: `RandomApply/GaussianBlur`).
    pub name: String,
    /// Its time, ns: CPU, or wall time where `basis` says so.
    pub time_ns: u64,
    /// Its share (0..1): of all the CPU sampled, or (without samples) of
    /// the ops' summed time.
    pub share: f64,
    /// What `time_ns` is.
    pub basis: Basis,
}

/// Helper threads spinning or yielding while waiting for work.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Spinning {
    /// The CPU of the spinning functions among the rows' top functions, ns.
    pub cpu_ns: u64,
    /// Its share of all the CPU sampled (0..1).
    pub share: f64,
    /// The functions, most CPU first.
    pub functions: Vec<String>,
    /// The environment variables that limit those threads.
    pub env: Vec<&'static str>,
    /// The op whose pool spun most after it returned (its `pool spin`
    /// row: credit by cause), with that spin, ns.
    pub most_after: Option<(String, u64)>,
}

/// The verdict on a trace (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Verdict {
    /// The share of the training loop spent waiting for data (0..1);
    /// `None` where no main process requested a batch.
    pub waiting_share: Option<f64>,
    /// The loops' time, ns (summed over main processes).
    pub loop_ns: u64,
    /// The time waiting for data in them, ns.
    pub wait_ns: u64,
    /// The time starting and stopping workers in them, ns.
    pub start_stop_ns: u64,
    /// `start_stop_ns` over `loop_ns` (0..1); `None` where no main
    /// process requested a batch.
    pub start_stop_share: Option<f64>,
    /// Times workers were started in them.
    pub starts: u64,
    /// The workers' busy share (0..1); `None` without workers.
    pub worker_busy_share: Option<f64>,
    /// The most workers alive at once (`num_workers`).
    pub workers: u64,
    /// CPUs of the machine the verdict was made on.
    pub cpus: Option<u64>,
    /// Whether a main process loads its batches itself.
    pub loads_in_process: bool,
    /// The op that costs most.
    pub heaviest_op: Option<HeaviestOp>,
    /// Helper threads spinning, where past [`SPIN_PCT`].
    pub spinning: Option<Spinning>,
    /// What would help, most useful first.
    pub advice: Vec<Advice>,
    /// How the figures are measured, in one sentence.
    pub measured: String,
    /// Whether its ops come from the samples' Python frames (a job
    /// sampled without the tracer: `trace attach`), so that no training
    /// loop was timed.
    #[serde(skip)]
    untraced: bool,
}

/// Whether `function` spins or yields waiting for work: OpenMP runtimes'
/// (`gomp_*`, `GOMP_*`, `__kmp_*`, `kmp_*`), OpenBLAS's
/// `blas_thread_server`, MKL's `mkl_serv_*yield*`, `sched_yield`,
/// `pthread_spin_*`, and the waits of the runtimes in-pipeline
/// attribution knows ([`crate::HelperRule::Cause`]).
pub fn is_spin_function(function: &str) -> bool {
    is_spin(function, "")
}

/// [`is_spin_function`], or any function of an OpenMP runtime `module`:
/// the rule credit by cause tells a pool's waiting from its work with.
fn is_spin(function: &str, module: &str) -> bool {
    crate::in_pipeline::cause::is_wait(function, module)
}

/// The environment variable that limits the threads running `function`.
fn env_of(function: &str) -> &'static str {
    let f = function.trim_start_matches('_');
    if f.contains("blas_thread_server") || f.contains("openblas") {
        "OPENBLAS_NUM_THREADS"
    } else if f.starts_with("mkl") {
        "MKL_NUM_THREADS"
    } else {
        "OMP_NUM_THREADS"
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn secs(ns: u64) -> String {
    if ns >= 10_000_000_000 {
        format!("{:.0} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        format!("{:.0} ms", ns as f64 / 1e6)
    }
}

impl Verdict {
    /// The verdict of `loops` (the trace's main loops), with the CPU facts
    /// of `attribution` where the trace was sampled, else the op figures
    /// of `lotus trace stats` (`ops`); `cpus`: the CPUs of this machine.
    pub fn of(
        loops: &LoopFigures,
        attribution: Option<&InPipelineAttribution>,
        ops: &[NamedSummary],
        cpus: Option<u64>,
    ) -> Verdict {
        let heaviest_op = match attribution {
            Some(a) => heaviest_sampled(a),
            None => heaviest_from_spans(ops),
        };
        let spinning = attribution.and_then(spinning_of);
        let mut v = Verdict {
            waiting_share: loops.waiting_share,
            loop_ns: loops.loop_ns,
            wait_ns: loops.wait_ns,
            start_stop_ns: loops.start_stop_ns,
            start_stop_share: (loops.loop_ns > 0)
                .then(|| loops.start_stop_ns as f64 / loops.loop_ns as f64),
            starts: loops.starts,
            worker_busy_share: loops.worker_busy_share,
            workers: loops.workers_at_once,
            cpus,
            loads_in_process: loops.loads_in_process,
            heaviest_op,
            spinning,
            advice: Vec::new(),
            measured: "waiting: time in the DataLoader's __next__ over the training loop, first batch request to last batch taken, with the workers started before it and stopped after; busy: the workers' batch spans over their time alive in it".into(),
            untraced: attribution.is_some_and(|a| a.ops_from == crate::OpsFrom::Frames),
        };
        v.advice = v.rules();
        v
    }

    /// The rules of the module documentation, in order.
    fn rules(&self) -> Vec<Advice> {
        let mut out = Vec::new();
        let mut say = |rule: Rule, text: String| out.push(Advice { rule, text });
        let heaviest = self.heaviest_op.as_ref().map(|h| {
            format!(
                "{} ({} of the {})",
                h.name,
                pct(h.share),
                if h.basis == Basis::CpuSampled {
                    "CPU"
                } else {
                    "ops' time"
                }
            )
        });
        let cpus = self.cpus.map_or("the CPUs here unknown".to_string(), |c| {
            format!("{c} CPUs here")
        });
        let start_stop = self.start_stop_share.unwrap_or(0.0);
        if start_stop * 100.0 >= START_STOP_PCT {
            say(
                Rule::KeepWorkers,
                if self.starts > 1 {
                    format!(
                        "starting and stopping workers took {} of the loop ({} of {}, {} starts): persistent_workers=True would keep them from one epoch to the next",
                        pct(start_stop),
                        secs(self.start_stop_ns),
                        secs(self.loop_ns),
                        self.starts
                    )
                } else {
                    format!(
                        "starting and stopping workers took {} of the loop ({} of {}), once: a cost each run pays once, less of a longer loop; a worker started with spawn or forkserver imports the script's modules first, so fewer or lighter imports at the top of the script start it faster",
                        pct(start_stop),
                        secs(self.start_stop_ns),
                        secs(self.loop_ns)
                    )
                },
            );
        }
        if let Some(w) = self.waiting_share {
            if w * 100.0 >= WAIT_PCT {
                if self.loads_in_process {
                    say(
                        Rule::LoadInWorkers,
                        format!(
                            "load batches in worker processes: DataLoader(num_workers=N) ({cpus}); the training loop now prepares every batch itself{}",
                            heaviest
                                .as_ref()
                                .map_or(String::new(), |h| format!(", and its heaviest op is {h}"))
                        ),
                    );
                } else if self
                    .worker_busy_share
                    .is_some_and(|b| b * 100.0 >= BUSY_PCT)
                {
                    let room = self.cpus.is_none_or(|c| self.workers + 1 < c);
                    if room {
                        say(
                            Rule::MoreWorkers,
                            format!(
                                "more DataLoader workers: the workers are busy and training waits ({} now, {cpus})",
                                self.workers
                            ),
                        );
                    }
                    if let Some(h) = &heaviest {
                        say(
                            Rule::HeaviestOp,
                            format!("make the heaviest op cheaper: {h}"),
                        );
                    }
                } else if let (None, Some(h)) = (self.worker_busy_share, &heaviest) {
                    // No DataLoader worker's batches measured (a Ray Data
                    // pipeline, a loader of its own): the ops are the lever.
                    say(
                        Rule::HeaviestOp,
                        format!(
                            "make the heaviest op cheaper, or give the pipeline more CPUs: {h}"
                        ),
                    );
                } else {
                    say(
                        Rule::HandOver,
                        format!(
                            "the workers were busy only {} of their time while training waited: the wait is in starting workers or handing batches over; try persistent_workers=True or a larger prefetch_factor",
                            self.worker_busy_share.map_or("?".into(), pct)
                        ),
                    );
                }
            } else if (w + start_stop) * 100.0 < WAIT_PCT {
                say(
                    Rule::NotTheBottleneck,
                    format!(
                        "data loading is not the bottleneck: training waited {} of its loop, the most a faster pipeline could save; look at the training step",
                        pct(w)
                    ),
                );
            }
        }
        if let Some(s) = &self.spinning {
            say(
                Rule::ThreadsSpinning,
                format!(
                    "helper threads spent {} of the CPU spinning or yielding ({}){}: limit them with {}=1 (or the few they need)",
                    pct(s.share),
                    s.functions.iter().take(2).cloned().collect::<Vec<_>>().join(", "),
                    s.most_after.as_ref().map_or(String::new(), |(op, ns)| format!(
                        ", {} of it after {op} returned",
                        secs(*ns)
                    )),
                    s.env.join("=1, ")
                ),
            );
        }
        out
    }

    /// The advice about the DataLoader (the rules [`Rule::MoreWorkers`],
    /// [`Rule::HeaviestOp`], [`Rule::HandOver`], [`Rule::LoadInWorkers`]
    /// and [`Rule::KeepWorkers`]: thresholds on what was measured) made
    /// predictions instead: `predicted`, the changes a model of the run
    /// (`lotus-predict`) predicts to shorten the loop whatever the noise,
    /// best first, each a sentence with its predicted loop. Where none
    /// does and training waited, that is said. The other rules stay.
    pub fn with_predictions(&mut self, predicted: Vec<String>) {
        self.advice.retain(|a| {
            !matches!(
                a.rule,
                Rule::MoreWorkers
                    | Rule::HeaviestOp
                    | Rule::HandOver
                    | Rule::LoadInWorkers
                    | Rule::KeepWorkers
            )
        });
        let waited = self.waiting_share.is_some_and(|w| w * 100.0 >= WAIT_PCT)
            || self
                .start_stop_share
                .is_some_and(|s| s * 100.0 >= START_STOP_PCT);
        let mut lines: Vec<Advice> = predicted
            .into_iter()
            .map(|text| Advice {
                rule: Rule::Predicted,
                text,
            })
            .collect();
        if lines.is_empty() && waited {
            lines.push(Advice {
                rule: Rule::Predicted,
                text: "no DataLoader setting lotus models (workers, prefetch, persistent workers) and no op taken out is predicted to shorten the loop beyond the noise: `lotus predict DIR` shows each".into(),
            });
        }
        lines.append(&mut self.advice);
        self.advice = lines;
    }

    /// Drops the rule [`Rule::ThreadsSpinning`]: where the spinning is the
    /// ops' pools', the model predicts one thread per pool (`--threads
    /// 1`) and proposes it only where it helps.
    pub fn without_spin_rule(&mut self) {
        self.advice.retain(|a| a.rule != Rule::ThreadsSpinning);
    }

    /// The facts, one sentence each: waiting, workers, heaviest op.
    pub fn facts(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.waiting_share {
            Some(w) => {
                out.push(format!(
                    "training waited for data {} of its loop ({} of {})",
                    pct(w),
                    secs(self.wait_ns),
                    secs(self.loop_ns)
                ));
                if self.start_stop_ns > 0 {
                    out.push(format!(
                        "starting and stopping the workers took {} of it ({}, {} start{})",
                        pct(self.start_stop_share.unwrap_or(0.0)),
                        secs(self.start_stop_ns),
                        self.starts,
                        if self.starts == 1 { "" } else { "s" }
                    ));
                }
            }
            None if self.untraced => out.push(
                "the job was sampled without lotus's tracer: its training loop's waits for data were not timed (`lotus trace run --sample -- CMD` times them)".into(),
            ),
            None => out.push(
                "no training loop in the trace (no main process waited for or took a batch)".into(),
            ),
        }
        if let Some(b) = self.worker_busy_share {
            out.push(format!(
                "the {} DataLoader workers were busy {} of their time",
                self.workers,
                pct(b)
            ));
        } else if self.loads_in_process {
            out.push("the training loop loads its batches itself (num_workers=0)".into());
        }
        if let Some(h) = &self.heaviest_op {
            out.push(match h.basis {
                Basis::CpuSampled => format!(
                    "the heaviest op is {}: {} of CPU, {} of the CPU sampled",
                    h.name,
                    secs(h.time_ns),
                    pct(h.share)
                ),
                // Span figures hold the ops run inside the op (a dataset
                // op holds its transforms): said so.
                Basis::CpuSpans | Basis::WallSpans => format!(
                    "the heaviest op is {}: {} of {} with the ops run inside it, {} of the ops' summed time",
                    h.name,
                    secs(h.time_ns),
                    if h.basis == Basis::CpuSpans {
                        "CPU"
                    } else {
                        "wall time"
                    },
                    pct(h.share)
                ),
            });
        }
        out
    }
}

/// The tracer's span of a garbage collection (`gc`): the interpreter's
/// work, not an op of the pipeline, so never the heaviest op.
const GC_OP: &str = "gc";

/// The op row of most CPU of its own, and its share of all the CPU.
fn heaviest_sampled(a: &InPipelineAttribution) -> Option<HeaviestOp> {
    let r = a
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::Op && r.name != GC_OP)
        .max_by(|x, y| x.cpu_ns.cmp(&y.cpu_ns).then_with(|| y.path.cmp(&x.path)))?;
    Some(HeaviestOp {
        name: r.path.clone(),
        time_ns: r.cpu_ns,
        share: r.share,
        basis: Basis::CpuSampled,
    })
}

/// The op of most CPU by its spans' clock where every op says it, else of
/// most wall time; its share of the ops' summed figure. Span figures are
/// inclusive (the trace's op totals do not say which ops nest), so an op
/// holding others (a dataset op around its transforms) can come first.
fn heaviest_from_spans(ops: &[NamedSummary]) -> Option<HeaviestOp> {
    let ops: Vec<&NamedSummary> = ops.iter().filter(|o| o.name != GC_OP).collect();
    if ops.is_empty() {
        return None;
    }
    let all_cpu = ops.iter().all(|o| o.cpu_ns.is_some());
    let time = |o: &NamedSummary| {
        if all_cpu {
            o.cpu_ns.unwrap_or(0)
        } else {
            u64::try_from(o.summary.total_ns).unwrap_or(0)
        }
    };
    let total = ops.iter().fold(0u64, |a, o| a.saturating_add(time(o)));
    let o = ops
        .iter()
        .max_by(|x, y| time(x).cmp(&time(y)).then_with(|| y.name.cmp(&x.name)))?;
    Some(HeaviestOp {
        name: o.name.clone(),
        time_ns: time(o),
        share: if total > 0 {
            time(o) as f64 / total as f64
        } else {
            0.0
        },
        basis: if all_cpu {
            Basis::CpuSpans
        } else {
            Basis::WallSpans
        },
    })
}

/// The spinning functions among every row's top functions, where past
/// [`SPIN_PCT`] of the CPU.
fn spinning_of(a: &InPipelineAttribution) -> Option<Spinning> {
    let mut by: std::collections::BTreeMap<String, u64> = Default::default();
    // Every spinning function the attribution met (whatever `--top`
    // showed); the rows' top functions for an attribution made without.
    let all: Vec<&crate::in_pipeline::TopFunction> = if a.spinning.is_empty() {
        a.rows.iter().flat_map(|r| &r.top_functions).collect()
    } else {
        a.spinning.iter().collect()
    };
    for f in all {
        if is_spin(&f.function, &f.module) {
            // A stripped runtime's function is named by its module.
            let name = if f.function.starts_with("func@") || f.function == "[unknown]" {
                let base = f.module.rsplit('/').next().unwrap_or(&f.module);
                format!("{} in {base}", f.function)
            } else {
                f.function.clone()
            };
            *by.entry(name).or_default() += f.cpu_ns;
        }
    }
    let cpu_ns = by.values().fold(0u64, |a, v| a.saturating_add(*v));
    if a.total_cpu_ns == 0 || (cpu_ns as f64) * 100.0 < SPIN_PCT * a.total_cpu_ns as f64 {
        return None;
    }
    let mut functions: Vec<(String, u64)> = by.into_iter().collect();
    functions.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut env: Vec<&'static str> = Vec::new();
    for (f, _) in &functions {
        let e = env_of(f);
        if !env.contains(&e) {
            env.push(e);
        }
    }
    let most_after = a
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::PoolSpin && r.cpu_ns > 0)
        .max_by_key(|r| (r.cpu_ns, std::cmp::Reverse(r.path.clone())))
        .and_then(|r| Some((r.parent.clone()?, r.cpu_ns)));
    Some(Spinning {
        cpu_ns,
        share: cpu_ns as f64 / a.total_cpu_ns as f64,
        functions: functions.into_iter().map(|(f, _)| f).collect(),
        env,
        most_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::in_pipeline::{AttributedRow, CpuSource, TopFunction};

    fn loops(waiting: f64, busy: Option<f64>, workers: u64) -> LoopFigures {
        let mut f = LoopFigures::default();
        f.loop_ns = 10_000_000_000;
        f.wait_ns = (waiting * 1e10) as u64;
        f.waiting_share = Some(waiting);
        f.worker_busy_share = busy;
        f.workers_at_once = workers;
        f
    }

    fn row(name: &str, kind: RowKind, cpu_ns: u64, tops: &[(&str, u64)]) -> AttributedRow {
        AttributedRow {
            name: name.into(),
            path: name.into(),
            parent: None,
            depth: 0,
            kind,
            samples: cpu_ns / 1000,
            inclusive_samples: cpu_ns / 1000,
            pool_samples: 0,
            cpu_ns,
            inclusive_cpu_ns: cpu_ns,
            cpu_source: CpuSource::Sampled,
            uncertainty_ns: 0,
            inclusive_uncertainty_ns: 0,
            share: cpu_ns as f64 / 1000.0,
            calls: None,
            cpu_per_call_ns: None,
            wall_ns: None,
            exclusive_wall_ns: None,
            top_functions: tops
                .iter()
                .map(|&(f, c)| TopFunction {
                    function: f.into(),
                    module: "/lib.so".into(),
                    samples: c / 1000,
                    share: c as f64 / cpu_ns as f64,
                    cpu_ns: c,
                })
                .collect(),
            counters: Default::default(),
            cpi: None,
        }
    }

    /// An attribution of 1000 ns of CPU: Loader 500, Crop 300, an
    /// independent row of 200 with `spin` ns in gomp_barrier_wait_end.
    fn attribution(spin: u64) -> InPipelineAttribution {
        InPipelineAttribution {
            ops_from: crate::OpsFrom::Spans,
            frequency_hz: 1000,
            interval_ns: 1000,
            total_samples: 1,
            lost_samples: 0,
            partial: false,
            total_cpu_ns: 1000,
            rows: vec![
                row("Loader", RowKind::Op, 500, &[("decode_mcu", 400)]),
                row("Crop", RowKind::Op, 300, &[]),
                row(
                    "other threads, cause unknown (worker)",
                    RowKind::Independent,
                    200,
                    &[("gomp_barrier_wait_end", spin), ("blas_thread_server", 10)],
                ),
            ],
            unseen: Vec::new(),
            counters: Vec::new(),
            counter_totals: Default::default(),
            counters_unsupported: None,
            pool_threads: Vec::new(),
            independent_threads: Vec::new(),
            notes: Vec::new(),
            spinning: Vec::new(),
            pool_figures: [[0; 2]; 2],
        }
    }

    fn rules(v: &Verdict) -> Vec<Rule> {
        v.advice.iter().map(|a| a.rule).collect()
    }

    #[test]
    fn busy_workers_and_waiting_training_want_more_workers_and_the_heaviest_op() {
        let a = attribution(0);
        let v = Verdict::of(&loops(0.4, Some(0.95), 2), Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::MoreWorkers, Rule::HeaviestOp]);
        assert!(v.advice[0].text.contains("2 now, 8 CPUs here"), "{v:#?}");
        assert!(
            v.advice[1].text.contains("Loader (50% of the CPU)"),
            "{v:#?}"
        );
        let h = v.heaviest_op.as_ref().expect("heaviest");
        assert_eq!((h.name.as_str(), h.time_ns), ("Loader", 500));
        assert!(v.facts()[0].contains("waited for data 40% of its loop (4.0 s of 10 s)"));
        // No CPU to spare: only the op.
        let v = Verdict::of(&loops(0.4, Some(0.95), 7), Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::HeaviestOp]);
    }

    #[test]
    fn the_other_rules() {
        let a = attribution(0);
        let v = Verdict::of(&loops(0.05, Some(0.95), 2), Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::NotTheBottleneck]);
        assert!(v.advice[0]
            .text
            .starts_with("data loading is not the bottleneck"));
        let v = Verdict::of(&loops(0.3, Some(0.5), 2), Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::HandOver]);
        let mut l = loops(0.3, None, 0);
        l.loads_in_process = true;
        let v = Verdict::of(&l, Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::LoadInWorkers]);
        // No loop: facts, no advice.
        let v = Verdict::of(&LoopFigures::default(), None, &[], Some(8));
        assert!(v.advice.is_empty());
        assert!(v.facts()[0].starts_with("no training loop"));
    }

    /// Starting and stopping workers is said when it takes 5% of the loop
    /// or more, and data loading is then not "not the bottleneck".
    #[test]
    fn starting_and_stopping_workers_is_said_when_it_matters() {
        let a = attribution(0);
        // 42% starting and stopping, 3% waiting, three starts.
        let mut l = loops(0.03, Some(0.5), 2);
        l.start_stop_ns = 4_200_000_000;
        l.starts = 3;
        let v = Verdict::of(&l, Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::KeepWorkers]);
        assert!(
            v.advice[0].text.starts_with(
                "starting and stopping workers took 42% of the loop (4.2 s of 10 s, 3 starts): persistent_workers=True"
            ),
            "{v:#?}"
        );
        assert!(
            v.facts()[1].contains("starting and stopping the workers took 42% of it"),
            "{:?}",
            v.facts()
        );
        // Once (persistent): not persistent_workers, but the start-up.
        l.starts = 1;
        let v = Verdict::of(&l, Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::KeepWorkers]);
        assert!(v.advice[0].text.contains("imports"), "{v:#?}");
        // 4% starting and stopping, 3% waiting: neither worth acting on.
        l.start_stop_ns = 400_000_000;
        let v = Verdict::of(&l, Some(&a), &[], Some(8));
        assert_eq!(rules(&v), [Rule::NotTheBottleneck]);
        // 4% and 7% waiting: over 10% together, so not said to be no
        // bottleneck; neither alone is worth a rule.
        let mut l = loops(0.07, Some(0.5), 2);
        l.start_stop_ns = 400_000_000;
        let v = Verdict::of(&l, Some(&a), &[], Some(8));
        assert!(rules(&v).is_empty(), "{v:#?}");
    }

    #[test]
    fn spinning_threads_are_said_with_the_variable_that_limits_them() {
        // 40 ns of 1000 spinning: under 5%, not said.
        let v = Verdict::of(
            &loops(0.05, Some(0.5), 2),
            Some(&attribution(30)),
            &[],
            None,
        );
        assert!(v.spinning.is_none(), "{v:#?}");
        let v = Verdict::of(
            &loops(0.05, Some(0.5), 2),
            Some(&attribution(150)),
            &[],
            None,
        );
        let s = v.spinning.as_ref().expect("spinning");
        assert_eq!(s.cpu_ns, 160);
        assert_eq!(s.functions, ["gomp_barrier_wait_end", "blas_thread_server"]);
        assert_eq!(s.env, ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"]);
        assert_eq!(rules(&v), [Rule::NotTheBottleneck, Rule::ThreadsSpinning]);
        assert!(
            v.advice[1]
                .text
                .contains("OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1"),
            "{}",
            v.advice[1].text
        );
        assert!(is_spin_function("__sched_yield") && !is_spin_function("ImagingResample"));
        // A stripped OpenMP runtime's functions, by their module.
        let mut a = attribution(0);
        a.rows[2].top_functions[0].function = "func@0x1de20".into();
        a.rows[2].top_functions[0].module = "/venv/torch/lib/libgomp-a34b3233.so.1".into();
        a.rows[2].top_functions[0].cpu_ns = 150;
        let v = Verdict::of(&loops(0.05, Some(0.5), 2), Some(&a), &[], None);
        let s = v.spinning.as_ref().expect("spinning");
        assert_eq!(s.functions[0], "func@0x1de20 in libgomp-a34b3233.so.1");
        assert_eq!(s.env, ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"]);
    }
}
