//! The sources as the compiler reads them (syn): every path a file names — `use` trees expanded
//! (groups, nesting, renames, globs), paths in code and attributes, paths inside macro bodies —
//! resolved from `self` and `super` to the crate root, each with its line; the methods it calls;
//! and the lines its `#[cfg(test)]` items take.

use proc_macro2::{Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::{self, Visit};

/// A path a file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub line: usize,
    /// Its segments from its root: `["crate", "sessions", "x"]`, `["axum", "Json"]`.
    pub path: Vec<String>,
    /// Inside a `#[cfg(test)]` item.
    pub in_test: bool,
}

/// What tidy needs of one file.
#[derive(Debug, Default)]
pub struct Parsed {
    pub named: Vec<Named>,
    /// `(line, method, arguments)` of each method call (`db.raw_pool()`: no arguments).
    pub methods: Vec<(usize, String, usize)>,
    /// Line ranges (1-based, inclusive) of `#[cfg(test)]` items.
    pub test_spans: Vec<(usize, usize)>,
    /// `(name, path)` of each name a `use` makes visible (`pub use tandem_store as db`).
    pub exports: Vec<(String, Vec<String>)>,
    /// `(line, identifier)` of every identifier in the file's public surface outside its tests:
    /// the signatures of its `pub` functions, of inherent `pub` methods and of the methods of
    /// its `pub` traits, the fields of its `pub` structs and enums, its `pub` type aliases.
    pub public: Vec<(usize, String)>,
    /// `(line, identifier)` of every identifier in the file's tokens (comments and string
    /// literals are not tokens of this kind): `cfg` arguments, macro names, everything.
    pub idents: Vec<(usize, String)>,
}

impl Parsed {
    /// Lines of the file outside its `#[cfg(test)]` items.
    pub fn production_lines(&self, text: &str) -> usize {
        let total = text.lines().count();
        let mut in_tests = vec![false; total + 2];
        for &(a, b) in &self.test_spans {
            for flag in in_tests.iter_mut().take(b.min(total) + 1).skip(a) {
                *flag = true;
            }
        }
        (1..=total).filter(|l| !in_tests[*l]).count()
    }
}

/// The module path of a file inside its crate: `server/src/sessions/mod.rs` → `["sessions"]`,
/// `tests/it/agent_runs/queue.rs` → `["agent_runs", "queue"]`.
pub fn module_of(path: &str) -> Vec<String> {
    let rest = if let Some(at) = path.find("/src/") {
        &path[at + 5..]
    } else if let Some(r) = path.strip_prefix("tests/it/") {
        r
    } else if let Some(r) = path.strip_prefix("e2e/") {
        r
    } else {
        path
    };
    let mut parts: Vec<String> = rest
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Parses `text` (the file at `path`).
pub fn parse(path: &str, text: &str) -> Result<Parsed, String> {
    let file = syn::parse_file(text).map_err(|e| {
        let at = e.span().start();
        format!("line {}: {e}", at.line)
    })?;
    let mut walk = Walk {
        module: module_of(path),
        out: Parsed::default(),
        in_test: 0,
    };
    walk.visit_file(&file);
    idents(file.to_token_stream(), &mut walk.out.idents);
    Ok(walk.out)
}

fn idents(ts: TokenStream, out: &mut Vec<(usize, String)>) {
    for t in ts {
        match t {
            TokenTree::Ident(i) => out.push((i.span().start().line, i.to_string())),
            TokenTree::Group(g) => idents(g.stream(), out),
            _ => {}
        }
    }
}

struct Walk {
    module: Vec<String>,
    out: Parsed,
    /// How many `#[cfg(test)]` items the walk is inside.
    in_test: usize,
}

impl Walk {
    /// Records `segs`, resolved from `self`/`super` to `crate`.
    fn push(&mut self, line: usize, segs: Vec<String>) {
        let path = match segs.first().map(String::as_str) {
            Some("self") | Some("super") => {
                let mut base = self.module.clone();
                let mut rest = segs.as_slice();
                while let Some(first) = rest.first() {
                    match first.as_str() {
                        "self" => {}
                        "super" => {
                            base.pop();
                        }
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                let mut p = vec!["crate".to_string()];
                p.extend(base);
                p.extend(rest.iter().cloned());
                p
            }
            _ => segs,
        };
        self.out.named.push(Named {
            line,
            path,
            in_test: self.in_test > 0,
        });
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                if let Some(name) = path.last() {
                    self.out.exports.push((name.clone(), path.clone()));
                }
                self.push(n.ident.span().start().line, path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.out.exports.push((r.rename.to_string(), path.clone()));
                self.push(r.ident.span().start().line, path);
            }
            syn::UseTree::Glob(g) => {
                self.push(g.star_token.spans[0].start().line, prefix.clone());
            }
            syn::UseTree::Group(g) => {
                for item in &g.items {
                    self.use_tree(prefix, item);
                }
            }
        }
    }

    /// Paths in a macro's tokens (`a::b::c`), which syn leaves unparsed.
    fn tokens(&mut self, ts: TokenStream) {
        let toks: Vec<TokenTree> = ts.into_iter().collect();
        let is_colon = |t: &TokenTree, joint: bool| matches!(t, TokenTree::Punct(p) if p.as_char() == ':' && (!joint || p.spacing() == Spacing::Joint));
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                TokenTree::Group(g) => {
                    self.tokens(g.stream());
                    i += 1;
                }
                TokenTree::Ident(id) => {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while j + 1 < toks.len()
                        && is_colon(&toks[j], true)
                        && is_colon(&toks[j + 1], false)
                    {
                        match toks.get(j + 2) {
                            Some(TokenTree::Ident(next)) => {
                                segs.push(next.to_string());
                                j += 3;
                            }
                            _ => break,
                        }
                    }
                    if segs.len() >= 2 {
                        self.push(id.span().start().line, segs);
                    }
                    i = j.max(i + 1);
                }
                _ => i += 1,
            }
        }
    }
}

