//! Reader for VTune's function-grouped CSV reports.
//!
//! `vtune -report hotspots -format csv -csv-delimiter comma` writes one row
//! per function. Column names vary by version and analysis (`CPU Time` or
//! `CPU Time:Self`; microarchitecture exploration adds `Clockticks`,
//! `Instructions Retired`, `CPI Rate` and top-down percentages), so columns
//! are found by name, never by position. Comma and TAB delimiters are both
//! read; figures may carry `s` / `%` suffixes and thousands separators.
//!
//! The reader streams: [`HotspotRows`] holds one record at a time, so a
//! caller that folds rows as they come (sums per function, attribution)
//! reads any size in constant memory; [`read_hotspots`] keeps every row.

use std::io::{BufRead, Read};

use lotus_core::{name_list, quote_cut, LineTooLong, MAX_LINE_BYTES};
use lotus_core::{parse_figure, Row, UNKNOWN_MODULE};
use lotus_core::{Error as CoreError, Report, Unit};

/// Header names of the function column, most specific first.
const FUNCTION_COLUMNS: &[&str] = &[
    "Function",
    "Source Function / Function / Call Stack",
    "Function / Call Stack",
    "Source Function",
];
/// Header names of the self-time column, preferred first.
const TIME_COLUMNS: &[&str] = &["CPU Time:Self", "CPU Time"];
const MODULE_COLUMN: &str = "Module";
const FULL_NAME_COLUMN: &str = "Function (Full)";
const SOURCE_COLUMN: &str = "Source File";
const ADDRESS_COLUMN: &str = "Start Address";

/// Where each needed column is.
#[derive(Debug)]
struct Columns {
    function: usize,
    time: usize,
    module: Option<usize>,
    full_name: Option<usize>,
    source: Option<usize>,
    address: Option<usize>,
    /// Every other column, read as a counter where its value is a number.
    counters: Vec<(usize, String)>,
}

fn find(header: &[String], names: &[&str]) -> Option<usize> {
    names
        .iter()
        .find_map(|name| header.iter().position(|h| h == name))
}

impl Columns {
    fn from_header(header: &[String], file: &str) -> Result<Self, CoreError> {
        let missing = |what: &str, names: &[&str]| {
            CoreError::report_at(
                file,
                1,
                format!(
                    "no {what} column (looked for {}; found {})",
                    name_list(names),
                    name_list(header)
                ),
            )
            .with_hint("export the report with `vtune -report hotspots -format csv -csv-delimiter comma`, grouped by function")
        };
        let function =
            find(header, FUNCTION_COLUMNS).ok_or_else(|| missing("function", FUNCTION_COLUMNS))?;
        let time = find(header, TIME_COLUMNS).ok_or_else(|| missing("CPU time", TIME_COLUMNS))?;
        let module = find(header, &[MODULE_COLUMN]);
        let full_name = find(header, &[FULL_NAME_COLUMN]);
        let source = find(header, &[SOURCE_COLUMN]);
        let address = find(header, &[ADDRESS_COLUMN]);
        let taken = [
            Some(function),
            Some(time),
            module,
            full_name,
            source,
            address,
        ];
        let counters = header
            .iter()
            .enumerate()
            .filter(|(i, name)| !taken.contains(&Some(*i)) && !name.is_empty())
            .map(|(i, name)| (i, name.clone()))
            .collect();
        Ok(Columns {
            function,
            time,
            module,
            full_name,
            source,
            address,
            counters,
        })
    }
}

/// Reads one line (the header), of at most [`MAX_LINE_BYTES`].
fn read_header_line(input: &mut dyn BufRead, file: &str) -> Result<Vec<u8>, CoreError> {
    let mut line = Vec::new();
    input
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut line)
        .map_err(|e| CoreError::report(file, format!("cannot read: {e}")))?;
    if line.len() > MAX_LINE_BYTES {
        return Err(
            CoreError::report_at(file, 1, LineTooLong { line: 1 }.to_string())
                .with_hint("give a VTune report exported as CSV, grouped by function"),
        );
    }
    if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
        line = rest.to_vec();
    }
    Ok(line)
}

