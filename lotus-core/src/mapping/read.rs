//! Reading a mapping file: the typed, streaming parse behind
//! [`Mapping::from_reader`](super::Mapping::from_reader). Every key of both
//! schemas is read into its type as it comes (no JSON tree), a key given
//! twice is refused, and bytes that are not UTF-8 are named by offset.

use crate::Error;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use serde::Deserialize;

use super::{LotusFormat, Mapping, OpFailure, OpMapping, Settings, SharedFunction, SCHEMA};
use crate::report_error::quote_cut;
use crate::row::Unit;

/// A mapping file of either schema, as read: every top-level key of both,
/// each optional. Derived structs refuse a key given twice ("duplicate
/// field"); maps go through [`unique_keys`].
#[derive(Deserialize)]
pub(super) struct AnyMapping {
    #[serde(default)]
    schema: Option<serde_json::Value>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default)]
    settings: Option<Settings>,
    #[serde(default)]
    unit: Option<Unit>,
    #[serde(default)]
    ops: Option<Vec<OpMapping>>,
    #[serde(default)]
    shared: Option<Vec<SharedFunction>>,
    #[serde(default)]
    imported_from: Option<String>,
    #[serde(default)]
    baseline: Option<OpMapping>,
    #[serde(default)]
    environment: Option<UniqueMap<String, String>>,
    #[serde(default)]
    failures: Option<Vec<OpFailure>>,
    #[serde(default)]
    op_to_func: Option<UniqueMap<String, Vec<String>>>,
    #[serde(default)]
    common_funcs_to_op: Option<UniqueMap<String, Vec<String>>>,
}

/// Only the schema tag (its first value), every other key skipped (no
/// tree is built). Reads any JSON object; anything else is a data error.
pub(super) struct SchemaProbe {
    pub(super) schema: Option<serde_json::Value>,
}

impl<'de> Deserialize<'de> for SchemaProbe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = SchemaProbe;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut schema = None;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == "schema" && schema.is_none() {
                        schema = Some(map.next_value()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(SchemaProbe { schema })
            }
        }
        d.deserialize_map(Visit)
    }
}

impl AnyMapping {
    pub(super) fn into_mapping(self, file: &str) -> Result<Mapping, Error> {
        let missing = |key: &str| Error::InvalidMapping {
            file: file.to_string(),
            message: format!("missing field `{key}`"),
        };
        if let Some(schema) = self.schema {
            if schema.as_str() != Some(SCHEMA) {
                return Err(Error::UnknownMappingSchema {
                    file: file.to_string(),
                    found: quote_cut(&schema.to_string(), 80),
                });
            }
            let m = Mapping {
                schema: SCHEMA.to_string(),
                backend: self.backend.ok_or_else(|| missing("backend"))?,
                settings: self.settings.ok_or_else(|| missing("settings"))?,
                unit: self.unit.unwrap_or_default(),
                ops: self.ops.ok_or_else(|| missing("ops"))?,
                shared: self.shared.ok_or_else(|| missing("shared"))?,
                imported_from: self.imported_from,
                baseline: self.baseline,
                environment: self.environment.map(|m| m.0).unwrap_or_default(),
                failures: self.failures.unwrap_or_default(),
            };
            m.validate(file)?;
            return Ok(m);
        }
        match self.op_to_func {
            Some(op_to_func) => LotusFormat {
                op_to_func: op_to_func.0,
                common_funcs_to_op: self.common_funcs_to_op.map(|m| m.0).unwrap_or_default(),
            }
            .into_mapping(file),
            None => Err(Error::NotAMapping {
                file: file.to_string(),
            }),
        }
    }
}

/// A reader that fails at the first byte that is not UTF-8 (serde_json
/// checks only inside strings, and would call the file's first bad byte
/// "expected value"), saying where it is.
pub(super) struct Utf8Checked<R> {
    inner: R,
    /// Bytes passed on so far.
    offset: u64,
    /// The first bytes of a character cut by the end of the last read.
    carry: [u8; 4],
    carried: usize,
}

