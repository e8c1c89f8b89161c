//! The gateway's module walls: no chain of imports between its top-level
//! modules leads back to where it started, and a module is `pub` only when
//! another crate uses it.
//!
//! The module graph is read from the source text of `src/`: `src/foo.rs` and
//! everything under `src/foo/` are module `foo`; `lib.rs` is the crate root
//! and stands outside the graph. An edge `a -> b` is any path that names the
//! top-level module `b` from `a`: `crate::b…` (in a `use`, in a
//! `use crate::{b, c::{…}}` group, or inline), `super::b` or
//! `super::super::b` wherever the `super`s climb to the crate root, and
//! `crate::Name` where the root imports `Name` from `b`. Comments, doc
//! comments, string and character literals are blanked first.
//!
//! Test code: a `#[cfg(test)] mod … { … }` block is skipped, so edges only
//! unit tests make do not count. Every other item counts, a `#[cfg(test)]`
//! function included: the graph may hold an edge too many, never one too few
//! for the code that ships.
//!
//! The public surface: every `pub mod` in `lib.rs` is in `PUBLIC` below, every
//! module in `PUBLIC` is `pub mod`, and code outside the crate (`USERS`)
//! names each of them as `levee_gateway::module`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules `lib.rs` may declare `pub mod`, and who outside the crate
/// uses each. Every other module is `pub(crate)` or private.
const PUBLIC: &[(&str, &str)] = &[
    ("census", "levee (src/check.rs), the gateway's tests"),
    ("clock", "the gateway's tests (deploy.rs)"),
    ("framing_view", "fuzz (h1_answer, h1_request)"),
    ("idempotency", "the gateway's tests (store_memory.rs)"),
    ("inspect", "fuzz (inspect)"),
    ("metrics", "the gateway's tests (deploy.rs)"),
    ("models", "the gateway's tests (models.rs)"),
    ("platform", "levee (src/check.rs, src/probe.rs)"),
    ("record", "levee (src/serve.rs), fuzz (redact)"),
    ("redact", "fuzz (redact)"),
    ("reload", "levee (src/serve.rs), the gateway's tests"),
    ("shared", "levee (src/check.rs)"),
    ("sse", "fuzz (sse)"),
    ("status", "the gateway's tests (vertex.rs)"),
    ("transport", "the gateway's tests"),
    ("upstream", "levee (src/check.rs)"),
];

