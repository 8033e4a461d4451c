//! The thread context each op runs in: by default the one a DataLoader
//! worker gives it (one intra-op thread for torch, one thread for OpenMP,
//! MKL and OpenBLAS), so that the mapping shows the kernels a pipeline
//! runs rather than idle pool threads spinning; and the warning for an op
//! whose samples are mostly such spinning all the same.
//!
//! Which setting wins: `--threads N` sets all of them to N. Without it,
//! when the user's environment sets any of the runtime variables, the
//! user has taken charge of threading: lotus sets none of them and leaves
//! torch to its own rule (it sizes its pool from `MKL_NUM_THREADS`, else
//! `OMP_NUM_THREADS`, so setting only the missing ones to 1 would silently
//! override the user's `OMP_NUM_THREADS`). Otherwise all are set to 1 and
//! torch gets `torch.set_num_threads(1)`.

use std::collections::BTreeMap;
use std::ffi::OsString;

use lotus_core::Report;

/// The thread-count variables of the OpenMP, MKL and OpenBLAS runtimes.
pub(crate) const THREAD_VARS: [&str; 3] =
    ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"];

/// Where one variable's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// Set by lotus (the default of one, or `--threads`).
    Lotus,
    /// Kept from the user's environment.
    Inherited,
}

/// The thread settings of every op process of a mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlan {
    /// `--threads`, when given.
    explicit: Option<u32>,
    /// Each of [`THREAD_VARS`] with its value and where it came from.
    vars: Vec<(&'static str, String, Source)>,
    /// What the harness passes to `torch.set_num_threads` (`--threads`
    /// of the harness); `None` leaves torch to `OMP_NUM_THREADS`.
    pub torch_threads: Option<u32>,
}

impl ThreadPlan {
    /// The plan for `--threads` (`explicit`) in an environment read
    /// through `lookup`.
    pub fn new(explicit: Option<u32>, lookup: impl Fn(&str) -> Option<String>) -> ThreadPlan {
        let inherited: Vec<_> = THREAD_VARS
            .iter()
            .filter_map(|&var| Some((var, lookup(var).filter(|v| !v.is_empty())?)))
            .collect();
        let (vars, torch_threads) = match explicit {
            Some(n) => (
                THREAD_VARS
                    .iter()
                    .map(|&var| (var, n.to_string(), Source::Lotus))
                    .collect(),
                Some(n),
            ),
            None if !inherited.is_empty() => (
                inherited
                    .into_iter()
                    .map(|(var, value)| (var, value, Source::Inherited))
                    .collect(),
                None,
            ),
            None => (
                THREAD_VARS
                    .iter()
                    .map(|&var| (var, "1".to_string(), Source::Lotus))
                    .collect(),
                Some(1),
            ),
        };
        ThreadPlan {
            explicit,
            vars,
            torch_threads,
        }
    }

