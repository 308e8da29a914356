//! Fuzzes the repo recipe parser, `Recipe::parse` of `tandem.toml` (the file comes from the
//! repository, which anyone who can push writes, and is read at every snapshot build and
//! session start): arbitrary text, random TOML documents and mutated valid recipes. Nothing may
//! panic or exhaust the stack; bad text is `Err(Invalid)`; a recipe that parses encodes again to
//! the same recipe (and hash), and its limits apply only within their documented ranges.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

use super::{FILE, Recipe, RecipeFile, RecipeLimits};
use crate::Error;
use crate::fuzz_support::{config, mutate, mutations};
use crate::runtime::Limits;

/// The documented ranges of `[workspace.limits]`.
const MEMORY_MB: std::ops::RangeInclusive<i64> = 64..=262_144;
const CPUS: std::ops::RangeInclusive<f64> = 0.1..=64.0;
const PIDS: std::ops::RangeInclusive<i64> = 64..=1_048_576;
const DISK_GB: std::ops::RangeInclusive<i64> = 1..=16_384;

/// Parses `text` and checks what holds for every answer.
fn check(text: &str) {
    let r = match Recipe::parse(Some(text)) {
        Ok(r) => r,
        Err(Error::Invalid(why)) => {
            assert!(why.starts_with(FILE), "the error names the file: {why}");
            return;
        }
        Err(e) => panic!("{text:?}: not an Invalid error: {e:?}"),
    };
    check_recipe(&r);
}

fn check_recipe(r: &Recipe) {
    // The limits: taken within their ranges, refused outside them (NaN included).
    let l = &r.limits;
    let fits = l.memory_mb.is_none_or(|m| MEMORY_MB.contains(&m))
        && l.cpus.is_none_or(|c| CPUS.contains(&c))
        && l.pids.is_none_or(|p| PIDS.contains(&p))
        && l.disk_gb.is_none_or(|d| DISK_GB.contains(&d));
    let base = Limits::default();
    match l.apply(base) {
        Ok(got) => {
            assert!(fits, "{l:?} applied though out of range");
            assert_eq!(
                got.memory_bytes,
                l.memory_mb.map_or(base.memory_bytes, |m| m << 20)
            );
            assert!(got.memory_bytes > 0);
            assert!(got.cpus.is_finite() && got.cpus > 0.0);
            assert_eq!(got.pids, l.pids.unwrap_or(base.pids));
            assert_eq!(
                got.disk_bytes,
                l.disk_gb.map_or(base.disk_bytes, |d| d << 30)
            );
        }
        Err(e) => {
            assert!(!fits, "{l:?} refused though in range: {e}");
            assert!(matches!(e, tandem_host::Error::Invalid(_)));
        }
    }
    // Encoded again (as a `tandem.toml`), it is the same recipe with the same hash.
    let file = RecipeFile {
        workspace: r.clone(),
        mcp: Vec::new(),
    };
    let text = toml::to_string(&file).unwrap_or_else(|e| panic!("{r:?} does not encode: {e}"));
    let back = Recipe::parse(Some(&text)).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_eq!(back.hash(), r.hash(), "{text:?}");
    if !l.cpus.is_some_and(f64::is_nan) {
        assert_eq!(&back, r);
    }
    assert!(r.hash().starts_with("sha256:") && r.hash().len() == 7 + 64);
}

/// Field names and table headers of `tandem.toml`, and some near misses.
const KEYS: &[&str] = &[
    "setup",
    "start",
    "env",
    "ports",
    "egress",
    "ready",
    "limits",
    "memory_mb",
    "cpus",
    "pids",
    "disk_gb",
    "workspace",
    "setpu",
    "NODE_ENV",
    "\"quoted key\"",
    "a.b",
];

const HEADERS: &[&str] = &[
    "[workspace]",
    "[workspace.limits]",
    "[workspace.env]",
    "[[workspace.setup]]",
    "[workspace]\n[workspace]",
    "[limits]",
    "",
];

/// A TOML value, valid or nearly so.
fn toml_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<String>().prop_map(|s| toml::Value::String(s).to_string()),
        "[a-z =;|&-]{0,12}".prop_map(|s| format!("\"{s}\"")),
        "[a-z ]{0,8}".prop_map(|s| format!("'''{s}'''")),
        any::<i64>().prop_map(|n| n.to_string()),
        prop_oneof![
            Just(0i64),
            Just(63),
            Just(64),
            Just(262_144),
            Just(262_145),
            Just(1_048_576),
            Just(1_048_577),
            Just(65_535),
            Just(65_536),
            Just(-1),
        ]
        .prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| toml::Value::Float(f).to_string()),
        proptest::sample::select(vec![
            "nan",
            "+inf",
            "-inf",
            "0.1",
            "0.09999",
            "64.0",
            "64.5",
            "1e999",
            "true",
            "false",
            "1979-05-27T07:32:00Z",
            "0x10",
            "0o7",
            "0b1",
            "1_000",
            "\"\\u0000\"",
            "\"\\uD800\"",
            "\"\\U0010FFFF\"",
        ])
        .prop_map(str::to_string),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(", "))),
            vec((proptest::sample::select(KEYS), inner), 0..4).prop_map(|kv| {
                let kv: Vec<String> = kv.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                format!("{{ {} }}", kv.join(", "))
            }),
        ]
    })
}

