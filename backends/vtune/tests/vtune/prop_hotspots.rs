//! Property tests of the VTune CSV reader (`read_hotspots`): arbitrary
//! bytes, valid reports written from random tables (read back exactly),
//! the same reports cut at any byte, with bytes flipped, or with another
//! delimiter. The reader never panics; every error names the file, and
//! past the header a line.
//!
//! `PROPTEST_CASES` sets the cases per property (256);
//! `LOTUS_FUZZ_SECONDS=N` fuzzes each property for N seconds instead.
#![allow(clippy::unwrap_used)]

use lotus_backend_vtune::read_hotspots;
use lotus_core::{parse_figure, Row, UNKNOWN_MODULE};
use lotus_core::{Error as CoreError, Report};
use lotus_testkit::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const FILE: &str = "fuzz/hotspots.csv";

fn read(bytes: &[u8]) -> Result<Report, CoreError> {
    read_hotspots(&mut &bytes[..], FILE)
}

/// Every error names the file it is about, first thing.
fn names_file(e: &CoreError) -> Result<(), TestCaseError> {
    prop_assert_eq!(e.file().unwrap_or_default(), FILE);
    let text = e.to_string();
    prop_assert!(text.starts_with(FILE), "{}", text);
    prop_assert!(!e.report_message().unwrap_or_default().is_empty());
    // An error message stays readable whatever the input holds.
    prop_assert!(text.len() < 16 * 1024, "error of {} bytes", text.len());
    Ok(())
}

/// A column of a generated report.
#[derive(Debug, Clone, PartialEq)]
enum Col {
    Function(&'static str),
    Time(&'static str),
    Module,
    Counter(&'static str),
}

impl Col {
    fn name(&self) -> &'static str {
        match self {
            Col::Function(n) | Col::Time(n) | Col::Counter(n) => n,
            Col::Module => "Module",
        }
    }
}

/// One row's fields, in column order.
#[derive(Debug, Clone)]
struct Table {
    delimiter: u8,
    crlf: bool,
    bom: bool,
    final_newline: bool,
    columns: Vec<Col>,
    rows: Vec<Vec<String>>,
}

fn function_name() -> impl Strategy<Value = String> {
    prop_oneof![
        // Plain C names, C++ signatures with the delimiters inside, quotes,
        // non-ASCII, the odd newline.
        "[a-zA-Z][a-zA-Z0-9_]{0,20}",
        "[a-zA-Z][a-zA-Z0-9_:<>(),*& \t\"|é日]{0,30}[a-z)]",
        "func@0x[0-9a-f]{1,8}",
        "_ZN[0-9]foo[0-9]barEv",
        "[a-z]{1,5}\n[a-z]{1,5}",
    ]
}

fn module_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(UNKNOWN_MODULE.to_string()),
        "lib[a-z]{1,8}\\.so(\\.[0-9]){0,3}",
        "(/[a-z0-9._-]{1,8}){1,3}/lib[a-z]{1,6}\\.so",
        "_imaging\\.cpython-3[0-9]{1,2}-x86_64-linux-gnu\\.so",
    ]
}

