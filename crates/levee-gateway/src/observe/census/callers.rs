//! Who calls: a slot per caller name (a gateway key's, else the
//! `x-levee-caller` header's for up to [`MAX_CALLER_NAMES`] names, else
//! `other` or `anonymous`) with its requests and deadlines, and which
//! configured key a caller's key is.

use super::sketch::Sketch;
use super::{ANONYMOUS, MAX_CALLER_NAMES, OTHER};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::HashMap;

/// The label of `levee_caller_requests`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct CallerLabel {
    caller: String,
}

/// One caller: its name, its requests and their deadlines.
#[derive(Clone)]
pub(super) struct CallerSlot {
    pub(super) name: Box<str>,
    pub(super) requests: u64,
    pub(super) deadlines: Sketch,
    pub(super) counter: Counter,
}

/// Every caller seen, by name.
#[derive(Clone)]
pub(super) struct Callers {
    by_name: HashMap<Box<str>, usize>,
    pub(super) slots: Vec<CallerSlot>,
    /// Names admitted from `x-levee-caller` (and `anonymous`) so far.
    dynamic: usize,
    /// The most such names (`limits.caller_names`); the rest are `other`.
    pub(super) limit: usize,
    /// The anonymous callers' slot once made: most requests name no
    /// caller, and finding the slot by name hashed it each time (~280
    /// instructions a request).
    anonymous: Option<usize>,
}

/// A usable caller name: 1 to 64 visible ASCII characters.
fn valid_name(v: &[u8]) -> Option<&str> {
    if v.is_empty() || v.len() > 64 || !v.iter().all(|b| b.is_ascii_graphic()) {
        return None;
    }
    std::str::from_utf8(v).ok()
}

impl Callers {
    /// No caller seen yet.
    pub(super) fn new() -> Callers {
        Callers {
            by_name: HashMap::new(),
            slots: Vec::new(),
            dynamic: 0,
            limit: MAX_CALLER_NAMES,
            anonymous: None,
        }
    }

    /// The slot named `name`, created when new.
    pub(super) fn slot(&mut self, name: &str, family: &Family<CallerLabel, Counter>) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        let counter = family
            .get_or_create(&CallerLabel {
                caller: name.to_string(),
            })
            .clone();
        self.slots.push(CallerSlot {
            name: name.into(),
            requests: 0,
            deadlines: Sketch::new(),
            counter,
        });
        self.by_name.insert(name.into(), self.slots.len() - 1);
        self.slots.len() - 1
    }

    /// The slot for a request without a gateway key.
    pub(super) fn identify(
        &mut self,
        header: Option<&[u8]>,
        family: &Family<CallerLabel, Counter>,
    ) -> usize {
        let name = match header {
            None => {
                if let Some(slot) = self.anonymous {
                    return slot;
                }
                if self.dynamic >= self.limit {
                    return self.slot(OTHER, family);
                }
                self.dynamic += 1;
                let slot = self.slot(ANONYMOUS, family);
                self.anonymous = Some(slot);
                return slot;
            }
            Some(v) => match valid_name(v) {
                None => OTHER,
                Some(n) if self.by_name.contains_key(n) => n,
                Some(_) if self.dynamic >= self.limit => OTHER,
                Some(n) => {
                    self.dynamic += 1;
                    n
                }
            },
        };
        self.slot(name, family)
    }
}

/// Which configured key a caller's key digest is (`None` without keys or
/// when none matches). Each comparison takes the same time wherever the
/// digests differ (`subtle`), so the answer's timing does not leak a key.
pub fn key_index(keys: &[[u8; 32]], digest: &[u8; 32]) -> Option<usize> {
    keys.iter()
        .position(|k| bool::from(subtle::ConstantTimeEq::ct_eq(&k[..], &digest[..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_names_are_bounded() {
        let family = Family::<CallerLabel, Counter>::default();
        let mut c = Callers {
            by_name: HashMap::new(),
            slots: Vec::new(),
            dynamic: 0,
            limit: 10,
            anonymous: None,
        };
        for i in 0..200 {
            c.identify(Some(format!("svc-{i}").as_bytes()), &family);
        }
        // The names are taken: an anonymous caller is `other` too.
        let other = c.identify(None, &family);
        assert_eq!(&*c.slots[other].name, OTHER);
        c.identify(Some(b"bad name"), &family);
        c.identify(Some(b"svc-3"), &family);
        let names: Vec<&str> = c.slots.iter().map(|s| &*s.name).collect();
        // N names and `other`: N + 1 label values.
        assert_eq!(names.len(), 10 + 1, "{names:?}");
        assert!(names.contains(&"svc-9") && !names.contains(&"svc-10"));
        // Anonymous callers take one of the N names when one is free.
        let mut c = Callers::new();
        let anonymous = c.identify(None, &family);
        assert_eq!(c.identify(None, &family), anonymous);
        assert_eq!(&*c.slots[anonymous].name, ANONYMOUS);
    }
}
