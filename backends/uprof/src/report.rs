//! Reader for `AMDuProfCLI report ... -f csv` output.
//!
//! The report is a CSV of several sections, each a title line, a header
//! and rows, separated by blank lines. The function table is the section
//! titled `100 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)` (the count and
//! the event vary), with header `FUNCTION,"CPU_TIME",Module` and possibly
//! more event columns. Function names may contain commas (quoted); modules
//! are full paths.
//!
//! The reader streams through the file and stops at the end of the
//! function table.

use std::io::{BufRead, Read};

use lotus_core::{name_list, quote_cut, LineTooLong, MAX_LINE_BYTES};
use lotus_core::{parse_figure, Row};
use lotus_core::{Error as CoreError, Report, Unit};

/// The words that mark the function table's title.
pub const FUNCTION_SECTION: &str = "HOTTEST FUNCTIONS";

fn text<'a>(bytes: &'a [u8], file: &str, line: u64) -> Result<&'a str, CoreError> {
    std::str::from_utf8(bytes).map_err(|e| {
        CoreError::report_at(
            file,
            line,
            format!("not valid UTF-8 (bad byte at offset {})", e.valid_up_to()),
        )
        .with_hint("the report must be the text AMDuProfCLI wrote; was it converted or cut?")
    })
}

fn csv_error(e: csv::Error, file: &str) -> CoreError {
    let line = e.position().map(|p| p.line());
    match e.kind() {
        csv::ErrorKind::Io(io) => CoreError::reading(file, line, io),
        _ => CoreError::report_at_line(file, line, e.to_string()),
    }
}

/// Remembers the last byte read, to tell a file cut mid-line, and refuses
/// lines longer than [`MAX_LINE_BYTES`] so memory stays bounded.
struct LastByte<'a> {
    inner: &'a mut dyn BufRead,
    last: Option<u8>,
    /// Newlines read so far.
    newlines: u64,
    /// Bytes since the last newline.
    line_len: usize,
}

impl Read for LastByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let got = &buf[..n];
        if let Some(&b) = got.last() {
            self.last = Some(b);
        }
        match got.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                self.newlines += got.iter().filter(|&&b| b == b'\n').count() as u64;
                self.line_len = n - i - 1;
            }
            None => self.line_len += n,
        }
        if self.line_len > MAX_LINE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                LineTooLong {
                    line: self.newlines + 1,
                },
            ));
        }
        Ok(n)
    }
}

/// Where the function table's columns are.
struct Columns {
    function: usize,
    module: usize,
    value: usize,
    width: usize,
    counters: Vec<(usize, String)>,
}

fn columns(header: &[String], file: &str, line: u64) -> Result<Columns, CoreError> {
    let pos = |name: &str| header.iter().position(|h| h.eq_ignore_ascii_case(name));
    let found = || name_list(header);
    let function = pos("FUNCTION").ok_or_else(|| {
        CoreError::report_at(
            file,
            line,
            format!("function table has no FUNCTION column (found {})", found()),
        )
    })?;
    let module = pos("Module").ok_or_else(|| {
        CoreError::report_at(
            file,
            line,
            format!("function table has no Module column (found {})", found()),
        )
    })?;
    let events: Vec<usize> = (0..header.len())
        .filter(|&i| i != function && i != module && !header[i].is_empty())
        .collect();
    let value = pos("CPU_TIME")
        .or_else(|| events.first().copied())
        .ok_or_else(|| {
            CoreError::report_at(
                file,
                line,
                format!(
                    "function table has no event column such as CPU_TIME (found {})",
                    found()
                ),
            )
        })?;
    let counters = events
        .into_iter()
        .filter(|&i| i != value)
        .map(|i| (i, header[i].clone()))
        .collect();
    Ok(Columns {
        function,
        module,
        value,
        width: header.len(),
        counters,
    })
}