fn field_text<'a>(
    bytes: &'a [u8],
    file: &str,
    line: u64,
    column: &str,
) -> Result<&'a str, CoreError> {
    std::str::from_utf8(bytes).map_err(|e| {
        CoreError::report_at(
            file,
            line,
            format!(
                "column '{column}' is not valid UTF-8 (bad byte at offset {})",
                e.valid_up_to()
            ),
        )
        .with_hint("the report must be UTF-8 text as vtune writes it; was it converted or cut?")
    })
}

fn csv_error(e: csv::Error, file: &str, line_offset: u64) -> CoreError {
    let line = e.position().map(|p| p.line() + line_offset);
    match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => CoreError::report_at_line(
            file,
            line,
            format!(
                "row has {len} fields where the header has {expected_len}: the file looks truncated or garbled"
            ),
        ),
        csv::ErrorKind::Io(io) => CoreError::reading(file, line, io),
        _ => CoreError::report_at_line(file, line, e.to_string()),
    }
}

/// Whether the CSV reader is inside a quoted field, to tell a file that
/// ends inside one (cut short) from one that ends cleanly. Follows the
/// `csv` crate's rules: a quote opens a quoted field only at its start;
/// inside one, `""` is a quote and `"` closes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    Outside,
    Quoted,
    /// A quote seen inside a quoted field: it closes the field unless the
    /// next byte is another quote.
    QuoteInQuoted,
}

/// Watches the bytes the CSV reader takes: the quoting state at the end,
/// and lines longer than [`MAX_LINE_BYTES`] (refused with [`LineTooLong`]
/// so memory stays bounded). Jumps from quote to quote (`memchr`): a
/// report without quotes costs one scan per buffer.
struct Watch<'a> {
    inner: &'a mut dyn BufRead,
    delimiter: u8,
    quoting: Quoting,
    /// The byte before the buffer being looked at (`\n` at the start).
    prev: u8,
    /// The line being read (1-based, in the whole file).
    line: u64,
    line_len: usize,
}

impl Watch<'_> {
    fn scan(&mut self, buf: &[u8]) {
        let mut i = 0;
        while i < buf.len() {
            match self.quoting {
                Quoting::Quoted => match memchr::memchr(b'"', &buf[i..]) {
                    Some(j) => {
                        self.quoting = Quoting::QuoteInQuoted;
                        i += j + 1;
                    }
                    None => break,
                },
                Quoting::QuoteInQuoted => {
                    self.quoting = if buf[i] == b'"' {
                        i += 1;
                        Quoting::Quoted
                    } else {
                        Quoting::Outside
                    };
                }
                Quoting::Outside => match memchr::memchr(b'"', &buf[i..]) {
                    Some(j) => {
                        let at = i + j;
                        let before = if at == 0 { self.prev } else { buf[at - 1] };
                        if before == self.delimiter || before == b'\n' || before == b'\r' {
                            self.quoting = Quoting::Quoted;
                        }
                        i = at + 1;
                    }
                    None => break,
                },
            }
        }
        if let Some(&last) = buf.last() {
            self.prev = last;
        }
    }
}

impl Read for Watch<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let got = &buf[..n];
        self.scan(got);
        match memchr::memrchr(b'\n', got) {
            Some(i) => {
                self.line += memchr::memchr_iter(b'\n', got).count() as u64;
                self.line_len = n - i - 1;
            }
            None => self.line_len += n,
        }
        if self.line_len > MAX_LINE_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                LineTooLong { line: self.line },
            ));
        }
        Ok(n)
    }
}

