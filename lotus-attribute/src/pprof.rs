//! Sampled trace folders as one gzipped pprof profile (`lotus export
//! --format pprof`): google/pprof's `profile.proto`, which `go tool
//! pprof`, Pyroscope and Parca read.
//!
//! Each sample of a folder is credited to its row by the rule `lotus
//! attribute DIR` applies, through the fold `--format folded` draws
//! (`in_pipeline::fold`, kept by thread): so the profile's totals are
//! attribute's by construction. The samples of one row, thread and call
//! stack are one pprof sample with their count: two values,
//! `samples/count` and `cpu/nanoseconds` (the count times the folder's
//! sampling interval, as `lotus attribute` counts a sample's CPU), and
//! string labels: `op` (the row's key in `lotus attribute DIR --format
//! json`: an op's path `A/B`, or a row's name), `process_role` (`main`,
//! `worker`, or `untraced` for a process that wrote no log), `pid`,
//! `tid`, `folder` (the DIR as given) and, where the folder's logs name
//! them, `host` and `rank`.
//!
//! Its locations are the stack's frames leaf first (as pprof wants): one
//! location and function per symbol of a folder, a native function with
//! its module as filename and as mapping, a Python frame (`py::qualname`)
//! with its file as filename and, where lotus read it from the
//! interpreter, the line its function begins on as the function's
//! `start_line` and the location's line. The period is the first folder's interval
//! (`cpu/nanoseconds`).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use lotus_samples::{SymbolTable, UNKNOWN_SYMBOL};
use lotus_sort::Budget;

use crate::in_pipeline::{fold, ThreadStack};
use crate::Error;

/// What [`write_pprof`] wrote, for the closing note.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PprofWritten {
    /// Folders read.
    pub folders: usize,
    /// Samples read (what the profile's `samples` values add up to).
    pub samples: u64,
    /// Their CPU time, ns (what its `cpu` values add up to).
    pub cpu_ns: u64,
    /// The profile's samples: distinct (row, thread, stack) of each folder.
    pub profile_samples: usize,
    /// Its locations (one per function of a folder).
    pub locations: usize,
    /// What is worth telling (a cut file, stacks missing...).
    pub notes: Vec<String>,
}

/// Writes the samples of the sampled trace folders `dirs` (of `prefix`:
/// `lotus trace run --sample` folders, their ops from the tracer's spans,
/// or `lotus trace attach` folders, their ops from the samples' frames)
/// to `out` as one gzipped pprof profile.
pub fn write_pprof<P: AsRef<Path>>(
    dirs: &[P],
    prefix: &str,
    budget: Budget,
    out: impl Write,
) -> Result<PprofWritten, Error> {
    let mut profile: Option<Builder> = None;
    let mut written = PprofWritten::default();
    for (i, dir) in dirs.iter().enumerate() {
        let dir = dir.as_ref();
        let f = fold(dir, prefix, budget, true)?;
        let builder = profile.get_or_insert_with(|| Builder::new(f.interval_ns));
        let shown = dir.display().to_string();
        let places = places_of(dir);
        for t in &f.by_thread {
            let place = places.get(&t.pid).cloned().unwrap_or_default();
            builder.add(i, &shown, &place, &f.symbols, t, f.interval_ns);
        }
        written.samples += f.samples;
        let cpu = f.by_thread.iter().map(|t| cpu_ns(t.samples, f.interval_ns));
        written.cpu_ns = cpu.fold(written.cpu_ns, u64::saturating_add);
        let said = |n: &String| match dirs.len() {
            1 => n.clone(),
            _ => format!("{shown}: {n}"),
        };
        written.notes.extend(f.notes.iter().map(said));
        written.folders += 1;
    }
    let profile = profile.unwrap_or_else(|| Builder::new(0)).finish();
    written.profile_samples = profile.sample.len();
    written.locations = profile.location.len();
    encode(&profile, out).map_err(|e| Error::Io(format!("cannot write the pprof profile: {e}")))?;
    Ok(written)
}

/// The CPU time of `n` samples taken every `interval_ns`, ns.
fn cpu_ns(n: u64, interval_ns: u64) -> u64 {
    n.saturating_mul(interval_ns)
}

/// `n` as a profile's value (its int64), saturated.
fn value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Where a process ran, where its log's header says: its host and rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) host: Option<String>,
    pub(crate) rank: Option<u32>,
}

