//! `lotus tune`'s search: which DataLoader setting to try next, given the
//! trials run so far, and its record (`lotus.tune/1`).
//!
//! The model predicts every setting of the [`grid`] (`num_workers`,
//! `prefetch_factor`, `persistent_workers`) from the best trial so far
//! (those with workers from the best trial that ran workers, where the
//! best ran none); where no untried setting is predicted to beat that
//! trial's loop by more than the run's noise ([`MIN_GAIN`] at least),
//! tuning stops; else the fastest predicted is tried next. A trial's
//! setting is applied by the tracer to the DataLoader's arguments
//! (`LOTUS_LOADER`, [`loader_env`]) and, for one thread per helper pool,
//! the environment ([`THREAD_VARS`]). The best setting is the trial of the
//! shortest measured loop ([`best_trial`]).

use serde::Serialize;

use crate::{grid, predict, Change, Observed, PredictError, Scenario, Setting};

/// A setting is tried where it is predicted to beat the best trial so far
/// by this share at least (or by the run's noise, where more).
pub const MIN_GAIN: f64 = 0.03;

/// The schema tag of `lotus tune --format json`.
pub const TUNE_SCHEMA: &str = "lotus.tune/1";

/// The variables that limit the helper pools a trial with one thread per
/// pool sets (each pool reads its own as it starts).
pub const THREAD_VARS: [&str; 6] = [
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "RAYON_NUM_THREADS",
];

/// One trial of `lotus tune`.
#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    /// 1, 2, ...
    pub n: u32,
    /// `LOTUS_LOADER`'s value ("" for the job as written).
    pub loader: String,
    /// Whether its helper pools had one thread each (`OMP_NUM_THREADS=1`
    /// and the others of [`THREAD_VARS`] set).
    pub one_thread: bool,
    /// The setting, in words ([`setting_words`]).
    pub setting: String,
    /// The prediction it was chosen by (none for trial 1), s.
    pub predicted_s: Option<f64>,
    /// The prediction's low end, s.
    pub low_s: Option<f64>,
    /// The prediction's high end, s.
    pub high_s: Option<f64>,
    /// Its loop as measured, s.
    pub measured_s: f64,
    /// Its trace folder (where kept).
    pub trace: Option<String>,
}

/// `lotus tune --format json`'s document (`lotus.tune/1`).
#[derive(Debug, Serialize)]
pub struct TuneRecord {
    /// [`TUNE_SCHEMA`].
    pub schema: &'static str,
    /// The trials, in the order run.
    pub trials: Vec<Trial>,
    /// The index of the best in `trials` ([`best_trial`]).
    pub best: usize,
    /// Why tuning stopped.
    pub stopped: String,
}

/// What to do after the trials run so far.
#[derive(Debug)]
pub enum NextTrial {
    /// Run this setting, predicted as `scenario`.
    Try {
        /// The prediction it is chosen by.
        scenario: Scenario,
        /// The setting.
        setting: Setting,
    },
    /// Stop: no setting is predicted to beat the best trial by more than
    /// `noise` (a share).
    Stop {
        /// The best trial's index.
        best: usize,
        /// The noise it was measured against.
        noise: f64,
    },
}

/// `s` in words, as the trials name their settings.
pub fn setting_words(s: &Setting) -> String {
    format!(
        "num_workers={}, prefetch_factor={}, persistent_workers={}{}",
        s.workers,
        s.prefetch,
        if s.persistent { "True" } else { "False" },
        if s.one_thread {
            ", one thread per pool"
        } else {
            ""
        }
    )
}

/// What a trial sets: `LOTUS_LOADER` ("" for the job as written) and
/// whether its pools get one thread each; as one key, to tell settings
/// tried.
fn key(loader: &str, one_thread: bool) -> String {
    format!("{loader};threads={}", u8::from(one_thread))
}

/// `LOTUS_LOADER` for `s` (as the tracer reads it).
pub fn loader_env(s: &Setting) -> String {
    if s.workers == 0 {
        "workers=0".into()
    } else {
        format!(
            "workers={},prefetch={},persistent={}",
            s.workers,
            s.prefetch,
            u8::from(s.persistent)
        )
    }
}

/// The setting `c` makes of `from`'s.
fn applied(from: &Setting, c: &Change) -> Setting {
    let mut s = from.clone();
    if let Some(n) = c.workers {
        s.workers = n;
    }
    if let Some(k) = c.prefetch {
        s.prefetch = k;
    }
    s.persistent |= c.persistent;
    s.one_thread |= c.threads == Some(1);
    s
}

