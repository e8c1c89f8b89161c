//! Deserializing "a string or an array" (and "a string or an object")
//! without serde's untagged buffering: the JSON token decides the variant,
//! so a message's content is read once, not parsed twice.

/// `Deserialize` for an enum `$ty` with a `$text(String)` variant and a
/// `$other(T)` variant read from a JSON array (`seq`) or object (`map`).
macro_rules! string_or {
    ($ty:ident, $text:ident, seq $other:ident) => {
        string_or!(@impl $ty, $text, $other, visit_seq, SeqAccess, SeqAccessDeserializer, "a string or an array");
    };
    ($ty:ident, $text:ident, map $other:ident) => {
        string_or!(@impl $ty, $text, $other, visit_map, MapAccess, MapAccessDeserializer, "a string or an object");
    };
    (@impl $ty:ident, $text:ident, $other:ident, $visit:ident, $access:ident, $adapter:ident, $what:literal) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<$ty, E> {
                        Ok($ty::$text(s.to_owned()))
                    }
                    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<$ty, E> {
                        Ok($ty::$text(s))
                    }
                    fn $visit<A: serde::de::$access<'de>>(self, a: A) -> Result<$ty, A::Error> {
                        serde::Deserialize::deserialize(serde::de::value::$adapter::new(a))
                            .map($ty::$other)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

pub(crate) use string_or;