/// Whether `head` (the start of a file) is a uProf report: it holds the
/// function table's title, or its first line names AMD uProf.
pub fn recognizes(head: &str) -> bool {
    head.contains(FUNCTION_SECTION) || head.lines().next().is_some_and(|l| l.contains("AMD uProf"))
}

/// The CPU_TIME timer interval a uProf report states in its MONITORED
/// EVENTS section (`,"CPU_TIME","1.000 milliseconds",...`), in seconds;
/// `None` where the report states none before its function table. Reads
/// line by line (a line is cut at 1 MiB), up to the function table.
pub fn stated_interval_s(input: &mut dyn BufRead, file: &str) -> Result<Option<f64>, CoreError> {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut *input)
            .take(1 << 20)
            .read_until(b'\n', &mut buf)
            .map_err(|e| CoreError::report(file, format!("cannot read the report: {e}")))?;
        if n == 0 {
            return Ok(None);
        }
        let line = String::from_utf8_lossy(&buf);
        if line.contains(FUNCTION_SECTION) {
            return Ok(None);
        }
        let fields: Vec<&str> = line
            .split(',')
            .map(|f| f.trim().trim_matches('"'))
            .collect();
        if let Some(i) = fields.iter().position(|f| *f == "CPU_TIME") {
            if let Some(dt) = fields.get(i + 1).and_then(|t| parse_interval(t)) {
                return Ok(Some(dt));
            }
        }
    }
}

/// `1.000 milliseconds` -> 0.001.
fn parse_interval(text: &str) -> Option<f64> {
    let (num, unit) = text.trim().split_once(' ')?;
    let v: f64 = num.trim().parse().ok()?;
    let scale = match unit.trim() {
        "seconds" | "second" | "s" => 1.0,
        "milliseconds" | "millisecond" | "ms" => 1e-3,
        "microseconds" | "microsecond" | "us" => 1e-6,
        _ => return None,
    };
    (v > 0.0 && v.is_finite()).then_some(v * scale)
}

