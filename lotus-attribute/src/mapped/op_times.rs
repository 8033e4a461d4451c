//! The ops' own times, read from a CSV of `op,seconds` or from a lotus
//! trace folder: the weights that divide a function several ops share.

use lotus_sys::input::Dir;
use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::Path;

use super::Error;
use lotus_core::parse_figure;
use lotus_core::{quote_cut, LineTooLong, MAX_LINE_BYTES};
use lotus_trace::op_totals;
use lotus_trace::{TraceError, TraceFolder, TraceIndex, Warnings};

/// Each op's own time, the weights that divide a shared function.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct OpTimes {
    /// Where the times came from (a file name), for the output.
    pub source: String,
    /// Seconds per op.
    pub seconds: BTreeMap<String, f64>,
}

/// Column names read as the op in an op-times file with a header.
const OP_COLUMNS: &[&str] = &["op", "name", "op_name"];
/// Column names read as the seconds in an op-times file with a header.
const SECONDS_COLUMNS: &[&str] = &[
    "seconds",
    "time_s",
    "cpu_time_s",
    "wall_s",
    "time",
    "total_s",
];

/// The file a trace folder may give op times in ([`OpTimes::read_path`]).
pub const TRACE_OP_TIMES: &str = "op_times.csv";

impl OpTimes {
    /// The trace's op times as the CSV [`OpTimes::read_csv`] reads
    /// (`op,seconds`: each op's total time, as `lotus trace stats
    /// --op-times` writes it), with how many ops; `None` where the trace
    /// has no op events.
    pub fn csv_of_trace(index: &TraceIndex) -> Option<(String, usize)> {
        let totals = op_totals(index);
        if totals.is_empty() {
            return None;
        }
        let mut text = String::from("op,seconds\n");
        for (op, ns) in &totals {
            // Op names may hold commas or quotes (a transform's repr):
            // quoted as CSV does; one a spreadsheet would run as a formula
            // gets a leading `'`.
            let op = lotus_sys::text::csv_cell(op);
            let name = if op.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", op.replace('"', "\"\""))
            } else {
                op.to_string()
            };
            text += &format!("{name},{:.9}\n", *ns as f64 / 1e9);
        }
        Some((text, totals.len()))
    }

    /// Reads a CSV of `op,seconds`, streaming. The header line is optional
    /// (a first line whose seconds are not a number is one); with a header,
    /// the columns are found by name (`op` and `seconds`, `time_s`,
    /// `cpu_time_s`...), without one they are the first two. An op on
    /// two lines is refused (which of the two is meant is not known), and
    /// so are times whose sum is not finite. Blank lines and `#` comments
    /// are skipped. `file` names the input in errors.
    pub fn read_csv(input: &mut dyn BufRead, file: &str) -> Result<OpTimes, Error> {
        let err = |line: u64, message: String| Error::OpTimes {
            file: file.to_string(),
            line: Some(line),
            message,
        };
        let mut seconds: BTreeMap<String, f64> = BTreeMap::new();
        let mut first_line: std::collections::HashMap<String, u64> = Default::default();
        let mut total = 0.0f64;
        let mut columns: Option<(usize, usize)> = None;
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            // At most one line of MAX_LINE_BYTES: memory stays bounded
            // whatever the file is.
            let n = (&mut *input)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut buf)
                .map_err(|e| Error::OpTimes {
                    file: file.to_string(),
                    line: None,
                    message: format!("cannot read: {e}"),
                })?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if buf.len() > MAX_LINE_BYTES {
                return Err(err(line_no, LineTooLong { line: line_no }.to_string()));
            }
            let text = std::str::from_utf8(&buf).map_err(|e| {
                err(
                    line_no,
                    format!(
                        "not valid UTF-8 (bad byte at offset {}): expected lines of 'op,seconds'",
                        e.valid_up_to()
                    ),
                )
            })?;
            let line = text.trim_start_matches('\u{feff}').trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = csv_fields(line);
            let fields: Vec<&str> = fields.iter().map(|f| f.trim()).collect();
            let (op_col, s_col) = match columns {
                Some(c) => c,
                None => {
                    // The first line: a header when its seconds column is
                    // not a number.
                    let is_data = fields.len() >= 2 && parse_figure(fields[1]).is_some();
                    if is_data {
                        columns = Some((0, 1));
                        (0, 1)
                    } else {
                        let find = |names: &[&str]| {
                            fields
                                .iter()
                                .position(|f| names.iter().any(|n| f.eq_ignore_ascii_case(n)))
                        };
                        let op = find(OP_COLUMNS).unwrap_or(0);
                        let s = find(SECONDS_COLUMNS).or((fields.len() >= 2).then_some(1));
                        match s {
                            Some(s) if s != op => columns = Some((op, s)),
                            _ => {
                                return Err(err(
                                    line_no,
                                    format!("expected 'op,seconds' (a header, or an op name and its seconds), found '{}'", quote_cut(line, 80)),
                                ))
                            }
                        }
                        continue;
                    }
                }
            };
            let (Some(op), Some(text)) = (fields.get(op_col), fields.get(s_col)) else {
                return Err(err(
                    line_no,
                    format!(
                        "expected an op name and its seconds, found '{}'",
                        quote_cut(line, 80)
                    ),
                ));
            };
            // A name lotus wrote with a leading `'` (a formula guard,
            // `lotus_sys::text::csv_cell`) reads back as it was.
            let op = &lotus_sys::text::csv_uncell(op);
            if op.is_empty() {
                return Err(err(line_no, "empty op name".into()));
            }
            let v = parse_figure(text).filter(|v| *v >= 0.0).ok_or_else(|| {
                err(
                    line_no,
                    format!(
                        "'{}' is not a number of seconds of 0 or more",
                        quote_cut(text, 80)
                    ),
                )
            })?;
            if let Some(first) = first_line.get(*op) {
                return Err(err(
                    line_no,
                    format!(
                        "op '{}' is listed twice (first on line {first}): give each op once",
                        quote_cut(op, 80)
                    ),
                ));
            }
            total += v;
            if !total.is_finite() {
                return Err(err(
                    line_no,
                    format!(
                        "op '{}': the times add up to more than a number can hold",
                        quote_cut(op, 80)
                    ),
                ));
            }
            first_line.insert(op.to_string(), line_no);
            seconds.insert(op.to_string(), v);
        }
        if seconds.is_empty() {
            return Err(Error::OpTimes {
                file: file.to_string(),
                line: None,
                message: "no op times in it: expected lines of 'op,seconds'".into(),
            });
        }
        Ok(OpTimes {
            source: file.to_string(),
            seconds,
        })
    }

    /// Op times from a trace: the total duration of each op's events
    /// (kind `op`, name without the leading `S`), in seconds. `source`
    /// names the trace in outputs.
    pub fn from_totals(
        totals: impl IntoIterator<Item = (String, u64)>,
        source: &str,
    ) -> Result<OpTimes, Error> {
        let seconds: BTreeMap<String, f64> = totals
            .into_iter()
            .map(|(op, ns)| (op, ns as f64 / 1e9))
            .collect();
        if seconds.is_empty() {
            return Err(Error::OpTimes {
                file: source.to_string(),
                line: None,
                message:
                    "the trace has no op events (lines of kind op, such as SLoader or S<Transform>)"
                        .into(),
            });
        }
        Ok(OpTimes {
            source: source.to_string(),
            seconds,
        })
    }

    /// Reads `lotus attribute --op-times PATH`: a CSV
    /// ([`OpTimes::read_csv`]), or a trace folder (its logs, read through
    /// [`OpTimes::read_trace_dir`], their bad lines returned; else its
    /// [`TRACE_OP_TIMES`], opened inside it as its logs are: no link out
    /// of the folder, regular files only, bounded).
    pub fn read_path(path: &Path) -> Result<(OpTimes, Option<Warnings>), Error> {
        use std::io::BufReader;
        let cannot = |name: &str, e: std::io::Error| {
            Error::Io(format!("cannot open --op-times {name}: {e}"))
        };
        if !path.is_dir() {
            let name = path.display().to_string();
            let f = lotus_sys::input::open_regular(path).map_err(|e| cannot(&name, e))?;
            return Ok((OpTimes::read_csv(&mut BufReader::new(f), &name)?, None));
        }
        if let Some((times, warnings)) = OpTimes::read_trace_dir(path)? {
            return Ok((times, Some(warnings)));
        }
        let f = path.join(TRACE_OP_TIMES);
        if f.symlink_metadata().is_err() {
            return Err(Error::Io(format!(
                "--op-times {}: a folder is read as a lotus trace (its <prefix>_main_pid_<pid> / <prefix>_worker_pid_<pid> logs, or an {TRACE_OP_TIMES}), and this one has none; give a CSV of op,seconds (one line per op) instead",
                path.display()
            )));
        }
        let name = f.display().to_string();
        let opened = lotus_sys::input::Folder::open(path)
            .and_then(|dir| dir.open_file(Path::new(TRACE_OP_TIMES)))
            .map_err(|e| cannot(&name, e))?;
        Ok((OpTimes::read_csv(&mut BufReader::new(opened), &name)?, None))
    }

    /// Reads a lotus trace folder (its `*_main_pid_*` / `*_worker_pid_*`
    /// logs, recursively) through [`lotus_trace`]: each op's total time.
    /// `None` when the folder holds no trace logs. Bad lines are skipped
    /// and returned.
    pub fn read_trace_dir<'a>(
        dir: impl Into<Dir<'a>>,
    ) -> Result<Option<(OpTimes, Warnings)>, Error> {
        let dir: Dir<'_> = dir.into();
        let source = dir.path().display().to_string();
        let err = |e: TraceError| Error::OpTimes {
            file: source.clone(),
            line: None,
            message: e.to_string(),
        };
        let folder = match TraceFolder::scan(dir) {
            Ok(f) => f,
            Err(TraceError::NoLogs { .. }) => return Ok(None),
            Err(e) => return Err(err(e)),
        };
        let budget = lotus_sort::Budget::from_env().map_err(|e| err(e.into()))?;
        let index = TraceIndex::load(&folder, false, budget, |_| {}).map_err(err)?;
        let times = OpTimes::from_totals(op_totals(&index), &source)?;
        Ok(Some((times, index.warnings)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_times_csv() {
        let read = |t: &str| OpTimes::read_csv(&mut t.as_bytes(), "t.csv");
        let t = read("op,seconds\nA,1.5\nB, 2\n\n# c\n").expect("reads");
        assert_eq!(t.seconds["A"], 1.5);
        assert_eq!(t.seconds["B"], 2.0);
        let e = read("op,seconds\nA,1.5\nB, 2\n\n# c\nA,0.5\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:6: op 'A' is listed twice (first on line 2): give each op once"
        );
        let e = read("A,1e308\nB,1e308\n").unwrap_err();
        assert!(e.to_string().starts_with("t.csv:2: op 'B'"), "{e}");
        let t = read("A,1\n\"B\",3s\n").expect("no header");
        assert_eq!(t.seconds["B"], 3.0);
        let t = read("calls,time_s,op\n9,1.25,X\n").expect("named columns");
        assert_eq!(t.seconds["X"], 1.25);
        let e = read("op,seconds\nA,x\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.csv:2: 'x' is not a number of seconds of 0 or more"
        );
        let e = read("A,-1\n").unwrap_err();
        assert!(e.to_string().starts_with("t.csv:1:"), "{e}");
        assert!(read("op,seconds\n")
            .unwrap_err()
            .to_string()
            .contains("no op times"));
        assert!(read("justone\n")
            .unwrap_err()
            .to_string()
            .contains("'op,seconds'"));
    }

    #[test]
    fn op_times_from_trace_totals() {
        let t = OpTimes::from_totals([("Loader".to_string(), 1_500_000_000)], "t").expect("times");
        assert_eq!(t.seconds["Loader"], 1.5);
        let e = OpTimes::from_totals([], "t").unwrap_err().to_string();
        assert!(e.starts_with("t: the trace has no op events"), "{e}");
    }
}

/// The fields of one CSV line: commas inside double quotes do not split,
/// and `""` inside quotes is one quote (as `lotus trace stats --op-times`
/// and spreadsheets write op names that hold commas).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

#[cfg(test)]
mod csv_field_tests {
    use super::csv_fields;

    #[test]
    fn quoted_commas_and_quotes() {
        assert_eq!(csv_fields("a,1.5"), ["a", "1.5"]);
        assert_eq!(
            csv_fields("\"Resize(size=(224, 224))\",2.0"),
            ["Resize(size=(224, 224))", "2.0"]
        );
        assert_eq!(csv_fields("\"say \"\"hi\"\"\",3"), ["say \"hi\"", "3"]);
        assert_eq!(csv_fields(""), [""]);
    }
}
