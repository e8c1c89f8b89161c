//! A slab with generation-checked handles: events and parents refer to calls
//! that may have finished (and whose slot may have been reused) by the time
//! the event fires; a stale [`Ref`] simply finds nothing.

/// A handle to a slab entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ref {
    idx: u32,
    serial: u32,
}

#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    serial: u32,
    live: usize,
}

impl<T> Slab<T> {
    pub(crate) fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            serial: 0,
            live: 0,
        }
    }

    pub(crate) fn insert(&mut self, v: T) -> Ref {
        self.serial = self.serial.wrapping_add(1);
        self.live += 1;
        let serial = self.serial;
        match self.free.pop() {
            Some(idx) => {
                self.slots[idx as usize] = (serial, Some(v));
                Ref { idx, serial }
            }
            None => {
                let idx = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
                self.slots.push((serial, Some(v)));
                Ref { idx, serial }
            }
        }
    }

    pub(crate) fn get(&self, r: Ref) -> Option<&T> {
        match self.slots.get(r.idx as usize) {
            Some((s, Some(v))) if *s == r.serial => Some(v),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, r: Ref) -> Option<&mut T> {
        match self.slots.get_mut(r.idx as usize) {
            Some((s, Some(v))) if *s == r.serial => Some(v),
            _ => None,
        }
    }

    pub(crate) fn remove(&mut self, r: Ref) -> Option<T> {
        match self.slots.get_mut(r.idx as usize) {
            Some((s, slot @ Some(_))) if *s == r.serial => {
                self.free.push(r.idx);
                self.live -= 1;
                slot.take()
            }
            _ => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_handle_finds_nothing_after_reuse() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.len(), 1);
    }
}
