//! Checked views of application memory: the one place (besides the C
//! boundary and the devices) that dereferences raw pointers.
//!
//! A [`UserBuf`](crate::mem::UserBuf) names `len` bytes at an address that
//! the application lends to the library until the operation using it
//! completes (the C API's ownership rule). Creating one is `unsafe` — the creator promises the
//! memory is valid and not otherwise accessed while the library holds it —
//! and every access through it is bounds-checked, so the engine (which has no
//! `unsafe`) can never read or write outside it.

use crate::status::Status;
use std::ptr::NonNull;

/// Copies `n` bytes from `src` to `dst` (which may overlap); up to 16 bytes
/// with a few loads and stores instead of a call into the C library, whose
/// entry and size dispatch cost more than an 8-byte message's whole copy.
/// All loads happen before the first store, so overlap is harmless.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `n` bytes.
#[inline(always)]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY (all arms): every access is within the first `n` bytes.
    unsafe {
        if n > 16 {
            std::ptr::copy(src, dst, n);
        } else if n >= 8 {
            let (a, b) = (rd(src.cast::<u64>()), rd(src.add(n - 8).cast::<u64>()));
            wr(dst.cast::<u64>(), a);
            wr(dst.add(n - 8).cast::<u64>(), b);
        } else if n >= 4 {
            let (a, b) = (rd(src.cast::<u32>()), rd(src.add(n - 4).cast::<u32>()));
            wr(dst.cast::<u32>(), a);
            wr(dst.add(n - 4).cast::<u32>(), b);
        } else if n > 0 {
            let (a, b, c) = (*src, *src.add(n / 2), *src.add(n - 1));
            *dst = a;
            *dst.add(n / 2) = b;
            *dst.add(n - 1) = c;
        }
    }
}

/// Copies `n` bytes from `src` to `dst` (which must not overlap) with
/// non-temporal stores where the CPU has them: the copy's lines go to memory
/// instead of into this CPU's caches, and stores to lines that another CPU
/// holds do not first fetch them. The stores are ordered before any later
/// store (a store fence ends the copy), so a flag published after the copy
/// is seen after the data.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `n` bytes, and the
/// two must not overlap.
pub(crate) unsafe fn copy_bytes_nt(src: *const u8, dst: *mut u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every access is within the first `n` bytes of `src` and `dst`;
    // the streaming stores are to 16-aligned addresses (`head` aligns
    // `dst`); SSE2 is part of x86_64.
    unsafe {
        use std::arch::x86_64::{_mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        let head = (dst as usize).wrapping_neg() & 15;
        if n < head + 64 {
            return copy_bytes(src, dst, n);
        }
        copy_bytes(src, dst, head);
        let mut i = head;
        while i + 64 <= n {
            let a = _mm_loadu_si128(src.add(i).cast());
            let b = _mm_loadu_si128(src.add(i + 16).cast());
            let c = _mm_loadu_si128(src.add(i + 32).cast());
            let d = _mm_loadu_si128(src.add(i + 48).cast());
            _mm_stream_si128(dst.add(i).cast(), a);
            _mm_stream_si128(dst.add(i + 16).cast(), b);
            _mm_stream_si128(dst.add(i + 32).cast(), c);
            _mm_stream_si128(dst.add(i + 48).cast(), d);
            i += 64;
        }
        copy_bytes(src.add(i), dst.add(i), n - i);
        _mm_sfence();
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as the caller vouches.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, n)
    }
}

/// `dst.copy_from_slice(src)` through [`copy_bytes`] (no library call for
/// small copies). Panics, as `copy_from_slice` does, when the lengths differ.
#[inline(always)]
pub(crate) fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_slice: lengths differ");
    // SAFETY: both slices are valid for `src.len()` bytes.
    unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// A lent application buffer: address and length.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UserBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a UserBuf is only an address range; the creator of the buffer
// promised that the library alone accesses it while it is lent, and the
// endpoint serialises all accesses (it is used behind a lock).
unsafe impl Send for UserBuf {}
unsafe impl Sync for UserBuf {}

impl std::fmt::Debug for UserBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserBuf({:p}, {})", self.ptr, self.len)
    }
}

