//! Who calls: a slot per caller name (a gateway key's, else the
//! `x-levee-caller` header's or `anonymous`, for up to
//! `limits.caller_names` names, else `other`) with its requests and
//! deadlines, and which configured key a caller's key is.
//!
//! The names without a key are ranked by traffic: the first N seen take
//! the slots, and once a minute the busiest name counted as `other` takes
//! the slot of the quietest named caller when it sent more than twice as
//! many requests in that minute (and at least [`MIN_PROMOTE`]). At most
//! [`MAX_SWAPS`] names change hands a minute; a name that lost its slot has
//! its series removed at the next scrape, so the label never has more than
//! N names and `other` (keys' names aside).

use super::sketch::Sketch;
use super::{ANONYMOUS, MAX_CALLER_NAMES, OTHER};

/// The ranking window: names change hands at most once a window.
pub(super) const RANK_WINDOW_SECS: u64 = 60;
/// The fewest requests in a window that earn a name a slot.
pub(super) const MIN_PROMOTE: u64 = 10;
/// The most names that change hands in one window.
pub(super) const MAX_SWAPS: usize = 4;
/// A new holder's count for its first window: it is not the quietest.
const NEW_HOLDER: u64 = u64::MAX / 4;
/// Names counted as `other` that the ranking tracks (space-saving: the
/// busiest are kept exactly enough to be found).
const CANDIDATES: usize = 64;
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
    /// Requests in the current ranking window.
    pub(super) recent: u64,
    /// Holds its name by traffic (not a key's, not `other`): may lose it.
    pub(super) ranked: bool,
    /// Times the slot changed hands: part of its callers' label id.
    pub(super) incarnation: u16,
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
    /// Names counted as `other` in this window, with their requests.
    candidates: Vec<(Box<str>, u64)>,
    /// When this ranking window began (census seconds).
    window_start: u64,
    /// Slots that changed hands, with the name each gave up: its series
    /// are removed at the next scrape.
    pub(super) retired: Vec<(usize, Box<str>)>,
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
            candidates: Vec::new(),
            window_start: 0,
            retired: Vec::new(),
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
            recent: 0,
            ranked: false,
            incarnation: 0,
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
            None => match self.anonymous {
                Some(slot) => return slot,
                None => ANONYMOUS,
            },
            Some(v) => match valid_name(v) {
                None => OTHER,
                Some(n) => n,
            },
        };
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        if name == OTHER || self.dynamic >= self.limit {
            if name != OTHER {
                self.candidate(name);
            }
            return self.slot(OTHER, family);
        }
        self.dynamic += 1;
        let slot = self.slot(name, family);
        self.slots[slot].ranked = true;
        if name == ANONYMOUS {
            self.anonymous = Some(slot);
        }
        slot
    }

    /// Counts a request of `name`, which has no slot (space-saving: a new
    /// name takes the place of the least counted one, from its count).
    fn candidate(&mut self, name: &str) {
        if let Some(c) = self.candidates.iter_mut().find(|(n, _)| &**n == name) {
            c.1 += 1;
            return;
        }
        if self.candidates.len() < CANDIDATES {
            self.candidates.push((name.into(), 1));
            return;
        }
        if let Some(least) = self.candidates.iter_mut().min_by_key(|(_, n)| *n) {
            *least = (name.into(), least.1 + 1);
        }
    }

    /// Ends the ranking window at `now_secs` when it is over: the busiest
    /// names counted as `other` take the slots of the quietest named
    /// callers that they outsent more than twice over.
    pub(super) fn rank(&mut self, now_secs: u64, family: &Family<CallerLabel, Counter>) {
        if now_secs < self.window_start + RANK_WINDOW_SECS {
            return;
        }
        self.window_start = now_secs;
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.sort_by_key(|c| std::cmp::Reverse(c.1));
        let mut handed = Vec::new();
        for (name, sent) in candidates.into_iter().take(MAX_SWAPS) {
            let quietest = (0..self.slots.len())
                .filter(|&i| self.slots[i].ranked && !handed.contains(&i))
                .min_by_key(|&i| self.slots[i].recent);
            match quietest {
                Some(i) if sent >= MIN_PROMOTE && sent > 2 * self.slots[i].recent => {
                    self.hand_over(i, &name, family);
                    handed.push(i);
                }
                _ => break,
            }
        }
        for (i, s) in self.slots.iter_mut().enumerate() {
            // A new holder keeps its name for a whole window at least.
            s.recent = if handed.contains(&i) { NEW_HOLDER } else { 0 };
        }
    }

    /// Slot `i` changes hands: `name` takes it, its old name becomes `other`.
    fn hand_over(&mut self, i: usize, name: &str, family: &Family<CallerLabel, Counter>) {
        let s = &mut self.slots[i];
        let old = std::mem::replace(&mut s.name, name.into());
        family.remove(&CallerLabel {
            caller: old.to_string(),
        });
        s.counter = family
            .get_or_create(&CallerLabel {
                caller: name.to_string(),
            })
            .clone();
        s.requests = 0;
        s.deadlines = Sketch::new();
        s.incarnation = s.incarnation.wrapping_add(1);
        self.by_name.remove(&old);
        self.by_name.insert(name.into(), i);
        if &*old == ANONYMOUS {
            self.anonymous = None;
        }
        if name == ANONYMOUS {
            self.anonymous = Some(i);
        }
        self.retired.push((i, old));
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
        let mut c = Callers::new();
        c.limit = 10;
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

    /// A request from `name` (`None`: anonymous), counted as the census does.
    fn hit(c: &mut Callers, name: Option<&str>, family: &Family<CallerLabel, Counter>) -> usize {
        let i = c.identify(name.map(str::as_bytes), family);
        c.slots[i].recent += 1;
        i
    }

    #[test]
    fn the_busiest_names_take_the_slots_of_the_quietest() {
        let family = Family::<CallerLabel, Counter>::default();
        let mut c = Callers::new();
        c.limit = 3;
        for name in ["a", "b", "c"] {
            hit(&mut c, Some(name), &family);
        }
        hit(&mut c, Some("b"), &family);
        hit(&mut c, Some("c"), &family);
        hit(&mut c, Some("c"), &family);
        // `big` arrives past the three names: `other`, for now.
        for _ in 0..20 {
            let i = hit(&mut c, Some("big"), &family);
            assert_eq!(&*c.slots[i].name, OTHER);
        }
        // A few requests of a name are not enough to take a slot.
        for _ in 0..MIN_PROMOTE - 1 {
            hit(&mut c, Some("small"), &family);
        }
        c.rank(RANK_WINDOW_SECS, &family);
        // `big` took `a`'s slot (the quietest, 1 request); `small` took none.
        let names: Vec<&str> = c.slots.iter().map(|s| &*s.name).collect();
        assert!(names.contains(&"big") && !names.contains(&"a"), "{names:?}");
        assert!(!names.contains(&"small"), "{names:?}");
        assert_eq!(c.retired.len(), 1);
        assert_eq!(&*c.retired[0].1, "a");
        let i = hit(&mut c, Some("big"), &family);
        assert_eq!(&*c.slots[i].name, "big");
        assert_eq!(c.slots[i].incarnation, 1);
        // `a` is now `other`; N names and `other` all along.
        let i = hit(&mut c, Some("a"), &family);
        assert_eq!(&*c.slots[i].name, OTHER);
        assert_eq!(c.slots.len(), 3 + 1);
        // Before the window is over, nothing changes hands.
        for _ in 0..50 {
            hit(&mut c, Some("a"), &family);
        }
        c.rank(RANK_WINDOW_SECS + 30, &family);
        assert!(!c.slots.iter().any(|s| &*s.name == "a"));
        // The new holder keeps its name through the next window.
        c.rank(2 * RANK_WINDOW_SECS + 1, &family);
        assert!(c.slots.iter().any(|s| &*s.name == "big"));
        assert!(c.slots.iter().any(|s| &*s.name == "a"), "a took b's slot");
    }
}
