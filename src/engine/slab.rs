//! A slab whose keys carry a generation, so a stale or forged key (a
//! `send_id` / `recv_id` from the wire, an address handle from the
//! application) is detected, never followed (STYLE "typed keys").

/// Bits of a key that index the slab; the rest is the generation.
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// Most entries a slab can hold.
pub const MAX_ENTRIES: usize = INDEX_MASK as usize;

struct Slot<T> {
    gen: u32,
    val: Option<T>,
}

/// Generational slab.
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    /// Entries stored since the slab was made.
    inserted: u64,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab { slots: Vec::new(), free: Vec::new(), len: 0, inserted: 0 }
    }
}

impl<T> Slab<T> {
    /// Stores the value `make` builds (in place where the optimiser can);
    /// `None` when full, and then `make` is not called.
    #[inline]
    pub fn insert_with(&mut self, make: impl FnOnce() -> T) -> Option<u32> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= MAX_ENTRIES {
                    return None;
                }
                self.slots.push(Slot { gen: 1, val: None });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.val = Some(make());
        self.len += 1;
        self.inserted = self.inserted.wrapping_add(1);
        Some(slot.gen << INDEX_BITS | idx)
    }

    /// How many entries were stored since the slab was made (a count that
    /// changes with every insert).
    pub fn inserted(&self) -> u64 {
        self.inserted
    }

    /// Stores `val`; `None` when full.
    pub fn insert(&mut self, val: T) -> Option<u32> {
        self.insert_with(|| val)
    }

    fn slot(&self, key: u32) -> Option<&Slot<T>> {
        self.slots.get((key & INDEX_MASK) as usize).filter(|s| s.gen == key >> INDEX_BITS)
    }

    /// The entry of `key`, if live.
    pub fn get(&self, key: u32) -> Option<&T> {
        self.slot(key)?.val.as_ref()
    }

    /// The entry of `key`, if live.
    pub fn get_mut(&mut self, key: u32) -> Option<&mut T> {
        let slot = self.slots.get_mut((key & INDEX_MASK) as usize)?;
        if slot.gen != key >> INDEX_BITS {
            return None;
        }
        slot.val.as_mut()
    }

    /// Removes the entry of `key` after handing it to `f`; dropped in place,
    /// never moved (entries can be large).
    pub fn remove_with<R>(&mut self, key: u32, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let slot = self.live_slot(key)?;
        let r = f(slot.val.as_mut()?);
        slot.val = None;
        self.retire(key);
        Some(r)
    }

    fn live_slot(&mut self, key: u32) -> Option<&mut Slot<T>> {
        let slot = self.slots.get_mut((key & INDEX_MASK) as usize)?;
        (slot.gen == key >> INDEX_BITS && slot.val.is_some()).then_some(slot)
    }

    /// Bumps the generation of an emptied slot and frees it.
    fn retire(&mut self, key: u32) {
        let idx = key & INDEX_MASK;
        let slot = &mut self.slots[idx as usize];
        slot.gen = (slot.gen + 1) & (u32::MAX >> INDEX_BITS);
        if slot.gen == 0 {
            slot.gen = 1;
        }
        self.free.push(idx);
        self.len -= 1;
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Keys of all live entries.
    pub fn keys(&self) -> Vec<u32> {
        self.iter().map(|(k, _)| k).collect()
    }

    /// Live entries, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|s| s.val.as_mut())
    }

    /// Live entries with their keys.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.val.as_ref().map(|v| (s.gen << INDEX_BITS | i as u32, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_forged_keys_are_rejected() {
        let mut s = Slab::default();
        let a = s.insert(1).unwrap();
        assert_eq!(s.get(a), Some(&1));
        assert_eq!(s.remove_with(a, |v| *v), Some(1));
        let b = s.insert(2).unwrap();
        assert_eq!(a & INDEX_MASK, b & INDEX_MASK, "slot reused");
        assert_eq!(s.get(a), None, "stale key");
        assert_eq!(s.get(b ^ (1 << 25)), None, "forged generation");
        assert_eq!(s.get(12345), None);
        assert_eq!(s.len(), 1);
    }
}
