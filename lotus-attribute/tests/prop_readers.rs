//! Property tests of lotus-core's readers: mappings (`lotus.mapping/1` and
//! the original tool's `op_to_func` schema, [`Mapping::from_json`]),
//! profiles (`lotus.profile/1`, [`Profile::read_json`]) and op times
//! (`op,seconds` CSV, [`OpTimes::read_csv`]).
//!
//! Inputs: random JSON values, valid files with random mutations, valid
//! files cut at any byte, arbitrary text. Properties: no panic; an error
//! names the file first (and the line, for a cut JSON file); whatever is
//! accepted is valid and survives writing and reading again; valid files
//! read back exactly.
//!
//! `PROPTEST_CASES` sets the cases per property (256);
//! `LOTUS_FUZZ_SECONDS=N` fuzzes each property for N seconds instead.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use lotus_attribute::{Error as AttrError, OpTimes};
use lotus_core::Profile;
use lotus_core::{
    Error as CoreError, FunctionEntry, Mapping, OpFailure, OpMapping, Settings, UnsampledCalls,
    WindowSummary,
};
use lotus_core::{MergeRule, Row, Unit};
use lotus_testkit::fuzz;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;

const MAPPING_FILE: &str = "fuzz/mapping.json";
const PROFILE_FILE: &str = "fuzz/profile.json";
const TIMES_FILE: &str = "fuzz/op_times.csv";

fn starts_with_file(text: &str, file: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        text.starts_with(file),
        "error does not name the file: {}",
        text
    );
    prop_assert!(text.len() < 64 * 1024, "error of {} bytes", text.len());
    Ok(())
}

// ---------------------------------------------------------------------
// Generators

/// Keys a mapping or a profile has, so random objects hit the readers'
/// paths, plus anything.
const KEYS: &[&str] = &[
    "schema",
    "backend",
    "settings",
    "unit",
    "ops",
    "shared",
    "name",
    "runs",
    "samples",
    "functions",
    "function",
    "module",
    "share",
    "runs_seen",
    "rule",
    "warmup",
    "op_to_func",
    "common_funcs_to_op",
    "rows",
    "value",
    "counters",
    "sample_interval_s",
    "command",
    "environment",
    "failures",
    "baseline",
    "window",
    "imported_from",
];

const STRINGS: &[&str] = &[
    "lotus.mapping/1",
    "lotus.profile/1",
    "lotus.mapping/2",
    "samples",
    "seconds",
    "union",
    "majority",
    "min:2",
    "min:0",
    "f|m",
    "|",
    "memcpy|libc.so.6",
    "",
    "perf",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u32>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        (-2.0..2.0f64).prop_map(Value::from),
        proptest::sample::select(STRINGS).prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ]
}

fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(KEYS).prop_map(str::to_string),
        1 => ".{0,8}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((json_key(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An object at the top, as the readers expect, with the keys they look at.
fn json_object() -> impl Strategy<Value = Value> {
    proptest::collection::vec((json_key(), json_value()), 0..8)
        .prop_map(|kv| Value::Object(kv.into_iter().collect()))
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z][A-Za-z0-9_]{0,15}",
        "[A-Za-z][A-Za-z0-9_:<>(),*&| \"\\\\é日]{0,24}",
        "func@0x[0-9a-f]{1,6}",
    ]
}

fn module() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("[Unknown]".to_string()),
        "lib[a-z]{1,8}\\.so(\\.[0-9]){0,3}",
        "_imaging\\.cpython-3[0-9]{1,2}-x86_64-linux-gnu\\.so",
    ]
}

/// A whole number or a fraction with an exact binary form, as samples or
/// seconds: read back bit for bit.
fn amount() -> impl Strategy<Value = f64> {
    prop_oneof![
        (0u32..100_000).prop_map(f64::from),
        (0u32..1_000_000).prop_map(|n| f64::from(n) / 1024.0),
    ]
}

