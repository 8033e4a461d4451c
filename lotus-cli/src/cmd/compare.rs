//! `lotus compare A.json B.json ...`: the ops of live mappings made on
//! different hosts side by side: each mapping's host (CPU model, CPUs,
//! cores, kernel), each op's latency and CPU time per call, and their
//! ratios to the first mapping's ([`lotus_core::compare`] defines them).
//!
//! `--format json` prints `lotus.mapping-compare/1`:
//!
//! ```json
//! {"schema": "lotus.mapping-compare/1",
//!  "mappings": [{"label": "xeon", "file": "xeon.json",
//!                "host": {"host": "node1", "cpu_model": "...", "cpus": "32", "cpu_cores": "16", "kernel": "6.1.0"}}],
//!  "ops": [{"op": "Loader",
//!           "per_mapping": [{"calls": 400, "latency_s": 0.0021, "cpu_s": 0.0020,
//!                            "unsampled_cpu_s": 0.0018}, null],
//!           "latency_ratio": [1.0, null], "cpu_ratio": [1.0, null],
//!           "unsampled_cpu_ratio": [1.0, null]}]}
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use lotus_core::Mapping;
use lotus_core::{check_figures, compare, host_of, OpAcross};
use lotus_sys::text::{figure, one_line, printable};

use crate::render::table::{Column, Grid};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// Readable tables.
    Table,
    /// `lotus.mapping-compare/1`.
    Json,
    /// One row per (op, mapping).
    Csv,
    /// Markdown tables.
    Md,
}

/// `lotus compare`'s arguments.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Live mappings (lotus.mapping/1), the first the reference of the
    /// ratios.
    #[arg(value_name = "MAPPING", required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: CompareFormat,
}

