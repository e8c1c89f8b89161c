//! `docs/config.md` held to the parser, both ways:
//!
//! - every key the page lists loads when set to the page's example, and a
//!   default the page states as a value loads the same configuration as
//!   leaving the key out (and a different one from the example);
//! - every field of the `Raw*` structs in `src/raw.rs` (the keys the parser
//!   accepts) is listed on the page, and the page lists no other.
//!
//! The page's convention: a table row per key, whose cells are the full key
//! path in backticks (`routes[].retry.max_attempts`; `[]` is an item of a
//! list, `<name>` a provider's name), its type, its default (a value in
//! backticks at the start of the cell is checked; prose is not), what it
//! does, and an example in backticks.

use levee_config::Config;
use serde_norway::{Mapping, Value};
use std::collections::{BTreeMap, BTreeSet};

const DOC: &str = include_str!("../../../docs/config.md");
const RAW: &str = include_str!("../src/raw.rs");

/// A configuration every example is set into: two providers and one route
/// with a long-form target, so paths under `providers.<name>`, `routes[]`
/// and `routes[].targets[]` have somewhere to go.
const BASE: &str = "\
providers:
  openai: { api: openai, base_url: \"http://127.0.0.1:9100\" }
  anthropic: { api: anthropic, base_url: \"http://127.0.0.1:9101\" }
routes:
  - targets: [{ provider: openai }]
";

/// What `<name>` stands for when a path is set into [`BASE`].
const PROVIDER: &str = "openai";

/// A `prices[]` entry's required keys, but `path`.
fn price_companions(path: &str) -> Vec<(&'static str, &'static str)> {
    [
        ("prices[].provider", "openai"),
        ("prices[].model", "gpt-4.1"),
        ("prices[].input_per_mtok", "2.0"),
        ("prices[].output_per_mtok", "8.0"),
    ]
    .into_iter()
    .filter(|(k, _)| *k != path)
    .collect()
}

/// A caller's or a key's entry's required keys, and a budget's other half.
fn rule_companions(path: &str) -> Vec<(&'static str, &'static str)> {
    let keyed = path.starts_with("keys[].");
    let mut out = vec![if keyed {
        ("keys[].env", "LEVEE_TEST_KEY")
    } else {
        ("callers[].name", "test")
    }];
    match (keyed, path.rsplit_once('.').map(|(_, k)| k)) {
        (true, Some("usd")) => out.push(("keys[].budget.per", "day")),
        (true, Some("per")) => out.push(("keys[].budget.usd", "5")),
        (false, Some("usd")) => out.push(("callers[].budget.per", "day")),
        (false, Some("per")) => out.push(("callers[].budget.usd", "5")),
        _ => {}
    }
    out.retain(|(k, _)| *k != path);
    out
}

/// Keys that load only beside another: each is set with these first.
fn companions(path: &str) -> Vec<(&'static str, &'static str)> {
    match path {
        "keys[].name" => vec![("keys[].env", "LEVEE_TEST_KEY")],
        p if p.starts_with("prices[].") => price_companions(p),
        "routes[].passthrough_methods" => vec![("routes[].passthrough", "[\"/v1/files\"]")],
        "keys[].access_key_id" => vec![("keys[].secret_access_key_env", "LEVEE_TEST_SECRET")],
        "keys[].secret_access_key_env" => {
            vec![("keys[].access_key_id", "LEVEEBILLING0001")]
        }
        p if p.starts_with("callers[].")
            || ["keys[].models", "keys[].limits", "keys[].budget"]
                .iter()
                .any(|k| p.starts_with(k)) =>
        {
            rule_companions(p)
        }
        "providers.<name>.rate_limit.burst" => {
            vec![("providers.<name>.rate_limit.requests_per_minute", "600")]
        }
        // The cloud keys belong to their kinds.
        "providers.<name>.api_version" | "providers.<name>.token_file" => {
            vec![("providers.<name>.api", "azure")]
        }
        "providers.<name>.profile" => vec![
            ("providers.<name>.api", "bedrock"),
            ("providers.<name>.region", "us-east-1"),
        ],
        "providers.<name>.region"
        | "providers.<name>.project"
        | "providers.<name>.credentials_file"
        | "providers.<name>.token_url" => vec![
            ("providers.<name>.api", "vertex"),
            ("providers.<name>.region", "us-east5"),
            ("providers.<name>.project", "my-project"),
        ],
        // `mode`'s default (standalone) refuses the `nodes` its examples
        // need, so its default is stated in words, not checked here.
        "state.mode" | "state.nodes" => vec![
            ("state.backend", "redis"),
            ("state.mode", "cluster"),
            ("state.nodes", "[\"redis://10.0.0.7:6379\"]"),
        ],
        "state.sentinel_master" => vec![
            ("state.backend", "redis"),
            ("state.mode", "sentinel"),
            ("state.nodes", "[\"redis://10.0.0.7:26379\"]"),
        ],
        "state.tls" | "state.tls.ca_file" => vec![
            ("state.backend", "redis"),
            ("state.url", "\"rediss://localhost:6380\""),
        ],
        "state.tls.cert_file" => vec![
            ("state.backend", "redis"),
            ("state.url", "\"rediss://localhost:6380\""),
            ("state.tls.key_file", "/k.pem"),
        ],
        "state.tls.key_file" => vec![
            ("state.backend", "redis"),
            ("state.url", "\"rediss://localhost:6380\""),
            ("state.tls.cert_file", "/c.pem"),
        ],
        p if p.starts_with("state.") && p != "state.backend" => vec![("state.backend", "redis")],
        // A balanced group stands where the base's target is: no provider
        // of its own, a member on one.
        "routes[].targets[].balance" | "routes[].targets[].balance[].provider" => {
            vec![("routes[].targets[].provider", "null")]
        }
        p if p.starts_with("routes[].targets[].balance[].")
            || p == "routes[].targets[].strategy" =>
        {
            vec![
                ("routes[].targets[].provider", "null"),
                ("routes[].targets[].balance[].provider", "openai"),
            ]
        }
        _ => vec![],
    }
}

/// Keys whose default the page must state as a value, so it is checked.
const DEFAULTS_REQUIRED: &[&str] = &[
    "listen",
    "admin.listen",
    "shutdown_grace",
    "limits.max_body_bytes",
    "limits.max_header_bytes",
    "limits.header_read_timeout",
    "limits.body_read_timeout",
    "idempotency.ttl",
    "idempotency.max_entries",
    "idempotency.max_bytes",
    "state.backend",
    "state.url",
    "state.key_prefix",
    "state.replicas",
    "state.timeout",
    "state.on_unavailable",
    "state.max_bytes",
];

/// One documented key.
struct Entry {
    path: String,
    /// The default cell's leading value in backticks, if it starts with one.
    default: Option<String>,
    example: String,
    /// 1-based line in docs/config.md.
    line: usize,
}

/// A table row's cells, split on `|` not escaped as `\|`.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                out.last_mut().unwrap().push('|');
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The whole of `cell` as one code span, if it is one.
fn code(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.contains('`')).then_some(inner)
}

/// Every key row of docs/config.md.
fn documented() -> Vec<Entry> {
    let mut entries = Vec::new();
    for (i, row) in DOC.lines().enumerate() {
        let line = i + 1;
        if !row.starts_with("| `") {
            continue;
        }
        let c = cells(row);
        assert_eq!(
            c.len(),
            5,
            "docs/config.md line {line}: a key row has five cells (key, type, default, what it does, example), this one has {}",
            c.len()
        );
        let path = code(&c[0]).unwrap_or_else(|| {
            panic!("docs/config.md line {line}: the first cell must be the key path alone, in backticks")
        });
        let example = code(&c[4]).unwrap_or_else(|| {
            panic!("docs/config.md line {line}: `{path}`'s example must be one value in backticks")
        });
        let default = c[2]
            .strip_prefix('`')
            .and_then(|rest| rest.split_once('`'))
            .map(|(v, _)| v.to_string());
        entries.push(Entry {
            path: path.to_string(),
            default,
            example: example.to_string(),
            line,
        });
    }
    entries
}

/// A `Raw*` item of raw.rs: a struct's fields as (YAML key, Rust type), or
/// an enum's variants' payload types.
enum Item {
    Struct(Vec<(String, String)>),
    Enum(Vec<String>),
}

/// Reads the `pub struct Raw…` and `pub enum Raw…` blocks of raw.rs.
fn raw_items() -> BTreeMap<String, Item> {
    let mut items = BTreeMap::new();
    let mut lines = RAW.lines().enumerate();
    while let Some((_, line)) = lines.next() {
        let (is_struct, rest) = if let Some(r) = line.strip_prefix("pub struct ") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("pub enum ") {
            (false, r)
        } else {
            continue;
        };
        let Some(name) = rest.strip_suffix(" {").filter(|n| n.starts_with("Raw")) else {
            continue;
        };
        let mut fields = Vec::new();
        let mut variants = Vec::new();
        let mut rename = None;
        for (i, l) in lines.by_ref() {
            let l = l.trim();
            let here = || format!("src/raw.rs line {}: `{l}`", i + 1);
            if l == "}" {
                break;
            }
            if l.is_empty() || l.starts_with("//") {
                continue;
            }
            if let Some(attr) = l.strip_prefix("#[serde(") {
                if let Some(to) = attr.strip_prefix("rename = \"") {
                    rename = Some(to.split('"').next().unwrap_or_default().to_string());
                } else if attr != "default)]" {
                    panic!("{}: a serde attribute this test does not read; teach `raw_items` what it does to the key", here());
                }
                continue;
            }
            if is_struct {
                let field = l
                    .strip_prefix("pub ")
                    .and_then(|f| f.split_once(": "))
                    .unwrap_or_else(|| panic!("{}: not a `pub name: Type,` field", here()));
                let key = rename.take().unwrap_or_else(|| field.0.to_string());
                fields.push((key, field.1.trim_end_matches(',').to_string()));
            } else {
                let payload = l
                    .split_once('(')
                    .and_then(|(_, p)| p.strip_suffix("),"))
                    .unwrap_or_else(|| panic!("{}: not a `Name(Type),` variant", here()));
                variants.push(payload.to_string());
            }
        }
        let item = if is_struct {
            Item::Struct(fields)
        } else {
            Item::Enum(variants)
        };
        items.insert(name.to_string(), item);
    }
    items
}

/// The `Raw…` type named in a Rust type, if any.
fn raw_type(ty: &str) -> Option<&str> {
    let start = ty.find("Raw")?;
    let rest = &ty[start..];
    let end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// Every key path of `name`'s fields under `prefix`, into `out`; the items
/// reached, into `seen`.
fn walk(
    items: &BTreeMap<String, Item>,
    name: &str,
    prefix: &str,
    out: &mut BTreeSet<String>,
    seen: &mut BTreeSet<String>,
) {
    seen.insert(name.to_string());
    let item = items
        .get(name)
        .unwrap_or_else(|| panic!("src/raw.rs: `{name}` is used but its block was not read"));
    match item {
        Item::Struct(fields) => {
            for (key, ty) in fields {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                if let Some(child) = raw_type(ty) {
                    let child_prefix = if ty.contains("Map<String,") {
                        format!("{path}.<name>")
                    } else if ty.contains("Vec<") {
                        format!("{path}[]")
                    } else {
                        path.clone()
                    };
                    walk(items, child, &child_prefix, out, seen);
                }
                out.insert(path);
            }
        }
        Item::Enum(payloads) => {
            for ty in payloads {
                if let Some(child) = raw_type(ty) {
                    walk(items, child, prefix, out, seen);
                }
            }
        }
    }
}

/// Every key path the parser accepts, from raw.rs.
fn accepted() -> BTreeSet<String> {
    let items = raw_items();
    let (mut out, mut seen) = (BTreeSet::new(), BTreeSet::new());
    walk(&items, "RawConfig", "", &mut out, &mut seen);
    let unreached: Vec<&String> = items.keys().filter(|n| !seen.contains(*n)).collect();
    assert!(
        unreached.is_empty(),
        "src/raw.rs: {unreached:?} are not reached from RawConfig by this test's reading of field types; teach `walk` how they are"
    );
    out
}

fn yaml(text: &str) -> Value {
    serde_norway::from_str(text).unwrap_or_else(|e| panic!("`{text}` is not YAML: {e}"))
}

/// The mapping at `key` of `v` (made one when it is absent).
fn child<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    if v.is_null() {
        *v = Value::Mapping(Mapping::new());
    }
    let Value::Mapping(m) = v else {
        panic!("`{key}`'s parent is not a mapping")
    };
    m.entry(Value::String(key.to_string()))
        .or_insert(Value::Null)
}

/// Sets `path` (as the page writes it) in `root` to `value`.
fn set(root: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path.split('.').collect();
    let mut at = root;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let (key, item) = match seg.strip_suffix("[]") {
            Some(k) => (k, true),
            None => (*seg, false),
        };
        let key = if key == "<name>" { PROVIDER } else { key };
        at = child(at, key);
        if last {
            *at = value;
            return;
        }
        if item {
            if !at.is_sequence() {
                *at = Value::Sequence(Vec::new());
            }
            let Value::Sequence(list) = at else {
                unreachable!()
            };
            if list.is_empty() {
                list.push(Value::Mapping(Mapping::new()));
            }
            at = &mut list[0];
        }
    }
}