fn op_mapping(name: String) -> impl Strategy<Value = OpMapping> {
    (
        1u32..6,
        proptest::collection::btree_map((name_no_bar(), module()), (amount(), 1u32..6), 0..8),
        proptest::option::of((amount(), 0u64..1000, 0u64..100_000)),
    )
        .prop_map(move |(runs, funcs, window)| {
            let functions = funcs
                .into_iter()
                .map(|((function, module), (samples, seen))| FunctionEntry {
                    function,
                    module,
                    samples,
                    share: 0.0,
                    runs_seen: seen.min(runs),
                    module_path: None,
                    baseline: None,
                })
                .collect();
            let mut op = OpMapping {
                stacks: Vec::new(),
                name: name.clone(),
                runs,
                samples: 0.0,
                functions,
                window: window.map(|(seconds, iterations, samples)| WindowSummary {
                    seconds,
                    iterations,
                    windows: iterations % 5,
                    samples,
                    lost_samples: 0,
                    counters: BTreeMap::from([("task-clock-ns".to_string(), seconds * 1e9)]),
                    unsupported: BTreeMap::new(),
                    notes: Vec::new(),
                    unsampled: (iterations % 3 == 0).then_some(UnsampledCalls::new(
                        iterations,
                        seconds,
                        seconds / 2.0,
                    )),
                }),
            };
            op.recompute();
            op
        })
}

/// Function names for the original schema's `function|module` keys: a
/// `|` may be in the function (C++ `operator|`), never in the module.
fn name_no_bar() -> impl Strategy<Value = String> {
    name()
}

fn mapping() -> impl Strategy<Value = Mapping> {
    (
        proptest::collection::btree_set("[A-Z][A-Za-z0-9_]{0,12}", 1..5),
        proptest::sample::select(vec!["perf", "vtune", "uprof"]),
        prop_oneof![
            Just(MergeRule::Union),
            Just(MergeRule::Majority),
            Just(MergeRule::All),
            (1u32..5).prop_map(MergeRule::Min)
        ],
        any::<bool>(),
        proptest::collection::vec(("[A-Z][a-z]{0,8}", ".{0,30}"), 0..3),
    )
        .prop_flat_map(|(names, backend, rule, seconds, failures)| {
            let ops: Vec<_> = names.into_iter().map(op_mapping).collect();
            (
                Just(backend),
                Just(rule),
                Just(seconds),
                Just(failures),
                ops,
            )
        })
        .prop_map(|(backend, rule, seconds, failures, ops)| {
            let runs = ops.iter().map(|o| o.runs).max();
            let unit = if seconds {
                Unit::Seconds
            } else {
                Unit::Samples
            };
            let settings = Settings {
                runs,
                warmup: Some(3),
                rule,
            };
            let mut m = Mapping::new(backend, unit, settings, ops);
            m.failures = failures
                .into_iter()
                .map(|(op, error)| OpFailure { op, error })
                .collect();
            m
        })
}

fn row() -> impl Strategy<Value = Row> {
    (
        name(),
        module(),
        proptest::option::of("(/[a-z]{1,6}){1,3}/lib[a-z]{1,5}\\.so"),
        amount(),
        proptest::collection::btree_map(
            proptest::sample::select(vec!["cycles", "instructions", "Clockticks", "Retiring"])
                .prop_map(str::to_string),
            amount(),
            0..3,
        ),
        proptest::option::of(0u64..u64::from(u32::MAX)),
    )
        .prop_map(
            |(function, module, module_path, value, counters, addr)| Row {
                function,
                module,
                module_path,
                value,
                counters,
                full_name: None,
                source_file: None,
                start_address: addr,
            },
        )
}

fn profile() -> impl Strategy<Value = Profile> {
    (
        proptest::sample::select(vec!["perf", "vtune", "uprof"]),
        any::<bool>(),
        proptest::option::of((1u32..10_000).prop_map(|n| f64::from(n) / 1_048_576.0)),
        proptest::collection::vec(".{0,10}", 0..3),
        proptest::collection::vec(row(), 0..12),
    )
        .prop_map(|(backend, seconds, dt, command, rows)| {
            let mut p = Profile::new(
                backend,
                lotus_core::Report {
                    stacks: Vec::new(),
                    unit: if seconds {
                        Unit::Seconds
                    } else {
                        Unit::Samples
                    },
                    rows,
                },
            );
            p.sample_interval_s = dt;
            p.command = command;
            p
        })
}