/// Each process's host and rank in `dir`, from its logs' headers (none
/// where the folder has no logs, or they name neither): the first line
/// of each log is read ([`lotus_trace::LogHeader::of`]).
pub(crate) fn places_of(dir: &Path) -> HashMap<u32, Place> {
    let Ok(folder) = lotus_trace::TraceFolder::scan(dir) else {
        return HashMap::new();
    };
    let mut places = HashMap::new();
    for log in &folder.logs {
        let Some(h) = lotus_trace::LogHeader::of(log) else {
            continue;
        };
        let place = Place {
            host: h.host.as_deref().map(str::to_string),
            rank: h.rank,
        };
        if place != Place::default() {
            places.insert(log.name.pid, place);
        }
    }
    places
}

/// The profile in the making: each string, function, mapping and
/// location once.
struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    /// By (name, filename) string ids and first line.
    functions: HashMap<(i64, i64, i64), u64>,
    /// By filename string id.
    mappings: HashMap<i64, u64>,
    /// By (folder, symbol id).
    locations: HashMap<(usize, u32), u64>,
}

impl Builder {
    /// An empty profile of samples taken every `interval_ns`.
    fn new(interval_ns: u64) -> Builder {
        let mut b = Builder {
            profile: Profile::default(),
            strings: HashMap::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            locations: HashMap::new(),
        };
        // pprof's string table starts with "".
        b.string("");
        let samples = b.value_type("samples", "count");
        let cpu = b.value_type("cpu", "nanoseconds");
        b.profile.sample_type = vec![samples, cpu];
        b.profile.period_type = Some(cpu);
        b.profile.period = value(interval_ns);
        b.profile.default_sample_type = cpu.r#type;
        b
    }

    /// The id of the string `s` in the table.
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), id);
        id
    }

    fn value_type(&mut self, kind: &str, unit: &str) -> ValueType {
        ValueType {
            r#type: self.string(kind),
            unit: self.string(unit),
        }
    }

    /// The location of symbol `id` of folder `folder`.
    fn location(&mut self, folder: usize, symbols: &SymbolTable, id: u32) -> u64 {
        if let Some(&l) = self.locations.get(&(folder, id)) {
            return l;
        }
        let s = symbols.get(id);
        let name = self.string(if s.function.is_empty() {
            UNKNOWN_SYMBOL
        } else {
            &s.function
        });
        // A Python frame's file and the line its function begins on.
        let (path, line) = s.py_file_line();
        let line = i64::from(line.unwrap_or(0));
        let file = self.string(path);
        let next = self.profile.function.len() as u64 + 1;
        let function_id = *self.functions.entry((name, file, line)).or_insert(next);
        if function_id == next {
            self.profile.function.push(Function {
                id: function_id,
                name,
                system_name: name,
                filename: file,
                start_line: line,
            });
        }
        // A native function's module is its mapping; a Python frame's
        // file is no mapping of the process.
        let mapping_id = if s.function.starts_with("py::") {
            0
        } else {
            let next = self.profile.mapping.len() as u64 + 1;
            let m = *self.mappings.entry(file).or_insert(next);
            if m == next {
                self.profile.mapping.push(Mapping {
                    id: m,
                    filename: file,
                    has_functions: true,
                    ..Mapping::default()
                });
            }
            m
        };
        let l = self.profile.location.len() as u64 + 1;
        self.profile.location.push(Location {
            id: l,
            mapping_id,
            address: 0,
            line: vec![Line {
                function_id,
                line,
                column: 0,
            }],
            is_folded: false,
        });
        self.locations.insert((folder, id), l);
        l
    }

    /// A string label.
    fn label(&mut self, key: &str, text: &str) -> Label {
        Label {
            key: self.string(key),
            str: self.string(text),
            ..Label::default()
        }
    }

    /// The samples `t` of folder `folder` (shown as `shown`), whose
    /// processes ran where `place` says, taken every `interval_ns`.
    fn add(
        &mut self,
        folder: usize,
        shown: &str,
        place: &Place,
        symbols: &SymbolTable,
        t: &ThreadStack,
        interval_ns: u64,
    ) {
        // Leaf first: the fold's ids are outermost first.
        let location_id = t
            .ids
            .iter()
            .rev()
            .map(|&id| self.location(folder, symbols, id))
            .collect();
        let role = t.role.map_or("untraced", |r| r.as_str());
        let mut label = vec![
            self.label("op", &t.row),
            self.label("process_role", role),
            self.label("pid", &t.pid.to_string()),
            self.label("tid", &t.tid.to_string()),
            self.label("folder", shown),
        ];
        if let Some(host) = &place.host {
            label.push(self.label("host", host));
        }
        if let Some(rank) = place.rank {
            label.push(self.label("rank", &rank.to_string()));
        }
        self.profile.sample.push(Sample {
            location_id,
            value: vec![value(t.samples), value(cpu_ns(t.samples, interval_ns))],
            label,
        });
    }

    fn finish(self) -> Profile {
        self.profile
    }
}