    /// The plan for `--threads` in lotus's own environment.
    pub fn from_env(explicit: Option<u32>) -> ThreadPlan {
        ThreadPlan::new(explicit, |var| {
            std::env::var_os(var).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// The variables to add to the op process's environment (those kept
    /// from the user's environment are inherited and not repeated).
    pub(crate) fn env(&self) -> Vec<(OsString, OsString)> {
        self.vars
            .iter()
            .filter(|(_, _, src)| *src == Source::Lotus)
            .map(|(var, value, _)| ((*var).into(), value.into()))
            .collect()
    }

    /// What the mapping's `environment` records: `threads` (how many, and
    /// why), `torch_threads`, and each runtime variable with its origin.
    pub(crate) fn record(&self, env: &mut BTreeMap<String, String>) {
        let threads = match (self.explicit, self.torch_threads) {
            (Some(n), _) => format!("{n} (--threads)"),
            (None, Some(_)) => {
                "1 (default: as in a DataLoader worker; --threads N to change)".to_string()
            }
            (None, None) => "from the environment (its thread variables are kept)".to_string(),
        };
        env.insert("threads".into(), threads);
        env.insert(
            "torch_threads".into(),
            match self.torch_threads {
                Some(n) => format!("{n} (torch.set_num_threads, when the op imports torch)"),
                None => "torch's own (MKL_NUM_THREADS, else OMP_NUM_THREADS)".to_string(),
            },
        );
        for (var, value, src) in &self.vars {
            let origin = match src {
                Source::Lotus => "",
                Source::Inherited => " (from the environment)",
            };
            env.insert((*var).to_string(), format!("{value}{origin}"));
        }
    }
}

/// Share of a report's samples above which an op is said to mostly spin.
pub(crate) const SPIN_WARN_SHARE: f64 = 0.30;

/// Whether a module is an OpenMP runtime (GNU's, Intel's, LLVM's; torch
/// bundles GNU's as `libgomp-<hash>.so.1`).
fn is_openmp_module(module: &str) -> bool {
    ["libgomp", "libiomp", "libomp"]
        .iter()
        .any(|prefix| module.starts_with(prefix))
}

/// Whether a function is a thread pool's yield or wait: `sched_yield` and
/// the kernel's futex paths, where waiting pool threads go.
fn is_wait_function(function: &str) -> bool {
    let name = function.trim_start_matches('_');
    name.starts_with("sched_yield")
        || name.starts_with("do_sched_yield")
        || name.starts_with("x64_sys_sched_yield")
        || name.starts_with("futex")
        || name.starts_with("do_futex")
        || name.starts_with("x64_sys_futex")
}

/// The part of `report`'s samples spent in an OpenMP runtime or a thread
/// pool's yield and wait functions.
pub(crate) fn spin_share(report: &Report) -> f64 {
    let total = report.total();
    if total <= 0.0 {
        return 0.0;
    }
    let spin: f64 = report
        .rows
        .iter()
        .filter(|r| is_openmp_module(&r.module) || is_wait_function(&r.function))
        .map(|r| r.value)
        .sum();
    spin / total
}

/// The warning for a run whose samples are mostly a thread pool spinning
/// or waiting (more than [`SPIN_WARN_SHARE`]), if it is one.
pub(crate) fn spin_warning(report: &Report, plan: &ThreadPlan) -> Option<String> {
    let share = spin_share(report);
    if share <= SPIN_WARN_SHARE {
        return None;
    }
    let how = match plan.explicit {
        Some(n) => format!("it ran with --threads {n}; DataLoader workers run with one thread (drop --threads)"),
        None if plan.torch_threads.is_none() => "the thread counts from the environment (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) keep pool threads busy; DataLoader workers run with one (unset them, or pass --threads 1)".to_string(),
        None => "the op's own threads keep pool threads busy (it ran with one thread per runtime, as in a DataLoader worker)".to_string(),
    };
    Some(format!(
        "{:.0}% of the window's samples are in a thread pool's spin or wait loop (OpenMP runtime, sched_yield, futex), not in the op's kernels: {how}",
        share * 100.0
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_core::Row;

    fn plan(explicit: Option<u32>, set: &[(&str, &str)]) -> ThreadPlan {
        let set: Vec<(String, String)> = set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ThreadPlan::new(explicit, |var| {
            set.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
        })
    }

    fn env(p: &ThreadPlan) -> Vec<(String, String)> {
        p.env()
            .into_iter()
            .map(|(k, v)| (k.to_string_lossy().into(), v.to_string_lossy().into()))
            .collect()
    }

    #[test]
    fn one_thread_by_default_the_users_variables_kept_and_threads_wins() {
        let default = plan(None, &[]);
        assert_eq!(default.torch_threads, Some(1));
        assert_eq!(env(&default).len(), 3);
        assert!(env(&default).iter().all(|(_, v)| v == "1"));

        // Torch sizes its pool from MKL_NUM_THREADS before
        // OMP_NUM_THREADS: setting the missing one to 1 would override
        // the user's 8, so none is set.
        let user = plan(None, &[("OMP_NUM_THREADS", "8"), ("MKL_NUM_THREADS", "")]);
        assert_eq!(user.torch_threads, None);
        assert!(env(&user).is_empty());
        let mut recorded = BTreeMap::new();
        user.record(&mut recorded);
        assert_eq!(recorded["OMP_NUM_THREADS"], "8 (from the environment)");
        assert!(!recorded.contains_key("MKL_NUM_THREADS"));

        let explicit = plan(Some(4), &[("OMP_NUM_THREADS", "8")]);
        assert_eq!(explicit.torch_threads, Some(4));
        assert!(env(&explicit).iter().all(|(_, v)| v == "4"));
        assert_eq!(env(&explicit).len(), 3);
    }

    #[test]
    fn spin_share_counts_openmp_runtimes_and_wait_functions() {
        let rows = vec![
            Row::new(
                "func@0x1de20",
                "/venv/torch/lib/libgomp-a34b3233.so.1",
                50.0,
            ),
            Row::new("__sched_yield", "libc.so.6", 10.0),
            Row::new("futex_wait", "[kernel.kallsyms]", 5.0),
            Row::new("direct_copy_kernel", "libtorch_cpu.so", 35.0),
        ];
        let report = Report {
            stacks: Vec::new(),
            unit: lotus_core::Unit::Samples,
            rows,
        };
        assert!((spin_share(&report) - 0.65).abs() < 1e-9);
        assert!(spin_warning(&report, &plan(Some(4), &[])).is_some_and(|w| w.contains("65%")));
        let kernels = Report {
            stacks: Vec::new(),
            unit: lotus_core::Unit::Samples,
            rows: vec![Row::new("add_kernel", "libtorch_cpu.so", 10.0)],
        };
        assert_eq!(spin_warning(&kernels, &plan(None, &[])), None);
    }
}