/// A random change somewhere inside a JSON value: a key or element
/// removed, or a node replaced by another value.
#[derive(Debug, Clone)]
struct Mutation {
    path: Vec<usize>,
    remove: bool,
    new: Value,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    (
        proptest::collection::vec(any::<usize>(), 0..6),
        any::<bool>(),
        json_value(),
    )
        .prop_map(|(path, remove, new)| Mutation { path, remove, new })
}

fn mutate(v: &mut Value, path: &[usize], m: &Mutation) {
    let Some((&step, rest)) = path.split_first() else {
        *v = m.new.clone();
        return;
    };
    match v {
        Value::Object(map) if !map.is_empty() => {
            let key = map.keys().nth(step % map.len()).cloned().unwrap();
            if rest.is_empty() && m.remove {
                map.remove(&key);
            } else {
                mutate(map.get_mut(&key).unwrap(), rest, m);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = step % items.len();
            if rest.is_empty() && m.remove {
                items.remove(i);
            } else {
                mutate(&mut items[i], rest, m);
            }
        }
        _ => *v = m.new.clone(),
    }
}

/// The longest prefix of `text` of at most `at` (a fraction) of its bytes
/// that ends on a character boundary.
fn cut_str(text: &str, at: f64) -> &str {
    let mut n = ((text.len() as f64) * at) as usize;
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    &text[..n]
}

// ---------------------------------------------------------------------
// Mappings

/// What any accepted mapping must be: valid, and the same after being
/// written and read again.
fn accepted_mapping_is_sound(m: &Mapping) -> Result<(), TestCaseError> {
    for op in &m.ops {
        prop_assert!(!op.name.is_empty());
        for f in &op.functions {
            prop_assert!(f.samples.is_finite() && f.samples >= 0.0);
            prop_assert!((0.0..=1.0).contains(&f.share));
        }
    }
    let again = Mapping::from_json(&m.to_json(), MAPPING_FILE)
        .map_err(|e| TestCaseError::fail(format!("an accepted mapping does not read back: {e}")))?;
    prop_assert_eq!(&again, m);
    // The original tool's schema of it reads too.
    let lotus = serde_json::to_string(&m.to_lotus_format()).unwrap();
    if let Err(e) = Mapping::from_json(&lotus, MAPPING_FILE) {
        // Only a function or module the key form cannot hold is refused.
        let odd = m
            .ops
            .iter()
            .flat_map(|o| &o.functions)
            .any(|f| f.function.is_empty() || f.module.is_empty() || f.module.contains('|'));
        prop_assert!(odd, "the op_to_func form does not read back: {}", e);
    }
    Ok(())
}

fn check_mapping_text(text: &str) -> Result<(), TestCaseError> {
    match Mapping::from_json(text, MAPPING_FILE) {
        Ok(m) => accepted_mapping_is_sound(&m)?,
        Err(e) => starts_with_file(&e.to_string(), MAPPING_FILE)?,
    }
    Ok(())
}

#[test]
fn prop_mapping_random_json_never_panics() {
    let input = prop_oneof![json_value(), json_object()];
    fuzz::check("mapping_random_json", input, |v| {
        check_mapping_text(&v.to_string())?;
        // With the schema tag, the typed path is taken.
        if let Value::Object(mut map) = v {
            map.insert("schema".into(), "lotus.mapping/1".into());
            check_mapping_text(&Value::Object(map).to_string())?;
        }
        Ok(())
    });
}

#[test]
fn prop_mapping_random_text_never_panics() {
    fuzz::check("mapping_random_text", ".{0,300}", |text| {
        check_mapping_text(&text)
    });
}

#[test]
fn prop_mapping_round_trip_both_schemas() {
    fuzz::check("mapping_round_trip", mapping(), |m| {
        let back = Mapping::from_json(&m.to_json(), MAPPING_FILE)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &m);

        let lotus = serde_json::to_string_pretty(&m.to_lotus_format()).unwrap();
        let imported = Mapping::from_json(&lotus, MAPPING_FILE)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(imported.imported_from.as_deref(), Some("lotus"));
        let keys = |m: &Mapping| -> BTreeMap<String, Vec<(String, String)>> {
            m.ops
                .iter()
                .map(|o| {
                    let f = o
                        .functions
                        .iter()
                        .map(|f| (f.function.clone(), f.module.clone()))
                        .collect();
                    (o.name.clone(), f)
                })
                .collect()
        };
        prop_assert_eq!(keys(&imported), keys(&m));
        let shared = |m: &Mapping| -> BTreeSet<(String, String, BTreeSet<String>)> {
            m.shared
                .iter()
                .map(|s| {
                    (
                        s.function.clone(),
                        s.module.clone(),
                        s.ops.iter().cloned().collect(),
                    )
                })
                .collect()
        };
        prop_assert_eq!(shared(&imported), shared(&m));
        Ok(())
    });
}

