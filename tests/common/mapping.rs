//! Helpers for tests that run `lotus map` and read the mapping it wrote.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

/// What a finished `lotus map` left: (exit code, -1 when killed; the
/// mapping at `out`, when it was written; stderr).
pub fn map_result(o: &Output, out: &Path) -> (i32, Option<Value>, String) {
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let m = std::fs::read_to_string(out)
        .ok()
        .map(|t| serde_json::from_str(&t).expect("json"));
    (o.status.code().unwrap_or(-1), m, stderr)
}

/// The mapping's op names, in its order.
pub fn op_names(m: &Value) -> Vec<String> {
    m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .map(|o| o["name"].as_str().expect("name").to_string())
        .collect()
}

/// The op named `name` in mapping `m`; panics, showing the mapping,
/// when it has none.
pub fn op<'a>(m: &'a Value, name: &str) -> &'a Value {
    m["ops"]
        .as_array()
        .expect("ops")
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("op {name} in {m}"))
}

/// `field` (`function`, `module`) of each function the mapping lists for
/// `op`, in its order; "" where a function has none.
pub fn function_fields(m: &Value, op: &str, field: &str) -> Vec<String> {
    self::op(m, op)["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .map(|f| f[field].as_str().unwrap_or("").to_string())
        .collect()
}