/// [`BASE`] with `path`'s companions and `path` set to `value` (`None`:
/// companions only); the YAML and what the parser made of it.
fn load(path: &str, value: Option<&str>) -> (String, Result<Config, String>) {
    let mut root = yaml(BASE);
    for (p, v) in companions(path) {
        set(&mut root, p, yaml(v));
    }
    if let Some(v) = value {
        set(&mut root, path, yaml(v));
    }
    let text = serde_norway::to_string(&root).expect("a YAML value writes");
    let parsed = Config::parse(&text).map_err(|e| e.to_string());
    (text, parsed)
}

/// The configuration as a comparable whole, or why it was refused.
fn shape(path: &str, value: Option<&str>) -> Result<String, String> {
    let (text, parsed) = load(path, value);
    parsed
        .map(|c| format!("{c:?}"))
        .map_err(|e| format!("`{path}` set to {value:?} is refused: {e}\n{text}"))
}

#[test]
fn every_key_on_the_page_loads_with_its_example() {
    let entries = documented();
    assert!(!entries.is_empty(), "docs/config.md lists no key rows");
    let mut failures = Vec::new();
    for e in &entries {
        if let (text, Err(err)) = load(&e.path, Some(&e.example)) {
            failures.push(format!(
                "docs/config.md line {}: `{}` set to its example `{}` is refused: {err}\n{text}",
                e.line, e.path, e.example
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_key_the_parser_accepts_is_on_the_page_and_no_other() {
    let code = accepted();
    let mut doc = BTreeSet::new();
    for e in documented() {
        assert!(
            doc.insert(e.path.clone()),
            "docs/config.md line {}: `{}` is listed twice",
            e.line,
            e.path
        );
    }
    let missing: Vec<&String> = code.difference(&doc).collect();
    assert!(
        missing.is_empty(),
        "docs/config.md does not list these keys the parser accepts (src/raw.rs): {missing:?}; add a row for each"
    );
    let unknown: Vec<&String> = doc.difference(&code).collect();
    assert!(
        unknown.is_empty(),
        "docs/config.md lists keys src/raw.rs does not have: {unknown:?}"
    );
}

#[test]
fn documented_defaults_are_the_code_defaults() {
    let entries = documented();
    for required in DEFAULTS_REQUIRED {
        let e = entries
            .iter()
            .find(|e| e.path == *required)
            .unwrap_or_else(|| panic!("docs/config.md does not list `{required}`"));
        assert!(
            e.default.is_some(),
            "docs/config.md line {}: `{required}`'s default must start with its value in backticks, so it is checked",
            e.line
        );
    }
    let mut failures = Vec::new();
    for e in &entries {
        let Some(default) = &e.default else { continue };
        let at = format!("docs/config.md line {}: `{}`", e.line, e.path);
        let (left_out, written, example) = match (
            shape(&e.path, None),
            shape(&e.path, Some(default)),
            shape(&e.path, Some(&e.example)),
        ) {
            (Ok(l), Ok(w), Ok(x)) => (l, w, x),
            (l, w, x) => {
                let why = [l, w, x].into_iter().filter_map(Result::err);
                failures.push(format!("{at}: {}", why.collect::<Vec<_>>().join("\n")));
                continue;
            }
        };
        if written != left_out {
            failures.push(format!(
                "{at}: writing the documented default `{default}` loads another configuration than leaving the key out; the code's default differs"
            ));
        } else if example == left_out {
            failures.push(format!(
                "{at}: its example `{}` loads the same configuration as its default; give an example that differs",
                e.example
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