#[test]
fn prop_mapping_mutations_are_refused_or_sound() {
    let input = (
        mapping(),
        any::<bool>(),
        proptest::collection::vec(mutation(), 1..4),
    );
    fuzz::check("mapping_mutated", input, |(m, lotus, mutations)| {
        let mut v = if lotus {
            serde_json::to_value(m.to_lotus_format()).unwrap()
        } else {
            serde_json::to_value(&m).unwrap()
        };
        for mu in &mutations {
            mutate(&mut v, &mu.path, mu);
        }
        check_mapping_text(&v.to_string())
    });
}

#[test]
fn prop_mapping_cut_anywhere_is_a_json_error_with_a_line() {
    fuzz::check(
        "mapping_truncated",
        (mapping(), any::<bool>(), 0.0..1.0f64),
        |(m, lotus, at)| {
            let text = if lotus {
                serde_json::to_string_pretty(&m.to_lotus_format()).unwrap()
            } else {
                m.to_json()
            };
            let part = cut_str(text.trim_end(), at);
            match Mapping::from_json(part, MAPPING_FILE) {
                Ok(_) => prop_assert!(false, "a cut mapping was read: {:?}", part),
                Err(e) => {
                    prop_assert!(
                        matches!(e, CoreError::Json { line, .. } if line >= 1),
                        "{}",
                        e
                    );
                    starts_with_file(&e.to_string(), MAPPING_FILE)?;
                }
            }
            Ok(())
        },
    );
}

#[test]
fn deeply_nested_json_is_an_error_not_a_crash() {
    let deep = "[".repeat(1_000_000);
    let e = Mapping::from_json(&deep, MAPPING_FILE).unwrap_err();
    assert!(e.to_string().starts_with(MAPPING_FILE), "{e}");
    let deep = format!(
        "{{\"schema\": \"lotus.mapping/1\", \"ops\": {}",
        "[{\"a\":".repeat(200_000)
    );
    let e = Mapping::from_json(&deep, MAPPING_FILE).unwrap_err();
    assert!(e.to_string().starts_with(MAPPING_FILE), "{e}");
    let e = Profile::read_json(&mut "[".repeat(1_000_000).as_bytes(), PROFILE_FILE).unwrap_err();
    assert!(e.to_string().starts_with(PROFILE_FILE), "{e}");
}

// ---------------------------------------------------------------------
// Profiles

fn read_profile(text: &[u8]) -> Result<Profile, CoreError> {
    Profile::read_json(&mut &text[..], PROFILE_FILE)
}

fn check_profile_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    match read_profile(bytes) {
        Ok(p) => {
            prop_assert!(p.rows.iter().all(|r| r.value.is_finite() && r.value >= 0.0));
            prop_assert!(p.sample_interval_s.is_none_or(|d| d > 0.0 && d.is_finite()));
            let mut out = Vec::new();
            p.write_json(&mut out).unwrap();
            let again = read_profile(&out).map_err(|e| {
                TestCaseError::fail(format!("an accepted profile does not read back: {e}"))
            })?;
            prop_assert_eq!(again, p);
        }
        Err(e) => starts_with_file(&e.to_string(), PROFILE_FILE)?,
    }
    Ok(())
}

