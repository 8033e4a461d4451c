//! Property tests of the uProf CSV reader (`read_report`): arbitrary bytes,
//! valid reports of several sections written from random tables (the
//! function table read back exactly), the same reports cut at any byte or
//! with bytes flipped. The reader never panics; every error names the
//! file, and a cut inside the function table names a line.
//!
//! `PROPTEST_CASES` sets the cases per property (256);
//! `LOTUS_FUZZ_SECONDS=N` fuzzes each property for N seconds instead.
#![allow(clippy::unwrap_used)]

use lotus_backend_uprof::read_report;
use lotus_core::Row;
use lotus_core::{Error as CoreError, Report, Unit};
use lotus_testkit::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const FILE: &str = "fuzz/uprof.csv";

fn read(bytes: &[u8]) -> Result<Report, CoreError> {
    read_report(&mut &bytes[..], FILE)
}

fn names_file(e: &CoreError) -> Result<(), TestCaseError> {
    prop_assert_eq!(e.file().unwrap_or_default(), FILE);
    let text = e.to_string();
    prop_assert!(text.starts_with(FILE), "{}", text);
    prop_assert!(!e.report_message().unwrap_or_default().is_empty());
    prop_assert!(text.len() < 16 * 1024, "error of {} bytes", text.len());
    Ok(())
}

/// CSV quoting as uProf writes it: every text field quoted, quotes doubled.
fn q(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// Sections uProf writes before the function table.
const PREAMBLE: &[&str] = &[
    "\n\"AMD uProf (Version:4.0.341.0)\"\nPERFORMANCE ANALYSIS REPORT\n",
    "\nEXECUTION\nTarget Path:,\"/usr/bin/python\"\nCommand Line Arguments:,\"/x/op.py \"\nEnvironment Variables:\nCPU Details:,\"Family(0x19), Model(0x1), Number of Cores(128)\"\n",
    "\nPROFILE DETAILS\nProfile Session Type:,\"Time-based Sampling\"\nProfile Duration:,\"0.010 seconds\"\nCall Stack Sampling:,\"False\"\n",
    "\nMONITORED EVENTS\nTBP Events:,Name,Interval,Description\n,\"CPU_TIME\",\"1.000 milliseconds\",\"CPU Time is the time in which the CPU core is executing the code.\"\n",
];

/// Sections after it.
const AFTER: &[&str] = &[
    "\n\"100 HOTTEST PROCESSES (Sort Event - CPU_TIME)\"\nPROCESS,\"CPU_TIME\"\n\"pt_main_thread (PID:3152930)\",5179.0000\n",
    "\n\"100 HOTTEST MODULES (Sort Event - CPU_TIME)\"\nMODULE,\"CPU_TIME\"\n\"/usr/lib/libc.so.6\",4600.0000\n\"/usr/bin/python3.9\",12.0000\n",
    "\"100 HOTTEST THREADS (Sort Event - CPU_TIME)\"\nTHREAD,\"CPU_TIME\"\n\"pt_main_thread [TID:3152930] (PID:3152930)\",5179.0000\n",
];

const EVENTS: &[&str] = &["RETIRED_INST", "CYCLES_NOT_IN_HALT", "L2_CACHE_MISS"];

#[derive(Debug, Clone)]
struct UprofReport {
    preamble: Vec<&'static str>,
    count: u32,
    sort_event: &'static str,
    /// Event columns after FUNCTION, the sort event first.
    events: Vec<&'static str>,
    /// (function, module path, one value per event column)
    rows: Vec<(String, String, Vec<u64>)>,
    after: Vec<&'static str>,
    final_newline: bool,
}

fn function_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_][a-zA-Z0-9_]{0,20}",
        "[a-zA-Z][a-zA-Z0-9_:<>(),*& \"|é]{0,30}[a-z)]",
        "func@0x[0-9a-f]{1,8}",
    ]
}

