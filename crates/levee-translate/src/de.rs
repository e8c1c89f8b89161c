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

/// `Deserialize` for an enum of newtype variants tagged by a field (`role`),
/// like `#[serde(tag = …)]` but without buffering the object when the tag
/// is its first field (as the SDKs write it): the rest of the object is read
/// straight into the variant's struct. Otherwise it is buffered once.
macro_rules! tagged {
    ($ty:ident, $tag:literal, { $($name:literal => $variant:ident($inner:ty)),* $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const VARIANTS: &[&str] = &[$($name),*];
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(f, "an object with `{}`", $tag)
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$ty, A::Error> {
                        use serde::de::Error as _;
                        let first: Option<String> = map.next_key()?;
                        if first.as_deref() == Some($tag) {
                            let tag: std::borrow::Cow<'de, str> =
                                map.next_value::<crate::de::Str<'de>>()?.0;
                            let rest = serde::de::value::MapAccessDeserializer::new(map);
                            return match tag.as_ref() {
                                $($name => <$inner as serde::Deserialize>::deserialize(rest).map($ty::$variant),)*
                                other => Err(A::Error::unknown_variant(other, VARIANTS)),
                            };
                        }
                        let mut obj = serde_json::Map::new();
                        if let Some(k) = first {
                            obj.insert(k, map.next_value::<serde_json::Value>()?);
                        }
                        while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
                            obj.insert(k, v);
                        }
                        let tag = match obj.remove($tag) {
                            Some(serde_json::Value::String(t)) => t,
                            _ => return Err(A::Error::missing_field($tag)),
                        };
                        let rest = serde_json::Value::Object(obj);
                        match tag.as_str() {
                            $($name => serde_json::from_value::<$inner>(rest).map($ty::$variant).map_err(A::Error::custom),)*
                            other => Err(A::Error::unknown_variant(other, VARIANTS)),
                        }
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

pub(crate) use tagged;

/// A string read borrowed when it has no escapes.
pub(crate) struct Str<'a>(pub std::borrow::Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for Str<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(std::borrow::Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(std::borrow::Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}
