//! The mapping: which native functions each Python op runs.
//!
//! A mapping is built from one or more runs per op ([`OpAccumulator`]),
//! filtered by a [`MergeRule`], and written as `lotus.mapping/1` JSON
//! ([`Mapping`]) or as the original Lotus tool's schema ([`LotusFormat`]).
//! Both schemas read back in through [`Mapping::from_json`].

use crate::Error;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{Read, Seek, SeekFrom};
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};

use crate::report_error::quote_cut;
use crate::row::{function_key, split_function_key, Report, StackCount, Unit};

mod read;
use read::{AnyMapping, ObjectOnly, SchemaProbe, Utf8Checked};

/// The most characters of a parser's message kept in an error: serde
/// quotes the value it did not expect, which may be huge.
const MESSAGE_CHARS: usize = 300;

/// The schema tag of lotus mappings.
pub const SCHEMA: &str = "lotus.mapping/1";

/// Which functions an op keeps when its runs disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MergeRule {
    /// Seen in any run (what the original tool's published mappings use).
    #[default]
    Union,
    /// Seen in more than half of the runs.
    Majority,
    /// Seen in every run.
    All,
    /// Seen in at least K runs.
    Min(u32),
}

impl MergeRule {
    /// Whether a function seen in `runs_seen` of `runs` runs is kept.
    pub fn keeps(self, runs_seen: u32, runs: u32) -> bool {
        match self {
            MergeRule::Union => runs_seen >= 1,
            MergeRule::Majority => 2 * runs_seen > runs,
            MergeRule::All => runs_seen >= runs && runs_seen >= 1,
            MergeRule::Min(k) => runs_seen >= k.max(1),
        }
    }
}

impl fmt::Display for MergeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MergeRule::Union => f.write_str("union"),
            MergeRule::Majority => f.write_str("majority"),
            MergeRule::All => f.write_str("all"),
            MergeRule::Min(k) => write!(f, "min:{k}"),
        }
    }
}

impl FromStr for MergeRule {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "union" => Ok(MergeRule::Union),
            "majority" => Ok(MergeRule::Majority),
            "all" => Ok(MergeRule::All),
            _ => match s.strip_prefix("min:").map(str::parse::<u32>) {
                Some(Ok(k)) if k >= 1 => Ok(MergeRule::Min(k)),
                _ => Err(Error::UnknownMergeRule(s.to_string())),
            },
        }
    }
}

impl Serialize for MergeRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MergeRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How the mapping was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Settings {
    /// Runs per op (the largest, where ops differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// Warm-up calls before each window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u32>,
    /// The merge rule applied.
    #[serde(default)]
    pub rule: MergeRule,
}

/// One native function of an op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionEntry {
    /// Demangled function name.
    pub function: String,
    /// Module file name.
    pub module: String,
    /// Samples (or CPU seconds, per the mapping's unit) summed over runs.
    #[serde(serialize_with = "serialize_number")]
    pub samples: f64,
    /// This function's part of the op's kept samples; sums to 1 per op.
    pub share: f64,
    /// How many runs saw the function.
    pub runs_seen: u32,
    /// Full module path, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_path: Option<String>,
    /// True when the harness floor (an empty op) shows this function too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<bool>,
}

/// One op's functions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpMapping {
    /// The op's name.
    pub name: String,
    /// Runs merged.
    pub runs: u32,
    /// Samples (or seconds) of the kept functions, summed.
    #[serde(serialize_with = "serialize_number")]
    pub samples: f64,
    /// Kept functions, most samples first.
    pub functions: Vec<FunctionEntry>,
    /// Live mapping only: what the op's windows measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSummary>,
    /// The op's call stacks over all runs, most samples first, where they
    /// were taken (`lotus map --stacks`): the sampled function's callers
    /// in the op alone, as a flame graph draws them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<StackCount>,
}

