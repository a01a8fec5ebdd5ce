#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The shape of the code, read from its imports: no service crate's modules import each other
//! in a circle, and the gateway's layers import only downwards. What a newcomer would draw from
//! `use crate::...` lines (and paths written inline, and `super::`), one module per file.
//!
//! Test modules (`#[cfg(test)]` to the end of a file) and comments are left out: a test may
//! reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path inside the crate (`["api", "accounts", "orgs"]`); the crate root is `[]`.
type Module = Vec<String>;

/// Every module file of the crate under `src`, by module path.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut module: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    module.pop();
                }
                out.insert(module, path);
            }
        }
    }
    out
}

/// The code of a file that counts: no comments, no test module.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The identifier path starting at `s` (`a::b::C`), as segments.
fn path_at(s: &str) -> Vec<String> {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(s.len());
    s[..end].split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect()
}

/// The paths a file names under `crate::`, with `use crate::a::{b, c::d}` groups spread out.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let base = path_at(rest);
        let after = &rest[rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len())..];
        if rest[..rest.len() - after.len()].ends_with("::") && after.starts_with('{') {
            let group = &after[1..after.find('}').unwrap_or(after.len())];
            for part in group.split(',') {
                let part = part.split(" as ").next().unwrap_or_default().trim();
                let mut p = base.clone();
                if part != "self" && !part.is_empty() {
                    p.extend(part.split("::").map(str::to_owned));
                }
                out.push(p);
            }
        } else {
            out.push(base);
        }
    }
    out
}

/// The modules a folder's own file declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn children(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub ")).unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect()
}

/// Who imports whom: each module to the modules it names (the longest module a path starts with).
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let files = modules(src);
    // A path no module starts is an item of the crate root's own (`crate::Ctx` in `lib.rs`).
    let resolve = |segs: &[String]| {
        let module = (1..=segs.len()).rev().map(|n| segs[..n].to_vec()).find(|m| files.contains_key(m));
        module.or_else(|| (!segs.is_empty()).then(Vec::new))
    };
    let mut edges = BTreeMap::new();
    for (module, path) in &files {
        let code = code(path);
        let mut targets = BTreeSet::new();
        for p in crate_paths(&code) {
            targets.extend(resolve(&p));
        }
        // `super::x` from a file `a/b.rs` (module a::b) names a::x; from `a/mod.rs`, a's parent's x.
        let is_dir = matches!(path.file_stem().and_then(|s| s.to_str()), Some("mod" | "lib" | "main"));
        for (i, _) in code.match_indices("super::") {
            if code[..i].ends_with("super::") {
                continue;
            }
            let mut ups = 0;
            while code[i + ups * "super::".len()..].starts_with("super::") {
                ups += 1;
            }
            let mut base = if is_dir { module.clone() } else { module[..module.len().saturating_sub(1)].to_vec() };
            for _ in 1..ups {
                base.pop();
            }
            let rest = &code[i + ups * "super::".len()..];
            match rest.strip_prefix('{') {
                // `super::{a, b::C}`: each one.
                Some(group) => {
                    for part in group[..group.find('}').unwrap_or(group.len())].split(',') {
                        let mut p = base.clone();
                        p.extend(path_at(part.trim()));
                        targets.extend(resolve(&p));
                    }
                }
                None => {
                    base.extend(path_at(rest));
                    targets.extend(resolve(&base));
                }
            }
        }
        // A folder's own file names its children by their bare names (`runs::handle`).
        if is_dir {
            let text = std::fs::read_to_string(path).unwrap();
            for child in children(&text) {
                let pattern = format!("{child}::");
                for (i, _) in code.match_indices(&pattern) {
                    if code[..i].ends_with(|c: char| c == ':' || c.is_alphanumeric() || c == '_') {
                        continue;
                    }
                    let mut p = module.clone();
                    p.push(child.clone());
                    p.extend(path_at(&code[i + pattern.len()..]));
                    targets.extend(resolve(&p));
                }
            }
        }
        targets.remove(module);
        edges.insert(module.clone(), targets);
    }
    edges
}