/// Where other crates' code that uses the gateway lives, from the workspace
/// root.
const USERS: &[&str] = &[
    "crates/levee",
    "crates/levee-sim",
    "crates/levee-drill",
    "crates/levee-gateway/tests",
    "crates/levee-policy/benches",
    "crates/levee-translate/benches",
    "fuzz/fuzz_targets",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source with comments and literals replaced by spaces (newlines kept,
/// so line numbers still hold).
fn blank(src: &str) -> Vec<char> {
    let mut c: Vec<char> = src.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut i, n) = (0, c.len());
    while i < n {
        let start = i;
        let at = |j: usize| c.get(j).copied().unwrap_or(' ');
        if at(i) == '/' && at(i + 1) == '/' {
            while i < n && c[i] != '\n' {
                i += 1;
            }
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < n {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (at(i) == 'r' || (at(i) == 'b' && at(i + 1) == 'r'))
            && (i == 0 || !ident(at(i - 1)))
            && {
                let mut j = i + if at(i) == 'b' { 2 } else { 1 };
                while at(j) == '#' {
                    j += 1;
                }
                at(j) == '"'
            }
        {
            // A raw string: r"…", r#"…"#, br"…".
            let mut j = i + if at(i) == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < n && !(c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                j += 1;
            }
            i = (j + 1 + hashes).min(n);
        } else if at(i) == '"' {
            i += 1;
            while i < n && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i = (i + 1).min(n);
        } else if at(i) == '\'' && at(i + 1) == '\\' {
            i += 2;
            while i < n && c[i] != '\'' {
                i += 1;
            }
            i = (i + 1).min(n);
        } else if at(i) == '\'' && at(i + 2) == '\'' {
            i += 3;
        } else {
            i += 1;
            continue;
        }
        for ch in &mut c[start..i] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
    }
    c
}

/// Identifiers, `::` and single punctuation characters, each with its line.
fn tokens(src: &str) -> Vec<(String, usize)> {
    let c = blank(src);
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((c[start..i].iter().collect(), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(("::".into(), line));
            i += 2;
        } else {
            out.push((ch.to_string(), line));
            i += 1;
        }
    }
    out
}

/// The first segments of the path or `use` tree that starts at `t[i]`
/// (`b` for `b::x`, `b` and `c` for `{b, c::{d, e}}`).
fn heads(t: &[(String, usize)], i: usize) -> Vec<String> {
    match t.get(i).map(|x| x.0.as_str()) {
        Some("{") => {
            let (mut out, mut depth, mut expect) = (Vec::new(), 0, true);
            for (tok, _) in &t[i..] {
                match tok.as_str() {
                    "{" => depth += 1,
                    "}" if depth == 1 => break,
                    "}" => depth -= 1,
                    "," if depth == 1 => expect = true,
                    _ if depth == 1 && expect => {
                        out.push(tok.clone());
                        expect = false;
                    }
                    _ => {}
                }
            }
            out
        }
        Some(tok) => vec![tok.to_string()],
        None => Vec::new(),
    }
}

/// The index past the block whose `{` is at `t[open]`.
fn past_block(t: &[(String, usize)], open: usize) -> usize {
    let mut depth = 0;
    for (j, (tok, _)) in t.iter().enumerate().skip(open) {
        match tok.as_str() {
            "{" => depth += 1,
            "}" if depth == 1 => return j + 1,
            "}" => depth -= 1,
            _ => {}
        }
    }
    t.len()
}

/// If `t[i]` starts `#[cfg(test)] … mod name {`, the index of that `{`.
fn test_module(t: &[(String, usize)], i: usize) -> Option<usize> {
    let is = |j: usize, s: &str| t.get(j).is_some_and(|x| x.0 == s);
    let attr = ["#", "[", "cfg", "(", "test", ")", "]"];
    if !attr.iter().enumerate().all(|(k, s)| is(i + k, s)) {
        return None;
    }
    let mut j = i + attr.len();
    // Further attributes and a visibility, then `mod name {`.
    loop {
        if is(j, "#") && is(j + 1, "[") {
            let mut depth = 0;
            while j < t.len() {
                j += 1;
                match t[j].0.as_str() {
                    "[" => depth += 1,
                    "]" if depth == 1 => break,
                    "]" => depth -= 1,
                    _ => {}
                }
            }
            j += 1;
        } else if is(j, "pub") && is(j + 1, "(") {
            while j < t.len() && !is(j, ")") {
                j += 1;
            }
            j += 1;
        } else if is(j, "pub") {
            j += 1;
        } else {
            break;
        }
    }
    (is(j, "mod") && is(j + 2, "{")).then_some(j + 2)
}

/// A reference from one module to another: file and line.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

struct Crate {
    /// The top-level modules, each with the files it is made of.
    modules: BTreeMap<String, Vec<PathBuf>>,
    /// Names the root imports (`use b::Name;`), with their module.
    root_names: BTreeMap<String, String>,
    /// `pub mod` declarations in `lib.rs`.
    public: Vec<String>,
    src: PathBuf,
}

fn read_crate() -> Crate {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        if rel == Path::new("lib.rs") {
            continue;
        }
        let first = rel.components().next().unwrap().as_os_str();
        let name = Path::new(first).file_stem().unwrap().to_string_lossy();
        modules.entry(name.into_owned()).or_default().push(file);
    }
    let lib = tokens(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let (mut root_names, mut public) = (BTreeMap::new(), Vec::new());
    let mut i = 0;
    while i < lib.len() {
        if let Some(open) = test_module(&lib, i) {
            i = past_block(&lib, open);
            continue;
        }
        let tok = lib[i].0.as_str();
        if tok == "pub" && lib.get(i + 1).is_some_and(|x| x.0 == "mod") {
            public.push(lib[i + 2].0.clone());
        }
        // `use b::…;` at the root: every name it binds stands for `b`.
        let starts = i == 0 || matches!(lib[i - 1].0.as_str(), ";" | "}" | "]" | "pub" | ")");
        if tok == "use" && starts && modules.contains_key(&lib[i + 1].0) {
            let module = lib[i + 1].0.clone();
            let end = (i..lib.len()).find(|&j| lib[j].0 == ";").unwrap();
            for j in i + 1..end {
                let name = &lib[j].0;
                let leaf = matches!(lib[j + 1].0.as_str(), "," | "}" | ";");
                if leaf && name != "self" && name.starts_with(|c: char| c.is_alphabetic()) {
                    root_names.insert(name.clone(), module.clone());
                }
            }
            i = end;
        }
        i += 1;
    }
    Crate {
        modules,
        root_names,
        public,
        src,
    }
}

/// The names a file's paths reach at the crate root (`b` for `crate::b::x`),
/// each with its line; `path` is the file's module path (`["platform",
/// "azure"]` for `src/platform/azure.rs`).
fn root_refs(path: &[String], src: &str) -> Vec<(String, usize)> {
    let t = tokens(src);
    let mut out = Vec::new();
    // Inline modules the scan is in: the depth their `{` opened at.
    let (mut inline, mut depth, mut i) = (Vec::<usize>::new(), 0, 0);
    while i < t.len() {
        if let Some(open) = test_module(&t, i) {
            i = past_block(&t, open);
            continue;
        }
        let after_path = i > 0 && t[i - 1].0 == "::";
        let mut root = None;
        match t[i].0.as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            "mod" if t.get(i + 2).is_some_and(|x| x.0 == "{") => inline.push(depth),
            "crate" if !after_path && t.get(i + 1).is_some_and(|x| x.0 == "::") => {
                root = Some(i + 2);
            }
            "super" if !after_path => {
                let mut j = i;
                while t.get(j).is_some_and(|x| x.0 == "super")
                    && t.get(j + 1).is_some_and(|x| x.0 == "::")
                {
                    j += 2;
                }
                if (j - i) / 2 == path.len() + inline.len() {
                    root = Some(j);
                }
                i = j.max(i + 1) - 1;
            }
            _ => {}
        }
        if let Some(at) = root {
            out.extend(heads(&t, at).into_iter().map(|h| (h, t[i].1)));
        }
        i += 1;
    }
    out
}

/// Every reference from one top-level module to another.
fn edges(krate: &Crate) -> Edges {
    let mut edges = Edges::new();
    for (module, files) in &krate.modules {
        for file in files {
            let rel = file.strip_prefix(&krate.src).unwrap();
            let mut path: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if path.last().is_some_and(|s| s == "mod") {
                path.pop();
            }
            let src = std::fs::read_to_string(file).unwrap();
            for (head, line) in root_refs(&path, &src) {
                let at = format!("src/{}:{line}", rel.display());
                assert!(
                    head != "*",
                    "{at}: a glob import of the crate root hides which modules it uses; name them"
                );
                let target = if krate.modules.contains_key(&head) {
                    Some(head)
                } else {
                    krate.root_names.get(&head).cloned()
                };
                if let Some(target) = target.filter(|t| t != module) {
                    edges
                        .entry(module.clone())
                        .or_default()
                        .entry(target)
                        .or_insert(at);
                }
            }
        }
    }
    edges
}

/// A cycle in the graph, as the modules along it (first one repeated last).
fn find_cycle(edges: &Edges) -> Option<Vec<String>> {
    fn visit<'a>(
        node: &'a str,
        edges: &'a Edges,
        done: &mut BTreeSet<&'a str>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|&n| n == node) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        stack.push(node);
        for next in edges.get(node).into_iter().flat_map(|m| m.keys()) {
            if let Some(cycle) = visit(next, edges, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

#[test]
fn no_module_imports_lead_back_to_themselves() {
    let krate = read_crate();
    let edges = edges(&krate);
    let count: usize = edges.values().map(|m| m.len()).sum();
    // The scan found the graph: it is read from text and must not go blind.
    assert!(
        krate.modules.len() > 30 && count > 50,
        "the scan found {} modules and {count} edges; is src/ where it looks?",
        krate.modules.len()
    );
    eprintln!("{} modules, {count} edges", krate.modules.len());
    // Each cycle found is named with the lines that make its edges; the edge
    // that closed it is then set aside and the search runs again, until no
    // cycle is left.
    let (mut rest, mut found) = (edges.clone(), Vec::new());
    while let Some(cycle) = find_cycle(&rest) {
        let mut text = cycle.join(" -> ");
        for w in cycle.windows(2) {
            text += &format!("\n    {} -> {}: {}", w[0], w[1], edges[&w[0]][&w[1]]);
        }
        found.push(text);
        let n = cycle.len();
        rest.get_mut(&cycle[n - 2]).unwrap().remove(&cycle[n - 1]);
    }
    assert!(
        found.is_empty(),
        "the gateway's modules import each other in a cycle:\n  {}\n\
         Move what both sides need into a leaf module that imports neither.",
        found.join("\n  ")
    );
}

#[test]
fn public_modules_are_the_ones_other_crates_use() {
    let krate = read_crate();
    let listed: BTreeSet<&str> = PUBLIC.iter().map(|(m, _)| *m).collect();
    for module in &krate.public {
        assert!(
            listed.contains(module.as_str()),
            "lib.rs declares `pub mod {module}`, which is not in PUBLIC in tests/module_walls.rs. \
             If no other crate uses it, make it `pub(crate) mod {module}`; \
             otherwise add it to PUBLIC with the crate that uses it."
        );
    }
    for module in &listed {
        assert!(
            krate.public.iter().any(|m| m == module),
            "PUBLIC in tests/module_walls.rs lists `{module}`, which lib.rs no longer declares `pub mod`; remove it from the list"
        );
    }
    // Each listed module is named as `levee_gateway::module` outside the crate.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for dir in USERS {
        rust_files(&root.join(dir), &mut files);
    }
    let mut used = BTreeSet::new();
    for file in files {
        let t = tokens(&std::fs::read_to_string(&file).unwrap());
        for i in 0..t.len().saturating_sub(1) {
            if t[i].0 == "levee_gateway" && t[i + 1].0 == "::" {
                used.extend(heads(&t, i + 2));
            }
        }
    }
    for (module, users) in PUBLIC {
        assert!(
            used.contains(*module),
            "`levee_gateway::{module}` is public for {users}, but no code outside the crate names it any more; \
             make it `pub(crate) mod {module}` in lib.rs and remove it from PUBLIC"
        );
    }
}

#[test]
fn the_scan_reads_paths_as_rustc_resolves_them() {
    let src = r##"
use crate::{a, b::{c, d}, self};
// use crate::line_comment;
/// crate::doc_comment
/* crate::block /* nested */ crate::block */
fn f() {
    let s = "crate::string {";
    let r = r#"crate::raw {"#;
    let c = '{';
    crate::e::f(super::g::<'static>());
}
mod inner {
    use super::not_root;
    use super::super::h;
}
#[cfg(test)]
#[allow(unused)]
mod tests {
    use crate::test_only;
}
fn after() -> crate::i {}
"##;
    let refs: Vec<(String, usize)> = root_refs(&["m".to_string()], src);
    let want = [
        ("a", 2),
        ("b", 2),
        ("self", 2),
        ("e", 10),
        ("g", 10),
        ("h", 14),
        ("i", 21),
    ];
    let want: Vec<(String, usize)> = want.iter().map(|(h, l)| (h.to_string(), *l)).collect();
    assert_eq!(refs, want);
}