/// The trial of the shortest measured loop (the first of equals).
pub fn best_trial(trials: &[Trial]) -> usize {
    let mut best = 0;
    for (i, t) in trials.iter().enumerate() {
        if t.measured_s < trials[best].measured_s {
            best = i;
        }
    }
    best
}

/// The setting to try after `trials` (at least one: the job as written,
/// first), each observed as `observed` (the same order): the fastest
/// predicted of those not tried that beat the best trial by more than the
/// run's noise, predicted from the best trial (those with workers from
/// the best trial that ran workers, where the best ran none).
pub fn next_trial(trials: &[Trial], observed: &[Observed]) -> Result<NextTrial, PredictError> {
    let best = best_trial(trials);
    let best_s = trials[best].measured_s;
    let s0 = &observed[0].inputs.traced;
    // Trial 1's setting is the job's own (no LOTUS_LOADER).
    let tried: Vec<String> = trials
        .iter()
        .map(|t| {
            let loader = if t.loader.is_empty() {
                loader_env(s0)
            } else {
                t.loader.clone()
            };
            key(&loader, t.one_thread)
        })
        .collect();
    // The settings are predicted from the best trial; where it ran no
    // workers (its trace knows no worker's start-up or handover),
    // those with workers are predicted from the best trial that ran
    // some, where one did.
    let with_workers = (0..trials.len())
        .filter(|&i| observed[i].inputs.traced.workers > 0)
        .min_by(|&a, &b| trials[a].measured_s.total_cmp(&trials[b].measured_s));
    let mut sources = vec![best];
    if observed[best].inputs.traced.workers == 0 {
        sources.extend(with_workers);
    }
    let mut pick: Option<(Scenario, Setting)> = None;
    let mut noise = MIN_GAIN;
    for &src in &sources {
        let from = &observed[src];
        let own = from.inputs.traced.workers > 0;
        let g = grid(from);
        let p = predict(from, &g)?;
        let bar = p.model.noise.max(MIN_GAIN);
        noise = noise.max(bar);
        for (sc, c) in p.scenarios.into_iter().zip(g) {
            let set = applied(&from.inputs.traced, &c);
            // From a no-worker trial, only settings without workers
            // where another trial can speak for those with them.
            if src == best && !own && set.workers > 0 && sources.len() > 1 {
                continue;
            }
            if src != best && set.workers == 0 {
                continue;
            }
            // Worth a trial: predicted to beat the best so far by more
            // than the run's noise (at least MIN_GAIN); the trial then
            // measures it, so the model's own margin is not asked for.
            if sc.loop_s >= best_s * (1.0 - bar)
                || tried.contains(&key(&loader_env(&set), set.one_thread))
            {
                continue;
            }
            if pick.as_ref().is_none_or(|(b, _)| sc.loop_s < b.loop_s) {
                pick = Some((sc, set));
            }
        }
    }
    Ok(match pick {
        Some((scenario, setting)) => NextTrial::Try { scenario, setting },
        None => NextTrial::Stop { best, noise },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(n: u32, measured_s: f64) -> Trial {
        Trial {
            n,
            loader: String::new(),
            one_thread: false,
            setting: String::new(),
            predicted_s: None,
            low_s: None,
            high_s: None,
            measured_s,
            trace: None,
        }
    }

    #[test]
    fn the_best_trial_is_the_first_of_the_shortest_loops() {
        let trials = [trial(1, 2.0), trial(2, 1.5), trial(3, 1.5)];
        assert_eq!(best_trial(&trials), 1);
        assert_eq!(best_trial(&trials[..1]), 0);
    }

    #[test]
    fn a_setting_is_written_for_the_tracer_and_in_words() {
        let none = Setting::default();
        assert_eq!(loader_env(&none), "workers=0");
        let s = Setting {
            workers: 4,
            prefetch: 4,
            persistent: true,
            one_thread: true,
            ..Setting::default()
        };
        assert_eq!(loader_env(&s), "workers=4,prefetch=4,persistent=1");
        assert_eq!(
            setting_words(&s),
            "num_workers=4, prefetch_factor=4, persistent_workers=True, one thread per pool"
        );
        let c = Change {
            workers: Some(2),
            threads: Some(1),
            ..Change::default()
        };
        let a = applied(&none, &c);
        assert_eq!((a.workers, a.one_thread), (2, true));
    }
}