/// `profile`, serialized and gzipped, to `out`.
fn encode(profile: &Profile, out: impl Write) -> std::io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&prost::Message::encode_to_vec(profile))?;
    gz.finish()?.flush()
}

// google/pprof's profile.proto (Apache-2.0), the messages lotus writes,
// with their field numbers.

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, prost::Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, tag = "14")]
    default_sample_type: i64,
}

/// `ValueType`: a value's kind and unit (string ids).
#[derive(Clone, Copy, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

/// `Sample`: its locations (leaf first), values and labels.
#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

/// `Label`: a string label (`str`) or a number (`num`).
#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
    #[prost(int64, tag = "3")]
    num: i64,
    #[prost(int64, tag = "4")]
    num_unit: i64,
}

/// `Mapping`: a module.
#[derive(Clone, PartialEq, prost::Message)]
struct Mapping {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    memory_start: u64,
    #[prost(uint64, tag = "3")]
    memory_limit: u64,
    #[prost(uint64, tag = "4")]
    file_offset: u64,
    #[prost(int64, tag = "5")]
    filename: i64,
    #[prost(int64, tag = "6")]
    build_id: i64,
    #[prost(bool, tag = "7")]
    has_functions: bool,
    #[prost(bool, tag = "8")]
    has_filenames: bool,
    #[prost(bool, tag = "9")]
    has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    has_inline_frames: bool,
}

/// `Location`: a frame.
#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    mapping_id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
    #[prost(bool, tag = "5")]
    is_folded: bool,
}

