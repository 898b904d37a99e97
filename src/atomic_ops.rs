//! The arithmetic of atomics, at the bottom of the layers beside `status`:
//! the engine emulates atomics with it, and devices that map a peer's
//! memory (shm, sim) apply them with it.
//!
//! libfabric's datatypes and operations
//! (values in `shared/facts/wire-facts.md`), applied element-wise to the
//! responder's memory.
//!
//! Supported datatypes: all integers (8 to 128 bits), `float`, `double`,
//! `float complex` and `double complex`. `long double` (and its complex) and
//! libfabric 2.x's 16/8-bit floats have no portable arithmetic here and are
//! refused with `NotSup` before anything is sent. Which operation applies to
//! which datatype follows libfabric: bitwise operations and `MSWAP` only on
//! integers; ordering (`MIN`, `MAX`, `CSWAP_LE/LT/GE/GT`) not on complex
//! numbers.

use crate::status::Status;

/// libfabric `enum fi_datatype` values rdm4 knows.
#[allow(missing_docs)]
pub mod datatype {
    pub const INT8: u32 = 0;
    pub const UINT8: u32 = 1;
    pub const INT16: u32 = 2;
    pub const UINT16: u32 = 3;
    pub const INT32: u32 = 4;
    pub const UINT32: u32 = 5;
    pub const INT64: u32 = 6;
    pub const UINT64: u32 = 7;
    pub const FLOAT: u32 = 8;
    pub const DOUBLE: u32 = 9;
    pub const FLOAT_COMPLEX: u32 = 10;
    pub const DOUBLE_COMPLEX: u32 = 11;
    pub const LONG_DOUBLE: u32 = 12;
    pub const LONG_DOUBLE_COMPLEX: u32 = 13;
    pub const INT128: u32 = 14;
    pub const UINT128: u32 = 15;
}

/// libfabric `enum fi_op` values.
#[allow(missing_docs)]
pub mod op {
    pub const MIN: u32 = 0;
    pub const MAX: u32 = 1;
    pub const SUM: u32 = 2;
    pub const PROD: u32 = 3;
    pub const LOR: u32 = 4;
    pub const LAND: u32 = 5;
    pub const BOR: u32 = 6;
    pub const BAND: u32 = 7;
    pub const LXOR: u32 = 8;
    pub const BXOR: u32 = 9;
    pub const ATOMIC_READ: u32 = 10;
    pub const ATOMIC_WRITE: u32 = 11;
    pub const CSWAP: u32 = 12;
    pub const CSWAP_NE: u32 = 13;
    pub const CSWAP_LE: u32 = 14;
    pub const CSWAP_LT: u32 = 15;
    pub const CSWAP_GE: u32 = 16;
    pub const CSWAP_GT: u32 = 17;
    pub const MSWAP: u32 = 18;
}

/// Which REQ an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicClass {
    /// WRITE_RTA: updates memory, returns nothing.
    Write,
    /// FETCH_RTA: updates memory, returns the old values.
    Fetch,
    /// COMPARE_RTA: conditional update with compare values, returns the old values.
    Compare,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Complex,
}

/// Element size of a datatype, or `NotSup`.
pub fn type_size(dt: u32) -> Result<usize, Status> {
    Ok(match dt {
        datatype::INT8 | datatype::UINT8 => 1,
        datatype::INT16 | datatype::UINT16 => 2,
        datatype::INT32 | datatype::UINT32 | datatype::FLOAT => 4,
        datatype::INT64 | datatype::UINT64 | datatype::DOUBLE | datatype::FLOAT_COMPLEX => 8,
        datatype::DOUBLE_COMPLEX | datatype::INT128 | datatype::UINT128 => 16,
        _ => return Err(Status::NotSup),
    })
}

fn kind(dt: u32) -> Kind {
    match dt {
        datatype::FLOAT | datatype::DOUBLE => Kind::Float,
        datatype::FLOAT_COMPLEX | datatype::DOUBLE_COMPLEX => Kind::Complex,
        _ => Kind::Int,
    }
}

