//! The CSV lotus writes of the model's figures: ops compared across
//! mappings (`lotus compare --format csv`) and a profile's rows (`lotus
//! profile --format csv`), each cell made safe for a spreadsheet
//! ([`lotus_sys::text::csv_record`]).

use std::collections::BTreeSet;

use lotus_sys::text::{csv_number, csv_record};

use crate::{Error, OpAcross, Row};

/// `records` as CSV.
fn csv_text<R, S>(records: impl IntoIterator<Item = R>) -> Result<String, Error>
where
    R: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let failed = |e: &dyn std::fmt::Display| Error::Io {
        context: "writing CSV".into(),
        source: std::io::Error::other(e.to_string()),
    };
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in records {
        w.write_record(csv_record(r)).map_err(|e| failed(&e))?;
    }
    let bytes = w.into_inner().map_err(|e| failed(&e))?;
    String::from_utf8(bytes).map_err(|e| failed(&e))
}

/// `lotus compare --format csv`: a line per op and mapping (named by
/// `labels`, in the order of each op's figures), its figures per call and
/// their ratios to the first mapping's.
pub fn compare_csv(labels: &[String], ops: &[OpAcross]) -> Result<String, Error> {
    let header = [
        "op",
        "mapping",
        "calls",
        "latency_s",
        "cpu_s",
        "latency_ratio",
        "cpu_ratio",
        "unsampled_cpu_s",
        "unsampled_cpu_ratio",
    ]
    .map(String::from);
    let num = |v: Option<f64>| v.map(csv_number).unwrap_or_default();
    let lines = ops.iter().flat_map(|o| {
        labels.iter().enumerate().map(move |(i, l)| {
            let p = o.per_mapping[i];
            [
                o.op.clone(),
                l.clone(),
                p.map(|p| p.calls.to_string()).unwrap_or_default(),
                num(p.and_then(|p| p.latency_s)),
                num(p.and_then(|p| p.cpu_s)),
                num(o.latency_ratio[i]),
                num(o.cpu_ratio[i]),
                num(p.and_then(|p| p.unsampled_cpu_s)),
                num(o.unsampled_cpu_ratio[i]),
            ]
        })
    });
    csv_text(std::iter::once(header).chain(lines))
}

/// `lotus profile --format csv`: a line per function (`order`: largest
/// first), its value in `unit`, its share of `total` and its counters.
pub fn rows_csv(order: &[&Row], unit: &str, total: f64) -> Result<String, Error> {
    let share = |v: f64| if total > 0.0 { v / total } else { 0.0 };
    let counters: BTreeSet<&String> = order.iter().flat_map(|r| r.counters.keys()).collect();
    let mut header: Vec<String> = ["function", "module", unit, "share"]
        .map(String::from)
        .to_vec();
    header.extend(counters.iter().map(|c| c.to_string()));
    let lines = order.iter().map(|r| {
        let mut rec = vec![
            r.function.clone(),
            r.module.clone(),
            csv_number(r.value),
            csv_number(share(r.value)),
        ];
        rec.extend(counters.iter().map(|c| {
            r.counters
                .get(*c)
                .map(|v| csv_number(*v))
                .unwrap_or_default()
        }));
        rec
    });
    csv_text(std::iter::once(header).chain(lines))
}
