//! What the YAML reader accepts without a word, or words for its own ends,
//! said for the person editing the file: a key given twice in one mapping
//! (serde keeps the last of two providers of one name silently, and refuses a
//! repeated field naming neither line), a tab in indentation, and a key
//! indented one level too little (the reader names where the key landed, not
//! the block it was written for).
//!
//! Lines come from the parser ([`crate::locate`]) wherever it can say them.
//! Indentation is text, so the dedent hint reads the text; it is given only
//! when the same document, with that one line indented to the level of the
//! lines above it, reads past that line: the parser confirms it.

use crate::error::{yaml_message, ConfigError, Problem};
use crate::locate::{locate_nth, Seg};
use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess};
use serde::de::{IgnoredAny, Visitor};
use std::collections::HashSet;
use std::fmt;

/// Refuses a key given twice in one mapping, anywhere in the document, with
/// the lines of both. A document the reader cannot walk (a syntax error) is
/// left to the typed read that follows, which reports it.
pub(crate) fn no_duplicate_keys(text: &str) -> Result<(), ConfigError> {
    let mut walk = Walk::default();
    let de = serde_norway::Deserializer::from_str(text);
    // Stops with an error at the first key given twice (recorded in `walk`)
    // or at anything the reader refuses (left to the typed read).
    let _ = Node(&mut walk).deserialize(de);
    let Some((at, key)) = walk.found else {
        return Ok(());
    };
    let mut path: Vec<Seg<'_>> = at
        .iter()
        .map(|s| match s {
            Step::Key(k) => Seg::Key(k),
            Step::Index(i) => Seg::Index(*i),
        })
        .collect();
    path.push(Seg::Key(&key));
    let first = locate_nth(text, &path, 0);
    let again = locate_nth(text, &path, 1);
    let (what, fix) = match at.as_slice() {
        [Step::Key(p)] if p == "providers" => (
            format!("provider `{key}` is defined"),
            "give one of them another name, or merge the two blocks into one",
        ),
        [] => (
            format!("`{key}` is given at the top level"),
            "keep one of them",
        ),
        _ => (
            format!("`{key}` is given under `{}`", dotted(&at)),
            "keep one of them",
        ),
    };
    let problem = Problem::DuplicateKey {
        what,
        first,
        again,
        fix,
    };
    Err(match again.or(first) {
        Some(line) => ConfigError::AtLine {
            line,
            message: problem,
        },
        None => ConfigError::General(problem),
    })
}

/// A path as serde_norway's errors spell it: `routes[0].retry`.
fn dotted(path: &[Step]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A YAML reader's error for the person editing `text`: a tab in the
/// indentation said as such, a key indented one level too little explained
/// (with the line of the key when the reader pointed at its block instead).
/// `T` is what `text` was read as, for re-reading it.
pub(crate) fn read_error<T: DeserializeOwned>(text: &str, e: &serde_norway::Error) -> ConfigError {
    let (line, message) = yaml_message(e);
    let Some(line) = line else {
        return ConfigError::General(Problem::Yaml(message));
    };
    // The parser also breaks lines at a lone CR, NEL and the Unicode line
    // and paragraph separators; counting lines at '\n' agrees with it only
    // without them.
    if !plain_line_breaks(text) {
        return ConfigError::AtLine {
            line,
            message: Problem::Yaml(message),
        };
    }
    let lines: Vec<&str> = text.split('\n').collect();
    if let Some(column) = lines
        .get(line.wrapping_sub(1))
        .and_then(|l| tab_in_indent(l))
    {
        return ConfigError::AtLine {
            line,
            message: Problem::TabIndent { column },
        };
    }
    match dedented::<T>(&lines, line, &message) {
        Some((at, hint)) => ConfigError::AtLine {
            line: at,
            message: Problem::Yaml(format!("{message}; {hint}")),
        },
        None => ConfigError::AtLine {
            line,
            message: Problem::Yaml(message),
        },
    }
}

fn plain_line_breaks(text: &str) -> bool {
    let b = text.as_bytes();
    !text.contains(['\u{85}', '\u{2028}', '\u{2029}'])
        && b.iter()
            .enumerate()
            .all(|(i, &c)| c != b'\r' || b.get(i + 1) == Some(&b'\n'))
}

/// The 1-based column of a tab among the spaces and `-` list markers that
/// start `line`.
fn tab_in_indent(line: &str) -> Option<usize> {
    line.bytes()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'-'))
        .position(|b| b == b'\t')
        .map(|i| i + 1)
}

/// Leading spaces.
fn indent(line: &str) -> usize {
    line.bytes().take_while(|&b| b == b' ').count()
}