/// A random TOML document made of the recipe's headers and keys.
fn toml_document() -> impl Strategy<Value = String> {
    vec(
        prop_oneof![
            1 => proptest::sample::select(HEADERS).prop_map(str::to_string),
            4 => (proptest::sample::select(KEYS), toml_value())
                .prop_map(|(k, v)| format!("{k} = {v}")),
        ],
        0..10,
    )
    .prop_map(|lines| lines.join("\n"))
}

/// A valid recipe, its commands, names and values as odd as TOML strings allow.
fn recipe() -> impl Strategy<Value = Recipe> {
    let text = || prop_oneof!["[a-z0-9 ./=|&;$-]{0,24}", any::<String>(),];
    let commands = move || vec(text(), 0..4);
    (
        commands(),
        commands(),
        btree_map(text(), text(), 0..4),
        vec(any::<u16>(), 0..4),
        vec(text(), 0..3),
        commands(),
        (
            proptest::option::of(prop_oneof![MEMORY_MB, any::<i64>()]),
            proptest::option::of(prop_oneof![CPUS, any::<f64>()]),
            proptest::option::of(prop_oneof![PIDS, any::<i64>()]),
            proptest::option::of(prop_oneof![DISK_GB, any::<i64>()]),
        ),
    )
        .prop_map(
            |(setup, start, env, ports, egress, ready, (memory_mb, cpus, pids, disk_gb))| Recipe {
                setup,
                start,
                env,
                egress_ask: !egress.is_empty() && ports.len() % 2 == 1,
                ports,
                egress,
                ready,
                limits: RecipeLimits {
                    memory_mb,
                    cpus,
                    pids,
                    disk_gb,
                },
            },
        )
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn recipes_of_any_text_never_panic(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn recipes_of_random_toml_never_panic(text in toml_document()) {
        check(&text);
    }

    #[test]
    fn valid_recipes_round_trip(r in recipe()) {
        let text = toml::to_string(&RecipeFile { workspace: r.clone(), mcp: Vec::new() }).unwrap();
        let back = Recipe::parse(Some(&text))
            .map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(back.hash(), r.hash());
        check_recipe(&back);
    }

    #[test]
    fn mutated_recipes_never_panic(r in recipe(), muts in mutations()) {
        let text = toml::to_string(&RecipeFile { workspace: r, mcp: Vec::new() }).unwrap();
        // The file is read as UTF-8 text.
        check(&String::from_utf8_lossy(&mutate(text.as_bytes(), &muts)));
    }

    #[test]
    fn mutated_documented_recipes_never_panic(muts in mutations()) {
        let text = concat!(
            "[workspace]\n",
            "setup = [\"npm ci\", \"npm run build\"]   # at snapshot build, in /workspace\n",
            "start = [\"redis-server --daemonize yes\"] # at every session start\n",
            "env = { NODE_ENV = \"development\" }\n",
            "ports = [3000]\n",
            "egress = [\"registry.npmjs.org\"]\n",
            "ready = [\"redis-cli ping\"]\n",
            "\n[workspace.limits]\nmemory_mb = 2048\ncpus = 1.5\npids = 512\n",
        );
        check(text);
        check(&String::from_utf8_lossy(&mutate(text.as_bytes(), &muts)));
    }
}

#[test]
fn deeply_nested_recipes_are_refused_without_exhausting_the_stack() {
    let depth = 1 << 18;
    let texts = [
        format!(
            "[workspace]\nsetup = {}{}",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
        format!(
            "[workspace]\nenv = {}{}",
            "{a=".repeat(depth),
            "}".repeat(depth)
        ),
        format!("x = {}", "[".repeat(depth)),
        format!("[{}a]", "a.".repeat(depth)),
        format!("[workspace.env.{}a]", "a.".repeat(depth)),
        format!("[workspace]\n{}a = 1", "a.".repeat(depth)),
    ];
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for t in texts {
                assert!(Recipe::parse(Some(&t)).is_err());
            }
        })
        .unwrap()
        .join()
        .unwrap();
}