/// `Line`: a location's function.
#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
    #[prost(int64, tag = "2")]
    line: i64,
    #[prost(int64, tag = "3")]
    column: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
    #[prost(int64, tag = "5")]
    start_line: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use lotus_samples::{SampleSink, Symbol};
    use lotus_trace::Role;
    use std::io::Read;

    fn symbols() -> SymbolTable {
        let dir = tempfile::tempdir().expect("dir");
        let mut w = lotus_samples::SamplesWriter::create(dir.path(), "lotus").expect("w");
        let symbols = [
            (0, Symbol::new("main", "/bin/python3")),
            (1, Symbol::new("py::Dataset.__getitem__", "/src/data.py:42")),
            (2, Symbol::new("inflate", "/lib/libz.so.1")),
        ];
        w.symbols(&symbols).expect("symbols");
        w.finish().expect("finish");
        lotus_samples::SampleFiles::open(dir.path(), "lotus")
            .and_then(|f| f.read_symbols())
            .expect("read")
    }

    fn stack(row: &str, pid: u32, role: Option<Role>, ids: &[u32], n: u64) -> ThreadStack {
        ThreadStack {
            row: row.into(),
            pid,
            tid: pid + 1,
            role,
            ids: ids.to_vec(),
            samples: n,
        }
    }

    fn string(p: &Profile, id: i64) -> &str {
        &p.string_table[id as usize]
    }

    /// The labels of a sample, by key.
    fn labels(p: &Profile, s: &Sample) -> HashMap<String, String> {
        s.label
            .iter()
            .map(|l| (string(p, l.key).into(), string(p, l.str).into()))
            .collect()
    }

    #[test]
    fn a_hand_made_fold_becomes_samples_leaf_first_with_their_labels() {
        let symbols = symbols();
        let mut b = Builder::new(1_000_000);
        let place = Place {
            host: Some("node1".into()),
            rank: Some(3),
        };
        b.add(
            0,
            "run1",
            &place,
            &symbols,
            &stack("Decode/Crop", 10, Some(Role::Worker), &[0, 1, 2], 7),
            1_000_000,
        );
        b.add(
            0,
            "run1",
            &Place::default(),
            &symbols,
            &stack("untraced processes", 20, None, &[0, 2], 2),
            1_000_000,
        );
        let p = b.finish();
        assert_eq!(p.string_table[0], "");
        assert_eq!(string(&p, p.sample_type[0].r#type), "samples");
        assert_eq!(string(&p, p.sample_type[0].unit), "count");
        assert_eq!(string(&p, p.sample_type[1].r#type), "cpu");
        assert_eq!(string(&p, p.sample_type[1].unit), "nanoseconds");
        assert_eq!(p.period, 1_000_000);
        assert_eq!(p.period_type, Some(p.sample_type[1]));
        // Ids start at 1; each symbol is one location and function.
        let ids: Vec<u64> = p.location.iter().map(|l| l.id).collect();
        assert_eq!(ids, vec![1, 2, 3]);
        assert_eq!(
            p.function.iter().map(|f| f.id).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let name_of = |loc: u64| {
            let l = &p.location[loc as usize - 1];
            let f = &p.function[l.line[0].function_id as usize - 1];
            assert_eq!(
                l.line[0].line, f.start_line,
                "the line is the function's first"
            );
            (string(&p, f.name), string(&p, f.filename), l.mapping_id)
        };
        let first = &p.sample[0];
        assert_eq!(first.value, vec![7, 7_000_000]);
        let frames: Vec<_> = first.location_id.iter().map(|&l| name_of(l)).collect();
        assert_eq!(
            frames,
            vec![
                ("inflate", "/lib/libz.so.1", 1),
                ("py::Dataset.__getitem__", "/src/data.py", 0),
                ("main", "/bin/python3", 2),
            ]
        );
        // The Python frame's file, and its line 42 (read from the
        // interpreter, `file:line` in its module).
        let py = &p.location[first.location_id[1] as usize - 1];
        assert_eq!(py.line[0].line, 42);
        let l = labels(&p, first);
        assert_eq!(l["op"], "Decode/Crop");
        assert_eq!(l["process_role"], "worker");
        assert_eq!((l["pid"].as_str(), l["tid"].as_str()), ("10", "11"));
        assert_eq!((l["host"].as_str(), l["rank"].as_str()), ("node1", "3"));
        assert_eq!(l["folder"], "run1");
        // The second sample shares its locations; no host where none.
        let second = &p.sample[1];
        assert_eq!(second.location_id, vec![1, 3]);
        assert_eq!(second.value, vec![2, 2_000_000]);
        let l = labels(&p, second);
        assert_eq!(l["process_role"], "untraced");
        assert!(!l.contains_key("host") && !l.contains_key("rank"));
        // A Python frame's file is no mapping.
        let files: Vec<&str> = p.mapping.iter().map(|m| string(&p, m.filename)).collect();
        assert_eq!(files, ["/lib/libz.so.1", "/bin/python3"]);
        assert_eq!(p.mapping.iter().map(|m| m.id).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn the_profile_is_gzipped_protobuf_that_decodes_to_itself() {
        let symbols = symbols();
        let mut b = Builder::new(250);
        b.add(
            1,
            "d",
            &Place::default(),
            &symbols,
            &stack("A", 1, Some(Role::Main), &[0], 4),
            250,
        );
        let p = b.finish();
        let mut out = Vec::new();
        encode(&p, &mut out).expect("encode");
        assert_eq!(&out[..2], &[0x1f, 0x8b], "gzip magic");
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&out[..])
            .read_to_end(&mut raw)
            .expect("gunzip");
        let back = <Profile as prost::Message>::decode(&raw[..]).expect("decode");
        assert_eq!(back, p);
        assert_eq!(back.sample[0].value, vec![4, 1000]);
    }

    /// A folder of the in-pipeline tests: the profile's samples and CPU
    /// add up to the attribution's, per op label too.
    #[test]
    fn a_folders_samples_add_up_to_the_attribution_per_op() {
        let dir = crate::in_pipeline::tests::folder();
        let mut out = Vec::new();
        let w = write_pprof(&[dir.path()], "lotus", Budget::default(), &mut out).expect("pprof");
        let a =
            crate::attribute_folder(dir.path(), "lotus", Budget::default(), 5).expect("attributed");
        assert_eq!(w.samples, a.total_samples);
        assert_eq!(w.cpu_ns, a.total_samples * a.interval_ns);
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&out[..])
            .read_to_end(&mut raw)
            .expect("gunzip");
        let p = <Profile as prost::Message>::decode(&raw[..]).expect("decode");
        let mut by_op: HashMap<String, u64> = HashMap::new();
        for s in &p.sample {
            *by_op.entry(labels(&p, s)["op"].clone()).or_default() += s.value[0] as u64;
        }
        for r in &a.rows {
            assert_eq!(by_op.remove(&r.path).unwrap_or(0), r.samples, "{}", r.path);
        }
        assert!(by_op.is_empty(), "{by_op:?}");
    }
}