impl<R: Read> Utf8Checked<R> {
    pub(super) fn new(inner: R) -> Self {
        Utf8Checked {
            inner,
            offset: 0,
            carry: [0; 4],
            carried: 0,
        }
    }

    fn bad(&self, at: usize) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (bad byte at offset {}); is this a mapping JSON file?",
                self.offset + at as u64
            ),
        )
    }
}

impl<R: Read> Read for Utf8Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.carried > 0 {
            return Err(self.bad(0));
        }
        let mut at = 0;
        if self.carried > 0 {
            // Complete the cut character with the bytes that follow.
            let width = match self.carry[0] {
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => 4,
            };
            let take = (width - self.carried).min(n);
            self.carry[self.carried..self.carried + take].copy_from_slice(&buf[..take]);
            self.carried += take;
            at = take;
            if self.carried == width {
                if std::str::from_utf8(&self.carry[..width]).is_err() {
                    return Err(self.bad(0));
                }
                self.carried = 0;
            } else if std::str::from_utf8(&self.carry[..self.carried])
                .err()
                .is_some_and(|e| e.error_len().is_some())
            {
                return Err(self.bad(0));
            }
        }
        if self.carried == 0 {
            if let Err(e) = std::str::from_utf8(&buf[at..n]) {
                let cut = at + e.valid_up_to();
                if e.error_len().is_some() {
                    return Err(self.bad(cut));
                }
                // A character cut by the end of this read.
                self.carried = n - cut;
                self.carry[..self.carried].copy_from_slice(&buf[cut..n]);
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}

/// A `T` read only from a JSON object (derived structs also accept an
/// array of their fields in order, which no mapping file is).
pub(super) struct ObjectOnly<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = ObjectOnly<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(ObjectOnly)
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// A JSON object read into a map, refusing a key given twice (serde's
/// maps keep the last value silently, and a mapping with two values for
/// one key is ambiguous).
pub(super) struct UniqueMap<K, V>(pub(super) BTreeMap<K, V>);

impl<'de, K, V> Deserialize<'de> for UniqueMap<K, V>
where
    K: Deserialize<'de> + Ord + fmt::Display,
    V: Deserialize<'de>,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<K, V>(std::marker::PhantomData<(K, V)>);
        impl<'de, K, V> serde::de::Visitor<'de> for Visit<K, V>
        where
            K: Deserialize<'de> + Ord + fmt::Display,
            V: Deserialize<'de>,
        {
            type Value = UniqueMap<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<Self::Value, A::Error> {
                let mut map = BTreeMap::new();
                while let Some((k, v)) = access.next_entry::<K, V>()? {
                    if map.contains_key(&k) {
                        return Err(serde::de::Error::custom(format_args!(
                            "duplicate key '{}'",
                            quote_cut(&k.to_string(), 80)
                        )));
                    }
                    map.insert(k, v);
                }
                Ok(UniqueMap(map))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// `deserialize_with` for map fields: see [`UniqueMap`].
pub(super) fn unique_keys<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: Deserialize<'de> + Ord + fmt::Display,
    V: Deserialize<'de>,
{
    UniqueMap::deserialize(d).map(|m| m.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_is_checked_across_reads() {
        /// Hands out one byte per read.
        struct Drip<'a>(&'a [u8]);
        impl Read for Drip<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let Some((first, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                buf[0] = *first;
                self.0 = rest;
                Ok(1)
            }
        }
        let read = |bytes: &[u8]| {
            let mut out = Vec::new();
            Utf8Checked::new(Drip(bytes))
                .read_to_end(&mut out)
                .map(|_| out)
        };
        let text = "{\"é\": \"€𝄞\"}".as_bytes();
        assert_eq!(read(text).expect("valid"), text);
        let e = read(b"{\"a\xff\"}").unwrap_err();
        assert!(e.to_string().contains("offset 3"), "{e}");
        assert!(read(b"\"\xe2\x82\"").is_err(), "a cut character");
        assert!(read(b"\xe2\x82").is_err(), "cut at the end");
        let e = Mapping::from_json("\u{e9}", "x.json").unwrap_err();
        assert!(!e.to_string().contains("UTF-8"), "{e}");
    }
}