/// The strongly connected groups of more than one module (Tarjan's).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    group.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), found: Vec::new() };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The same graph between a crate's top-level modules (its folders and top files).
fn top_level(edges: &BTreeMap<Module, BTreeSet<Module>>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut top: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (from, tos) in edges {
        let Some(f) = from.first() else { continue };
        for t in tos.iter().filter_map(|to| to.first()) {
            if t != f {
                top.entry(vec![f.clone()]).or_default().insert(vec![t.clone()]);
            }
        }
    }
    top
}

fn src(service: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../services").join(service).join("src")
}

/// The crates whose modules form no circle, between files or between folders.
const WITHOUT_CIRCLES: [&str; 9] =
    ["gateway", "automations", "platform", "sandbox", "conversations", "callbacks", "halyard", "agent", "executor"];

#[test]
fn no_modules_import_each_other_in_a_circle() {
    let mut found = Vec::new();
    for service in WITHOUT_CIRCLES {
        let edges = graph(&src(service));
        assert!(edges.len() > 1, "{service}: its modules were read ({})", edges.len());
        for c in circles(&edges) {
            found.push(format!("{service}: the files {c:?} import each other"));
        }
        for c in circles(&top_level(&edges)) {
            found.push(format!("{service}: the folders {c:?} import each other"));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The gateway's layers, lowest first: a module imports only from its own layer's folder or
/// from those below it.
const GATEWAY_LAYERS: [&[&str]; 9] =
    [&["http"], &["read_model"], &["projection"], &["state"], &["auth"], &["audit"], &["domain"], &["api"], &["router"]];

#[test]
fn the_gateways_layers_import_only_downwards() {
    let rank = |m: &Module| m.first().and_then(|f| GATEWAY_LAYERS.iter().position(|l| l.contains(&f.as_str())));
    let edges = graph(&src("gateway"));
    let mut upward = Vec::new();
    for (from, tos) in &edges {
        let Some(r) = rank(from) else { continue };
        for to in tos {
            if rank(to).is_some_and(|t| t > r) {
                upward.push(format!("{} imports {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(upward.is_empty(), "imports from a lower layer to a higher one:\n{}", upward.join("\n"));
    // Every top-level module of the gateway is in a layer, or is the crate's own entry.
    let unplaced: Vec<String> = edges.keys().filter(|m| !m.is_empty() && rank(m).is_none()).map(|m| m.join("::")).collect();
    assert!(unplaced.is_empty(), "modules in no layer: {unplaced:?}");
    // The check sees imports: the handlers import the domain.
    assert!(edges.iter().any(|(f, t)| f.first().is_some_and(|f| f == "api") && t.iter().any(|t| t[0] == "domain")));
}

/// A circle made on purpose is found (the check can fail).
#[test]
fn a_circle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::write(dir.path().join("lib.rs"), "pub mod a;\npub mod b;\n").unwrap();
    std::fs::write(dir.path().join("a/mod.rs"), "pub mod x;\n").unwrap();
    std::fs::write(dir.path().join("a/x.rs"), "use crate::b::{self, Thing};\n// use crate::c;\n").unwrap();
    std::fs::write(dir.path().join("b.rs"), "fn f() { super::a::x::g() }\n#[cfg(test)]\nuse crate::lib;\n").unwrap();
    let edges = graph(dir.path());
    assert_eq!(circles(&edges), vec![vec!["a::x".to_owned(), "b".to_owned()]]);
    assert_eq!(circles(&top_level(&edges)), vec![vec!["a".to_owned(), "b".to_owned()]]);
    // The crate's own file, naming a child by its bare name, and the child importing the root's
    // item (the shape of a `Ctx` kept in `lib.rs`).
    std::fs::write(dir.path().join("lib.rs"), "pub mod a;\npub mod b;\npub struct Ctx;\nfn f() { b::f() }\n").unwrap();
    std::fs::write(dir.path().join("b.rs"), "use crate::Ctx;\n").unwrap();
    assert_eq!(circles(&graph(dir.path())), vec![vec![String::new(), "b".to_owned()]]);
}