/// A figure as VTune prints it, with the value it stands for.
fn figure() -> impl Strategy<Value = (String, f64)> {
    (0u64..10_000_000_000, 0usize..4).prop_map(|(n, style)| {
        let v = n as f64 / 1000.0;
        match style {
            0 => (format!("{v}"), v),
            1 => (format!("{v}s"), v),
            2 => (thousands(n), n as f64),
            _ => (format!("{}%", n % 100_000), (n % 100_000) as f64),
        }
    })
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

const FUNCTION_COLUMNS: &[&str] = &[
    "Function",
    "Source Function / Function / Call Stack",
    "Function / Call Stack",
];
const TIME_COLUMNS: &[&str] = &["CPU Time:Self", "CPU Time"];
const COUNTERS: &[&str] = &[
    "Clockticks",
    "Instructions Retired",
    "CPU Time:Spin Time",
    "Retiring",
    "Average CPU Frequency",
];

fn columns() -> impl Strategy<Value = Vec<Col>> {
    (
        proptest::sample::select(FUNCTION_COLUMNS),
        proptest::sample::select(TIME_COLUMNS),
        any::<bool>(),
        proptest::sample::subsequence(COUNTERS, 0..=3),
    )
        .prop_map(|(f, t, module, counters)| {
            let mut cols = vec![Col::Function(f), Col::Time(t)];
            if module {
                cols.push(Col::Module);
            }
            cols.extend(counters.into_iter().map(Col::Counter));
            cols
        })
        .prop_shuffle()
}

fn field(col: &Col) -> BoxedStrategy<String> {
    match col {
        Col::Function(_) => function_name().boxed(),
        Col::Module => module_name().boxed(),
        Col::Time(_) | Col::Counter(_) => figure().prop_map(|(text, _)| text).boxed(),
    }
}

fn table() -> impl Strategy<Value = Table> {
    (
        prop_oneof![Just(b','), Just(b'\t')],
        any::<bool>(),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.8),
        columns(),
    )
        .prop_flat_map(|(delimiter, crlf, bom, final_newline, columns)| {
            let row: Vec<BoxedStrategy<String>> = columns.iter().map(field).collect();
            let rows = proptest::collection::vec(row, 0..12);
            (
                Just(delimiter),
                Just(crlf),
                Just(bom),
                Just(final_newline),
                Just(columns),
                rows,
            )
        })
        .prop_map(
            |(delimiter, crlf, bom, final_newline, columns, rows)| Table {
                delimiter,
                crlf,
                bom,
                // A report with no rows keeps its header's newline.
                final_newline: final_newline || rows.is_empty(),
                columns,
                rows,
            },
        )
}

impl Table {
    /// The report as vtune writes it (csv quoting where needed).
    fn bytes(&self) -> Vec<u8> {
        let mut w = csv::WriterBuilder::new()
            .delimiter(self.delimiter)
            .terminator(if self.crlf {
                csv::Terminator::CRLF
            } else {
                csv::Terminator::Any(b'\n')
            })
            .from_writer(Vec::new());
        w.write_record(self.columns.iter().map(Col::name)).unwrap();
        for r in &self.rows {
            w.write_record(r).unwrap();
        }
        let mut out = w.into_inner().unwrap();
        if !self.final_newline {
            while out.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                out.pop();
            }
        }
        if self.bom {
            out.splice(0..0, *b"\xEF\xBB\xBF");
        }
        out
    }

    fn col(&self, pred: impl Fn(&Col) -> bool) -> Option<usize> {
        self.columns.iter().position(pred)
    }

    /// The rows the reader must give: a small model of the format.
    fn expected(&self) -> Vec<Row> {
        let f = self.col(|c| matches!(c, Col::Function(_))).unwrap();
        let t = self.col(|c| matches!(c, Col::Time(_))).unwrap();
        let m = self.col(|c| *c == Col::Module);
        self.rows
            .iter()
            .map(|r| {
                let function = if r[f].trim().is_empty() {
                    "[Unknown]"
                } else {
                    &r[f]
                };
                let module = m.map_or(UNKNOWN_MODULE, |m| r[m].as_str());
                let mut row = Row::new(function, module, parse_figure(&r[t]).unwrap());
                for (i, c) in self.columns.iter().enumerate() {
                    if let Col::Counter(name) = c {
                        row.counters
                            .insert(name.to_string(), parse_figure(&r[i]).unwrap());
                    }
                }
                row
            })
            .collect()
    }

    /// Byte offset where the header line ends (after its newline).
    fn header_end(&self, bytes: &[u8]) -> usize {
        bytes
            .iter()
            .position(|b| *b == b'\n')
            .map_or(bytes.len(), |i| i + 1)
    }
}