#[test]
fn prop_profile_random_json_never_panics() {
    let input = prop_oneof![json_value(), json_object()];
    fuzz::check("profile_random_json", input, |v| {
        check_profile_bytes(v.to_string().as_bytes())?;
        if let Value::Object(mut map) = v {
            map.insert("schema".into(), "lotus.profile/1".into());
            map.entry("unit").or_insert("samples".into());
            check_profile_bytes(Value::Object(map).to_string().as_bytes())?;
        }
        Ok(())
    });
}

#[test]
fn prop_profile_random_bytes_never_panic() {
    let input = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        ".{0,300}".prop_map(String::into_bytes),
    ];
    fuzz::check("profile_random_bytes", input, |bytes| {
        check_profile_bytes(&bytes)
    });
}

#[test]
fn prop_profile_round_trip() {
    fuzz::check("profile_round_trip", profile(), |p| {
        let mut out = Vec::new();
        p.write_json(&mut out).unwrap();
        let back = read_profile(&out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back, p);
        Ok(())
    });
}

#[test]
fn prop_profile_mutations_are_refused_or_sound() {
    let input = (profile(), proptest::collection::vec(mutation(), 1..4));
    fuzz::check("profile_mutated", input, |(p, mutations)| {
        let mut v = serde_json::to_value(&p).unwrap();
        for mu in &mutations {
            mutate(&mut v, &mu.path, mu);
        }
        check_profile_bytes(v.to_string().as_bytes())
    });
}

