//! The attribution sections of `lotus report`: per profile, each op's
//! time and hardware metrics, and each op's native functions.

use anyhow::Result;
use lotus_attribute::{Attribution, FunctionAttribution};

use super::{cell, Page};
use crate::attribution_inputs::LoadedProfile;
use crate::render::html::{module_cell, Cell};
use crate::render::svg::{grouped_bars, Colours};

/// A profile as the report shows it: read, attributed to the ops and to
/// the functions.
pub(super) type Attributed = (LoadedProfile, Attribution, FunctionAttribution);

/// The attribution sections: per-op time and hardware metrics, and each
/// op's functions.
pub(super) fn attribution(
    page: &mut Page,
    attributed: &[Attributed],
    colours: &Colours,
) -> Result<()> {
    op_tables(page, attributed, colours);
    let ops: Vec<String> = attributed[0].1.ops.iter().map(|o| o.op.clone()).collect();
    op_plots(page, attributed, &ops, colours)?;
    functions(page, attributed, &ops);
    Ok(())
}

/// Per profile, each op's time, share, CPI and top-down metrics.
fn op_tables(page: &mut Page, attributed: &[Attributed], colours: &Colours) {
    page.h(2, "Profiles attributed to ops");
    let metrics = crate::render::TOP_DOWN_METRICS;
    for (p, a, _) in attributed {
        let present: Vec<&str> = metrics
            .iter()
            .copied()
            .filter(|m| a.ops.iter().any(|o| o.metrics.contains_key(*m)))
            .collect();
        page.h(3, format!("{} ({})", p.name, p.format));
        let mut headers = vec!["op", "CPU time (s)", "share", "CPI"];
        headers.extend(present.iter().copied());
        let k_s = p.seconds_per_unit();
        let rows = a
            .ops
            .iter()
            .map(|o| {
                let k = |f: &str| format!("attribution/{}/{}/{f}", p.name, o.op);
                let mut row = vec![
                    Cell::name(&o.op).swatch(crate::render::html::timeline::hex(colours, &o.op)),
                    cell(
                        &k("cpu_time_s"),
                        k_s.map_or("-".to_string(), |s| format!("{:.3}", o.value * s)),
                    ),
                    cell(&k("share"), format!("{:.4}", o.share)),
                    cell(
                        &k("cpi"),
                        o.cpi.map_or("-".to_string(), |c| format!("{c:.3}")),
                    ),
                ];
                for m in &present {
                    row.push(cell(
                        &k(&format!("topdown/{m}")),
                        o.metrics
                            .get(*m)
                            .map_or("-".to_string(), |v| format!("{v:.2}")),
                    ));
                }
                row
            })
            .collect();
        page.table(&headers, rows);
    }
}

/// CPU time and CPI per op, per profile.
fn op_plots(
    page: &mut Page,
    attributed: &[Attributed],
    ops: &[String],
    colours: &Colours,
) -> Result<()> {
    let groups: Vec<String> = attributed.iter().map(|(p, _, _)| p.name.clone()).collect();
    let time_series: Vec<(String, Vec<f64>)> = ops
        .iter()
        .map(|op| {
            let v = attributed
                .iter()
                .map(|(p, a, _)| {
                    let k = p.seconds_per_unit().unwrap_or(1.0);
                    a.op(op).map_or(0.0, |o| o.value * k)
                })
                .collect();
            (op.clone(), v)
        })
        .collect();
    let svg = grouped_bars(
        "CPU time per op, per profile",
        "CPU time (s)",
        &groups,
        &time_series,
        colours,
    )?;
    page.plot(
        "op_cpu_time",
        "Each op's part of each profile (the same colours as the trace's ops).",
        svg,
    );
    let cpi_series: Vec<(String, Vec<f64>)> = ops
        .iter()
        .map(|op| {
            let v = attributed
                .iter()
                .map(|(_, a, _)| a.op(op).and_then(|o| o.cpi).unwrap_or(f64::NAN))
                .collect();
            (op.clone(), v)
        })
        .filter(|(_, v): &(String, Vec<f64>)| v.iter().any(|x| x.is_finite()))
        .collect();
    if !cpi_series.is_empty() {
        let svg = grouped_bars(
            "Cycles per instruction per op, per profile",
            "CPI",
            &groups,
            &cpi_series,
            colours,
        )?;
        page.plot(
            "op_cpi",
            "Clockticks over instructions of each op's functions.",
            svg,
        );
    }

    Ok(())
}

/// Per profile and op, its native functions.
fn functions(page: &mut Page, attributed: &[Attributed], ops: &[String]) {
    page.h(2, "Native functions of each op");
    for (p, _, f) in attributed {
        page.h(3, p.name.clone());
        let k_s = p.seconds_per_unit();
        for op in ops {
            let mine: Vec<_> = f
                .functions
                .iter()
                .filter(|x| x.ops.iter().any(|c| &c.op == op))
                .collect();
            if mine.is_empty() {
                continue;
            }
            page.h(4, op.clone());
            let rows = mine
                .into_iter()
                .map(|x| {
                    let part = x.ops.iter().find(|c| &c.op == op).map_or(0.0, |c| c.part);
                    let k = |fld: &str| {
                        format!(
                            "functions/{}/{}/{}/{}/{fld}",
                            p.name, op, x.function, x.module
                        )
                    };
                    vec![
                        Cell::name(&x.function),
                        module_cell(&x.module),
                        cell(&k("part"), format!("{part:.3}")),
                        cell(
                            &k("cpu_time_s"),
                            k_s.map_or("-".to_string(), |s| format!("{:.3}", x.figures.value * s)),
                        ),
                        cell(
                            &k("cpi"),
                            x.figures.cpi.map_or("-".to_string(), |c| format!("{c:.3}")),
                        ),
                        cell(
                            &k("retiring"),
                            x.figures
                                .metrics
                                .get("Retiring")
                                .map_or("-".to_string(), |v| format!("{v:.2}")),
                        ),
                    ]
                })
                .collect();
            page.table(
                &[
                    "function",
                    "module",
                    "part",
                    "CPU time (s)",
                    "CPI",
                    "Retiring",
                ],
                rows,
            );
        }
    }
}