/// What an op's measurement windows held, over all runs (live mapping).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WindowSummary {
    /// Seconds the windows were open, summed over runs.
    pub seconds: f64,
    /// Op calls inside the windows, summed over runs (op mode; a script's
    /// calls inside its own windows are not counted: see `windows`).
    pub iterations: u64,
    /// Windows opened, summed over runs: one per run in op mode, each
    /// resume/pause pair of a script.
    #[serde(default)]
    pub windows: u64,
    /// Samples taken in the windows (before any rule).
    pub samples: u64,
    /// Samples the kernel dropped.
    #[serde(default)]
    pub lost_samples: u64,
    /// Counted events summed over the windows (`task-clock-ns`,
    /// `context-switches`, `page-faults`, `cycles`, `instructions`).
    #[serde(default, deserialize_with = "read::unique_keys")]
    pub counters: BTreeMap<String, f64>,
    /// Counters that cannot be measured here, and why.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "read::unique_keys"
    )]
    pub unsupported: BTreeMap<String, String>,
    /// The op's calls timed with sampling stopped right after each window,
    /// summed over runs: the reference for what sampling cost each call
    /// (see [`WindowSummary::sampling_cost`]). Absent where the backend
    /// cannot stop sampling outside windows (VTune, uProf), for scripts,
    /// and in mappings made before lotus timed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsampled: Option<UnsampledCalls>,
    /// What the backend knows the op's samples miss, each with its figure
    /// and the run it is about (e.g. "run 1: samples cover 0.72 s of the
    /// 0.97 s CPU process 1234 ran (74%)": kernel mode not sampled, lost
    /// or throttled samples, modules that could not be named). Absent when
    /// there is nothing to say, and in mappings made before lotus kept
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Op calls timed with sampling stopped (see [`WindowSummary::unsampled`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct UnsampledCalls {
    /// Calls timed.
    pub calls: u64,
    /// Their wall-clock seconds.
    pub seconds: f64,
    /// The op process's CPU seconds meanwhile (all its threads, the clock
    /// a window's `task-clock-ns` reads).
    pub cpu_seconds: f64,
}

impl UnsampledCalls {
    /// `calls` that took `seconds` of wall-clock time and `cpu_seconds` of
    /// the process's CPU time.
    pub fn new(calls: u64, seconds: f64, cpu_seconds: f64) -> Self {
        UnsampledCalls {
            calls,
            seconds,
            cpu_seconds,
        }
    }
}

/// What sampling cost an op's calls: its windows' CPU time per call
/// against the same op's unsampled calls'.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SamplingCost {
    /// CPU seconds a call in the windows (sampled).
    pub sampled_cpu_s: f64,
    /// CPU seconds a call with sampling stopped.
    pub unsampled_cpu_s: f64,
}

impl SamplingCost {
    /// How much more CPU time a sampled call took, as a fraction (0.48:
    /// 48% more); negative within noise.
    pub fn slowdown(&self) -> f64 {
        self.sampled_cpu_s / self.unsampled_cpu_s - 1.0
    }
}

impl WindowSummary {
    /// What sampling cost each call, where the windows counted calls and
    /// CPU time (`task-clock-ns`) and unsampled calls were timed.
    pub fn sampling_cost(&self) -> Option<SamplingCost> {
        let u = self.unsampled.as_ref()?;
        let cpu_ns = *self.counters.get(crate::compare::TASK_CLOCK_NS)?;
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if self.iterations == 0 || u.calls == 0 || !positive(u.cpu_seconds) || !positive(cpu_ns) {
            return None;
        }
        Some(SamplingCost {
            sampled_cpu_s: cpu_ns / 1e9 / self.iterations as f64,
            unsampled_cpu_s: u.cpu_seconds / u.calls as f64,
        })
    }
}

/// A function found under more than one op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SharedFunction {
    /// Function name.
    pub function: String,
    /// Module file name.
    pub module: String,
    /// The ops that run it, in the mapping's op order.
    pub ops: Vec<String>,
}

/// A `lotus.mapping/1` mapping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Mapping {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The backend that measured it.
    pub backend: String,
    /// How it was made.
    pub settings: Settings,
    /// What `samples` counts.
    #[serde(default)]
    pub unit: Unit,
    /// Per-op functions, in op order.
    pub ops: Vec<OpMapping>,
    /// Functions under two ops or more.
    pub shared: Vec<SharedFunction>,
    /// Set when read from another schema (`"lotus"`): then samples, shares
    /// and run counts were not in the input and are zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<String>,
    /// Live mapping only: the harness floor, an empty op run under the same
    /// harness. Its functions are the interpreter and harness, not any op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<OpMapping>,
    /// Where and with what the mapping was made (host, python, versions).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "read::unique_keys"
    )]
    pub environment: BTreeMap<String, String>,
    /// Ops that could not be mapped, and why: they are absent from `ops`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<OpFailure>,
}

