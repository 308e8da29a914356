//! Shared pieces of the property-based fuzz tests (`*/fuzz_tests.rs`) of what hostile clients,
//! workspaces and webhook senders give the server: the case budget, byte mutations of valid
//! inputs, JSON-ish generators and a float-tolerant JSON comparison.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;

/// `default` cases (sized so each test runs in a few seconds in CI), or `TANDEM_FUZZ_CASES`
/// cases for every fuzz test, to fuzz longer locally. Failures are not persisted to files: a
/// failure found is kept as a plain `#[test]` with its input.
pub fn config(default: u32) -> Config {
    let cases = std::env::var("TANDEM_FUZZ_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// One change to a valid input; positions wrap around its length.
#[derive(Clone, Debug)]
pub enum Mutation {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Truncate(usize),
}

/// Bytes that change the meaning of JSON and TOML most.
const SPECIAL: &[u8] = b"{}[]\"',:=\\.-+eE0123456789 \t\r\n#\x00\x7f\xc3\xa9\xff";

fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![3 => proptest::sample::select(SPECIAL), 1 => any::<u8>()]
}

/// A few random mutations.
pub fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let one = prop_oneof![
        (any::<usize>(), byte()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), vec(byte(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 1usize..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 1usize..32).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ];
    vec(one, 1..6)
}

/// `input` with `mutations` applied.
pub fn mutate(input: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = input.to_vec();
    for m in mutations {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
        match m {
            Mutation::Set(i, x) => {
                if !b.is_empty() {
                    let i = i % b.len();
                    b[i] = *x;
                }
            }
            Mutation::Insert(i, xs) => {
                let i = at(*i, b.len());
                b.splice(i..i, xs.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let i = at(*i, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Duplicate(i, n) => {
                let i = at(*i, b.len());
                let end = (i + n).min(b.len());
                let copy = b[i..end].to_vec();
                b.splice(end..end, copy);
            }
            Mutation::Truncate(i) => {
                let i = at(*i, b.len());
                b.truncate(i);
            }
        }
    }
    b
}

/// Any JSON value, with object keys and strings drawn mostly from `words` (the field and tag
/// names the parser looks for), so random documents get past the first field.
pub fn json(words: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let word = prop_oneof![
        4 => proptest::sample::select(words).prop_map(str::to_string),
        1 => any::<String>(),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop_oneof![
            -3i64..1000,
            Just(i64::MIN),
            Just(i64::MAX),
            Just(i64::from(u16::MAX) + 1),
            Just(i64::from(u32::MAX) + 1),
        ]
        .prop_map(Value::from),
        Just(Value::from(u64::MAX)),
        any::<f64>().prop_map(Value::from),
        word.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        let word = prop_oneof![
            4 => proptest::sample::select(words).prop_map(str::to_string),
            1 => any::<String>(),
        ];
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec((word, inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A JSON object with a `tag` field (one of `words`) and fields named from `words`: the shape
/// of an internally tagged message.
pub fn tagged(tag: &'static str, words: &'static [&'static str]) -> impl Strategy<Value = Value> {
    (
        proptest::sample::select(words),
        vec((proptest::sample::select(words), json(words)), 0..6),
    )
        .prop_map(move |(t, fields)| {
            let mut m: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            m.insert(tag.into(), Value::String(t.into()));
            Value::Object(m)
        })
}

/// Equal JSON, numbers compared as floats within rounding (a float parsed from JSON may be one
/// unit in the last place off the one printed).
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x == y {
                return true;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => {
                    (x - y).abs() <= 1e-12 * x.abs().max(y.abs()) || (x - y).abs() <= 1e-300
                }
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// `depth` nested arrays around `1`: what a hostile sender uses to exhaust the stack.
pub fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}
