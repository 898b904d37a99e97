//! A small first-in first-out queue of plain values for the per-message
//! queues (posted receives, the completion queue).
//!
//! `VecDeque` costs its push an out-of-line call with a growth check and
//! its pop a move through `Option`; on the eager path the queues see three
//! pushes and three pops per message. This ring of `Copy` values inlines to
//! a few instructions per operation, and when it runs empty its next entries
//! start again at slot 0, so a queue that once grew large (a backlog of
//! unexpected messages, completions nobody polled) keeps reusing the same
//! few hot cache lines instead of walking its whole capacity.

/// A growable ring of `T`, oldest first.
#[derive(Debug, Clone)]
pub(crate) struct Fifo<T: Copy> {
    /// The slots; a power of two of them (or none). Slots outside
    /// `[head, head + len)` hold stale copies, never read.
    buf: Vec<T>,
    head: usize,
    len: usize,
}

impl<T: Copy> Default for Fifo<T> {
    fn default() -> Self {
        Fifo { buf: Vec::new(), head: 0, len: 0 }
    }
}

impl<T: Copy> Fifo<T> {
    #[inline(always)]
    fn slot(&self, i: usize) -> usize {
        (self.head + i) & (self.buf.len().wrapping_sub(1))
    }

    /// Entries queued.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `v`.
    #[inline(always)]
    pub fn push_back(&mut self, v: T) {
        if self.len == self.buf.len() {
            self.grow(v);
        }
        let i = self.slot(self.len);
        self.buf[i] = v;
        self.len += 1;
    }

    /// Doubles the slots (at least 16), the entries moved to the front.
    #[cold]
    fn grow(&mut self, fill: T) {
        let cap = (self.buf.len() * 2).max(16);
        let mut buf = vec![fill; cap];
        for (i, dst) in buf.iter_mut().enumerate().take(self.len) {
            *dst = self.buf[self.slot(i)];
        }
        self.buf = buf;
        self.head = 0;
    }

    /// The oldest entry.
    #[inline(always)]
    pub fn front(&self) -> Option<&T> {
        (self.len > 0).then(|| &self.buf[self.head])
    }

    /// Drops the oldest entry (nothing when empty). Entries are taken as a
    /// copy from `front` and then this: a caller that first looks at the
    /// entry does not read it twice.
    #[inline(always)]
    pub fn skip_front(&mut self) {
        if self.len > 0 {
            self.len -= 1;
            self.head = if self.len == 0 { 0 } else { self.slot(1) };
        }
    }

    /// Hands up to `max` of the oldest entries to `f` in place (with their
    /// index), then takes them off the queue; returns how many.
    #[inline(always)]
    pub fn take_front(&mut self, max: usize, mut f: impl FnMut(usize, &T)) -> usize {
        let n = max.min(self.len);
        for i in 0..n {
            f(i, &self.buf[self.slot(i)]);
        }
        self.len -= n;
        self.head = if self.len == 0 { 0 } else { self.slot(n) };
        n
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len).map(move |i| &self.buf[self.slot(i)])
    }

    /// Takes the entry `i` places from the front (later ones move up).
    pub fn remove(&mut self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let v = self.buf[self.slot(i)];
        for j in i..self.len - 1 {
            let (dst, src) = (self.slot(j), self.slot(j + 1));
            self.buf[dst] = self.buf[src];
        }
        self.len -= 1;
        if self.len == 0 {
            self.head = 0;
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::Fifo;
    use std::collections::VecDeque;

    /// `front` and `skip_front`, as the engine takes an entry.
    fn pop<T: Copy>(f: &mut Fifo<T>) -> Option<T> {
        let v = f.front().copied();
        f.skip_front();
        v
    }

    /// Random pushes, pops and removals agree with `VecDeque`, across
    /// growth and wrap-around.
    #[test]
    fn behaves_like_vecdeque() {
        let mut f = Fifo::default();
        let mut model = VecDeque::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 7 {
                0..=2 => {
                    f.push_back(step);
                    model.push_back(step);
                }
                3 | 4 => assert_eq!(pop(&mut f), model.pop_front()),
                6 if x % 3 == 0 => {
                    let k = (x >> 12) as usize % 5;
                    let mut seen = Vec::new();
                    let n = f.take_front(k, |i, v| seen.push((i, *v)));
                    let want: Vec<_> = (0..k.min(model.len())).map(|i| (i, model.pop_front().unwrap())).collect();
                    assert_eq!(n, want.len());
                    assert_eq!(seen, want);
                }
                5 if !model.is_empty() => {
                    let i = (x >> 8) as usize % model.len();
                    assert_eq!(f.remove(i), model.remove(i));
                }
                _ => assert_eq!(f.front(), model.front()),
            }
            assert_eq!(f.len(), model.len());
            assert!(f.iter().eq(model.iter()));
        }
        assert_eq!(f.remove(f.len()), None);
    }

    /// An emptied queue starts again at its first slot.
    #[test]
    fn restarts_at_the_front_when_empty() {
        let mut f = Fifo::default();
        for i in 0..40 {
            f.push_back(i);
        }
        while pop(&mut f).is_some() {}
        f.push_back(7);
        assert_eq!(f.head, 0);
        assert_eq!(pop(&mut f), Some(7));
        assert!(f.is_empty());
        assert_eq!(pop(&mut f), None);
    }
}