/// Checks that `op` applies to `dt` and says which REQ it uses
/// (`fetch` asks for the old values back).
pub fn classify(dt: u32, o: u32, fetch: bool) -> Result<AtomicClass, Status> {
    type_size(dt)?;
    let k = kind(dt);
    let ok = match o {
        op::MIN | op::MAX | op::CSWAP_LE | op::CSWAP_LT | op::CSWAP_GE | op::CSWAP_GT => k != Kind::Complex,
        op::BOR | op::BAND | op::BXOR | op::MSWAP => k == Kind::Int,
        op::SUM
        | op::PROD
        | op::LOR
        | op::LAND
        | op::LXOR
        | op::ATOMIC_READ
        | op::ATOMIC_WRITE
        | op::CSWAP
        | op::CSWAP_NE => true,
        _ => false,
    };
    if !ok {
        return Err(Status::NotSup);
    }
    Ok(match o {
        op::CSWAP..=op::MSWAP => AtomicClass::Compare,
        op::ATOMIC_READ => AtomicClass::Fetch,
        _ if fetch => AtomicClass::Fetch,
        _ => AtomicClass::Write,
    })
}

/// Element operations, implemented once per datatype by the macros below.
trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
    /// The new value of `dst` for a non-compare op, or `None` to leave it.
    fn apply(o: u32, dst: Self, x: Self) -> Option<Self>;
    /// `compare OP dst` for the CSWAP family (MSWAP handled separately).
    fn test(o: u32, cmp: Self, dst: Self) -> bool;
    /// `(x & mask) | (dst & !mask)` for MSWAP (integers only).
    fn mswap(dst: Self, x: Self, mask: Self) -> Self;
}

/// `SIZE`, `load` and `store` of a primitive number, little-endian.
macro_rules! le_codec {
    ($t:ty) => {
        const SIZE: usize = std::mem::size_of::<$t>();
        fn load(b: &[u8]) -> Self {
            let mut a = [0u8; std::mem::size_of::<$t>()];
            a.copy_from_slice(&b[..Self::SIZE]);
            <$t>::from_le_bytes(a)
        }
        fn store(self, b: &mut [u8]) {
            b[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
        }
    };
}

/// `compare OP dst` of the CSWAP family for ordered types (integers, floats).
fn ordered_test<T: PartialOrd>(o: u32, c: T, d: T) -> bool {
    match o {
        op::CSWAP => c == d,
        op::CSWAP_NE => c != d,
        op::CSWAP_LE => c <= d,
        op::CSWAP_LT => c < d,
        op::CSWAP_GE => c >= d,
        op::CSWAP_GT => c > d,
        _ => false,
    }
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            le_codec!($t);
            fn apply(o: u32, d: Self, x: Self) -> Option<Self> {
                Some(match o {
                    op::MIN => d.min(x),
                    op::MAX => d.max(x),
                    op::SUM => d.wrapping_add(x),
                    op::PROD => d.wrapping_mul(x),
                    op::LOR => ((d != 0) || (x != 0)) as $t,
                    op::LAND => ((d != 0) && (x != 0)) as $t,
                    op::LXOR => ((d != 0) ^ (x != 0)) as $t,
                    op::BOR => d | x,
                    op::BAND => d & x,
                    op::BXOR => d ^ x,
                    op::ATOMIC_WRITE => x,
                    _ => return None,
                })
            }
            fn test(o: u32, c: Self, d: Self) -> bool {
                ordered_test(o, c, d)
            }
            fn mswap(d: Self, x: Self, m: Self) -> Self {
                (x & m) | (d & !m)
            }
        }
    )*};
}
int_elem!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            le_codec!($t);
            fn apply(o: u32, d: Self, x: Self) -> Option<Self> {
                Some(match o {
                    op::MIN => if x < d { x } else { d },
                    op::MAX => if x > d { x } else { d },
                    op::SUM => d + x,
                    op::PROD => d * x,
                    op::LOR => ((d != 0.0) || (x != 0.0)) as u8 as $t,
                    op::LAND => ((d != 0.0) && (x != 0.0)) as u8 as $t,
                    op::LXOR => ((d != 0.0) ^ (x != 0.0)) as u8 as $t,
                    op::ATOMIC_WRITE => x,
                    _ => return None,
                })
            }
            fn test(o: u32, c: Self, d: Self) -> bool {
                ordered_test(o, c, d)
            }
            fn mswap(d: Self, _: Self, _: Self) -> Self {
                d
            }
        }
    )*};
}
float_elem!(f32, f64);

/// A complex number of `T` (real, imaginary), as C lays it out.
#[derive(Clone, Copy, PartialEq)]
struct Cx<T>(T, T);