/// Runs `lotus compare`.
pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let mut mappings = Vec::new();
    for path in &args.files {
        let name = path.display().to_string();
        if path.is_dir() {
            bail!("{name}: is a folder; give mapping files (lotus map --out FILE)");
        }
        let f = lotus_sys::input::open_regular(path)
            .with_context(|| format!("cannot read mapping {name}"))?;
        let m = Mapping::from_reader(f, &name)?;
        // Another host's figures are data: ones no window can have
        // measured are refused here rather than printed.
        check_figures(&m, &name)?;
        mappings.push(m);
    }
    let mut labels: Vec<String> = args
        .files
        .iter()
        .map(|p| {
            p.file_stem().map_or_else(
                || p.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            )
        })
        .collect();
    let dup = |l: &String, all: &[String]| all.iter().filter(|x| *x == l).count() > 1;
    let all = labels.clone();
    for (l, p) in labels.iter_mut().zip(&args.files) {
        if dup(l, &all) {
            *l = p.display().to_string();
        }
    }
    let refs: Vec<&Mapping> = mappings.iter().collect();
    let ops = compare(&refs);
    if ops
        .iter()
        .all(|o| o.per_mapping.iter().all(Option::is_none))
    {
        bail!(
            "no op of these mappings has per-call figures: they come from live mappings (`lotus map --backend ... OPS`), whose windows count calls; mappings from vendor reports have none"
        );
    }
    for (m, (l, p)) in mappings.iter().zip(labels.iter().zip(&args.files)) {
        if m.ops.iter().all(|o| o.window.is_none()) {
            crate::usage::say!(
                "lotus: note: {l} ({}): no windows (a mapping from reports?): no per-call figures",
                p.display()
            );
        }
    }
    let text = match args.format {
        CompareFormat::Json => {
            let named: Vec<(&str, &std::path::Path, &Mapping)> = mappings
                .iter()
                .zip(labels.iter().zip(&args.files))
                .map(|(m, (l, p))| (l.as_str(), p.as_path(), m))
                .collect();
            let out = lotus_core::compare_document(&named, &ops);
            serde_json::to_string_pretty(&out)? + "\n"
        }
        CompareFormat::Csv => lotus_core::compare_csv(&labels, &ops)?,
        // Names and hosts from the files: control characters escaped.
        CompareFormat::Table => printable(&table(
            &mappings,
            &labels,
            &ops,
            Some(crate::render::table::width()),
        ))
        .into_owned(),
        CompareFormat::Md => printable(&table(&mappings, &labels, &ops, None)).into_owned(),
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// The hosts and the ops side by side: terminal tables fitted to `width`,
/// or Markdown (`None`).
fn table(
    mappings: &[Mapping],
    labels: &[String],
    ops: &[OpAcross],
    width: Option<usize>,
) -> String {
    let render = |g: Grid| match width {
        Some(w) => g.render(Some(w)),
        None => format!("\n{}", g.markdown()),
    };
    let hosts = render(hosts_grid(mappings, labels));
    // Columns for the unsampled CPU per call where any mapping has it.
    let unsampled = ops
        .iter()
        .flat_map(|o| o.per_mapping.iter().flatten())
        .any(|p| p.unsampled_cpu_s.is_some());
    let mut header = vec!["op".to_string()];
    let labels: Vec<String> = labels.iter().map(|l| one_line(l).into_owned()).collect();
    for (i, l) in labels.iter().enumerate() {
        header.push(format!("{l} latency ms"));
        header.push(format!("{l} CPU ms"));
        if unsampled {
            header.push(format!("{l} CPU ms unsampled"));
        }
        if i > 0 {
            header.push(format!("{l} / {} latency", labels[0]));
            header.push(format!("{l} / {} CPU", labels[0]));
            if unsampled {
                header.push(format!("{l} / {} CPU unsampled", labels[0]));
            }
        }
    }
    // Bounded precision: a figure far from 1 in exponent form.
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| figure(s * 1e3, 4));
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |r| format!("{}x", figure(r, 2)));
    let rows: Vec<Vec<String>> = ops
        .iter()
        .map(|o| {
            let mut row = vec![one_line(&o.op).into_owned()];
            for i in 0..labels.len() {
                let p = o.per_mapping[i];
                row.push(ms(p.and_then(|p| p.latency_s)));
                row.push(ms(p.and_then(|p| p.cpu_s)));
                if unsampled {
                    row.push(ms(p.and_then(|p| p.unsampled_cpu_s)));
                }
                if i > 0 {
                    row.push(ratio(o.latency_ratio[i]));
                    row.push(ratio(o.cpu_ratio[i]));
                    if unsampled {
                        row.push(ratio(o.unsampled_cpu_ratio[i]));
                    }
                }
            }
            row
        })
        .collect();
    let columns = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            if i == 0 {
                Column::left(h)
            } else {
                Column::right(h)
            }
        })
        .collect();
    let t = render(Grid::new(columns, rows));
    let text = format!(
        "Hosts\n{hosts}\nOps per call (latency: window time / calls; CPU: task-clock / calls; CPU unsampled: calls timed with sampling stopped, the op's own cost; ratios over {})\n{t}",
        labels[0]
    );
    match width {
        Some(w) => crate::render::table::wrap_lines(&text, w),
        None => text,
    }
}

/// The hosts the mappings were made on: name, CPU, cores, kernel.
fn hosts_grid(mappings: &[Mapping], labels: &[String]) -> Grid<'static> {
    let host_rows: Vec<Vec<String>> = mappings
        .iter()
        .zip(labels)
        .map(|(m, l)| {
            let h = host_of(m);
            let get = |k: &str| h.get(k).cloned().unwrap_or_else(|| "-".into());
            [
                l.clone(),
                get("host"),
                get("cpu_model"),
                get("cpus"),
                get("cpu_cores"),
                get("kernel"),
            ]
            .map(|c| one_line(&c).into_owned())
            .to_vec()
        })
        .collect();
    Grid::new(
        vec![
            Column::left("mapping"),
            Column::left("host"),
            Column::left("CPU model"),
            Column::right("CPUs"),
            Column::right("cores"),
            Column::left("kernel"),
        ],
        host_rows,
    )
}