/// Whether `attrs` hold `#[cfg(test)]` (or a `cfg` naming `test` among others).
fn cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .to_token_stream()
                .into_iter()
                .any(|t| mentions_test(&t))
    })
}

fn mentions_test(t: &TokenTree) -> bool {
    match t {
        TokenTree::Ident(i) => i == "test",
        TokenTree::Group(g) => g.stream().into_iter().any(|t| mentions_test(&t)),
        _ => false,
    }
}

fn attrs_of(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

/// First and last line an item's tokens (its attributes included) take.
fn lines_of(item: &syn::Item) -> (usize, usize) {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for t in item.to_token_stream() {
        let s = t.span();
        lo = lo.min(s.start().line);
        hi = hi.max(s.end().line);
    }
    (lo, hi)
}

/// Whether `v` is plain `pub` (not `pub(crate)` or narrower).
fn is_pub(v: &syn::Visibility) -> bool {
    matches!(v, syn::Visibility::Public(_))
}

impl Walk {
    /// Records the identifiers of `node` as part of the public surface.
    fn public(&mut self, node: &impl ToTokens) {
        if self.in_test > 0 {
            return;
        }
        fn idents(ts: TokenStream, out: &mut Vec<(usize, String)>) {
            for t in ts {
                match t {
                    TokenTree::Ident(i) => out.push((i.span().start().line, i.to_string())),
                    TokenTree::Group(g) => idents(g.stream(), out),
                    _ => {}
                }
            }
        }
        idents(node.to_token_stream(), &mut self.out.public);
    }
}

impl<'ast> Visit<'ast> for Walk {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_pub(&f.vis) {
            self.public(&f.sig);
        }
        visit::visit_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if i.trait_.is_none() {
            for item in &i.items {
                if let syn::ImplItem::Fn(f) = item
                    && is_pub(&f.vis)
                {
                    self.public(&f.sig);
                }
            }
        }
        visit::visit_item_impl(self, i);
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if is_pub(&t.vis) {
            for item in &t.items {
                if let syn::TraitItem::Fn(f) = item {
                    self.public(&f.sig);
                }
            }
        }
        visit::visit_item_trait(self, t);
    }

    fn visit_item_struct(&mut self, st: &'ast syn::ItemStruct) {
        if is_pub(&st.vis) {
            for f in &st.fields {
                if is_pub(&f.vis) {
                    self.public(f);
                }
            }
        }
        visit::visit_item_struct(self, st);
    }

    fn visit_item_enum(&mut self, e: &'ast syn::ItemEnum) {
        if is_pub(&e.vis) {
            for v in &e.variants {
                self.public(&v.fields);
            }
        }
        visit::visit_item_enum(self, e);
    }

    fn visit_item_type(&mut self, t: &'ast syn::ItemType) {
        if is_pub(&t.vis) {
            self.public(&t.ty);
        }
        visit::visit_item_type(self, t);
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = cfg_test(attrs_of(item));
        if test {
            self.out.test_spans.push(lines_of(item));
            self.in_test += 1;
        }
        visit::visit_item(self, item);
        if test {
            self.in_test -= 1;
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            visit::visit_item_mod(self, m);
            self.module.pop();
        } else {
            visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        self.use_tree(&mut prefix, &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() >= 2 || p.leading_colon.is_some() {
            let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
            self.push(p.segments[0].ident.span().start().line, segs);
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        visit::visit_macro(self, m);
        self.tokens(m.tokens.clone());
    }

    fn visit_expr_method_call(&mut self, c: &'ast syn::ExprMethodCall) {
        self.out.methods.push((
            c.method.span().start().line,
            c.method.to_string(),
            c.args.len(),
        ));
        visit::visit_expr_method_call(self, c);
    }
}