fn module_path() -> impl Strategy<Value = String> {
    prop_oneof![
        "(/[a-z0-9._-]{1,8}){1,4}/lib[a-z]{1,6}\\.so(\\.[0-9]){0,3}",
        "/usr/bin/python3\\.[0-9]{1,2}",
        Just("[vdso]".to_string()),
    ]
}

fn report() -> impl Strategy<Value = UprofReport> {
    (
        proptest::sample::subsequence(PREAMBLE, 0..=PREAMBLE.len()),
        1u32..200,
        proptest::sample::select(vec!["CPU_TIME", "CYCLES_NOT_IN_HALT"]),
        proptest::sample::subsequence(EVENTS, 0..=2),
        proptest::sample::subsequence(AFTER, 0..=AFTER.len()),
        any::<bool>(),
    )
        .prop_flat_map(|(preamble, count, sort_event, more, after, nl)| {
            let mut events = vec![sort_event];
            events.extend(more.into_iter().filter(|e| *e != sort_event));
            let width = events.len();
            let row = (
                function_name(),
                module_path(),
                proptest::collection::vec(0u64..100_000_000, width),
            );
            (
                Just(preamble),
                Just(count),
                Just(sort_event),
                Just(events),
                proptest::collection::vec(row, 0..12),
                Just(after),
                Just(nl),
            )
        })
        .prop_map(
            |(preamble, count, sort_event, events, rows, after, nl)| UprofReport {
                preamble,
                count,
                sort_event,
                events,
                rows,
                // uProf writes more sections after the function table; a
                // file that ends with it ends with a newline.
                final_newline: nl || after.is_empty(),
                after,
            },
        )
}

impl UprofReport {
    fn text(&self) -> String {
        let mut s: String = self.preamble.concat();
        s += &format!(
            "\n{}\n",
            q(&format!(
                "{} HOTTEST FUNCTIONS (Sort Event - {})",
                self.count, self.sort_event
            ))
        );
        s += "FUNCTION";
        for e in &self.events {
            s += &format!(",{}", q(e));
        }
        s += ",Module\n";
        // The table's end: the rows, then what follows.
        for (f, m, values) in &self.rows {
            s += &q(f);
            for v in values {
                s += &format!(",{}.{:04}", v / 10_000, v % 10_000);
            }
            s += &format!(",{}\n", q(m));
        }
        s += &self.after.concat();
        if !self.final_newline {
            while s.ends_with('\n') {
                s.pop();
            }
        }
        s
    }

    fn expected(&self) -> Vec<Row> {
        // The value column is CPU_TIME where the table has it, else the
        // first event column; the others are counters.
        let value_col = self
            .events
            .iter()
            .position(|e| *e == "CPU_TIME")
            .unwrap_or(0);
        self.rows
            .iter()
            .map(|(f, m, values)| {
                let as_f64 = |v: u64| (v as f64) / 10_000.0;
                let mut row = Row::new(f, m, as_f64(values[value_col]));
                for (i, e) in self.events.iter().enumerate() {
                    if i != value_col {
                        row.counters.insert(e.to_string(), as_f64(values[i]));
                    }
                }
                row
            })
            .collect()
    }

    /// Byte range of the function table's rows (after its header line, up
    /// to the end of its last row).
    fn table_rows(&self, text: &str) -> (usize, usize) {
        let header = text.find("FUNCTION,").unwrap();
        let start = header + text[header..].find('\n').unwrap() + 1;
        let len: usize = self
            .rows
            .iter()
            .map(|(f, m, values)| {
                q(f).len()
                    + values
                        .iter()
                        .map(|v| format!(",{}.{:04}", v / 10_000, v % 10_000).len())
                        .sum::<usize>()
                    + q(m).len()
                    + 2
            })
            .sum();
        (start, start + len)
    }
}

/// Fixed-point figures read back as the same f64 the model computes.
fn same(a: &[Row], b: &[Row]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.function == y.function
                && x.module == y.module
                && x.module_path == y.module_path
                && (x.value - y.value).abs() <= 1e-9 * y.value.abs().max(1.0)
                && x.counters.len() == y.counters.len()
                && x.counters
                    .iter()
                    .zip(&y.counters)
                    .all(|((kx, vx), (ky, vy))| {
                        kx == ky && (vx - vy).abs() <= 1e-9 * vy.abs().max(1.0)
                    })
        })
}