/// An op that could not be mapped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpFailure {
    /// The op (or its file's stem when it never ran far enough to say).
    pub op: String,
    /// What went wrong.
    pub error: String,
}

/// Writes whole numbers as JSON integers (sample counts stay `2154`, not
/// `2154.0`) and everything else as floats.
fn serialize_number<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

#[derive(Debug, Clone)]
struct Seen {
    function: String,
    module: String,
    module_path: Option<String>,
    samples: f64,
    runs_seen: u32,
    last_run: u32,
}

/// Collects one op's runs, then merges them.
#[derive(Debug, Clone)]
pub struct OpAccumulator {
    name: String,
    runs: u32,
    seen: Vec<Seen>,
    index: HashMap<(String, String), usize>,
    /// The runs' stacks, summed.
    stacks: HashMap<Vec<String>, u64>,
}

impl OpAccumulator {
    /// An op with no runs yet.
    pub fn new(name: impl Into<String>) -> Self {
        OpAccumulator {
            name: name.into(),
            runs: 0,
            seen: Vec::new(),
            index: HashMap::new(),
            stacks: HashMap::new(),
        }
    }

    /// The op's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs added so far.
    pub fn runs(&self) -> u32 {
        self.runs
    }

    /// Adds one run's report. Several rows of one function in a run (the
    /// same name at two addresses) add up and count as one sighting.
    pub fn add_run(&mut self, report: &Report) {
        self.runs += 1;
        let run = self.runs;
        for row in &report.rows {
            let key = (row.function.clone(), row.module.clone());
            let idx = match self.index.get(&key) {
                Some(&i) => i,
                None => {
                    let i = self.seen.len();
                    self.seen.push(Seen {
                        function: row.function.clone(),
                        module: row.module.clone(),
                        module_path: None,
                        samples: 0.0,
                        runs_seen: 0,
                        last_run: 0,
                    });
                    self.index.insert(key, i);
                    i
                }
            };
            let s = &mut self.seen[idx];
            s.samples += row.value;
            if s.module_path.is_none() {
                s.module_path.clone_from(&row.module_path);
            }
            if s.last_run != run {
                s.last_run = run;
                s.runs_seen += 1;
            }
        }
        for stack in &report.stacks {
            *self.stacks.entry(stack.frames.clone()).or_default() += stack.samples;
        }
    }

    /// Applies `rule` and computes shares.
    pub fn finish(&self, rule: MergeRule) -> OpMapping {
        let functions = self
            .seen
            .iter()
            .filter(|s| rule.keeps(s.runs_seen, self.runs))
            .map(|s| FunctionEntry {
                function: s.function.clone(),
                module: s.module.clone(),
                samples: s.samples,
                share: 0.0,
                runs_seen: s.runs_seen,
                module_path: s.module_path.clone(),
                baseline: None,
            })
            .collect();
        let mut stacks: Vec<StackCount> = self
            .stacks
            .iter()
            .map(|(frames, &samples)| StackCount {
                frames: frames.clone(),
                samples,
            })
            .collect();
        stacks.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.frames.cmp(&b.frames))
        });
        let mut op = OpMapping {
            name: self.name.clone(),
            runs: self.runs,
            samples: 0.0,
            functions,
            window: None,
            stacks,
        };
        op.recompute();
        op
    }
}

impl OpMapping {
    /// Recomputes `samples`, each `share` and the order (most samples
    /// first, then by name) from the functions' samples. When the kept
    /// functions have no samples at all, every share is 0.
    pub fn recompute(&mut self) {
        self.samples = self.functions.iter().map(|f| f.samples).sum();
        let total = self.samples;
        for f in &mut self.functions {
            f.share = if total > 0.0 { f.samples / total } else { 0.0 };
        }
        self.functions.sort_by(|a, b| {
            b.samples
                .total_cmp(&a.samples)
                .then_with(|| a.function.cmp(&b.function))
                .then_with(|| a.module.cmp(&b.module))
        });
    }
}

impl Mapping {
    /// A mapping of `ops` (in the order given), with the shared list
    /// computed.
    pub fn new(backend: &str, unit: Unit, settings: Settings, ops: Vec<OpMapping>) -> Self {
        let mut m = Mapping {
            schema: SCHEMA.to_string(),
            backend: backend.to_string(),
            settings,
            unit,
            ops,
            shared: Vec::new(),
            imported_from: None,
            baseline: None,
            environment: BTreeMap::new(),
            failures: Vec::new(),
        };
        m.shared = compute_shared(&m.ops);
        m
    }