/// Reads the function table of an AMD uProf CSV report. `file` names the
/// input in errors. Values are sample counts of the sort event (CPU_TIME:
/// one sample per timer interval, 1 ms by default); other event columns
/// become counters.
pub fn read_report(input: &mut dyn BufRead, file: &str) -> Result<Report, CoreError> {
    let mut tracked = LastByte {
        inner: input,
        last: None,
        newlines: 0,
        line_len: 0,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(&mut tracked);
    let mut record = csv::ByteRecord::new();
    let mut titles: Vec<String> = Vec::new();
    let mut saw_any = false;
    let mut total = 0.0f64;

    // Find the title line.
    loop {
        if !reader
            .read_byte_record(&mut record)
            .map_err(|e| csv_error(e, file))?
        {
            let what = if saw_any {
                format!(
                    "no '{FUNCTION_SECTION}' section (sections found: {})",
                    if titles.is_empty() {
                        "none".to_string()
                    } else {
                        titles.join("; ")
                    }
                )
            } else {
                "empty report".to_string()
            };
            return Err(CoreError::report(file, what).with_hint(
                "make the report with `AMDuProfCLI report -i SESSION --report-output F -f csv` from a time-based (tbp) session",
            ));
        }
        saw_any = true;
        let non_empty = record.iter().filter(|f| !f.is_empty()).count();
        if non_empty != 1 || record[0].is_empty() {
            continue;
        }
        let title = String::from_utf8_lossy(&record[0]).trim().to_string();
        if title.to_ascii_uppercase().contains(FUNCTION_SECTION) {
            break;
        }
        // Listed in the error when the table is missing: a few, shortened,
        // whatever the file holds.
        if titles.len() < 24
            && (title.starts_with(|c: char| c.is_ascii_digit())
                || title.chars().all(|c| !c.is_lowercase()))
        {
            titles.push(quote_cut(&title, 100));
        }
    }
    let title_line = record.position().map_or(0, |p| p.line());

    // The header follows on the next line.
    if !reader
        .read_byte_record(&mut record)
        .map_err(|e| csv_error(e, file))?
    {
        return Err(CoreError::report_at(
            file,
            title_line,
            "function section has no header: the file looks truncated",
        ));
    }
    let header_line = record.position().map_or(0, |p| p.line());
    let header: Vec<String> = record
        .iter()
        .map(|f| text(f, file, header_line).map(|s| s.trim().to_string()))
        .collect::<Result<_, _>>()?;
    let cols = columns(&header, file, header_line)?;

    let mut rows = Vec::new();
    let mut next_line = reader.position().line();
    let mut last_line = header_line;
    loop {
        if !reader
            .read_byte_record(&mut record)
            .map_err(|e| csv_error(e, file))?
        {
            // uProf writes more sections after the function table; a file
            // that ends inside the table, mid-line, was cut short (a quoted
            // module path cut in two still parses as a row).
            drop(reader);
            if tracked.last.is_some_and(|b| b != b'\n') {
                return Err(CoreError::report_at(
                    file,
                    last_line,
                    "the file ends in the middle of this row: it looks truncated",
                ));
            }
            break;
        }
        let line = record.position().map_or(0, |p| p.line());
        // A blank line ends the section (the CSV reader skips blank lines,
        // so a gap in line numbers is one).
        if line > next_line {
            break;
        }
        next_line = reader.position().line();
        last_line = line;
        if record.len() != cols.width {
            if record.len() == 1 {
                break; // the next section's title, with no blank line before it
            }
            return Err(CoreError::report_at(
                file,
                line,
                format!(
                    "row has {} fields where the function table's header has {}: the file looks truncated or garbled",
                    record.len(),
                    cols.width
                ),
            ));
        }
        let function = text(&record[cols.function], file, line)?;
        let module = text(&record[cols.module], file, line)?;
        let value_text = text(&record[cols.value], file, line)?;
        let value = parse_figure(value_text).ok_or_else(|| {
            CoreError::report_at(
                file,
                line,
                format!(
                    "'{}' is not a number in column '{}'",
                    quote_cut(value_text, 80),
                    quote_cut(&header[cols.value], 80)
                ),
            )
        })?;
        if value < 0.0 {
            return Err(CoreError::report_at(
                file,
                line,
                format!(
                    "'{}' in column '{}' is negative: a sample count is 0 or more (the report looks garbled or edited)",
                    quote_cut(value_text, 80),
                    quote_cut(&header[cols.value], 80)
                ),
            ));
        }
        // Each value is finite; their sum must be too, or an op's total
        // would be infinite (written as `null` in JSON).
        total += value;
        if !total.is_finite() {
            return Err(CoreError::report_at(
                file,
                line,
                "the values up to this row add up to more than a number can hold (the report looks garbled)",
            ));
        }
        let mut row = Row::new(function, module, value);
        for (i, name) in &cols.counters {
            if let Some(v) = parse_figure(text(&record[*i], file, line)?) {
                row.counters.insert(name.clone(), v);
            }
        }
        rows.push(row);
    }
    Ok(Report {
        stacks: Vec::new(),
        unit: Unit::Samples,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_interval_and_the_format_are_recognized() {
        let text = "AMD uProf Profile Report\nMONITORED EVENTS\n,\"CPU_TIME\",\"1.000 milliseconds\",x\n\n100 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\n";
        assert!(recognizes(text));
        assert!(!recognizes("Function,CPU Time,Module\n"));
        let dt = stated_interval_s(&mut text.as_bytes(), "r.csv").expect("read");
        assert_eq!(dt, Some(1e-3));
        let none = "x\n100 HOTTEST FUNCTIONS\n,\"CPU_TIME\",\"1 ms\"\n";
        assert_eq!(
            stated_interval_s(&mut none.as_bytes(), "r.csv").expect("read"),
            None
        );
        assert_eq!(parse_interval("250 microseconds"), Some(250e-6));
        assert_eq!(parse_interval("-1 ms"), None);
    }

    fn read(text: &[u8]) -> Result<Report, CoreError> {
        read_report(&mut &text[..], "u.csv")
    }

    const GOOD: &[u8] = b"\"AMD uProf (Version:4.0.341.0)\"\nPERFORMANCE ANALYSIS REPORT\n\n\"10 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\"\nFUNCTION,\"CPU_TIME\",Module\n\"f(a, b)\",12.0000,\"/usr/lib/libx.so.1\"\n\"g\",3.0000,\"/bin/python3.9\"\n\n\"10 HOTTEST PROCESSES (Sort Event - CPU_TIME)\"\nPROCESS,\"CPU_TIME\"\n\"p\",15.0\n";

    #[test]
    fn reads_only_the_function_section() {
        let r = read(GOOD).expect("reads");
        assert_eq!(r.unit, Unit::Samples);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.rows[0].function, "f(a, b)");
        assert_eq!(r.rows[0].module, "libx.so.1");
        assert_eq!(r.rows[0].module_path.as_deref(), Some("/usr/lib/libx.so.1"));
        assert_eq!(r.rows[1].value, 3.0);
    }

    #[test]
    fn extra_event_columns_become_counters() {
        let r = read(b"\"5 HOTTEST FUNCTIONS (Sort Event - CYCLES)\"\nFUNCTION,CYCLES,RETIRED_INST,Module\nf,100,250,/l/a.so\n").expect("reads");
        assert_eq!(r.rows[0].value, 100.0);
        assert_eq!(r.rows[0].counters["RETIRED_INST"], 250.0);
    }

    #[test]
    fn missing_section_lists_what_was_found() {
        let e = read(b"\"100 HOTTEST PROCESSES (Sort Event - CPU_TIME)\"\nPROCESS,\"CPU_TIME\"\n")
            .unwrap_err();
        assert!(
            e.report_message()
                .unwrap_or_default()
                .contains("no 'HOTTEST FUNCTIONS' section"),
            "{e}"
        );
        assert!(
            e.report_message()
                .unwrap_or_default()
                .contains("100 HOTTEST PROCESSES"),
            "{e}"
        );
        assert!(read(b"")
            .unwrap_err()
            .report_message()
            .unwrap_or_default()
            .contains("empty"));
    }

    #[test]
    fn truncated_row_names_its_line() {
        let cut = &GOOD[..GOOD.len() - 120];
        let e = read(cut).unwrap_err();
        assert_eq!(e.line(), Some(6), "{e}");
        assert!(
            e.report_message().unwrap_or_default().contains("truncated"),
            "{e}"
        );
    }

    #[test]
    fn a_line_over_the_limit_is_refused_with_its_number() {
        let mut big = b"x\n\"1 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\"\nFUNCTION,CPU_TIME,Module\n\"f\",1,".to_vec();
        big.resize(MAX_LINE_BYTES + 100, b'y');
        let e = read(&big).unwrap_err();
        assert_eq!(e.line(), Some(4), "{e}");
        assert!(
            e.report_message()
                .unwrap_or_default()
                .contains("longer than 8 MiB"),
            "{e}"
        );
    }

    #[test]
    fn bad_bytes_in_a_function_name_name_the_line() {
        let e = read(b"\"1 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\"\nFUNCTION,CPU_TIME,Module\n\"\xff\",1,/a.so\n").unwrap_err();
        assert_eq!(e.line(), Some(3));
        assert!(e.report_message().unwrap_or_default().contains("UTF-8"));
    }

    #[test]
    fn negative_values_and_sums_past_a_number_are_refused_with_the_line() {
        let head = "\"5 HOTTEST FUNCTIONS (Sort Event - CPU_TIME)\"\nFUNCTION,CPU_TIME,Module\n";
        let e = read(format!("{head}f,1,/l/a.so\ng,-2,/l/a.so\n").as_bytes()).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("u.csv:4:") && e.contains("negative"), "{e}");
        let e = read(format!("{head}f,1e308,/l/a.so\ng,1e308,/l/a.so\n").as_bytes()).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("u.csv:4:") && e.contains("add up"), "{e}");
    }
}