#[test]
fn prop_arbitrary_bytes_never_panic() {
    let alphabet: Vec<u8> =
        b"\"100 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\nFUNCTION,Module,0123456789.\r\xff"
            .to_vec();
    let biased = proptest::collection::vec(proptest::sample::select(alphabet), 0..512);
    let title_then_noise = proptest::collection::vec(any::<u8>(), 0..512).prop_map(|rest| {
        [
            &b"\"10 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\"\nFUNCTION,\"CPU_TIME\",Module\n"[..],
            &rest[..],
        ]
        .concat()
    });
    let input = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048),
        biased,
        title_then_noise,
    ];
    fuzz::check("uprof_arbitrary_bytes", input, |bytes| {
        match read(&bytes) {
            Ok(r) => {
                prop_assert_eq!(r.unit, Unit::Samples);
                prop_assert!(r.rows.iter().all(|row| row.value.is_finite()));
            }
            Err(e) => names_file(&e)?,
        }
        Ok(())
    });
}

#[test]
fn prop_valid_reports_read_back_exactly() {
    fuzz::check("uprof_round_trip", report(), |r| {
        let text = r.text();
        let got = read(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let want = r.expected();
        prop_assert!(same(&got.rows, &want), "{:?}\n!=\n{:?}", got.rows, want);
        Ok(())
    });
}

#[test]
fn prop_cut_reports_are_an_error_or_a_prefix() {
    fuzz::check("uprof_truncated", (report(), 0.0..=1.0f64), |(r, at)| {
        let text = r.text();
        let part = fuzz::cut(text.as_bytes(), at);
        let want = r.expected();
        let (rows_start, rows_end) = r.table_rows(&text);
        match read(part) {
            Err(e) => {
                names_file(&e)?;
                // Cut inside the table: the error says where.
                if part.len() > rows_start && part.len() < rows_end {
                    prop_assert!(e.line().is_some(), "no line in {}", e);
                }
            }
            Ok(got) => {
                prop_assert!(got.rows.len() <= want.len());
                prop_assert!(
                    same(&got.rows, &want[..got.rows.len()]),
                    "{:?} is not a prefix of {:?}",
                    got.rows,
                    want
                );
            }
        }
        Ok(())
    });
}

#[test]
fn prop_flipped_bytes_never_panic() {
    let flips = proptest::collection::vec((0.0..1.0f64, any::<u8>()), 1..6);
    fuzz::check("uprof_flipped", (report(), flips), |(r, flips)| {
        let mut bytes = r.text().into_bytes();
        for (at, b) in flips {
            let i = ((bytes.len() as f64) * at) as usize;
            if let Some(x) = bytes.get_mut(i) {
                *x = b;
            }
        }
        match read(&bytes) {
            Ok(got) => prop_assert!(got.rows.iter().all(|row| row.value.is_finite())),
            Err(e) => names_file(&e)?,
        }
        Ok(())
    });
}

/// A 50 MB input of one line is refused with an error naming the file
/// and a short message.
#[test]
fn one_huge_line_is_refused() {
    let mut big =
        b"\"1 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\"\nFUNCTION,CPU_TIME,Module\n\"f\",1,"
            .to_vec();
    big.resize(50 << 20, b'y');
    let e = read(&big).unwrap_err();
    assert_eq!(e.file().unwrap_or_default(), FILE);
    assert!(e.line().is_some(), "{e}");
    assert!(
        e.to_string().len() < 16 * 1024,
        "{} bytes",
        e.to_string().len()
    );
    let mut big = Vec::new();
    big.resize(50 << 20, b'z');
    let e = read(&big).unwrap_err();
    assert_eq!(e.file().unwrap_or_default(), FILE);
    assert_eq!(e.line(), Some(1), "{e}");
    assert!(
        e.to_string().len() < 16 * 1024,
        "{} bytes",
        e.to_string().len()
    );
}