    /// Marks each op function that the baseline also shows
    /// (`baseline: true`), and with `exclude` drops them (shares and the
    /// shared list are recomputed).
    pub fn mark_baseline(&mut self, baseline: OpMapping, exclude: bool) {
        let floor: std::collections::HashSet<(&str, &str)> = baseline
            .functions
            .iter()
            .map(|f| (f.function.as_str(), f.module.as_str()))
            .collect();
        for op in &mut self.ops {
            for f in &mut op.functions {
                f.baseline = Some(floor.contains(&(f.function.as_str(), f.module.as_str())));
            }
            if exclude {
                op.functions.retain(|f| f.baseline != Some(true));
                op.recompute();
            }
        }
        self.shared = compute_shared(&self.ops);
        self.baseline = Some(baseline);
    }

    /// Keeps only the functions `rule` keeps (from a looser rule's
    /// mapping; a stricter mapping cannot get back what it dropped), and
    /// recomputes shares and the shared list.
    pub fn apply_rule(&mut self, rule: MergeRule) {
        for op in &mut self.ops {
            let runs = op.runs;
            op.functions.retain(|f| rule.keeps(f.runs_seen, runs));
            op.recompute();
        }
        self.settings.rule = rule;
        self.shared = compute_shared(&self.ops);
    }

    /// The op called `name`.
    pub fn op(&self, name: &str) -> Option<&OpMapping> {
        self.ops.iter().find(|o| o.name == name)
    }

    /// The original tool's schema.
    pub fn to_lotus_format(&self) -> LotusFormat {
        let op_to_func = self
            .ops
            .iter()
            .map(|op| {
                let keys = op
                    .functions
                    .iter()
                    .map(|f| function_key(&f.function, &f.module))
                    .collect();
                (op.name.clone(), keys)
            })
            .collect();
        let common_funcs_to_op = self
            .shared
            .iter()
            .map(|s| (function_key(&s.function, &s.module), s.ops.clone()))
            .collect();
        LotusFormat {
            op_to_func,
            common_funcs_to_op,
        }
    }

    /// Writes the mapping as pretty JSON.
    pub fn to_json(&self) -> String {
        // A Mapping holds only strings, numbers and lists: it always
        // serializes.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Reads a mapping in either schema: `lotus.mapping/1` or the original
    /// tool's `{"op_to_func": ..., "common_funcs_to_op": ...}`. `file` names
    /// the input in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Mapping, Error> {
        Mapping::from_reader(std::io::Cursor::new(text.as_bytes()), file)
    }
    /// Reads the mapping file at `path` ([`Mapping::from_reader`]),
    /// opened as a regular file ([`lotus_sys::input::open_regular`]); a
    /// folder, or a file that is not a mapping, is refused saying what it
    /// looks like (its first bytes: a CSV or text report, a profile) and
    /// what to pass instead.
    pub fn read_file(path: &std::path::Path) -> Result<Mapping, Error> {
        let name = path.display().to_string();
        if path.is_dir() {
            let why = "is a folder; give a mapping file (lotus map --out FILE)";
            return Err(Error::unreadable(&name, &why));
        }
        let mut file =
            lotus_sys::input::open_regular(path).map_err(|e| Error::unreadable(&name, &e))?;
        let mut head = Vec::with_capacity(64);
        (&mut file)
            .take(64)
            .read_to_end(&mut head)
            .and_then(|_| file.rewind())
            .map_err(|e| Error::unreadable(&name, &e))?;
        let head_text = String::from_utf8_lossy(&head);
        let first = head_text.trim_start_matches('\u{feff}').trim_start();
        let looks_like_json = first.is_empty() || first.starts_with('{');
        // Streamed: the file is never held as text nor as a JSON tree.
        Mapping::from_reader(file, &name).map_err(|e| {
            let hint = match &e {
                Error::Json { .. } | Error::InvalidMapping { .. } | Error::NotAMapping { .. }
                    if !looks_like_json =>
                {
                    " (this looks like a CSV or text report, not a mapping: pass profiles with --profile, mappings come from `lotus map`)"
                }
                Error::UnknownMappingSchema { found, .. } if found.contains("lotus.profile/") => {
                    " (this is a profile: pass it with --profile)"
                }
                _ => return e,
            };
            Error::NotAMappingFile {
                source: Box::new(e),
                hint,
            }
        })
    }