#[test]
fn prop_profile_cut_anywhere_is_a_json_error_with_a_line() {
    fuzz::check("profile_truncated", (profile(), 0.0..1.0f64), |(p, at)| {
        let text = p.to_json();
        let part = cut_str(text.trim_end(), at);
        match read_profile(part.as_bytes()) {
            Ok(_) => prop_assert!(false, "a cut profile was read: {:?}", part),
            Err(e) => {
                prop_assert!(
                    matches!(e, CoreError::Json { line, .. } if line >= 1),
                    "{}",
                    e
                );
                starts_with_file(&e.to_string(), PROFILE_FILE)?;
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------
// Op times

fn read_times(text: &str) -> Result<OpTimes, AttrError> {
    OpTimes::read_csv(&mut text.as_bytes(), TIMES_FILE)
}

/// Op names as a trace or a person writes them: no comma or quote (the
/// format is `op,seconds`, split at commas).
fn op_name() -> impl Strategy<Value = String> {
    "[A-Za-z][A-Za-z0-9_ ()<>.:é-]{0,20}[A-Za-z0-9)]"
}

/// Seconds as written, with their value.
fn seconds() -> impl Strategy<Value = (String, f64)> {
    (0u64..10_000_000_000, 0usize..3).prop_map(|(n, style)| {
        let v = n as f64 / 1e9;
        match style {
            0 => (format!("{v:.9}"), v),
            1 => (format!("{v}"), v),
            _ => (format!("{v}s"), v),
        }
    })
}

#[derive(Debug, Clone)]
struct TimesFile {
    header: Option<&'static str>,
    lines: Vec<(String, String, f64)>,
    comments: Vec<usize>,
    final_newline: bool,
}

fn times_file() -> impl Strategy<Value = TimesFile> {
    (
        proptest::option::of(proptest::sample::select(vec![
            "op,seconds",
            "name,time_s",
            "op,cpu_time_s",
        ])),
        proptest::collection::vec((op_name(), seconds()), 1..10),
        proptest::collection::vec(0usize..10, 0..3),
        any::<bool>(),
    )
        .prop_map(|(header, lines, comments, final_newline)| {
            // Each op once: the reader refuses an op listed twice (a
            // separate property checks that), so a valid file never
            // repeats a name. The first line of a name stays, so there is
            // always at least one.
            let mut seen = std::collections::BTreeSet::new();
            TimesFile {
                header,
                lines: lines
                    .into_iter()
                    .filter(|(o, _)| seen.insert(o.trim().to_string()))
                    .map(|(o, (t, v))| (o, t, v))
                    .collect(),
                comments,
                final_newline,
            }
        })
}

impl TimesFile {
    fn text(&self) -> String {
        let mut s = String::new();
        if let Some(h) = self.header {
            s += h;
            s += "\n";
        }
        for (i, (op, text, _)) in self.lines.iter().enumerate() {
            if self.comments.contains(&i) {
                s += "# a comment, then a blank line\n\n";
            }
            s += &format!("{op},{text}\n");
        }
        if !self.final_newline {
            s.pop();
        }
        s
    }

    fn expected(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        for (op, _, v) in &self.lines {
            let first = m.insert(op.trim().to_string(), *v);
            assert!(first.is_none(), "the generator repeated op {op:?}");
        }
        m
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn prop_op_times_arbitrary_text_never_panics() {
    let input = prop_oneof![".{0,400}", "([A-Za-z,\"#0-9.s \n\r-]|\u{feff}){0,200}",];
    fuzz::check("op_times_arbitrary", input, |text| {
        match read_times(&text) {
            Ok(t) => {
                prop_assert!(!t.seconds.is_empty());
                prop_assert!(t.seconds.values().all(|v| v.is_finite() && *v >= 0.0));
                prop_assert!(t.seconds.keys().all(|k| !k.is_empty()));
            }
            Err(e) => starts_with_file(&e.to_string(), TIMES_FILE)?,
        }
        Ok(())
    });
}

#[test]
fn prop_op_times_arbitrary_bytes_never_panic() {
    let input = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        proptest::collection::vec(
            proptest::sample::select(b"op,seconds\nA1.5s#\"\r \xff\xef\xbb\xbf".to_vec()),
            0..200
        ),
    ];
    fuzz::check("op_times_bytes", input, |bytes| {
        match OpTimes::read_csv(&mut &bytes[..], TIMES_FILE) {
            Ok(t) => prop_assert!(t.seconds.values().all(|v| v.is_finite() && *v >= 0.0)),
            Err(e) => {
                starts_with_file(&e.to_string(), TIMES_FILE)?;
                // Bad bytes are on a line.
                if let AttrError::OpTimes {
                    line: None,
                    message,
                    ..
                } = &e
                {
                    prop_assert!(message.contains("no op times"), "{}", e);
                }
            }
        }
        Ok(())
    });
}

#[test]
fn prop_op_times_read_back() {
    fuzz::check("op_times_round_trip", times_file(), |f| {
        let t = read_times(&f.text()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let want = f.expected();
        prop_assert_eq!(
            t.seconds.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (op, v) in &want {
            prop_assert!(
                close(t.seconds[op], *v),
                "{}: {} != {}",
                op,
                t.seconds[op],
                v
            );
        }
        Ok(())
    });
}

#[test]
fn prop_op_times_repeated_op_is_refused_on_its_line() {
    // The other side of the generator's rule: a file that lists an op a
    // second time is refused, naming the op.
    fuzz::check(
        "op_times_repeated",
        (times_file(), any::<proptest::sample::Index>(), seconds()),
        |(mut f, which, (text, v))| {
            let op = f.lines[which.index(f.lines.len())].0.clone();
            f.lines.push((format!(" {op} "), text, v));
            f.final_newline = true;
            match read_times(&f.text()) {
                Ok(t) => prop_assert!(false, "{op:?} read twice: {:?}", t.seconds),
                Err(e) => {
                    let msg = e.to_string();
                    starts_with_file(&msg, TIMES_FILE)?;
                    prop_assert!(msg.contains("listed twice"), "{}", msg);
                }
            }
            Ok(())
        },
    );
}

#[test]
fn prop_op_times_cut_is_an_error_or_a_prefix() {
    // A cut at a line's end reads as the lines before it; a cut inside the
    // last line's seconds can only lower that op's time (the figure is
    // shorter): the format has no end marker to tell.
    fuzz::check(
        "op_times_truncated",
        (times_file(), 0.0..=1.0f64),
        |(f, at)| {
            let text = f.text();
            let part = cut_str(&text, at);
            // The model: the complete lines of the cut, and the op of a line
            // left incomplete.
            let complete = match part.rfind('\n') {
                Some(i) => &part[..=i],
                None => "",
            };
            let partial_op = part[complete.len()..].split(',').next().map(str::trim);
            let mut whole = TimesFile {
                lines: Vec::new(),
                ..f.clone()
            };
            let data_lines: Vec<&str> = complete
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .skip(usize::from(f.header.is_some()))
                .collect();
            whole.lines = f.lines[..data_lines.len()].to_vec();
            let want = whole.expected();
            match read_times(part) {
                Err(e) => {
                    starts_with_file(&e.to_string(), TIMES_FILE)?;
                    if let AttrError::OpTimes { line: None, .. } = e {
                        // Only "no op times in it" names no line.
                        prop_assert!(want.is_empty(), "{}", e);
                    }
                }
                Ok(t) => {
                    for (op, v) in &t.seconds {
                        let before = want.get(op).copied().unwrap_or(0.0);
                        if Some(op.as_str()) == partial_op {
                            prop_assert!(*v + 1e-9 >= before, "{}: {} < {}", op, v, before);
                            let full = f.expected()[op];
                            prop_assert!(*v <= full + 1e-9, "{}: {} > {}", op, v, full);
                        } else {
                            prop_assert!(close(*v, before), "{}: {} != {}", op, v, before);
                        }
                    }
                    for op in want.keys() {
                        prop_assert!(t.seconds.contains_key(op), "{} lost", op);
                    }
                }
            }
            Ok(())
        },
    );
}

/// A 50 MB op-times file of one line is refused with a short message that
/// names the file and line.
#[test]
fn op_times_one_huge_line_is_refused() {
    let big = "x".repeat(50 << 20);
    let e = read_times(&big).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{TIMES_FILE}:1:")),
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(text.len() < 16 * 1024, "error of {} bytes", text.len());
    let big = format!("op,seconds\nA,1\n{}", "y,".repeat(25 << 20));
    let e = read_times(&big).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{TIMES_FILE}:3:")),
        "{}",
        &text[..200.min(text.len())]
    );
    assert!(text.len() < 16 * 1024, "error of {} bytes", text.len());
}

/// Long strings where a mapping or a profile expects something else give
/// short messages (serde quotes the value it did not expect).
#[test]
fn long_values_are_shortened_in_messages() {
    let long = "z".repeat(1 << 20);
    let texts = [
        format!("{{\"schema\": \"{long}\"}}"),
        format!("{{\"schema\": \"lotus.mapping/1\", \"backend\": \"perf\", \"settings\": {{}}, \"ops\": \"{long}\", \"shared\": []}}"),
        format!("{{\"op_to_func\": {{\"A\": \"{long}\"}}}}"),
        format!("{{\"op_to_func\": {{\"A\": [\"{long}\"]}}}}"),
        format!("{{\"schema\": \"lotus.mapping/1\", \"settings\": {{\"rule\": \"{long}\"}}}}"),
    ];
    for text in &texts {
        let e = Mapping::from_json(text, MAPPING_FILE)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(MAPPING_FILE), "{}", &e[..200]);
        assert!(
            e.len() < 4096,
            "mapping error of {} bytes: {}",
            e.len(),
            &e[..200]
        );
    }
    let texts = [
        format!("{{\"schema\": \"{long}\"}}"),
        format!("{{\"unit\": \"{long}\", \"rows\": []}}"),
        format!("{{\"unit\": \"samples\", \"rows\": [{{\"function\": \"{long}\", \"module\": \"m\", \"value\": -1}}]}}"),
        format!("{{\"unit\": \"samples\", \"rows\": \"{long}\"}}"),
    ];
    for text in &texts {
        let e = Profile::read_json(&mut text.as_bytes(), PROFILE_FILE)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(PROFILE_FILE), "{}", &e[..200]);
        assert!(
            e.len() < 4096,
            "profile error of {} bytes: {}",
            e.len(),
            &e[..200]
        );
    }
}