/// What the last column of a row contributes, blanked in both rows: a file
/// cut inside its last line's last field reads as a shorter field (VTune's
/// own TAB exports end without a newline, so a missing newline is no sign
/// of a cut).
fn blank_last_column(row: &mut Row, last: &Col) {
    match last {
        Col::Function(_) => row.function.clear(),
        Col::Module => {
            row.module.clear();
            row.module_path = None;
        }
        Col::Time(_) => row.value = 0.0,
        Col::Counter(name) => {
            row.counters.remove(*name);
        }
    }
}

const HEADERS: &[&[u8]] = &[
    b"Function,CPU Time,Module\n",
    b"Function\tCPU Time:Self\tModule\tClockticks\n",
    b"\xEF\xBB\xBFFunction,CPU Time\n",
];

#[test]
fn prop_arbitrary_bytes_never_panic() {
    let alphabet: Vec<u8> =
        b"Function,CPU Time:Self,Module\t\"\r\n 0123456789.s%,x_\xff\xc3\xa9".to_vec();
    let biased = proptest::collection::vec(proptest::sample::select(alphabet), 0..512);
    let header_then_noise = (
        proptest::sample::select(HEADERS),
        proptest::collection::vec(any::<u8>(), 0..512),
    )
        .prop_map(|(h, rest)| [h, &rest[..]].concat());
    let input = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048),
        biased,
        header_then_noise,
    ];
    fuzz::check("vtune_arbitrary_bytes", input, |bytes| {
        match read(&bytes) {
            Ok(r) => {
                for row in &r.rows {
                    prop_assert!(row.value.is_finite());
                }
            }
            Err(e) => names_file(&e)?,
        }
        Ok(())
    });
}

#[test]
fn prop_valid_reports_read_back_exactly() {
    fuzz::check("vtune_round_trip", table(), |t| {
        let bytes = t.bytes();
        let r = read(&bytes).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        prop_assert_eq!(r.unit, lotus_core::Unit::Seconds);
        prop_assert_eq!(r.rows, t.expected());
        Ok(())
    });
}

#[test]
fn prop_cut_reports_are_an_error_or_a_prefix() {
    let input = (table(), 0.0..=1.0f64);
    fuzz::check("vtune_truncated", input, |(t, at)| {
        let whole = t.bytes();
        let part = fuzz::cut(&whole, at);
        let expected = t.expected();
        let header_end = t.header_end(&whole);
        match read(part) {
            Err(e) => {
                names_file(&e)?;
                if part.len() >= header_end {
                    prop_assert!(e.line().is_some(), "no line in {}", e);
                }
            }
            Ok(r) => {
                prop_assert!(
                    r.rows.len() <= expected.len(),
                    "{} rows from a cut of a report of {}",
                    r.rows.len(),
                    expected.len()
                );
                let Some((last, full)) = r.rows.split_last() else {
                    return Ok(());
                };
                prop_assert_eq!(full, &expected[..full.len()]);
                let mut got = last.clone();
                let mut want = expected[full.len()].clone();
                if part.len() < whole.len() {
                    let last_col = t.columns.last().unwrap();
                    blank_last_column(&mut got, last_col);
                    blank_last_column(&mut want, last_col);
                }
                prop_assert_eq!(got, want);
            }
        }
        Ok(())
    });
}

#[test]
fn prop_cut_inside_quotes_is_an_error() {
    // A cut that leaves a quoted field open is a truncated file, never a
    // row with half a name.
    let input = (table(), 0.0..=1.0f64);
    fuzz::check("vtune_cut_in_quotes", input, |(t, at)| {
        let whole = t.bytes();
        let part = fuzz::cut(&whole, at);
        let quotes = part.iter().filter(|b| **b == b'"').count();
        if !quotes.is_multiple_of(2) {
            let r = read(part);
            prop_assert!(r.is_err(), "read {:?}", r);
            if let Err(e) = r {
                names_file(&e)?;
                prop_assert!(e.line().is_some(), "no line in {}", e);
            }
        }
        Ok(())
    });
}