/// Where the first key of `line` starts, past its spaces and `- ` markers.
fn key_column(line: &str) -> usize {
    let b = line.as_bytes();
    let mut i = indent(line);
    while b.get(i) == Some(&b'-') && matches!(b.get(i + 1), Some(b' ')) {
        i += 1;
        while b.get(i) == Some(&b' ') {
            i += 1;
        }
    }
    i
}

/// Neither blank nor a comment.
fn is_content(line: &str) -> bool {
    let t = line.trim_matches([' ', '\r']);
    !t.is_empty() && !t.starts_with('#')
}

/// The key of a block mapping entry `key: …`, its indentation first, for a
/// line that is one (no list marker).
fn block_key(line: &str) -> Option<(usize, &str)> {
    let at = indent(line);
    let rest = line.get(at..)?;
    if rest.starts_with(['-', '#', '{', '[']) {
        return None;
    }
    let (key, after) = rest.split_once(':')?;
    if !(after.is_empty() || after.starts_with([' ', '\r'])) {
        return None;
    }
    let key = key.trim_end().trim_matches(['"', '\'']);
    (!key.is_empty()).then_some((at, key))
}

/// The field a "missing field `F`" error names.
fn missing_field(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("missing field `")?;
    rest.split_once('`').map(|(f, _)| f)
}

/// When the error at `line` is explained by a key indented one level too
/// little: the key's line and the explanation.
fn dedented<T: DeserializeOwned>(
    lines: &[&str],
    line: usize,
    message: &str,
) -> Option<(usize, String)> {
    let at = match missing_field(message) {
        // The reader points at the first key of the block that lacks the
        // field; a dedented field is the line that ends the block.
        Some(field) => {
            let level = key_column(lines.get(line.checked_sub(1)?)?);
            let end = (line..lines.len())
                .find(|&i| is_content(lines[i]) && key_column(lines[i]) < level)?;
            let (_, key) = block_key(lines[end])?;
            (key == field).then_some(end + 1)?
        }
        None => line,
    };
    let ix = at.checked_sub(1)?;
    let (own, key) = block_key(lines.get(ix)?)?;
    let prev = (0..ix).rev().find(|&i| is_content(lines[i]))?;
    if key_column(lines[prev]) <= own {
        return None;
    }
    // The line that opens the block the key fell out of: the nearest one
    // above at the key's indentation or less.
    let opener = (0..=prev)
        .rev()
        .find(|&i| is_content(lines[i]) && indent(lines[i]) <= own)?;
    let opener_is_item = key_column(lines[opener]) > indent(lines[opener]);
    let inner = ((opener + 1)..ix)
        .filter(|&i| is_content(lines[i]))
        .map(|i| key_column(lines[i]))
        .chain(opener_is_item.then(|| key_column(lines[opener])))
        .min()?;
    if inner <= own {
        return None;
    }
    // Confirmed only when the document, with that line indented to `inner`,
    // reads past it.
    let mut moved: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    moved[ix] = format!("{}{}", " ".repeat(inner), lines[ix].get(own..)?);
    let confirmed = match serde_norway::from_str::<T>(&moved.join("\n")) {
        Ok(_) => true,
        Err(e) => e.location().is_some_and(|l| l.line() > at),
    };
    if !confirmed {
        return None;
    }
    let owner = match block_key(lines[opener]) {
        Some((_, name)) if !opener_is_item => format!("`{name}` (line {})", opener + 1),
        _ => format!("the list item on line {}", opener + 1),
    };
    let more = inner - own;
    let s = if more == 1 { "" } else { "s" };
    Some((
        at,
        format!(
            "`{key}` on line {at} is indented less than the lines above it, which leaves it outside {owner}: if it belongs there, indent it by {more} more space{s} to line up with them"
        ),
    ))
}

/// One step of the walk's path.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// The walk's position and the first key found twice.
#[derive(Default)]
struct Walk {
    path: Vec<Step>,
    found: Option<(Vec<Step>, String)>,
}

const TWICE: &str = "a key given twice";

/// Any node, walked to its leaves.
struct Node<'w>(&'w mut Walk);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let walk = self.0;
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key_seed(KeyText)? {
            let Some(key) = key else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if !seen.insert(key.clone()) {
                walk.found = Some((walk.path.clone(), key));
                return Err(de::Error::custom(TWICE));
            }
            walk.path.push(Step::Key(key));
            map.next_value_seed(Node(&mut *walk))?;
            walk.path.pop();
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let walk = self.0;
        let mut i = 0;
        loop {
            walk.path.push(Step::Index(i));
            let more = seq.next_element_seed(Node(&mut *walk))?;
            walk.path.pop();
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
}

/// A mapping key as the line finder matches it (strings, and integers as
/// their digits); `None` for other keys, which are not compared.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<String>, E> {
        Ok(Some(v.to_string()))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
}
