//! The line of a node in a YAML document, as the YAML parser itself reports
//! it. Validation that spans several keys (a route naming a provider, two
//! routes setting one provider's breaker) runs after parsing, when serde's
//! positions are gone; it records the path of what it refuses, and
//! [`locate`] reads the document again with a probe that walks that path and
//! stops with an error at the node — an error the parser stamps with the
//! node's position. Flow and block style, comments, quoted keys and
//! multi-line strings are the parser's business, not a guess over the text.

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// One step of a path into the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seg<'a> {
    /// The value under a mapping key.
    Key(&'a str),
    /// An item of a sequence (0-based).
    Index(usize),
}

/// The 1-based line of the node at `path` in `text`. When the path ends at a
/// key, that key's line; when part of the path is missing, the line of the
/// deepest node that exists. `None` when `text` is not YAML.
pub fn locate(text: &str, path: &[Seg<'_>]) -> Option<usize> {
    locate_nth(text, path, 0)
}

/// [`locate`], where the path's last step is a key given more than once in
/// its mapping: the line of its occurrence `nth` (0-based) there.
pub fn locate_nth(text: &str, path: &[Seg<'_>], nth: usize) -> Option<usize> {
    // Only a document that parses can be probed: every error the probe then
    // meets is its own stop.
    serde_norway::from_str::<IgnoredAny>(text).ok()?;
    let de = serde_norway::Deserializer::from_str(text);
    match (Probe { path, skip: nth }).deserialize(de) {
        Ok(()) => None,
        Err(e) => e.location().map(|l| l.line()),
    }
}

const STOP: &str = "the node looked for";

/// Walks `path`; returns an error at the node it leads to.
struct Probe<'p, 'a> {
    path: &'p [Seg<'a>],
    /// Occurrences of the path's last key to pass over before stopping.
    skip: usize,
}

impl<'de> DeserializeSeed<'de> for Probe<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // A visitor that accepts nothing fails on whatever node is here, and
        // the parser stamps that failure with the node's position: that is
        // the answer when the path ends here or cannot go on.
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(STOP)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Seg::Key(want), rest)) = self.path.split_first() else {
            return Err(de::Error::custom(STOP));
        };
        let stop_at_key = rest.is_empty();
        let mut skip = self.skip;
        while let Some(hit) = map.next_key_seed(KeyProbe {
            want,
            stop: stop_at_key && skip == 0,
        })? {
            if hit && !stop_at_key {
                return map.next_value_seed(Probe {
                    path: rest,
                    skip: self.skip,
                });
            }
            if hit {
                skip = skip.saturating_sub(1);
            }
            map.next_value::<IgnoredAny>()?;
        }
        Err(de::Error::custom(STOP))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Seg::Index(want), rest)) = self.path.split_first() else {
            return Err(de::Error::custom(STOP));
        };
        for _ in 0..*want {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Err(de::Error::custom(STOP));
            }
        }
        seq.next_element_seed(Probe {
            path: rest,
            skip: self.skip,
        })?;
        Err(de::Error::custom(STOP))
    }
}

/// Reads one mapping key: whether it is the one wanted, or — when the path
/// ends at this key — an error at the key itself.
struct KeyProbe<'a> {
    want: &'a str,
    stop: bool,
}

impl<'de> DeserializeSeed<'de> for KeyProbe<'_> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyProbe<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        match v == self.want {
            true if self.stop => Err(E::custom(STOP)),
            hit => Ok(hit),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
        self.visit_str(&v.to_string())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Seg::*;

    const DOC: &str = "listen: x\nroutes:\n  - match: { model_prefix: \"a/\" }\n    retry:\n      max_attempts: 0\n  - match: { model_prefix: \"b/\" }\n    retry: { max_attempts: 9 }\n";

    #[test]
    fn finds_block_inline_and_listed_keys() {
        assert_eq!(locate(DOC, &[Key("listen")]), Some(1));
        let max = |i| {
            locate(
                DOC,
                &[Key("routes"), Index(i), Key("retry"), Key("max_attempts")],
            )
        };
        assert_eq!(max(0), Some(5));
        assert_eq!(max(1), Some(7));
        assert_eq!(
            locate(DOC, &[Key("routes"), Index(1), Key("match")]),
            Some(6)
        );
        assert_eq!(locate(DOC, &[Key("routes"), Index(1)]), Some(6));
        // A block-style value: the key's own line.
        assert_eq!(
            locate(DOC, &[Key("routes"), Index(0), Key("retry")]),
            Some(4)
        );
    }

    #[test]
    fn a_missing_part_points_at_the_deepest_node_found() {
        // The sequence under `routes:` starts on line 3.
        assert_eq!(locate(DOC, &[Key("routes"), Index(5)]), Some(3));
        assert_eq!(locate(DOC, &[Key("nope")]), Some(1));
        assert_eq!(locate("not: [valid", &[Key("not")]), None);
    }

    #[test]
    fn keys_named_in_comments_strings_and_other_blocks_are_not_taken_for_the_key() {
        // A reader of the text alone finds `retry:` inside the quoted
        // string on line 3 and the comment on line 4 before the real key.
        let doc = "routes:\n  - match:\n      model_prefix: \"a\n        retry: x\"\n    # retry: { max_attempts: 1 }\n    retry:\n      max_attempts: 0\n";
        assert_eq!(
            locate(
                doc,
                &[Key("routes"), Index(0), Key("retry"), Key("max_attempts")]
            ),
            Some(7)
        );
        let anchors = "base: &b { open_for: 2s }\nroutes:\n  - circuit_breaker: *b\n";
        assert_eq!(
            locate(anchors, &[Key("routes"), Index(0), Key("circuit_breaker")]),
            Some(3)
        );
    }
}