/// A VTune function-grouped CSV report read one row at a time: memory
/// stays that of one record, whatever the report's size. The header is
/// read by [`HotspotRows::new`]; each [`Iterator::next`] reads one row.
/// After the first error the iterator ends.
///
/// ```
/// use lotus_backend_vtune::HotspotRows;
///
/// let csv = b"Function,CPU Time,Module\nmemcpy,1.5,libc.so.6\nmemcpy,0.5,libc.so.6\n";
/// let mut input = &csv[..];
/// let mut total = 0.0;
/// for row in HotspotRows::new(&mut input, "r.csv").unwrap() {
///     total += row.unwrap().value;
/// }
/// assert_eq!(total, 2.0);
/// ```
pub struct HotspotRows<'a> {
    file: String,
    header: Vec<String>,
    cols: Columns,
    reader: csv::Reader<Watch<'a>>,
    record: csv::ByteRecord,
    last_line: u64,
    done: bool,
    /// The CPU times read so far, summed (kept finite).
    total_time: f64,
}

impl<'a> HotspotRows<'a> {
    /// Reads the header of the report in `input`. `file` names the input
    /// in errors.
    pub fn new(input: &'a mut dyn BufRead, file: &str) -> Result<Self, CoreError> {
        let header_line = read_header_line(input, file)?;
        if header_line.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(CoreError::report(file, "empty report: no header line")
                .with_hint("re-run `vtune -report hotspots ... -format csv`"));
        }
        let header_text = std::str::from_utf8(&header_line).map_err(|e| {
            CoreError::report_at(
                file,
                1,
                format!(
                    "header is not valid UTF-8 (bad byte at offset {})",
                    e.valid_up_to()
                ),
            )
        })?;
        let tabs = header_text.matches('\t').count();
        let commas = header_text.matches(',').count();
        let delimiter = if tabs > commas { b'\t' } else { b',' };
        let header: Vec<String> = {
            let mut r = csv::ReaderBuilder::new()
                .has_headers(false)
                .delimiter(delimiter)
                .from_reader(header_text.as_bytes());
            let mut rec = csv::StringRecord::new();
            r.read_record(&mut rec).map_err(|e| csv_error(e, file, 0))?;
            rec.iter().map(|s| s.trim().to_string()).collect()
        };
        let cols = Columns::from_header(&header, file)?;
        let watch = Watch {
            inner: input,
            delimiter,
            quoting: Quoting::Outside,
            prev: b'\n',
            line: 2,
            line_len: 0,
        };
        let reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .delimiter(delimiter)
            .flexible(false)
            .from_reader(watch);
        Ok(HotspotRows {
            file: file.to_string(),
            header,
            cols,
            reader,
            record: csv::ByteRecord::new(),
            last_line: 1,
            done: false,
            total_time: 0.0,
        })
    }

    /// The header's column names.
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// Reads the next row; `None` at the end of the report.
    fn read_row(&mut self) -> Result<Option<Row>, CoreError> {
        let file = self.file.as_str();
        let (header, cols, record) = (&self.header, &self.cols, &mut self.record);
        match self.reader.read_byte_record(record) {
            Ok(true) => {}
            Ok(false) => {
                // The CSV reader takes an unclosed quote at the end of the
                // input as the end of the field: a file cut inside a quoted
                // name would give a row with half a name.
                if self.reader.get_ref().quoting == Quoting::Quoted {
                    return Err(CoreError::report_at(
                        file,
                        self.last_line,
                        "the file ends inside a quoted field of this row: it looks truncated",
                    )
                    .with_hint("re-export the report"));
                }
                return Ok(None);
            }
            Err(e) => return Err(csv_error(e, file, 1)),
        }
        let line = record.position().map_or(0, |p| p.line()) + 1;
        self.last_line = line;
        if record.len() != header.len() {
            return Err(CoreError::report_at(
                file,
                line,
                format!(
                    "row has {} fields where the header has {}: the file looks truncated or garbled",
                    record.len(),
                    header.len()
                ),
            ));
        }
        let get = |i: usize, name: &str| field_text(&record[i], file, line, name);
        let function = get(cols.function, &header[cols.function])?;
        let time_text = get(cols.time, &header[cols.time])?;
        let time = parse_figure(time_text).ok_or_else(|| {
            CoreError::report_at(
                file,
                line,
                format!(
                    "'{}' is not a number in column '{}'",
                    quote_cut(time_text, 80),
                    quote_cut(&header[cols.time], 80)
                ),
            )
        })?;
        if time < 0.0 {
            return Err(CoreError::report_at(
                file,
                line,
                format!(
                    "'{}' in column '{}' is negative: a CPU time is 0 or more (the report looks garbled or edited)",
                    quote_cut(time_text, 80),
                    quote_cut(&header[cols.time], 80)
                ),
            ));
        }
        // Each time is finite; their sum must be too, or an op's total
        // would be infinite (written as `null` in JSON).
        self.total_time += time;
        if !self.total_time.is_finite() {
            return Err(CoreError::report_at(
                file,
                line,
                "the CPU times up to this row add up to more than a number can hold (the report looks garbled)",
            ));
        }
        let module = match cols.module {
            Some(i) => get(i, MODULE_COLUMN)?,
            None => UNKNOWN_MODULE,
        };
        let function = if function.trim().is_empty() {
            "[Unknown]"
        } else {
            function
        };
        let mut row = Row::new(function, module, time);
        if let Some(i) = cols.full_name {
            let full = get(i, FULL_NAME_COLUMN)?.trim();
            if !full.is_empty() && full != row.function {
                row.full_name = Some(full.to_string());
            }
        }
        if let Some(i) = cols.source {
            let src = get(i, SOURCE_COLUMN)?.trim();
            if !src.is_empty() && src != "[Unknown]" {
                row.source_file = Some(src.to_string());
            }
        }
        if let Some(i) = cols.address {
            let text = get(i, ADDRESS_COLUMN)?.trim();
            row.start_address = parse_address(text).filter(|&a| a != 0);
        }
        for (i, name) in &cols.counters {
            if let Some(v) = parse_figure(get(*i, name)?) {
                row.counters.insert(name.clone(), v);
            }
        }
        Ok(Some(row))
    }
}