    /// Reads a mapping like [`Mapping::from_json`], streaming from `reader`:
    /// the file's text is never held whole, and no generic JSON tree is
    /// built (a mapping of a million functions reads in a fraction of the
    /// memory a tree would take). A key given twice in one object is
    /// refused, as is an op name given twice. `reader` is rewound for a
    /// second, light pass only when the first fails, to tell an unknown
    /// schema from a malformed mapping.
    pub fn from_reader<R: Read + Seek>(mut reader: R, file: &str) -> Result<Mapping, Error> {
        let start = reader
            .stream_position()
            .map_err(|e| Error::unreadable(file, &e))?;
        let parsed: Result<ObjectOnly<AnyMapping>, _> =
            serde_json::from_reader(std::io::BufReader::new(Utf8Checked::new(&mut reader)));
        let any = match parsed {
            Ok(any) => any.0,
            Err(e) if e.is_io() => return Err(Error::unreadable(file, &e)),
            Err(e) if e.is_data() => {
                // A well-formed file of another schema version may not fit
                // this one's types: say which schema it is.
                if reader.seek(SeekFrom::Start(start)).is_ok() {
                    let probe: Result<SchemaProbe, _> =
                        serde_json::from_reader(std::io::BufReader::new(&mut reader));
                    match probe {
                        Ok(SchemaProbe {
                            schema: Some(found),
                        }) if found.as_str() != Some(SCHEMA) => {
                            return Err(Error::UnknownMappingSchema {
                                file: file.to_string(),
                                found: quote_cut(&found.to_string(), 80),
                            });
                        }
                        Err(e) if e.is_data() => {
                            return Err(Error::NotAMapping {
                                file: file.to_string(),
                            })
                        }
                        _ => {}
                    }
                }
                return Err(Error::InvalidMapping {
                    file: file.to_string(),
                    message: quote_cut(&e.to_string(), MESSAGE_CHARS),
                });
            }
            Err(e) => {
                return Err(Error::Json {
                    file: file.to_string(),
                    line: e.line(),
                    column: e.column(),
                    message: quote_cut(&e.to_string(), MESSAGE_CHARS),
                })
            }
        };
        any.into_mapping(file)
    }

    fn validate(&self, file: &str) -> Result<(), Error> {
        let invalid = |message: String| Error::InvalidMapping {
            file: file.to_string(),
            message,
        };
        let mut names = std::collections::HashSet::with_capacity(self.ops.len());
        for op in &self.ops {
            if op.name.is_empty() {
                return Err(invalid("an op has an empty name".into()));
            }
            if !names.insert(op.name.as_str()) {
                return Err(invalid(format!(
                    "op '{}' is listed twice: each op must have its own name",
                    quote_cut(&op.name, 80)
                )));
            }
            let mut functions = std::collections::HashSet::with_capacity(op.functions.len());
            let mut sum = 0.0f64;
            for f in &op.functions {
                if !functions.insert((f.function.as_str(), f.module.as_str())) {
                    return Err(invalid(format!(
                        "op '{}': function '{}' of module '{}' is listed twice",
                        quote_cut(&op.name, 80),
                        quote_cut(&f.function, 80),
                        quote_cut(&f.module, 80)
                    )));
                }
                sum += f.samples;
            }
            if !(op.samples.is_finite() && op.samples >= 0.0 && sum.is_finite()) {
                return Err(invalid(format!(
                    "op '{}': its samples must add up to a finite number of 0 or more",
                    quote_cut(&op.name, 80)
                )));
            }
            for f in &op.functions {
                if !(f.samples.is_finite() && f.samples >= 0.0) {
                    return Err(invalid(format!(
                        "op '{}', function '{}': samples must be a number of 0 or more",
                        quote_cut(&op.name, 80),
                        quote_cut(&f.function, 80)
                    )));
                }
                if !(0.0..=1.0).contains(&f.share) {
                    return Err(invalid(format!(
                        "op '{}', function '{}': share {} is outside 0..1",
                        quote_cut(&op.name, 80),
                        quote_cut(&f.function, 80),
                        f.share
                    )));
                }
            }
        }
        Ok(())
    }
}