#[test]
fn prop_literal_quotes_inside_unquoted_fields_are_no_cut() {
    // `12" panel` unquoted: the csv rules read the quote as a character,
    // so the reader must not take it for an open quoted field.
    let name = "[a-z]{1,6}\"[a-z\"]{0,6}";
    let rows = proptest::collection::vec((name, 0u32..100_000, any::<bool>()), 1..8);
    fuzz::check("vtune_literal_quotes", rows, |rows| {
        let mut text = String::from("Function,CPU Time,Module\n");
        for (f, t, last_quoted) in &rows {
            let module = if *last_quoted {
                "\"/usr/lib/a.so\""
            } else {
                "a.so"
            };
            text += &format!("{f},{t},{module}\n");
        }
        let r = read(text.as_bytes()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got: Vec<&str> = r.rows.iter().map(|r| r.function.as_str()).collect();
        let want: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        prop_assert_eq!(got, want);
        prop_assert!(r.rows.iter().all(|r| r.module == "a.so"));
        Ok(())
    });
}

#[test]
fn prop_flipped_bytes_never_panic() {
    let flips = proptest::collection::vec((0.0..1.0f64, any::<u8>()), 1..6);
    fuzz::check("vtune_flipped", (table(), flips), |(t, flips)| {
        let mut bytes = t.bytes();
        for (at, b) in flips {
            let i = ((bytes.len() as f64) * at) as usize;
            if let Some(x) = bytes.get_mut(i) {
                *x = b;
            }
        }
        match read(&bytes) {
            Ok(r) => prop_assert!(r.rows.iter().all(|row| row.value.is_finite())),
            Err(e) => names_file(&e)?,
        }
        Ok(())
    });
}

#[test]
fn prop_other_delimiters_are_refused_at_the_header() {
    let delimiter = proptest::sample::select(vec![b';', b'|', b' ', b':']);
    fuzz::check("vtune_delimiters", (table(), delimiter), |(mut t, d)| {
        t.delimiter = d;
        // A delimiter that never appears in a header name: the header is
        // one field (or names no function or time column), always line 1.
        if t.columns.iter().any(|c| c.name().contains(d as char)) {
            return Ok(());
        }
        match read(&t.bytes()) {
            Ok(r) => prop_assert!(false, "read with delimiter {:?}: {:?}", d as char, r),
            Err(e) => {
                names_file(&e)?;
                prop_assert_eq!(e.line(), Some(1), "{}", e);
            }
        }
        Ok(())
    });
}

/// A 50 MB input of one line (no newline anywhere) is refused with an
/// error naming the file, promptly and with a short message.
#[test]
fn one_huge_line_is_refused() {
    let mut big = b"Function,CPU Time,".to_vec();
    big.resize(50 << 20, b'x');
    let t = std::time::Instant::now();
    let e = read(&big).unwrap_err();
    assert_eq!(e.file().unwrap_or_default(), FILE);
    assert!(
        e.to_string().len() < 16 * 1024,
        "{} bytes",
        e.to_string().len()
    );
    assert!(t.elapsed().as_secs() < 20);
    // The same after a valid header: one 50 MB row.
    let mut big = b"Function,CPU Time,Module\n".to_vec();
    big.resize(50 << 20, b'y');
    let e = read(&big).unwrap_err();
    assert_eq!(e.file().unwrap_or_default(), FILE);
    assert_eq!(e.line(), Some(2), "{e}");
    assert!(
        e.report_message()
            .unwrap_or_default()
            .contains("longer than"),
        "{e}"
    );
    assert!(
        e.to_string().len() < 16 * 1024,
        "{} bytes",
        e.to_string().len()
    );
}
