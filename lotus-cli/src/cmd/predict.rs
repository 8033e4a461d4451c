//! `lotus predict DIR`: what a DataLoader change would give the training
//! loop, from one traced run ([`lotus_predict`] holds the model).
//!
//! Each change flag is one scenario (`--workers 0 1 4` three); with
//! `--together` the flags make one scenario; with none, every change
//! worth trying is predicted and ranked, fastest first. `--format json`
//! prints `lotus.predict/1`:
//!
//! ```json
//! {"schema": "lotus.predict/1",
//!  "measured": {"loop_s": 12.3, "wait_share": 0.45, "workers": 2, "prefetch": 2,
//!               "persistent": false, "epochs": 3, "batches": 300, "cpus": 2.0},
//!  "model": {"simulated_s": 11.9, "cpus_effective": 1.9, "margin": 0.12, "noise": 0.02},
//!  "scenarios": [{"change": "--workers 4", "loop_s": 8.1, "low_s": 7.0, "high_s": 9.3,
//!                 "gain_s": 4.2, "helps": true, "wait_share": 0.1, "cpus_used": 1.9,
//!                 "reason": "..."}],
//!  "notes": []}
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use lotus_predict::{predict, ranked, Change, Prediction};
use lotus_sys::text::{one_line, printable};

use crate::render::table::{Column, Grid};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PredictFormat {
    /// A readable table.
    Table,
    /// `lotus.predict/1`.
    Json,
}

/// `lotus predict`'s arguments.
#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// The trace folder of one run (`lotus trace run --out DIR`).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Predict with N DataLoader workers (several values: one scenario each).
    #[arg(long, value_name = "N", num_args = 1..)]
    pub workers: Vec<u32>,
    /// Predict with prefetch_factor K.
    #[arg(long = "prefetch-factor", value_name = "K", num_args = 1..)]
    pub prefetch: Vec<u32>,
    /// Predict with persistent_workers=True.
    #[arg(long = "persistent-workers")]
    pub persistent: bool,
    /// Predict with pin_memory=True.
    #[arg(long = "pin-memory")]
    pub pin_memory: bool,
    /// Predict with OP costing nothing (removed, cached, or moved off the CPU).
    #[arg(long, value_name = "OP")]
    pub without: Vec<String>,
    /// Predict on a machine of N CPUs.
    #[arg(long, value_name = "N", num_args = 1..)]
    pub cpus: Vec<f64>,
    /// Predict with gc.freeze() called before the workers start.
    #[arg(long = "gc-freeze")]
    pub gc_freeze: bool,
    /// Predict with each helper pool (OpenMP, OpenBLAS, MKL, rayon) limited
    /// to N threads; only 1 is modelled, from the run's samples
    /// (`lotus trace run --sample`).
    #[arg(long, value_name = "N")]
    pub threads: Option<u32>,
    /// The flags together make one scenario (by default each is its own).
    #[arg(long)]
    pub together: bool,
    /// The CPUs the traced run had (default: this machine's).
    #[arg(long = "traced-cpus", value_name = "N")]
    pub traced_cpus: Option<f64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: PredictFormat,
}

impl PredictArgs {
    /// The scenarios the flags ask for (none: rank every change).
    fn changes(&self) -> Vec<Change> {
        let mut each = Vec::new();
        each.extend(self.workers.iter().map(|&n| Change::new().workers(n)));
        each.extend(self.prefetch.iter().map(|&k| Change::new().prefetch(k)));
        if self.persistent {
            each.push(Change::new().persistent());
        }
        if self.pin_memory {
            each.push(Change::new().pin_memory());
        }
        each.extend(self.without.iter().map(|op| Change::new().without(op)));
        each.extend(self.cpus.iter().map(|&c| Change::new().cpus(c)));
        if self.gc_freeze {
            each.push(Change::new().gc_freeze());
        }
        each.extend(self.threads.map(|n| Change::new().threads(n)));
        if !self.together || each.is_empty() {
            return each;
        }
        let mut all = Change::new();
        for c in each {
            all.workers = c.workers.or(all.workers);
            all.prefetch = c.prefetch.or(all.prefetch);
            all.persistent |= c.persistent;
            all.pin_memory |= c.pin_memory;
            all.without.extend(c.without);
            all.cpus = c.cpus.or(all.cpus);
            all.gc_freeze |= c.gc_freeze;
            all.threads = c.threads.or(all.threads);
        }
        vec![all]
    }
}

/// Runs `lotus predict`.
pub fn run(args: PredictArgs) -> Result<ExitCode> {
    let cpus = match args.traced_cpus {
        Some(c) if c > 0.0 && c.is_finite() => c,
        Some(c) => {
            anyhow::bail!("--traced-cpus {c}: give the positive number of CPUs the traced run had")
        }
        None => lotus_attribute::cpus_here().unwrap_or(1) as f64,
    };
    // The samples, where the trace has them, say what the helper pools
    // did (`--threads 1`).
    let sampled = crate::traces::sampled_attribution(&args.dir, "lotus");
    let obs = lotus_attribute::observe_run(&args.dir, cpus, sampled.as_ref())
        .with_context(|| format!("cannot model the run traced in {}", args.dir.display()))?;
    let changes = args.changes();
    let p = if changes.is_empty() {
        ranked(&obs)?
    } else {
        predict(&obs, &changes)?
    };
    for note in &p.notes {
        crate::usage::say!("lotus: note: {note}");
    }
    let text = match args.format {
        PredictFormat::Json => serde_json::to_string_pretty(&p)? + "\n",
        PredictFormat::Table => printable(&table(&p, crate::render::table::width())).into_owned(),
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// The run as traced, then one row per scenario.
fn table(p: &Prediction, width: usize) -> String {
    let m = &p.measured;
    let head = format!(
        "the run as traced: training loop {:.2} s ({} batches, {} epoch{}), {} workers, prefetch_factor {}, persistent_workers={}, {} CPUs; training waited {:.0}% of it\n",
        m.loop_s,
        m.batches,
        m.epochs,
        if m.epochs == 1 { "" } else { "s" },
        m.workers,
        m.prefetch,
        if m.persistent { "True" } else { "False" },
        m.cpus,
        m.wait_share * 100.0
    );
    let rows = p
        .scenarios
        .iter()
        .map(|s| {
            vec![
                one_line(&s.change).into_owned(),
                format!("{:.2} s", s.loop_s),
                format!("{:.2}-{:.2} s", s.low_s, s.high_s),
                format!("{:+.0}%", (s.loop_s / m.loop_s.max(1e-9) - 1.0) * 100.0),
                if s.helps { "yes" } else { "no" }.to_string(),
                one_line(&s.reason).into_owned(),
            ]
        })
        .collect();
    let grid = Grid::new(
        vec![
            Column::left("change"),
            Column::right("loop"),
            Column::right("90% interval"),
            Column::right("vs now"),
            Column::left("helps"),
            Column::left("why"),
        ],
        rows,
    );
    let how = format!(
        "how: the traced run replayed on shared CPUs under each change (docs: predict.md); the run as traced simulates to {:.2} s on {:.1} effective CPUs; intervals hold the batches' spread, the model's own error ({:.0}%) and the machine's business ({:.0}%)\n",
        p.model.simulated_s,
        p.model.cpus_effective,
        p.model.margin * 100.0,
        p.model.noise * 100.0
    );
    let mut text = crate::render::table::wrap_lines(
        &format!("{head}\n{}\n{how}", grid.render(Some(width))),
        width,
    );
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}