fn compute_shared(ops: &[OpMapping]) -> Vec<SharedFunction> {
    let mut by_key: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for op in ops {
        for f in &op.functions {
            let list = by_key.entry((&f.function, &f.module)).or_default();
            if list.last() != Some(&op.name) {
                list.push(op.name.clone());
            }
        }
    }
    let mut shared: Vec<SharedFunction> = by_key
        .into_iter()
        .filter(|(_, ops)| ops.len() >= 2)
        .map(|((function, module), ops)| SharedFunction {
            function: function.to_string(),
            module: module.to_string(),
            ops,
        })
        .collect();
    shared.sort_by(|a, b| {
        b.ops
            .len()
            .cmp(&a.ops.len())
            .then_with(|| a.function.cmp(&b.function))
    });
    shared
}

/// The original Lotus tool's mapping schema (`mapping_funcs.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LotusFormat {
    /// Op name to `function|module` keys.
    #[serde(deserialize_with = "read::unique_keys")]
    pub op_to_func: BTreeMap<String, Vec<String>>,
    /// `function|module` key to the ops that run it (two or more).
    #[serde(default, deserialize_with = "read::unique_keys")]
    pub common_funcs_to_op: BTreeMap<String, Vec<String>>,
}

impl LotusFormat {
    /// A lotus mapping with the same ops and functions. Samples, shares and
    /// run counts are not in this schema: they are zero, and
    /// `imported_from` says so.
    pub fn into_mapping(self, file: &str) -> Result<Mapping, Error> {
        let mut ops = Vec::with_capacity(self.op_to_func.len());
        for (name, keys) in self.op_to_func {
            let mut functions = Vec::with_capacity(keys.len());
            for key in keys {
                let (function, module) =
                    split_function_key(&key).ok_or_else(|| Error::InvalidMapping {
                        file: file.to_string(),
                        message: format!(
                            "op '{}': '{}' is not a 'function|module' key",
                            quote_cut(&name, 80),
                            quote_cut(&key, 80)
                        ),
                    })?;
                functions.push(FunctionEntry {
                    function: function.to_string(),
                    module: module.to_string(),
                    samples: 0.0,
                    share: 0.0,
                    runs_seen: 0,
                    module_path: None,
                    baseline: None,
                });
            }
            ops.push(OpMapping {
                stacks: Vec::new(),
                name,
                runs: 0,
                samples: 0.0,
                functions,
                window: None,
            });
        }
        let mut m = Mapping::new("unknown", Unit::Samples, Settings::default(), ops);
        m.imported_from = Some("lotus".to_string());
        // The same checks as a lotus mapping (an op with an empty name).
        m.validate(file)?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Row;

    /// `window.notes` is optional: a window without it (older mappings)
    /// reads with none, none is written when empty, and notes round-trip.
    #[test]
    fn window_notes_are_optional_and_kept() {
        let mut w: WindowSummary =
            serde_json::from_str(r#"{"seconds": 1.0, "iterations": 3, "samples": 9}"#)
                .expect("an old window reads");
        assert!(w.notes.is_empty());
        let text = serde_json::to_string(&w).expect("json");
        assert!(!text.contains("notes"), "{text}");
        w.notes
            .push("run 1: 5 samples (50.0%) in [x] could not be named: y".into());
        let back: WindowSummary =
            serde_json::from_str(&serde_json::to_string(&w).expect("json")).expect("reads");
        assert_eq!(back.notes, w.notes);
    }

    #[test]
    fn sampling_cost_compares_the_windows_calls_with_the_unsampled_ones() {
        let mut w = WindowSummary {
            iterations: 1000,
            ..WindowSummary::default()
        };
        w.counters.insert("task-clock-ns".into(), 150_000_000.0);
        assert_eq!(w.sampling_cost(), None, "no unsampled calls");
        w.unsampled = Some(UnsampledCalls {
            calls: 200,
            seconds: 0.021,
            cpu_seconds: 0.02,
        });
        let cost = w.sampling_cost().expect("both figures");
        assert!((cost.sampled_cpu_s - 150e-6).abs() < 1e-12);
        assert!((cost.unsampled_cpu_s - 100e-6).abs() < 1e-12);
        assert!((cost.slowdown() - 0.5).abs() < 1e-9);
        // The field round-trips, and a mapping written before it reads.
        let text = serde_json::to_string(&w).expect("json");
        let back: WindowSummary = serde_json::from_str(&text).expect("read back");
        assert_eq!(back, w);
        let old: WindowSummary =
            serde_json::from_str(r#"{"seconds": 1.0, "iterations": 3, "samples": 9}"#)
                .expect("old window");
        assert_eq!(old.unsampled, None);
        // No calls or no CPU time: no figure rather than a division by 0.
        w.unsampled = Some(UnsampledCalls::default());
        assert_eq!(w.sampling_cost(), None);
    }

    fn report(rows: &[(&str, &str, f64)]) -> Report {
        Report {
            stacks: Vec::new(),
            unit: Unit::Samples,
            rows: rows.iter().map(|(f, m, v)| Row::new(f, m, *v)).collect(),
        }
    }

    fn three_runs() -> OpAccumulator {
        let mut acc = OpAccumulator::new("Op");
        acc.add_run(&report(&[
            ("a", "m", 10.0),
            ("b", "m", 5.0),
            ("c", "m", 1.0),
        ]));
        acc.add_run(&report(&[("a", "m", 12.0), ("b", "m", 4.0)]));
        acc.add_run(&report(&[
            ("a", "m", 8.0),
            ("d", "m", 2.0),
            ("a", "m", 1.0),
        ]));
        acc
    }

    fn names(op: &OpMapping) -> Vec<&str> {
        op.functions.iter().map(|f| f.function.as_str()).collect()
    }

    #[test]
    fn rules_keep_what_they_say() {
        let acc = three_runs();
        assert_eq!(names(&acc.finish(MergeRule::Union)), ["a", "b", "d", "c"]);
        assert_eq!(names(&acc.finish(MergeRule::Majority)), ["a", "b"]);
        assert_eq!(names(&acc.finish(MergeRule::All)), ["a"]);
        assert_eq!(names(&acc.finish(MergeRule::Min(2))), ["a", "b"]);
        assert_eq!(names(&acc.finish(MergeRule::Min(1))), ["a", "b", "d", "c"]);
    }

    #[test]
    fn duplicate_rows_in_one_run_count_once() {
        let op = three_runs().finish(MergeRule::Union);
        let a = &op.functions[0];
        assert_eq!((a.samples, a.runs_seen), (31.0, 3));
        let total: f64 = op.functions.iter().map(|f| f.share).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert_eq!(op.samples, 43.0);
    }

    #[test]
    fn apply_rule_equals_building_with_the_rule() {
        let acc = three_runs();
        let mut m = Mapping::new(
            "t",
            Unit::Samples,
            Settings::default(),
            vec![acc.finish(MergeRule::Union)],
        );
        m.apply_rule(MergeRule::Majority);
        assert_eq!(m.ops[0], acc.finish(MergeRule::Majority));
    }

    #[test]
    fn rule_parsing() {
        assert_eq!("min:3".parse::<MergeRule>().ok(), Some(MergeRule::Min(3)));
        for bad in ["min:0", "min:", "min:x", "most", ""] {
            assert!(bad.parse::<MergeRule>().is_err(), "{bad}");
        }
        assert_eq!(MergeRule::Min(4).to_string(), "min:4");
    }

    #[test]
    fn majority_of_even_runs_needs_more_than_half() {
        assert!(!MergeRule::Majority.keeps(2, 4));
        assert!(MergeRule::Majority.keeps(3, 4));
    }

    fn two_op_mapping() -> Mapping {
        let mut x = OpAccumulator::new("X");
        x.add_run(&report(&[
            ("memcpy", "libc.so.6", 3.0),
            ("fx", "a.so", 9.0),
        ]));
        let mut y = OpAccumulator::new("Y");
        y.add_run(&report(&[
            ("memcpy", "libc.so.6", 1.0),
            ("fy", "a.so", 2.0),
        ]));
        Mapping::new(
            "perf",
            Unit::Samples,
            Settings::default(),
            vec![x.finish(MergeRule::Union), y.finish(MergeRule::Union)],
        )
    }

    #[test]
    fn baseline_marks_and_excludes_floor_functions() {
        let mut m = two_op_mapping();
        let mut floor = OpAccumulator::new("(empty)");
        floor.add_run(&report(&[("memcpy", "libc.so.6", 5.0)]));
        let floor = floor.finish(MergeRule::Union);
        let mut marked = m.clone();
        marked.mark_baseline(floor.clone(), false);
        let x = marked.op("X").expect("X");
        assert_eq!(
            x.functions
                .iter()
                .filter(|f| f.baseline == Some(true))
                .count(),
            1
        );
        assert_eq!(marked.shared.len(), 1);
        m.mark_baseline(floor, true);
        assert!(m.shared.is_empty());
        let x = m.op("X").expect("X");
        assert_eq!(names(x), ["fx"]);
        assert_eq!(x.functions[0].share, 1.0);
    }

    #[test]
    fn shared_lists_functions_of_two_ops() {
        let m = two_op_mapping();
        assert_eq!(
            m.shared,
            vec![SharedFunction {
                function: "memcpy".into(),
                module: "libc.so.6".into(),
                ops: vec!["X".into(), "Y".into()]
            }]
        );
    }

    #[test]
    fn json_round_trip_and_integer_samples() {
        let m = two_op_mapping();
        let text = m.to_json();
        assert!(text.contains("\"samples\": 9,"), "{text}");
        assert!(text.contains("\"schema\": \"lotus.mapping/1\""));
        assert_eq!(Mapping::from_json(&text, "m.json").expect("reads"), m);
    }

    #[test]
    fn lotus_format_round_trip_keeps_ops_and_functions() {
        let m = two_op_mapping();
        let lf = m.to_lotus_format();
        assert_eq!(lf.op_to_func["X"], vec!["fx|a.so", "memcpy|libc.so.6"]);
        assert_eq!(lf.common_funcs_to_op["memcpy|libc.so.6"], vec!["X", "Y"]);
        let text = serde_json::to_string(&lf).expect("serializes");
        let back = Mapping::from_json(&text, "old.json").expect("reads");
        assert_eq!(back.imported_from.as_deref(), Some("lotus"));
        assert_eq!(back.to_lotus_format(), lf);
    }

    #[test]
    fn bad_mapping_files_are_named() {
        let e = Mapping::from_json("{\"schema\": \"lotus.mapping/9\"}", "f.json").unwrap_err();
        assert!(e.to_string().starts_with("f.json: mapping schema"), "{e}");
        let e = Mapping::from_json("[1,2]", "g.json").unwrap_err();
        assert!(matches!(e, Error::NotAMapping { .. }));
        let e = Mapping::from_json("{\n\"op_to_func\": ", "h.json").unwrap_err();
        assert!(e.to_string().starts_with("h.json:2:"), "{e}");
        let e = Mapping::from_json("{\"op_to_func\": {\"A\": [\"nokey\"]}}", "i.json").unwrap_err();
        assert!(e.to_string().contains("'nokey'"), "{e}");
        let e = Mapping::from_json(r#"{"op_to_func": {"": []}}"#, "e.json").unwrap_err();
        assert!(e.to_string().contains("empty name"), "{e}");
    }

    #[test]
    fn duplicate_keys_and_op_names_are_refused_with_the_name() {
        let m = two_op_mapping();
        let text = m.to_json();
        let twice = text.replacen(
            "\"schema\": \"lotus.mapping/1\",",
            "\"schema\": \"lotus.mapping/1\", \"schema\": \"lotus.mapping/1\",",
            1,
        );
        let e = Mapping::from_json(&twice, "d.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("d.json") && e.contains("duplicate field `schema`"),
            "{e}"
        );
        let mut dup = m.clone();
        dup.ops[1].name = "X".into();
        let e = Mapping::from_json(&dup.to_json(), "d.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("op 'X' is listed twice"), "{e}");
        let mut env = m.clone();
        env.environment.insert("host".into(), "a".into());
        let text = env
            .to_json()
            .replacen("\"host\": \"a\"", "\"host\": \"a\", \"host\": \"b\"", 1);
        let e = Mapping::from_json(&text, "d.json").unwrap_err().to_string();
        assert!(e.contains("duplicate key 'host'"), "{e}");
        let e = Mapping::from_json(r#"{"op_to_func": {"A": [], "A": []}}"#, "o.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate key 'A'"), "{e}");
    }

    #[test]
    fn samples_that_add_up_to_infinity_are_refused_with_the_op() {
        let mut m = two_op_mapping();
        for f in &mut m.ops[0].functions {
            f.samples = 1e308;
        }
        let e = Mapping::from_json(&m.to_json(), "inf.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("op 'X'") && e.contains("finite"), "{e}");
    }
}