macro_rules! complex_elem {
    ($($t:ty),*) => {$(
        impl Elem for Cx<$t> {
            const SIZE: usize = 2 * std::mem::size_of::<$t>();
            fn load(b: &[u8]) -> Self {
                let h = std::mem::size_of::<$t>();
                Cx(<$t as Elem>::load(b), <$t as Elem>::load(&b[h..]))
            }
            fn store(self, b: &mut [u8]) {
                let h = std::mem::size_of::<$t>();
                self.0.store(b);
                self.1.store(&mut b[h..]);
            }
            fn apply(o: u32, d: Self, x: Self) -> Option<Self> {
                let nz = |c: Self| c.0 != 0.0 || c.1 != 0.0;
                let b = |v: bool| Cx(v as u8 as $t, 0.0);
                Some(match o {
                    op::SUM => Cx(d.0 + x.0, d.1 + x.1),
                    op::PROD => Cx(d.0 * x.0 - d.1 * x.1, d.0 * x.1 + d.1 * x.0),
                    op::LOR => b(nz(d) || nz(x)),
                    op::LAND => b(nz(d) && nz(x)),
                    op::LXOR => b(nz(d) ^ nz(x)),
                    op::ATOMIC_WRITE => x,
                    _ => return None,
                })
            }
            fn test(o: u32, c: Self, d: Self) -> bool {
                match o {
                    op::CSWAP => c == d,
                    op::CSWAP_NE => c != d,
                    _ => false,
                }
            }
            fn mswap(d: Self, _: Self, _: Self) -> Self {
                d
            }
        }
    )*};
}
complex_elem!(f32, f64);

fn run<T: Elem>(o: u32, dst: &mut [u8], operand: &[u8], compare: &[u8], old: &mut [u8]) {
    for i in 0..dst.len() / T::SIZE {
        let at = i * T::SIZE..(i + 1) * T::SIZE;
        let d = T::load(&dst[at.clone()]);
        if let Some(o_slot) = old.get_mut(at.clone()) {
            d.store(o_slot);
        }
        let x = operand.get(at.clone()).map(T::load);
        let new = match o {
            op::ATOMIC_READ => None,
            op::MSWAP => match (x, compare.get(at.clone()).map(T::load)) {
                (Some(x), Some(m)) => Some(T::mswap(d, x, m)),
                _ => None,
            },
            op::CSWAP..=op::CSWAP_GT => match (x, compare.get(at.clone()).map(T::load)) {
                (Some(x), Some(c)) if T::test(o, c, d) => Some(x),
                _ => None,
            },
            _ => x.and_then(|x| T::apply(o, d, x)),
        };
        if let Some(n) = new {
            n.store(&mut dst[at]);
        }
    }
}

/// Applies `op` to every element of `dst` with `operand` (and `compare` for
/// the compare family), writing the old values to `old` when it is not
/// empty. `dst.len()` must be a multiple of the element size and the other
/// slices at least as long where used (the engine checks before calling).
pub fn apply(dt: u32, o: u32, dst: &mut [u8], operand: &[u8], compare: &[u8], old: &mut [u8]) -> Result<(), Status> {
    classify(dt, o, false)?;
    match dt {
        datatype::INT8 => run::<i8>(o, dst, operand, compare, old),
        datatype::UINT8 => run::<u8>(o, dst, operand, compare, old),
        datatype::INT16 => run::<i16>(o, dst, operand, compare, old),
        datatype::UINT16 => run::<u16>(o, dst, operand, compare, old),
        datatype::INT32 => run::<i32>(o, dst, operand, compare, old),
        datatype::UINT32 => run::<u32>(o, dst, operand, compare, old),
        datatype::INT64 => run::<i64>(o, dst, operand, compare, old),
        datatype::UINT64 => run::<u64>(o, dst, operand, compare, old),
        datatype::INT128 => run::<i128>(o, dst, operand, compare, old),
        datatype::UINT128 => run::<u128>(o, dst, operand, compare, old),
        datatype::FLOAT => run::<f32>(o, dst, operand, compare, old),
        datatype::DOUBLE => run::<f64>(o, dst, operand, compare, old),
        datatype::FLOAT_COMPLEX => run::<Cx<f32>>(o, dst, operand, compare, old),
        datatype::DOUBLE_COMPLEX => run::<Cx<f64>>(o, dst, operand, compare, old),
        _ => return Err(Status::NotSup),
    }
    Ok(())
}