impl Iterator for HotspotRows<'_> {
    type Item = Result<Row, CoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.read_row().transpose();
        if !matches!(next, Some(Ok(_))) {
            self.done = true;
        }
        next
    }
}

/// Reads a VTune function-grouped CSV report (hotspots, or any analysis
/// grouped by function). `file` names the input in errors. CPU time is in
/// seconds; every other numeric column becomes a counter. The rows are
/// read one at a time ([`HotspotRows`]) and all kept in the [`Report`].
pub fn read_hotspots(input: &mut dyn BufRead, file: &str) -> Result<Report, CoreError> {
    let rows = HotspotRows::new(input, file)?.collect::<Result<Vec<_>, _>>()?;
    Ok(Report {
        stacks: Vec::new(),
        unit: Unit::Seconds,
        rows,
    })
}

fn parse_address(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &[u8]) -> Result<Report, CoreError> {
        read_hotspots(&mut &text[..], "t.csv")
    }

    #[test]
    fn reads_columns_by_name_in_any_order() {
        let r = read(b"Module,CPU Time:Self,Function,Extra\nlibc.so.6,1.5,memcpy,2\n/x/liba.so,0.25,_ZN3foo3barEv,x\n")
            .expect("reads");
        assert_eq!(r.unit, Unit::Seconds);
        assert_eq!(r.rows.len(), 2);
        assert_eq!(
            (
                r.rows[0].function.as_str(),
                r.rows[0].module.as_str(),
                r.rows[0].value
            ),
            ("memcpy", "libc.so.6", 1.5)
        );
        assert_eq!(r.rows[0].counters.get("Extra"), Some(&2.0));
        assert_eq!(r.rows[1].function, "foo::bar()");
        assert_eq!(r.rows[1].module, "liba.so");
        assert_eq!(r.rows[1].module_path.as_deref(), Some("/x/liba.so"));
        assert!(r.rows[1].counters.is_empty());
    }

    #[test]
    fn self_time_wins_over_total() {
        let r = read(b"Function,CPU Time:Total,CPU Time:Self,Module\nf,9,1,m\n").expect("reads");
        assert_eq!(r.rows[0].value, 1.0);
    }

    #[test]
    fn tab_separated_with_suffixes_and_separators() {
        let r = read(b"Source Function / Function / Call Stack\tCPU Time\tClockticks\tRetiring\tModule\tStart Address\ndecode_mcu\t1868.632s\t6,275,872,000,000\t41.5%\t[Unknown]\t0\n").expect("reads");
        let row = &r.rows[0];
        assert_eq!(row.value, 1868.632);
        assert_eq!(row.counters["Clockticks"], 6.275872e12);
        assert_eq!(row.counters["Retiring"], 41.5);
        assert_eq!(row.module, "[Unknown]");
        assert_eq!(row.start_address, None);
    }

    #[test]
    fn quoted_names_with_commas() {
        let r = read(b"Function,CPU Time,Module,Start Address\n\"f(char**, long)\",2.0,libtorch_cpu.so,0x58c96f0\n").expect("reads");
        assert_eq!(r.rows[0].function, "f(char**, long)");
        assert_eq!(r.rows[0].start_address, Some(0x58c96f0));
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = read(b"Function,Module\nf,m\n").unwrap_err();
        assert_eq!(e.line(), Some(1));
        assert!(
            e.report_message().unwrap_or_default().contains("CPU time"),
            "{e}"
        );
        let e = read(b"Function,CPU Time,Module\nf,1.0,m\ng,abc,m\n").unwrap_err();
        assert_eq!(e.line(), Some(3));
        assert!(
            e.report_message().unwrap_or_default().contains("'abc'"),
            "{e}"
        );
        let e = read(b"Function,CPU Time,Module\nf,1.0,m\ng,2.").unwrap_err();
        assert_eq!(e.line(), Some(3));
        assert!(
            e.report_message().unwrap_or_default().contains("truncated"),
            "{e}"
        );
        let e = read(b"Function,CPU Time,Module\n\xff\xfe,1.0,m\n").unwrap_err();
        assert_eq!(e.line(), Some(2));
        assert!(
            e.report_message().unwrap_or_default().contains("UTF-8"),
            "{e}"
        );
        assert!(read(b"")
            .unwrap_err()
            .report_message()
            .unwrap_or_default()
            .contains("empty"));
    }

    #[test]
    fn cut_inside_a_quoted_last_field_is_an_error() {
        let e = read(b"Function,CPU Time,Module\nf,1.0,m\ng,2.0,\"/usr/li").unwrap_err();
        assert_eq!(e.line(), Some(3), "{e}");
        assert!(
            e.report_message().unwrap_or_default().contains("truncated"),
            "{e}"
        );
        // A closed quote at the end is a complete field.
        let r = read(b"Function,CPU Time,Module\ng,2.0,\"/usr/lib/a.so\"").expect("reads");
        assert_eq!(r.rows[0].module, "a.so");
    }

    #[test]
    fn unterminated_quote_is_an_error_not_a_row() {
        let e = read(b"Function,CPU Time,Module\n\"f(char**, long,1.0,m\n").unwrap_err();
        assert_eq!(e.line(), Some(2), "{e}");
    }

    #[test]
    fn negative_times_and_sums_past_a_number_are_refused_with_the_line() {
        let e = read(b"Function,Module,CPU Time\nf,m.so,1.0\ng,m.so,-0.5\n").unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("t.csv:3:") && e.contains("negative"), "{e}");
        let e = read(b"Function,Module,CPU Time\nf,m.so,1e308\ng,m.so,1e308\n").unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("t.csv:3:") && e.contains("add up"), "{e}");
    }
}
