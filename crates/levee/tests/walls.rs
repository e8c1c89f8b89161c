//! The workspace's walls: rules about the shape of the code that no compiler
//! checks, read here from the repository's source text. Which crate may
//! depend on which (the retry policy does no I/O; the libraries under the
//! gateway never reach up into it; the mock, simulator and drill never share
//! the gateway's code), no chain of imports between a crate's top-level
//! modules leading back to where it started, a gateway whose public modules
//! are few and each used by another crate, no task-local state, functions of
//! at most 80 lines and source files of at most 700, and each cloud platform
//! named by at most three source files. Each wall keeps the code readable in
//! parts: a reader can take a crate, a module, a function or a platform on its
//! own. Each rule is its own test; a failure names every place that breaks
//! it, as `path:line`, and says what to do.
//!
//! Every checker is a function of paths and text; the tests at the end of
//! this file run each one on small inline sources, one that breaks its rule
//! and one that keeps it, so a checker that went blind would show.
//!
//! The source text is read with comments, doc comments, string and character
//! literals blanked (newlines kept, so line numbers still hold): a word in a
//! comment or a message is not code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------
// The workspace as text.

/// A file of the workspace: its path from the workspace root, with `/`
/// between components, and its text.
struct Source {
    path: String,
    text: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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

/// `path` under `base`, with `/` between components.
fn relative(path: &Path, base: &Path) -> String {
    let rel = path.strip_prefix(base).expect("a path under its base");
    let parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Every `.rs` file under `dir` (a path from the workspace root), sorted.
fn read_rs(dir: &str) -> Vec<Source> {
    let base = workspace().join(dir);
    let mut files = Vec::new();
    rust_files(&base, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|file| Source {
            path: format!("{dir}/{}", relative(&file, &base)),
            text: std::fs::read_to_string(&file).expect("a readable source file"),
        })
        .collect()
}

/// The names of the directories under `crates/` that hold a `Cargo.toml`.
fn crate_names() -> Vec<String> {
    let dir = workspace().join("crates");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the workspace has crates/")
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names.len() >= 9,
        "found only {names:?} under {}; is the workspace root where the walls look?",
        dir.display()
    );
    names
}

/// Every `.rs` file under `crates/*/<sub>` for each of `subs`.
fn crate_sources(subs: &[&str]) -> Vec<Source> {
    let mut out = Vec::new();
    for name in crate_names() {
        for sub in subs {
            out.extend(read_rs(&format!("crates/{name}/{sub}")));
        }
    }
    out
}

/// Fails the rule's test when it found problems, naming each and what to do.
fn verdict(rule: &str, problems: &[String], what_to_do: &str) {
    assert!(
        problems.is_empty(),
        "{rule}: {} problem(s)\n  {}\n{what_to_do}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------
// Rust source as tokens.

/// The source with comments and literals replaced by spaces (newlines kept,
/// so line numbers still hold).
fn blank(src: &str) -> Vec<char> {
    let mut c: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < c.len() {
        let start = i;
        i = past_comment_or_literal(&c, i);
        if i == start {
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

/// The index past the comment or literal that starts at `c[i]`, or `i` when
/// none does.
fn past_comment_or_literal(c: &[char], i: usize) -> usize {
    let n = c.len();
    let at = |j: usize| c.get(j).copied().unwrap_or(' ');
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    if at(i) == '/' && at(i + 1) == '/' {
        (i..n).find(|&j| c[j] == '\n').unwrap_or(n)
    } else if at(i) == '/' && at(i + 1) == '*' {
        let (mut j, mut depth) = (i, 0);
        while j < n {
            if at(j) == '/' && at(j + 1) == '*' {
                depth += 1;
                j += 2;
            } else if at(j) == '*' && at(j + 1) == '/' {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    break;
                }
            } else {
                j += 1;
            }
        }
        j.min(n)
    } else if (at(i) == 'r' || (at(i) == 'b' && at(i + 1) == 'r')) && (i == 0 || !ident(at(i - 1)))
    {
        past_raw_string(c, i + if at(i) == 'b' { 2 } else { 1 }).unwrap_or(i)
    } else if at(i) == '"' {
        let mut j = i + 1;
        while j < n && c[j] != '"' {
            j += if c[j] == '\\' { 2 } else { 1 };
        }
        (j + 1).min(n)
    } else if at(i) == '\'' && at(i + 1) == '\\' {
        // An escape: the character after the backslash may itself be `'`.
        let j = (i + 3..n).find(|&j| c[j] == '\'').unwrap_or(n);
        (j + 1).min(n)
    } else if at(i) == '\'' && at(i + 2) == '\'' {
        i + 3
    } else {
        i
    }
}

/// The index past a raw string whose `#`s or `"` start at `c[j]` (after its
/// `r` or `br`), or `None` when no raw string starts there.
fn past_raw_string(c: &[char], mut j: usize) -> Option<usize> {
    let n = c.len();
    let at = |j: usize| c.get(j).copied().unwrap_or(' ');
    let mut hashes = 0;
    while at(j) == '#' {
        hashes += 1;
        j += 1;
    }
    if at(j) != '"' {
        return None;
    }
    j += 1;
    while j < n && !(c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
        j += 1;
    }
    Some((j + 1 + hashes).min(n))
}

/// A token: an identifier, `::` or a single punctuation character, with its
/// line.
type Tokens = Vec<(String, usize)>;

/// The tokens of `src`, comments and literals left out.
fn tokens(src: &str) -> Tokens {
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

/// If `t[i]` starts `#[cfg(test)]`, the index of the `mod` after it and any
/// further attributes and visibility (or of whatever item follows).
fn after_test_attribute(t: &[(String, usize)], i: usize) -> Option<usize> {
    let is = |j: usize, s: &str| t.get(j).is_some_and(|x| x.0 == s);
    let attr = ["#", "[", "cfg", "(", "test", ")", "]"];
    if !attr.iter().enumerate().all(|(k, s)| is(i + k, s)) {
        return None;
    }
    let mut j = i + attr.len();
    loop {
        if is(j, "#") && is(j + 1, "[") {
            let mut depth = 0;
            while j + 1 < t.len() {
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
            return Some(j);
        }
    }
}

/// If `t[i]` starts `#[cfg(test)] … mod name {`, the index of that `{`.
fn test_module(t: &[(String, usize)], i: usize) -> Option<usize> {
    let j = after_test_attribute(t, i)?;
    let is = |j: usize, s: &str| t.get(j).is_some_and(|x| x.0 == s);
    (is(j, "mod") && is(j + 2, "{")).then_some(j + 2)
}

/// If `t[i]` starts `#[cfg(test)] … mod name;`, that name: a module in a
/// file of its own that only tests build.
fn test_file_module(t: &[(String, usize)], i: usize) -> Option<String> {
    let j = after_test_attribute(t, i)?;
    let is = |j: usize, s: &str| t.get(j).is_some_and(|x| x.0 == s);
    (is(j, "mod") && is(j + 2, ";")).then(|| t[j + 1].0.clone())
}

/// The tokens of `src` outside `#[cfg(test)] mod … { … }` blocks.
fn shipped_tokens(src: &str) -> Tokens {
    let t = tokens(src);
    let (mut out, mut i) = (Vec::new(), 0);
    while i < t.len() {
        if let Some(open) = test_module(&t, i) {
            i = past_block(&t, open);
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Rule 1: crate dependency walls.

/// Crates that do I/O: a runtime, sockets, HTTP, TLS, Redis, cloud SDKs. A
/// name ending in `*` stands for every crate it starts.
const IO: &[&str] = &[
    "tokio*",
    "hyper*",
    "h2",
    "http-body*",
    "rustls*",
    "socket2",
    "mio",
    "redis",
    "aws-*",
    "reqwest",
];

/// Every Levee crate.
const LEVEE: &[&str] = &["levee", "levee-*"];

/// The crates that build on the gateway or stand beside it.
const ABOVE: &[&str] = &[
    "levee-gateway",
    "levee-mock",
    "levee-sim",
    "levee-drill",
    "levee",
];

/// A crate and the crates its normal dependencies (`[dependencies]`, also
/// per target) may not name; dev-dependencies are free.
struct Wall {
    krate: &'static str,
    never: &'static [&'static [&'static str]],
    why: &'static str,
}

const WALLS: &[Wall] = &[
    Wall {
        krate: "levee-policy",
        never: &[IO, LEVEE],
        why: "the retry policy is plain logic the gateway and the simulator share: it takes time and randomness as arguments and does no I/O",
    },
    Wall {
        krate: "levee-wire",
        never: &[ABOVE],
        why: "the wire formats sit under the gateway, the mock and the simulator",
    },
    Wall {
        krate: "levee-config",
        never: &[ABOVE],
        why: "the configuration sits under the gateway, the mock and the simulator",
    },
    Wall {
        krate: "levee-translate",
        never: &[ABOVE],
        why: "the dialect translation sits under the gateway",
    },
    Wall {
        krate: "levee-mock",
        never: &[&["levee-gateway"]],
        why: "the mock stands in for the providers the gateway is tested against: shared code would hide a bug on both sides",
    },
    Wall {
        krate: "levee-sim",
        never: &[&["levee-gateway"]],
        why: "the simulator models the gateway from the shared policy, not from its I/O code",
    },
    Wall {
        krate: "levee-drill",
        never: &[&["levee-gateway"]],
        why: "the drill loads a gateway from outside, as a client would",
    },
];

fn matches_name(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// `line` up to its `#` comment, if any (a `#` in a string stays).
fn toml_code(line: &str) -> &str {
    let mut quote = None;
    for (i, ch) in line.char_indices() {
        match (quote, ch) {
            (None, '"' | '\'') => quote = Some(ch),
            (Some(q), _) if ch == q => quote = None,
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// A table header's dotted parts, quotes kept (`target.'cfg(unix)'.dependencies`
/// is three parts).
fn header_parts(header: &str) -> Vec<String> {
    let (mut parts, mut part, mut quote) = (Vec::new(), String::new(), None);
    for ch in header.chars() {
        match (quote, ch) {
            (None, '.') => parts.push(std::mem::take(&mut part).trim().to_string()),
            (None, '"' | '\'') => quote = Some(ch),
            (Some(q), _) if ch == q => quote = None,
            _ => {}
        }
        if quote.is_some() || ch != '.' {
            part.push(ch);
        }
    }
    parts.push(part.trim().to_string());
    parts
}

/// The value of `package = "…"` in `line`, the crate a renamed dependency
/// stands for.
fn package_of(line: &str) -> Option<String> {
    let rest = &line[line.find("package")? + "package".len()..];
    let rest = rest.trim_start().strip_prefix('=')?.trim_start();
    let quote = rest.chars().next().filter(|q| *q == '"' || *q == '\'')?;
    let value = &rest[1..];
    Some(value[..value.find(quote)?].to_string())
}

/// The normal dependencies a `Cargo.toml` declares (`[dependencies]`,
/// `[dependencies.name]` and their `[target.….dependencies]` forms), each as
/// the crate it names (its `package` when renamed) and its line.
fn normal_dependencies(toml: &str) -> Vec<(String, usize)> {
    // In a dependencies table: `None`; in `[dependencies.name]`: the index
    // of its entry in `out`.
    let mut table: Option<Option<usize>> = None;
    let (mut out, mut open_arrays) = (Vec::new(), 0i32);
    for (n, raw) in toml.lines().enumerate() {
        let line = toml_code(raw).trim();
        if open_arrays == 0 && line.starts_with('[') {
            let parts = header_parts(line.trim_matches(|c| c == '[' || c == ']'));
            let deps = match parts.first().map(String::as_str) {
                Some("target") => parts.get(2..),
                _ => parts.get(..),
            };
            table = match deps {
                Some([d]) if d == "dependencies" => Some(None),
                Some([d, name]) if d == "dependencies" => {
                    out.push((name.trim_matches('"').to_string(), n + 1));
                    Some(Some(out.len() - 1))
                }
                _ => None,
            };
            continue;
        }
        let key_line = open_arrays == 0 && line.contains('=');
        match table {
            Some(None) if key_line => {
                let key = line.split(['=', '.']).next().unwrap_or("").trim();
                let name = package_of(line).unwrap_or_else(|| key.trim_matches('"').to_string());
                out.push((name, n + 1));
            }
            Some(Some(entry)) if key_line && line.starts_with("package") => {
                if let Some(name) = package_of(line) {
                    out[entry].0 = name;
                }
            }
            _ => {}
        }
        open_arrays += line.matches('[').count() as i32 - line.matches(']').count() as i32;
    }
    out
}

/// The `name` of a `Cargo.toml`'s `[package]`.
fn package_name(toml: &str) -> Option<String> {
    let mut in_package = false;
    for line in toml.lines().map(|l| toml_code(l).trim()) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && line.split('=').next().is_some_and(|k| k.trim() == "name") {
            return package_of(&line.replacen("name", "package", 1));
        }
    }
    None
}

/// Each normal dependency of the crate whose `Cargo.toml` is at `path` that
/// its wall forbids, with the wall's reason.
fn dependency_breaches(path: &str, toml: &str, walls: &[Wall]) -> Vec<String> {
    let Some(krate) = package_name(toml) else {
        return vec![format!("{path}: no `[package]` name found")];
    };
    let Some(wall) = walls.iter().find(|w| w.krate == krate) else {
        return Vec::new();
    };
    normal_dependencies(toml)
        .into_iter()
        .filter(|(dep, _)| *dep != krate)
        .filter(|(dep, _)| {
            wall.never
                .iter()
                .flat_map(|l| l.iter())
                .any(|p| matches_name(p, dep))
        })
        .map(|(dep, line)| {
            format!(
                "{path}:{line}: {krate} depends on `{dep}`, which its wall forbids ({})",
                wall.why
            )
        })
        .collect()
}

#[test]
fn crates_depend_only_on_what_their_walls_allow() {
    let mut problems = Vec::new();
    let mut walled = BTreeSet::new();
    for name in crate_names() {
        let path = format!("crates/{name}/Cargo.toml");
        let toml = std::fs::read_to_string(workspace().join(&path)).expect("a readable Cargo.toml");
        walled.extend(package_name(&toml).filter(|p| WALLS.iter().any(|w| w.krate == p)));
        problems.extend(dependency_breaches(&path, &toml, WALLS));
    }
    for wall in WALLS {
        if !walled.contains(wall.krate) {
            problems.push(format!(
                "the wall for `{}` names a crate not found under crates/: update WALLS in crates/levee/tests/walls.rs",
                wall.krate
            ));
        }
    }
    verdict(
        "crate dependency walls",
        &problems,
        "Move the code that needs the dependency into a crate its wall allows (the gateway, or a \
         new crate above the walled one), or make it a [dev-dependencies] entry if only tests use it.",
    );
}

// ---------------------------------------------------------------------------
// Rule 2: no module cycle inside a crate.
//
// The module graph of a crate is read from the source text of its `src/`:
// `src/foo.rs` and everything under `src/foo/` are module `foo`; the root
// (`lib.rs`, or `main.rs` for a binary-only crate) stands outside the
// graph. An edge `a -> b` is any path that names the top-level module `b`
// from `a`: `crate::b…` (in a `use`, in a `use crate::{b, c::{…}}` group, or
// inline), `super::b` or `super::super::b` wherever the `super`s climb to
// the crate root, and `crate::Name` where the root imports `Name` from `b`.
//
// Test code: a `#[cfg(test)] mod … { … }` block is skipped, and so is a file
// declared `#[cfg(test)] mod name;` (with the files under it), so edges only
// unit tests make do not count. Every other item counts, a `#[cfg(test)]`
// function included: the graph may hold an edge too many, never one too few
// for the code that ships.

/// One crate's `src/`: where it is, its root file and every file in it, by
/// path under `src/`.
struct CrateSrc {
    dir: String,
    root: String,
    files: Vec<(String, String)>,
}

/// A reference from one module to another, with the first `path:line` that
/// makes it.
type Edges = BTreeMap<String, BTreeMap<String, String>>;

/// Names bound at the crate root, each with the modules it stands for.
type RootNames = BTreeMap<String, BTreeSet<String>>;

struct Graph {
    /// The top-level modules, each with the files it is made of.
    modules: BTreeMap<String, Vec<String>>,
    /// Names the root binds (`use b::Name;`, an inline `mod name { … }`),
    /// with the modules each stands for.
    root_names: RootNames,
    /// The root's `pub mod` declarations, with their lines.
    public: Vec<(String, usize)>,
}

/// A file's module path (`["platform", "azure"]` for `platform/azure.rs`,
/// `["platform"]` for `platform/mod.rs`).
fn module_path(rel: &str) -> Vec<String> {
    let mut path: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if path.last().is_some_and(|s| s == "mod") {
        path.pop();
    }
    path
}

/// The module paths of the files only tests build: each declared
/// `#[cfg(test)] mod name;`, with everything under it.
fn test_only_files(krate: &CrateSrc) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (rel, text) in &krate.files {
        let t = tokens(text);
        let base = if *rel == krate.root {
            Vec::new()
        } else {
            module_path(rel)
        };
        for i in 0..t.len() {
            if let Some(name) = test_file_module(&t, i) {
                out.push([base.clone(), vec![name]].concat());
            }
        }
    }
    out
}

fn read_graph(krate: &CrateSrc) -> Graph {
    let mut modules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let test_only = test_only_files(krate);
    for (rel, _) in &krate.files {
        let other_root = krate.root == "lib.rs" && (rel == "main.rs" || rel.starts_with("bin/"));
        let tests = test_only.iter().any(|p| module_path(rel).starts_with(p));
        if *rel == krate.root || other_root || tests {
            continue;
        }
        modules
            .entry(module_path(rel)[0].clone())
            .or_default()
            .push(rel.clone());
    }
    let root = krate.files.iter().find(|(rel, _)| *rel == krate.root);
    let (root_names, public) = read_root(&tokens(root.map_or("", |(_, text)| text)), &modules);
    Graph {
        modules,
        root_names,
        public,
    }
}

/// The names the root binds with `use module::…;` or `use crate::module::…;`
/// (each standing for its module), its inline modules (each standing for
/// every module its paths reach) and its `pub mod` declarations.
fn read_root(
    t: &[(String, usize)],
    modules: &BTreeMap<String, Vec<String>>,
) -> (RootNames, Vec<(String, usize)>) {
    let (mut root_names, mut public) = (RootNames::new(), Vec::new());
    let tok = |j: usize| t.get(j).map_or("", |x| x.0.as_str());
    let mut i = 0;
    while i < t.len() {
        if let Some(open) = test_module(t, i) {
            i = past_block(t, open);
            continue;
        }
        if tok(i) == "pub" && tok(i + 1) == "mod" {
            public.push((tok(i + 2).to_string(), t[i].1));
        }
        if tok(i) == "mod" && tok(i + 2) == "{" {
            let end = past_block(t, i + 2);
            let reached = inline_reach(&t[i + 2..end], modules);
            root_names
                .entry(tok(i + 1).to_string())
                .or_default()
                .extend(reached);
            i = end;
            continue;
        }
        let starts = i == 0 || matches!(tok(i - 1), ";" | "}" | "]" | "pub" | ")");
        let crate_path = tok(i + 1) == "crate" && tok(i + 2) == "::";
        let first = if crate_path { i + 3 } else { i + 1 };
        if tok(i) == "use" && starts && modules.contains_key(tok(first)) {
            let end = (i..t.len()).find(|&j| tok(j) == ";").unwrap_or(t.len());
            for j in first..end {
                let name = tok(j);
                let leaf = matches!(tok(j + 1), "," | "}" | ";");
                if leaf && name != "self" && name.starts_with(|c: char| c.is_alphabetic()) {
                    let to = root_names.entry(name.to_string()).or_default();
                    to.insert(tok(first).to_string());
                }
            }
            i = end;
        }
        i += 1;
    }
    (root_names, public)
}

/// The top-level modules the paths in an inline module of the root reach
/// (`crate::b…`, `super::b…`, `use b…`).
fn inline_reach(block: &[(String, usize)], modules: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let tok = |j: usize| block.get(j).map_or("", |x| x.0.as_str());
    let mut out = Vec::new();
    for j in 0..block.len() {
        let start = match tok(j) {
            "crate" | "super" if tok(j + 1) == "::" => j + 2,
            "use" => j + 1,
            _ => continue,
        };
        out.extend(
            heads(block, start)
                .into_iter()
                .filter(|h| modules.contains_key(h)),
        );
    }
    out
}

/// The names a file's paths reach at the crate root (`b` for `crate::b::x`),
/// each with its line; `path` is the file's module path.
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

/// Every reference from one top-level module to another, and a problem for
/// each glob import of the crate root.
fn edges(krate: &CrateSrc, graph: &Graph) -> (Edges, Vec<String>) {
    let (mut edges, mut problems) = (Edges::new(), Vec::new());
    let text: BTreeMap<&str, &str> = krate
        .files
        .iter()
        .map(|(r, t)| (r.as_str(), t.as_str()))
        .collect();
    for (module, files) in &graph.modules {
        for rel in files {
            for (head, line) in root_refs(&module_path(rel), text[rel.as_str()]) {
                let at = format!("{}/{rel}:{line}", krate.dir);
                if head == "*" {
                    problems.push(format!(
                        "{at}: a glob import of the crate root hides which modules it uses; name them"
                    ));
                }
                let targets = if graph.modules.contains_key(&head) {
                    BTreeSet::from([head])
                } else {
                    graph.root_names.get(&head).cloned().unwrap_or_default()
                };
                for target in targets.into_iter().filter(|t| t != module) {
                    let to = edges.entry(module.clone()).or_default();
                    to.entry(target).or_insert(at.clone());
                }
            }
        }
    }
    (edges, problems)
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

/// Every cycle in the graph, each named with the lines that make its edges:
/// each cycle found is set aside by removing the edge that closed it, and
/// the search runs again until no cycle is left.
fn cycles(name: &str, edges: &Edges) -> Vec<String> {
    let (mut rest, mut found) = (edges.clone(), Vec::new());
    while let Some(cycle) = find_cycle(&rest) {
        let mut text = format!("{name}: {}", cycle.join(" -> "));
        for w in cycle.windows(2) {
            text += &format!("\n      {} -> {}: {}", w[0], w[1], edges[&w[0]][&w[1]]);
        }
        found.push(text);
        let n = cycle.len();
        if let Some(to) = rest.get_mut(&cycle[n - 2]) {
            to.remove(&cycle[n - 1]);
        }
    }
    found
}

/// A crate's `src/` read from the workspace, or why it cannot be.
fn read_crate_src(name: &str) -> Result<CrateSrc, String> {
    let dir = format!("crates/{name}/src");
    let base = workspace().join(&dir);
    let root = ["lib.rs", "main.rs"]
        .into_iter()
        .find(|r| base.join(r).is_file())
        .ok_or_else(|| format!("{dir} has neither lib.rs nor main.rs: where is the crate root?"))?;
    let files = read_rs(&dir)
        .into_iter()
        .map(|s| (s.path[dir.len() + 1..].to_string(), s.text))
        .collect();
    Ok(CrateSrc {
        dir,
        root: root.to_string(),
        files,
    })
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_cycle() {
    let mut problems = Vec::new();
    let mut sizes = BTreeMap::new();
    for name in crate_names() {
        let krate = match read_crate_src(&name) {
            Ok(k) => k,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let graph = read_graph(&krate);
        let (edges, globs) = edges(&krate, &graph);
        problems.extend(globs);
        problems.extend(cycles(&name, &edges));
        let count: usize = edges.values().map(|m| m.len()).sum();
        sizes.insert(name, (graph.modules.len(), count));
    }
    eprintln!("modules and edges per crate: {sizes:?}");
    // The scan found the graphs: they are read from text and must not go
    // blind.
    let modules: usize = sizes.values().map(|s| s.0).sum();
    let count: usize = sizes.values().map(|s| s.1).sum();
    assert!(
        modules > 60 && count > 100,
        "the scan found {modules} modules and {count} edges in the workspace's crates; is crates/ where it looks?"
    );
    verdict(
        "module cycles",
        &problems,
        "Move what both sides of a cycle need into a leaf module that imports neither, \
         or move the code that closes it to the side that owns its data.",
    );
}

// ---------------------------------------------------------------------------
// Rule 3: the gateway's public surface. Every `pub mod` in its `lib.rs` is in
// `PUBLIC`, every module in `PUBLIC` is `pub mod`, code outside the crate
// (`USERS`) names each as `levee_gateway::module`, and there are at most
// `MAX_PUBLIC` of them: the gateway is used through a few doors.

/// The modules the gateway's `lib.rs` may declare `pub mod`, and who outside
/// the crate uses each. Every other module is `pub(crate)` or private.
const PUBLIC: &[(&str, &str)] = &[
    (
        "census",
        "levee (src/check.rs), the gateway's tests (census.rs)",
    ),
    ("framing_view", "fuzz (h1_answer, h1_request)"),
    ("fuzz", "fuzz (inspect, sse, redact)"),
    ("idempotency", "the gateway's tests (store_memory.rs)"),
    ("preflight", "levee (src/check.rs, src/probe.rs)"),
    ("record", "levee (src/serve.rs), fuzz (redact)"),
    (
        "reload",
        "levee (src/serve.rs), the gateway's tests (reload.rs)",
    ),
    ("transport", "the gateway's tests"),
];

/// At most this many `pub mod`s in the gateway's `lib.rs`.
const MAX_PUBLIC: usize = 8;

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

const GATEWAY_LIB: &str = "crates/levee-gateway/src/lib.rs";

/// The first segments of every `levee_gateway::…` path in `sources`.
fn gateway_paths(sources: &[Source]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for source in sources {
        let t = tokens(&source.text);
        for i in 0..t.len().saturating_sub(1) {
            if t[i].0 == "levee_gateway" && t[i + 1].0 == "::" {
                used.extend(heads(&t, i + 2));
            }
        }
    }
    used
}

/// Every way the declared `pub mod`s, the `public` list and the paths other
/// crates use disagree.
fn surface_problems(
    declared: &[(String, usize)],
    public: &[(&str, &str)],
    used: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (module, line) in declared {
        if !public.iter().any(|(m, _)| m == module) {
            problems.push(format!(
                "{GATEWAY_LIB}:{line}: `pub mod {module}` is not in PUBLIC in crates/levee/tests/walls.rs. \
                 If no other crate uses it, make it `pub(crate) mod {module}`; \
                 otherwise add it to PUBLIC with the crate that uses it."
            ));
        }
    }
    for (module, users) in public {
        if !declared.iter().any(|(m, _)| m == module) {
            problems.push(format!(
                "PUBLIC in crates/levee/tests/walls.rs lists `{module}`, which {GATEWAY_LIB} no longer declares `pub mod`; remove it from the list"
            ));
        } else if !used.contains(*module) {
            problems.push(format!(
                "`levee_gateway::{module}` is public for {users}, but no code outside the crate names it any more; \
                 make it `pub(crate) mod {module}` in {GATEWAY_LIB} and remove it from PUBLIC"
            ));
        }
    }
    problems
}

/// A problem when more than `max` modules are declared `pub mod`.
fn too_many_public(declared: &[(String, usize)], max: usize) -> Option<String> {
    let names: Vec<String> = declared
        .iter()
        .map(|(m, l)| format!("{m} (line {l})"))
        .collect();
    (declared.len() > max).then(|| {
        format!(
            "{GATEWAY_LIB} declares {} `pub mod`s (limit {max}): {}",
            declared.len(),
            names.join(", ")
        )
    })
}

fn gateway_public_modules() -> Vec<(String, usize)> {
    let krate = read_crate_src("levee-gateway").expect("the gateway's src/");
    let public = read_graph(&krate).public;
    assert!(
        !public.is_empty(),
        "found no `pub mod` in {GATEWAY_LIB}; is it where the walls look?"
    );
    public
}

#[test]
fn the_gateways_public_modules_are_the_ones_other_crates_use() {
    let sources: Vec<Source> = USERS.iter().flat_map(|dir| read_rs(dir)).collect();
    let problems = surface_problems(&gateway_public_modules(), PUBLIC, &gateway_paths(&sources));
    verdict(
        "the gateway's public modules",
        &problems,
        "Keep PUBLIC in crates/levee/tests/walls.rs and the `pub mod`s of the gateway's lib.rs the same list, \
         each module on it used by another crate.",
    );
}

#[test]
fn the_gateway_has_at_most_eight_public_modules() {
    let problems: Vec<String> = too_many_public(&gateway_public_modules(), MAX_PUBLIC)
        .into_iter()
        .collect();
    verdict(
        "the gateway's public surface",
        &problems,
        "Other crates reach the gateway through a few modules: re-export what they need from one of \
         them (or from the crate root) and make the rest `pub(crate) mod`.",
    );
}

// ---------------------------------------------------------------------------
// Rule 4: no task-local state.

/// Each `task_local!` in the code of `path`.
fn task_locals(path: &str, text: &str) -> Vec<String> {
    let t = tokens(text);
    t.windows(2)
        .filter(|w| w[0].0 == "task_local" && w[1].0 == "!")
        .map(|w| format!("{path}:{}: `task_local!`", w[0].1))
        .collect()
}

#[test]
fn no_code_keeps_task_local_state() {
    let problems: Vec<String> = crate_sources(&["src"])
        .iter()
        .flat_map(|s| task_locals(&s.path, &s.text))
        .collect();
    verdict(
        "task-local state",
        &problems,
        "A task-local value is state a function reads without being given it, and it is lost in \
         any task spawned from there: pass the value as an argument or keep it in a field of what \
         needs it.",
    );
}

// ---------------------------------------------------------------------------
// Rule 5: functions of at most 80 lines.

const MAX_FN_LINES: usize = 80;

/// Each function in `text` longer than `max` lines, counted from the line
/// holding `fn name` to the line of its closing brace (comments and blank
/// lines count; comments and literals are blanked before braces are
/// matched). A `fn` whose signature ends in `;` has no body and is skipped.
fn long_functions(path: &str, text: &str, max: usize) -> Vec<String> {
    let c = blank(text);
    let word = |j: usize| {
        c.get(j)
            .is_some_and(|ch| ch.is_alphanumeric() || *ch == '_')
    };
    let line_at = |j: usize| 1 + c[..j.min(c.len())].iter().filter(|ch| **ch == '\n').count();
    let mut out = Vec::new();
    for i in 0..c.len() {
        let is_fn = c[i] == 'f' && c.get(i + 1) == Some(&'n') && (i == 0 || !word(i - 1));
        if !is_fn {
            continue;
        }
        let gap = (i + 2..c.len())
            .find(|&j| !c[j].is_whitespace())
            .unwrap_or(c.len());
        if gap == i + 2 || !word(gap) {
            continue;
        }
        let name_end = (gap..c.len()).find(|&j| !word(j)).unwrap_or(c.len());
        let name: String = c[gap..name_end].iter().collect();
        let Some(open) = (name_end..c.len()).find(|&j| c[j] == '{' || c[j] == ';') else {
            continue;
        };
        if c[open] == ';' {
            continue;
        }
        let close = past_braces(&c, open);
        let lines = line_at(close) - line_at(i) + 1;
        if lines > max {
            let line = line_at(i);
            out.push(format!(
                "{path}:{line} fn {name} is {lines} lines (limit {max})"
            ));
        }
    }
    out
}

/// The index of the `}` that closes the `{` at `c[open]` (the end of the
/// text when none does).
fn past_braces(c: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (k, ch) in c.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    c.len()
}

#[test]
fn no_function_is_longer_than_80_lines() {
    let mut sources = crate_sources(&["src", "tests", "benches"]);
    sources.extend(read_rs("fuzz/fuzz_targets"));
    assert!(
        sources.len() > 100,
        "found only {} source files",
        sources.len()
    );
    let problems: Vec<String> = sources
        .iter()
        .flat_map(|s| long_functions(&s.path, &s.text, MAX_FN_LINES))
        .collect();
    verdict(
        "functions of at most 80 lines",
        &problems,
        "Split each into named functions by what each part does (a test's shared setup into a \
         helper), keeping its behaviour, output and assertions as they are.",
    );
}

// ---------------------------------------------------------------------------
// Rule 6: source files of at most 700 lines, unit tests aside.

const MAX_FILE_LINES: usize = 700;

/// The lines of `text` without a trailing `#[cfg(test)]` `mod tests { … }`
/// block: one whose closing brace is the file's last code (further
/// attributes may stand between the two lines).
fn shipped_lines(text: &str) -> usize {
    let c = blank(text);
    let blanked: String = c.iter().collect();
    let lines: Vec<&str> = blanked.lines().collect();
    (0..lines.len())
        .filter(|&i| lines[i].trim() == "#[cfg(test)]")
        .find(|&attr| tests_run_to_the_end(&c, &lines, attr))
        .unwrap_or(lines.len())
}

/// Whether the `#[cfg(test)]` on `lines[attr]` opens a `mod tests { … }`
/// whose closing brace is the last code in `c` (the blanked text `lines`
/// was split from).
fn tests_run_to_the_end(c: &[char], lines: &[&str], attr: usize) -> bool {
    let Some(decl) = (attr + 1..lines.len()).find(|&i| !lines[i].trim().starts_with("#[")) else {
        return false;
    };
    let decl_line = lines[decl].trim();
    if !(decl_line.starts_with("mod tests") && decl_line.ends_with('{')) {
        return false;
    }
    let before: usize = lines[..decl].iter().map(|l| l.chars().count() + 1).sum();
    let brace = lines[decl]
        .rfind('{')
        .map_or(0, |b| lines[decl][..b].chars().count());
    let close = past_braces(c, before + brace);
    c.get(close + 1..)
        .is_some_and(|rest| rest.iter().all(|ch| ch.is_whitespace()))
}

/// A problem when `text` is longer than `max` lines, unit tests aside.
fn long_file(path: &str, text: &str, max: usize) -> Option<String> {
    let n = shipped_lines(text);
    (n > max).then(|| format!("{path} is {n} lines without its trailing tests (limit {max})"))
}

#[test]
fn no_source_file_is_longer_than_700_lines() {
    let problems: Vec<String> = crate_sources(&["src"])
        .iter()
        .filter_map(|s| long_file(&s.path, &s.text, MAX_FILE_LINES))
        .collect();
    verdict(
        "source files of at most 700 lines",
        &problems,
        "Split each into modules by what each part does (a `foo.rs` becomes `foo/mod.rs` and \
         `foo/part.rs`), its unit tests moving with the code they test.",
    );
}

// ---------------------------------------------------------------------------
// Rule 7: each platform named by at most three source files.
//
// What counts as naming a platform: an identifier in code (after comments,
// doc comments, string and character literals are blanked, and outside
// `#[cfg(test)] mod … { … }` blocks) that is the platform's name or starts
// with it at a word boundary, in any of Rust's three cases: `Azure`,
// `AzureOpenai`, `azure`, `azure_url`, `AZURE_BASE`; `Vertex`,
// `VertexOpenai`, `VertexOpenAi`, `vertex::Token`; and so on. The boundary
// is the end of the identifier, `_`, a digit, or (for the capitalised form)
// a capital letter: `Geminis` or `azurely` do not count. A platform's name in
// a string (a config keyword, a URL, a message) or in a comment does not
// count: it is text, not code that depends on the platform. Unit tests do not
// count either: they show a platform's case of code that is written for any.
// The mock (`crates/levee-mock`) stands in for every platform and is left
// out.

/// The platforms, lower case.
const PLATFORMS: &[&str] = &["azure", "bedrock", "vertex", "gemini"];

/// At most this many source files outside the mock name a platform.
const MAX_PLATFORM_FILES: usize = 3;

/// Whether `ident` names `platform` (lower case), in any of its three cases.
fn names_platform(ident: &str, platform: &str) -> bool {
    let mut capital = platform[..1].to_uppercase();
    capital.push_str(&platform[1..]);
    let forms = [
        (capital, true),
        (platform.to_string(), false),
        (platform.to_uppercase(), false),
    ];
    forms.iter().any(|(form, camel)| {
        ident.strip_prefix(form.as_str()).is_some_and(|rest| {
            let next = rest.chars().next();
            next.is_none_or(|ch| ch == '_' || ch.is_ascii_digit() || (*camel && ch.is_uppercase()))
        })
    })
}

/// The platforms the code of `text` names, each with the first line that
/// does.
fn platforms_named(text: &str) -> BTreeMap<&'static str, usize> {
    let mut named = BTreeMap::new();
    for (ident, line) in shipped_tokens(text) {
        for platform in PLATFORMS {
            if names_platform(&ident, platform) {
                named.entry(*platform).or_insert(line);
            }
        }
    }
    named
}

/// For each platform more than `max` files name, the files that do.
fn spread_platforms(sources: &[Source], max: usize) -> Vec<String> {
    let mut files: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for source in sources {
        for (platform, line) in platforms_named(&source.text) {
            files
                .entry(platform)
                .or_default()
                .push(format!("{}:{line}", source.path));
        }
    }
    let report: Vec<String> = files
        .iter()
        .filter(|(_, f)| f.len() <= max)
        .map(|(p, f)| format!("{p}: {} file(s)\n      {}", f.len(), f.join("\n      ")))
        .collect();
    if !report.is_empty() {
        eprintln!("platforms within the limit:\n  {}", report.join("\n  "));
    }
    files
        .into_iter()
        .filter(|(_, f)| f.len() > max)
        .map(|(p, f)| {
            format!(
                "{p} is named by {} files (limit {max}):\n      {}",
                f.len(),
                f.join("\n      ")
            )
        })
        .collect()
}

/// The source files, from the workspace root, that each crate builds only
/// for tests: declared `#[cfg(test)] mod name;`, or under such a module.
fn test_only_paths() -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for name in crate_names() {
        let Ok(krate) = read_crate_src(&name) else {
            continue;
        };
        let test_only = test_only_files(&krate);
        for (rel, _) in &krate.files {
            if test_only.iter().any(|p| module_path(rel).starts_with(p)) {
                paths.insert(format!("{}/{rel}", krate.dir));
            }
        }
    }
    paths
}

#[test]
fn each_platform_is_named_by_at_most_three_source_files() {
    let test_only = test_only_paths();
    let sources: Vec<Source> = crate_sources(&["src"])
        .into_iter()
        .filter(|s| !s.path.starts_with("crates/levee-mock/"))
        .filter(|s| !test_only.contains(&s.path))
        .collect();
    let problems = spread_platforms(&sources, MAX_PLATFORM_FILES);
    verdict(
        "platform names",
        &problems,
        "Keep what a platform needs in its own module (its configuration, its request rewriting and \
         signing); the code around it reaches it through a platform-neutral type or trait and does \
         not name it.",
    );
}

// ---------------------------------------------------------------------------
// The checkers on small inline sources: each catches a break of its rule and
// passes code that keeps it.

fn source(path: &str, text: &str) -> Source {
    Source {
        path: path.to_string(),
        text: text.to_string(),
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
    let q = '\'';
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
        ("e", 11),
        ("g", 11),
        ("h", 15),
        ("i", 22),
    ];
    let want: Vec<(String, usize)> = want.iter().map(|(h, l)| (h.to_string(), *l)).collect();
    assert_eq!(refs, want);
}

#[test]
fn the_dependency_wall_catches_a_forbidden_dependency_in_any_normal_table() {
    let toml = r#"[package]
name = "levee-policy" # the policy
version = "0.1.0"

[dependencies]
thiserror.workspace = true
tokio = { version = "1", features = [
  "rt",
] }
runtime = { package = "hyper-util", version = "0.1" }

[dependencies.redis]
version = "1"

[target.'cfg(unix)'.dependencies]
levee-wire.workspace = true

[dev-dependencies]
tokio.workspace = true
levee-config = "1"
"#;
    let found = dependency_breaches("p/Cargo.toml", toml, WALLS);
    let lines: Vec<&str> = found
        .iter()
        .map(|p| p.split(": ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        lines,
        [
            "p/Cargo.toml:7",
            "p/Cargo.toml:10",
            "p/Cargo.toml:12",
            "p/Cargo.toml:16"
        ],
        "{found:#?}"
    );
    assert!(found[1].contains("`hyper-util`"), "{found:#?}");
    let clean = "[package]\nname = \"levee-policy\"\n[dependencies]\nthiserror.workspace = true\nrand = \"0.8\"\n[dev-dependencies]\ntokio = \"1\"\n";
    assert_eq!(
        dependency_breaches("p/Cargo.toml", clean, WALLS),
        Vec::<String>::new()
    );
    let mock = "[package]\nname = \"levee-mock\"\n[dependencies]\nlevee-wire.workspace = true\nlevee-gateway = { path = \"../levee-gateway\" }\n";
    assert_eq!(dependency_breaches("m/Cargo.toml", mock, WALLS).len(), 1);
}

fn fixture_crate(files: &[(&str, &str)]) -> CrateSrc {
    CrateSrc {
        dir: "crates/x/src".to_string(),
        root: "lib.rs".to_string(),
        files: files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect(),
    }
}

fn fixture_cycles(files: &[(&str, &str)]) -> Vec<String> {
    let krate = fixture_crate(files);
    let (edges, globs) = edges(&krate, &read_graph(&krate));
    assert!(globs.is_empty(), "{globs:?}");
    cycles("x", &edges)
}

#[test]
fn the_module_graph_finds_a_cycle_and_names_its_lines() {
    let lib = "mod a;\nmod b;\nmod c;\npub use c::Thing;\n";
    let a = "use crate::b::f;\n";
    let b = "\nfn g() -> crate::Thing { todo!() }\n";
    let c = "fn h() {\n    super::a::run();\n}\n";
    let found = fixture_cycles(&[("lib.rs", lib), ("a.rs", a), ("b.rs", b), ("c/mod.rs", c)]);
    assert_eq!(
        found,
        [
            "x: a -> b -> c -> a\n      a -> b: crates/x/src/a.rs:1\n      \
          b -> c: crates/x/src/b.rs:2\n      c -> a: crates/x/src/c/mod.rs:2"
        ]
    );
    // The same edges from unit tests and comments only: no cycle.
    let c = "// crate::a\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n";
    let found = fixture_cycles(&[("lib.rs", lib), ("a.rs", a), ("b.rs", b), ("c/mod.rs", c)]);
    assert_eq!(found, Vec::<String>::new());
    // A file only tests build makes no edge; declared without the
    // `#[cfg(test)]`, it closes the cycle.
    let c_tests = "fn h() {\n    super::super::a::run();\n}\n";
    for (c, cycle) in [
        ("#[cfg(test)]\nmod c_tests;\n", false),
        ("mod c_tests;\n", true),
    ] {
        let files = [
            ("lib.rs", lib),
            ("a.rs", a),
            ("b.rs", b),
            ("c/mod.rs", c),
            ("c/c_tests.rs", c_tests),
        ];
        assert_eq!(fixture_cycles(&files).len(), usize::from(cycle), "{c}");
    }
    let lib_tests = "mod a;\n#[cfg(test)]\n#[allow(unused)]\nmod d;\n";
    let krate = fixture_crate(&[
        ("lib.rs", lib_tests),
        ("a.rs", ""),
        ("d.rs", ""),
        ("d/e.rs", ""),
    ]);
    assert_eq!(read_graph(&krate).modules.keys().collect::<Vec<_>>(), ["a"]);
    // A name the root re-exports, or an inline module of the root, stands
    // for the module it comes from.
    let lib = "mod a;\nmod b;\npub use crate::b::Thing;\npub mod facade {\n    pub use crate::a::Other;\n}\n";
    let a = "fn f() -> crate::Thing { todo!() }\n";
    let b = "use crate::facade::Other;\n";
    let found = fixture_cycles(&[("lib.rs", lib), ("a.rs", a), ("b.rs", b)]);
    assert_eq!(
        found,
        ["x: a -> b -> a\n      a -> b: crates/x/src/a.rs:1\n      b -> a: crates/x/src/b.rs:1"]
    );
    // A glob import of the root is a problem of its own.
    let krate = fixture_crate(&[("lib.rs", lib), ("a.rs", "use crate::*;\n")]);
    assert_eq!(edges(&krate, &read_graph(&krate)).1.len(), 1);
}

#[test]
fn a_binary_crates_modules_hang_from_main() {
    let mut krate = fixture_crate(&[
        ("main.rs", "mod a;\nmod b;\nfn main() { a::go() }\n"),
        ("a.rs", "pub fn go() { crate::b::go() }\n"),
        ("b.rs", "pub fn go() { super::a::go() }\n"),
    ]);
    krate.root = "main.rs".to_string();
    let graph = read_graph(&krate);
    assert_eq!(graph.modules.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(cycles("x", &edges(&krate, &graph).0).len(), 1);
}

#[test]
fn the_public_surface_check_catches_each_mismatch() {
    let lib = "pub mod a;\npub mod b;\npub(crate) mod c;\nmod d;\n";
    let krate = fixture_crate(&[
        ("lib.rs", lib),
        ("a.rs", ""),
        ("b.rs", ""),
        ("c.rs", ""),
        ("d.rs", ""),
    ]);
    let declared = read_graph(&krate).public;
    assert_eq!(declared, [("a".to_string(), 1), ("b".to_string(), 2)]);
    let users = [source(
        "u.rs",
        "use levee_gateway::{a, c::X};\n// levee_gateway::b\nlet s = \"levee_gateway::b\";",
    )];
    let used = gateway_paths(&users);
    assert_eq!(used, BTreeSet::from(["a".to_string(), "c".to_string()]));
    let listed = [("a", "u"), ("b", "u"), ("c", "u")];
    let found = surface_problems(&declared, &listed, &used);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].contains("`levee_gateway::b` is public for u"),
        "{found:#?}"
    );
    assert!(found[1].contains("lists `c`"), "{found:#?}");
    let found = surface_problems(&declared, &[("a", "u")], &used);
    assert!(
        found.len() == 1 && found[0].contains(":2: `pub mod b`"),
        "{found:#?}"
    );
    let all = BTreeSet::from(["a".to_string(), "b".to_string()]);
    assert_eq!(
        surface_problems(&declared, &listed[..2], &all),
        Vec::<String>::new()
    );
    assert!(too_many_public(&declared, 1).is_some_and(|p| p.contains("2 `pub mod`s (limit 1)")));
    assert_eq!(too_many_public(&declared, 2), None);
}

#[test]
fn the_task_local_check_finds_the_macro_and_not_its_name_in_text() {
    let text = "// task_local! in a comment\nconst S: &str = \"task_local!\";\ntokio::task_local! {\n    static X: u8;\n}\n";
    assert_eq!(task_locals("f.rs", text), ["f.rs:3: `task_local!`"]);
    assert_eq!(
        task_locals("f.rs", "fn task_local() {}\n"),
        Vec::<String>::new()
    );
}

/// A function of `lines` lines whose comments and strings hold braces.
fn function_of(name: &str, lines: usize) -> String {
    let mut text = format!("fn {name}() {{\n    let s = \"}}\"; // }}\n");
    for _ in 0..lines - 3 {
        text += "    let c = '}';\n";
    }
    text + "}\n"
}

#[test]
fn the_function_length_check_counts_from_fn_to_its_closing_brace() {
    let text = format!(
        "trait T {{\n    fn declared(&self);\n}}\n{}{}",
        function_of("short", 80),
        function_of("long", 81)
    );
    assert_eq!(
        long_functions("f.rs", &text, 80),
        ["f.rs:84 fn long is 81 lines (limit 80)"]
    );
    let nested = format!("fn outer() {{\n{}}}\n", function_of("inner", 81));
    let found = long_functions("f.rs", &nested, 80);
    assert_eq!(
        found,
        [
            "f.rs:1 fn outer is 83 lines (limit 80)",
            "f.rs:2 fn inner is 81 lines (limit 80)"
        ]
    );
}

#[test]
fn the_file_length_check_leaves_out_a_trailing_test_module_only() {
    let code = "fn f() {}\n".repeat(10);
    let tests = "#[cfg(test)]\nmod tests {\n    use super::*;\n    const S: &str = \"}\";\n    fn t() {}\n}\n";
    assert_eq!(shipped_lines(&code), 10);
    assert_eq!(shipped_lines(&format!("{code}{tests}")), 10);
    assert_eq!(shipped_lines(&format!("{code}{tests}\nfn g() {{}}\n")), 18);
    assert_eq!(
        shipped_lines(&format!("{code}#[cfg(test)]\nmod helpers {{\n}}\n")),
        13
    );
    assert!(long_file("f.rs", &format!("{code}{tests}"), 9)
        .is_some_and(|p| p == "f.rs is 10 lines without its trailing tests (limit 9)"));
    assert_eq!(long_file("f.rs", &format!("{code}{tests}"), 10), None);
}

#[test]
fn the_platform_check_counts_identifiers_in_code_only() {
    assert!(names_platform("Azure", "azure"));
    assert!(names_platform("AzureOpenai", "azure"));
    assert!(names_platform("azure_url", "azure"));
    assert!(names_platform("GEMINI_BASE_URL", "gemini"));
    assert!(names_platform("VertexOpenAi", "vertex"));
    assert!(names_platform("VertexOpenai", "vertex"));
    assert!(!names_platform("Geminis", "gemini"));
    assert!(!names_platform("azurely", "azure"));
    assert!(!names_platform("MyAzure", "azure"));
    let code = "use crate::platform::bedrock;\nfn f(k: ApiKind) -> bool {\n    matches!(k, ApiKind::VertexOpenAi)\n}\n";
    let text = "// Azure\nconst U: &str = \"https://x.openai.azure.com\";\n#[cfg(test)]\nmod tests {\n    fn gemini_answers() {}\n}\n";
    assert_eq!(
        platforms_named(code),
        BTreeMap::from([("bedrock", 1), ("vertex", 3)])
    );
    assert_eq!(platforms_named(text), BTreeMap::new());
    let files: Vec<Source> = (0..4).map(|i| source(&format!("f{i}.rs"), code)).collect();
    let found = spread_platforms(&files, 3);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with("bedrock is named by 4 files (limit 3):\n      f0.rs:1"),
        "{found:#?}"
    );
    assert_eq!(spread_platforms(&files[..3], 3), Vec::<String>::new());
}
