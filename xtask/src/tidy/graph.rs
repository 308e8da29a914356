//! The server's module graph, read from what each file names (`syntax.rs`): which top-level
//! module a path reaches (through the crate root's re-exports too), the edges between modules,
//! and the import circles in them. A circle fails tidy unless [`ALLOWED_CIRCLES`] names it.

use std::collections::{BTreeMap, BTreeSet};

use super::Source;
use super::syntax::{self, Parsed};

/// Import circles that are allowed for now, with why. A circle found passes only when all its
/// modules are in one entry: a new circle, or a module joining one, fails.
pub const ALLOWED_CIRCLES: &[(&[&str], &str)] = &[(
    &[
        "automations",
        "cluster",
        "desktop",
        "gateway",
        "github",
        "identity",
        "live",
        "progress",
        "slack",
        "state",
        "vscode",
    ],
    // The core, which the surfaces used to tangle with, is a crate of its own; what is left is
    // the composition root's state and the surfaces it holds.
    "the surfaces share `AppState`, which holds each surface's handle (the composition root's state)",
)];

/// The server's top-level modules and what the crate root re-exports.
pub struct ServerModules {
    modules: BTreeSet<String>,
    /// A name the crate root makes visible → the path it stands for.
    exports: BTreeMap<String, Vec<String>>,
}

/// The server module a file belongs to (`server/src/sessions/x.rs` → `sessions`); none for the
/// crate root and the binary.
pub fn server_module(path: &str) -> Option<String> {
    let rest = path.strip_prefix("server/src/")?;
    if rest.starts_with("bin/") || rest == "lib.rs" {
        return None;
    }
    let top = rest.split('/').next()?;
    Some(top.trim_end_matches(".rs").to_string())
}

impl ServerModules {
    pub fn read(parsed: &BTreeMap<String, Parsed>) -> Self {
        let modules = parsed.keys().filter_map(|p| server_module(p)).collect();
        let exports = parsed
            .get("server/src/lib.rs")
            .map(|p| p.exports.iter().cloned().collect())
            .unwrap_or_default();
        Self { modules, exports }
    }

    /// The server module `path` reaches (`crate::db` is the store crate's: none).
    pub fn module_of(&self, path: &[String]) -> Option<String> {
        let [root, name, ..] = path else {
            return None;
        };
        if root != "crate" {
            return None;
        }
        if self.modules.contains(name) {
            return Some(name.clone());
        }
        let target = self.exports.get(name)?;
        let first = target.iter().find(|s| *s != "crate")?;
        self.modules.contains(first).then(|| first.clone())
    }

    /// Module → the modules its (non-test) code names.
    pub fn edges(&self, parsed: &BTreeMap<String, Parsed>) -> BTreeMap<String, BTreeSet<String>> {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (path, p) in parsed {
            let Some(module) = server_module(path) else {
                continue;
            };
            let entry = edges.entry(module.clone()).or_default();
            for n in p.named.iter().filter(|n| !n.in_test) {
                if let Some(used) = self.module_of(&n.path)
                    && used != module
                {
                    entry.insert(used);
                }
            }
        }
        edges
    }
}

/// The server's module graph of `files`.
pub fn graph(files: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let parsed: BTreeMap<String, Parsed> = files
        .iter()
        .filter_map(|f| Some((f.path.clone(), syntax::parse(&f.path, &f.text).ok()?)))
        .collect();
    ServerModules::read(&parsed).edges(&parsed)
}

/// Strongly connected components with more than one module (Tarjan's algorithm).
pub fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on_stack.insert(v);
            if let Some(ws) = self.edges.get(v) {
                for w in ws {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let lw = self.low[w];
                        let lv = self.low.get_mut(v).expect("visited");
                        *lv = (*lv).min(lw);
                    } else if self.on_stack.contains(w) {
                        let iw = self.index[w];
                        let lv = self.low.get_mut(v).expect("visited");
                        *lv = (*lv).min(iw);
                    }
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut w = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !w.index.contains_key(v.as_str()) {
            w.visit(v);
        }
    }
    w.out
}

pub fn print(files: &[Source]) {
    let edges = graph(files);
    println!("server modules and what they import:");
    for (m, to) in &edges {
        let to: Vec<&str> = to.iter().map(String::as_str).collect();
        println!(
            "  {m} ({}) -> {}",
            super::layer_name(super::layer_of(m)),
            to.join(" ")
        );
    }
    for c in circles(&edges) {
        println!("import circle of {} modules: {}", c.len(), c.join(" "));
    }
}