impl UserBuf {
    /// A buffer of `len` bytes at `ptr`. A NULL `ptr` is accepted only with
    /// `len == 0` (it then names the empty buffer); otherwise `None`.
    ///
    /// # Safety
    /// For as long as the returned value (or a copy) is used, the `len` bytes
    /// at `ptr` must stay valid for reads and writes and must not be accessed
    /// by anyone else.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Option<UserBuf> {
        match NonNull::new(ptr) {
            Some(ptr) if isize::try_from(len).is_ok() => Some(UserBuf { ptr, len }),
            None if len == 0 => Some(UserBuf::empty()),
            _ => None,
        }
    }

    /// A buffer over a slice that lives for the rest of the program.
    pub fn from_static(s: &'static mut [u8]) -> UserBuf {
        // SAFETY: the exclusive 'static borrow is consumed; nobody else can access it.
        unsafe { UserBuf::from_raw(s.as_mut_ptr(), s.len()) }.unwrap_or(UserBuf::empty())
    }

    /// The empty buffer.
    pub fn empty() -> UserBuf {
        UserBuf { ptr: NonNull::dangling(), len: 0 }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address (as the remote side names registered memory).
    #[inline]
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// The sub-buffer `[off, off + len)`, or `None` when out of bounds.
    pub fn slice(&self, off: usize, len: usize) -> Option<UserBuf> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: in bounds of a buffer the creator vouched for.
        let ptr = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(off)) };
        Some(UserBuf { ptr, len })
    }

    /// Copies `dst.len()` bytes from offset `off`; `false` (and nothing copied)
    /// when the range is out of bounds.
    #[inline]
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> bool {
        self.read_at_with(off, dst, false)
    }

    /// [`UserBuf::read_at`], with non-temporal stores into `dst` when `nt`:
    /// its lines go to memory rather than into this CPU's caches, and the
    /// stores are ordered before any later store.
    #[inline(always)]
    pub fn read_at_with(&self, off: usize, dst: &mut [u8], nt: bool) -> bool {
        match off.checked_add(dst.len()) {
            Some(end) if end <= self.len => {
                let (src, to, n) = (self.ptr.as_ptr().wrapping_add(off), dst.as_mut_ptr(), dst.len());
                // SAFETY: in bounds (checked above) of memory lent to us; `dst`
                // is a Rust slice and cannot overlap memory lent exclusively.
                unsafe {
                    if nt {
                        copy_bytes_nt(src, to, n)
                    } else {
                        copy_bytes(src, to, n)
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// Copies `src` to offset `off`; `false` (and nothing written) when the
    /// range is out of bounds.
    #[inline(always)]
    pub fn write_at(&self, off: usize, src: &[u8]) -> bool {
        match off.checked_add(src.len()) {
            Some(end) if end <= self.len => {
                // SAFETY: in bounds (checked above) of memory lent to us.
                unsafe { copy_bytes(src.as_ptr(), self.ptr.as_ptr().add(off), src.len()) };
                true
            }
            _ => false,
        }
    }

    /// Copies `len` bytes from `src` at `src_off` to `self` at `dst_off`;
    /// `false` when either range is out of bounds.
    pub fn copy_from(&self, dst_off: usize, src: &UserBuf, src_off: usize, len: usize) -> bool {
        match (self.slice(dst_off, len), src.slice(src_off, len)) {
            (Some(d), Some(s)) => {
                // SAFETY: both ranges checked in bounds; `copy` allows overlap.
                unsafe { std::ptr::copy(s.ptr.as_ptr(), d.ptr.as_ptr(), len) };
                true
            }
            _ => false,
        }
    }

    /// Runs `f` on the bytes as a shared slice.
    #[inline]
    pub fn with_slice<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: valid for `len` bytes and not accessed by others while lent.
        f(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// Runs `f` on the bytes as an exclusive slice.
    pub fn with_slice_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        // SAFETY: as `with_slice`; the library accesses a lent buffer from one
        // place at a time (the endpoint is used behind a lock).
        f(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// [`Self::atomic_apply`] of the operations the CPU has an instruction
    /// for, on 4- and 8-byte integers (sum, and, or, xor, swap, read,
    /// compare-swap); `None` for the others (the compare-and-swap loop).
    fn atomic_native(
        &self,
        dt: u32,
        o: u32,
        operand: &[u8],
        compare: &[u8],
        old: &mut [u8],
    ) -> Option<Result<(), Status>> {
        use crate::atomic_ops::{datatype as d, op};
        use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
        macro_rules! native {
            ($a:ty, $t:ty) => {{
                const N: usize = std::mem::size_of::<$t>();
                let word = |s: &[u8], at: usize| {
                    s.get(at..at + N).map_or(0, |b| <$t>::from_ne_bytes(b.try_into().unwrap_or([0; N])))
                };
                for at in (0..self.len).step_by(N) {
                    // SAFETY: as in `atomic_apply`: in bounds, aligned (checked by the caller).
                    let a = unsafe { <$a>::from_ptr(self.ptr.as_ptr().add(at).cast::<$t>()) };
                    let v = word(operand, at);
                    let was = match o {
                        op::SUM => a.fetch_add(v, SeqCst),
                        op::BAND => a.fetch_and(v, SeqCst),
                        op::BOR => a.fetch_or(v, SeqCst),
                        op::BXOR => a.fetch_xor(v, SeqCst),
                        op::ATOMIC_WRITE => a.swap(v, SeqCst),
                        op::ATOMIC_READ => a.load(SeqCst),
                        op::CSWAP => a.compare_exchange(word(compare, at), v, SeqCst, SeqCst).unwrap_or_else(|x| x),
                        _ => return None,
                    };
                    if let Some(o) = old.get_mut(at..at + N) {
                        o.copy_from_slice(&was.to_ne_bytes());
                    }
                }
                Some(Ok(()))
            }};
        }
        match dt {
            d::INT64 | d::UINT64 => native!(AtomicU64, u64),
            d::INT32 | d::UINT32 => native!(AtomicU32, u32),
            _ => None,
        }
    }

    /// Applies atomic operation `o` of libfabric datatype `dt` to every
    /// element of the buffer (see `atomic_ops::apply`), each
    /// element by one compare-and-swap of the CPU (a loop: read, compute,
    /// swap if unchanged) where it is 1, 2, 4 or 8 bytes and aligned: such
    /// elements are atomic with respect to every other rdm4 atomic on them,
    /// from this process or a peer mapping the same memory. 16-byte
    /// elements (128-bit integers, double complex) and unaligned ones are
    /// applied with plain loads and stores: atomic only with respect to the
    /// other atomics the same endpoint serves.
    pub fn atomic_apply(&self, dt: u32, o: u32, operand: &[u8], compare: &[u8], old: &mut [u8]) -> Result<(), Status> {
        use crate::atomic_ops::{apply, type_size};
        use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};
        let size = type_size(dt)?;
        let aligned = self.addr() % size as u64 == 0;
        if !matches!(size, 1 | 2 | 4 | 8) || !aligned {
            return self.with_slice_mut(|dst| apply(dt, o, dst, operand, compare, old));
        }
        if let Some(r) = self.atomic_native(dt, o, operand, compare, old) {
            return r;
        }
        let n = self.len / size;
        for i in 0..n {
            let at = i * size;
            let opnd = operand.get(at..at + size).unwrap_or(&[]);
            let cmp = compare.get(at..at + size).unwrap_or(&[]);
            // One element: read it, compute the new value, swap it in if it
            // did not change meanwhile; else again.
            macro_rules! cas {
                ($a:ty, $t:ty) => {{
                    // SAFETY: `at + size <= len`, aligned to `size` (checked
                    // above); the memory is valid while lent and accessed by
                    // peers only through atomics of the same width.
                    let a = unsafe { <$a>::from_ptr(self.ptr.as_ptr().add(at).cast::<$t>()) };
                    let mut cur = a.load(SeqCst);
                    loop {
                        let mut v = cur.to_ne_bytes();
                        apply(dt, o, &mut v, opnd, cmp, &mut [])?;
                        let new = <$t>::from_ne_bytes(v);
                        if new == cur {
                            break;
                        }
                        match a.compare_exchange(cur, new, SeqCst, SeqCst) {
                            Ok(_) => break,
                            Err(now) => cur = now,
                        }
                    }
                    if let Some(o) = old.get_mut(at..at + size) {
                        o.copy_from_slice(&cur.to_ne_bytes());
                    }
                }};
            }
            match size {
                1 => cas!(AtomicU8, u8),
                2 => cas!(AtomicU16, u16),
                4 => cas!(AtomicU32, u32),
                _ => cas!(AtomicU64, u64),
            }
        }
        Ok(())
    }
}

/// Memory owned by a test or a Rust caller and lent as a [`UserBuf`]:
/// it keeps the allocation alive and gives the bytes back afterwards.
pub struct OwnedBuf {
    bytes: Box<[u8]>,
}

impl OwnedBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> OwnedBuf {
        OwnedBuf { bytes: vec![0u8; len].into_boxed_slice() }
    }

    /// A copy of `data`.
    pub fn from_slice(data: &[u8]) -> OwnedBuf {
        OwnedBuf { bytes: data.to_vec().into_boxed_slice() }
    }

    /// The buffer to lend. While an operation uses it, the caller must not
    /// read or write the bytes through [`OwnedBuf::bytes`].
    pub fn buf(&mut self) -> UserBuf {
        // SAFETY: the box keeps the allocation alive as long as `self`; the
        // documented rule forbids other access while lent.
        unsafe { UserBuf::from_raw(self.bytes.as_mut_ptr(), self.bytes.len()) }.unwrap_or(UserBuf::empty())
    }

    /// The bytes (after the operations using them completed).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, mutable (after the operations using them completed).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_temporal_copies_equal_plain_ones_at_every_length_and_alignment() {
        let src: Vec<u8> = (0..600u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in (0..300).chain([511, 512, 513]) {
            for (s_off, d_off) in [(0, 0), (1, 0), (0, 1), (3, 15), (15, 3), (8, 16), (16, 8)] {
                let mut dst = vec![0xEEu8; 600];
                // SAFETY: both ranges are inside their vectors and distinct.
                unsafe { copy_bytes_nt(src.as_ptr().add(s_off), dst.as_mut_ptr().add(d_off), len) };
                assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len], "len {len}, offsets {s_off}/{d_off}");
                assert!(dst[..d_off].iter().chain(&dst[d_off + len..]).all(|&b| b == 0xEE), "len {len}: wrote outside");
            }
        }
    }
}
