//! Emulated atomics through the engine, checked against an independent
//! reference: every (datatype, op) pair the engine accepts, as write, fetch
//! and compare atomics over a reordering sim; refused datatypes and pairs;
//! fetch-add ordering; remote-access errors; malformed posts.
//!
//! The reference below is written from libfabric's definitions of the
//! operations (`fi_atomic(3)`), per native type, and never calls
//! `atomic_ops::apply`.

mod common;

use common::*;
use rdm4::atomic_ops::{self, datatype as dt, op, AtomicClass};
use rdm4::device::sim::SimConfig;
use rdm4::device::Access;
use rdm4::engine::{Config, CqFlags, RemoteBuf};
use rdm4::mem::{OwnedBuf, UserBuf};
use rdm4::Status;

/// Elements per atomic.
const N: usize = 8;
/// Bytes between two cases' slots in the target region (guard bytes around each).
const SLOT: usize = 16 * N + 32;
const GUARD: u8 = 0xA5;

// ---------------------------------------------------------------------------
// Reference implementation.
// ---------------------------------------------------------------------------

/// A value of one atomic datatype, with libfabric's semantics.
trait Elem: Copy + PartialEq + std::fmt::Debug {
    const SIZE: usize;
    /// Has an order (MIN, MAX, CSWAP_LE..GT apply).
    const ORDERED: bool;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    /// Exactly representable test values.
    fn samples() -> Vec<Self>;
    /// The condition of the CSWAP family: `compare OP *addr`.
    fn cond(o: u32, compare: Self, dst: Self) -> bool;
    /// The new value of `*addr` given operand `x` and compare `c`.
    fn update(o: u32, d: Self, x: Self, c: Self) -> Self;
}

macro_rules! ref_int {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const ORDERED: bool = true;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b[..Self::SIZE].try_into().unwrap())
            }
            fn samples() -> Vec<Self> {
                let mut v: Vec<$t> = [0i128, 1, -1, 2, 3, 5, 7, -8, 100, 0x5A, -0x33, 0, 0x7E, 6]
                    .iter()
                    .map(|&x| x as $t)
                    .collect();
                v.push(<$t>::MAX);
                v.push(<$t>::MIN);
                v.push(<$t>::MAX - 3);
                v
            }
            fn cond(o: u32, c: Self, d: Self) -> bool {
                match o {
                    op::CSWAP => c == d,
                    op::CSWAP_NE => c != d,
                    op::CSWAP_LE => c <= d,
                    op::CSWAP_LT => c < d,
                    op::CSWAP_GE => c >= d,
                    op::CSWAP_GT => c > d,
                    _ => unreachable!("not a CSWAP: {o}"),
                }
            }
            fn update(o: u32, d: Self, x: Self, c: Self) -> Self {
                let b = |v: bool| -> $t { if v { 1 } else { 0 } };
                match o {
                    op::MIN => if x < d { x } else { d },
                    op::MAX => if x > d { x } else { d },
                    op::SUM => d.wrapping_add(x),
                    op::PROD => d.wrapping_mul(x),
                    op::LOR => b(d != 0 || x != 0),
                    op::LAND => b(d != 0 && x != 0),
                    op::BOR => d | x,
                    op::BAND => d & x,
                    op::LXOR => b((d != 0) != (x != 0)),
                    op::BXOR => d ^ x,
                    op::ATOMIC_READ => d,
                    op::ATOMIC_WRITE => x,
                    op::CSWAP..=op::CSWAP_GT => if Self::cond(o, c, d) { x } else { d },
                    op::MSWAP => (x & c) | (d & !c),
                    _ => unreachable!("op {o}"),
                }
            }
        }
    )*};
}
ref_int!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128);

macro_rules! ref_float {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const ORDERED: bool = true;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b[..Self::SIZE].try_into().unwrap())
            }
            fn samples() -> Vec<Self> {
                vec![0.0, 1.0, -2.5, 3.0, 0.5, 1024.0, -7.25, 2.0, -1.0, 6.0, 0.0, 12.75, -0.125]
            }
            fn cond(o: u32, c: Self, d: Self) -> bool {
                match o {
                    op::CSWAP => c == d,
                    op::CSWAP_NE => c != d,
                    op::CSWAP_LE => c <= d,
                    op::CSWAP_LT => c < d,
                    op::CSWAP_GE => c >= d,
                    op::CSWAP_GT => c > d,
                    _ => unreachable!("not a CSWAP: {o}"),
                }
            }
            fn update(o: u32, d: Self, x: Self, c: Self) -> Self {
                let b = |v: bool| -> $t { if v { 1.0 } else { 0.0 } };
                match o {
                    op::MIN => if x < d { x } else { d },
                    op::MAX => if x > d { x } else { d },
                    op::SUM => d + x,
                    op::PROD => d * x,
                    op::LOR => b(d != 0.0 || x != 0.0),
                    op::LAND => b(d != 0.0 && x != 0.0),
                    op::LXOR => b((d != 0.0) != (x != 0.0)),
                    op::ATOMIC_READ => d,
                    op::ATOMIC_WRITE => x,
                    op::CSWAP..=op::CSWAP_GT => if Self::cond(o, c, d) { x } else { d },
                    _ => unreachable!("op {o} on a float"),
                }
            }
        }
    )*};
}
ref_float!(f32, f64);

/// A C complex number: (real, imaginary).
#[derive(Clone, Copy, PartialEq, Debug)]
struct Complex<F>(F, F);

macro_rules! ref_complex {
    ($($t:ty),*) => {$(
        impl Elem for Complex<$t> {
            const SIZE: usize = 2 * std::mem::size_of::<$t>();
            const ORDERED: bool = false;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.0.to_le_bytes());
                out.extend_from_slice(&self.1.to_le_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let h = Self::SIZE / 2;
                Complex(<$t>::from_le_bytes(b[..h].try_into().unwrap()), <$t>::from_le_bytes(b[h..2 * h].try_into().unwrap()))
            }
            fn samples() -> Vec<Self> {
                vec![
                    Complex(0.0, 0.0),
                    Complex(1.0, -2.5),
                    Complex(0.0, 3.0),
                    Complex(3.0, 0.0),
                    Complex(-0.5, 2.0),
                    Complex(2.0, 2.0),
                    Complex(-1.0, 0.0),
                    Complex(0.5, -0.5),
                    Complex(0.0, 0.0),
                    Complex(1024.0, -1.0),
                    Complex(0.0, -0.25),
                ]
            }
            fn cond(o: u32, c: Self, d: Self) -> bool {
                match o {
                    op::CSWAP => c.0 == d.0 && c.1 == d.1,
                    op::CSWAP_NE => !(c.0 == d.0 && c.1 == d.1),
                    _ => unreachable!("ordering CSWAP on a complex: {o}"),
                }
            }
            fn update(o: u32, d: Self, x: Self, c: Self) -> Self {
                let nonzero = |z: Self| z.0 != 0.0 || z.1 != 0.0;
                let b = |v: bool| Complex(if v { 1.0 } else { 0.0 }, 0.0);
                match o {
                    op::SUM => Complex(d.0 + x.0, d.1 + x.1),
                    // (a+bi)(c+di) = (ac-bd) + (ad+bc)i
                    op::PROD => Complex(d.0 * x.0 - d.1 * x.1, d.0 * x.1 + d.1 * x.0),
                    op::LOR => b(nonzero(d) || nonzero(x)),
                    op::LAND => b(nonzero(d) && nonzero(x)),
                    op::LXOR => b(nonzero(d) != nonzero(x)),
                    op::ATOMIC_READ => d,
                    op::ATOMIC_WRITE => x,
                    op::CSWAP | op::CSWAP_NE => if Self::cond(o, c, d) { x } else { d },
                    _ => unreachable!("op {o} on a complex"),
                }
            }
        }
    )*};
}
ref_complex!(f32, f64);

/// Which datatypes are integers, reals or complex (independent of the engine).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Int,
    Real,
    Complex,
    Refused,
}

fn family(d: u32) -> Family {
    match d {
        dt::INT8..=dt::UINT64 | dt::INT128 | dt::UINT128 => Family::Int,
        dt::FLOAT | dt::DOUBLE => Family::Real,
        dt::FLOAT_COMPLEX | dt::DOUBLE_COMPLEX => Family::Complex,
        _ => Family::Refused,
    }
}

fn elem_size(d: u32) -> usize {
    match d {
        dt::INT8 | dt::UINT8 => 1,
        dt::INT16 | dt::UINT16 => 2,
        dt::INT32 | dt::UINT32 | dt::FLOAT => 4,
        dt::INT64 | dt::UINT64 | dt::DOUBLE | dt::FLOAT_COMPLEX => 8,
        dt::DOUBLE_COMPLEX | dt::INT128 | dt::UINT128 => 16,
        dt::LONG_DOUBLE => 16,
        dt::LONG_DOUBLE_COMPLEX => 32,
        _ => unreachable!(),
    }
}

/// libfabric's table of valid (datatype, op) pairs.
fn valid(d: u32, o: u32) -> bool {
    let f = family(d);
    match o {
        op::MIN | op::MAX | op::CSWAP_LE | op::CSWAP_LT | op::CSWAP_GE | op::CSWAP_GT => {
            matches!(f, Family::Int | Family::Real)
        }
        op::BOR | op::BAND | op::BXOR | op::MSWAP => f == Family::Int,
        op::SUM
        | op::PROD
        | op::LOR
        | op::LAND
        | op::LXOR
        | op::ATOMIC_READ
        | op::ATOMIC_WRITE
        | op::CSWAP
        | op::CSWAP_NE => f != Family::Refused,
        _ => false,
    }
}

fn is_compare(o: u32) -> bool {
    (op::CSWAP..=op::MSWAP).contains(&o)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// No result buffer (WRITE_RTA / DC_WRITE_RTA).
    Write,
    /// Result buffer (FETCH_RTA).
    Fetch,
    /// Result and compare buffers (COMPARE_RTA).
    Compare,
}

fn modes(o: u32) -> Vec<Mode> {
    if is_compare(o) {
        vec![Mode::Compare]
    } else if o == op::ATOMIC_READ {
        vec![Mode::Fetch]
    } else {
        vec![Mode::Write, Mode::Fetch]
    }
}

/// The bytes of one case: initial memory, operand, compare, expected memory after, expected old values.
struct Bytes {
    init: Vec<u8>,
    operand: Vec<u8>,
    compare: Vec<u8>,
    after: Vec<u8>,
    old: Vec<u8>,
}

fn build<T: Elem>(o: u32, variant: usize) -> Bytes {
    let s = T::samples();
    let l = s.len();
    let v = variant * 5;
    let init: Vec<T> = (0..N).map(|i| s[(i + v) % l]).collect();
    let operand: Vec<T> = (0..N).map(|i| s[(3 * i + 1 + v) % l]).collect();
    // Compare values: equal to the target element for even i; for odd i
    // smaller (i % 4 == 1) or larger (i % 4 == 3) where the type is ordered.
    let pick = |i: usize, want_less: bool| -> T {
        if T::ORDERED {
            (0..l)
                .map(|k| s[(5 * i + k + v) % l])
                .find(
                    |&x| if want_less { T::cond(op::CSWAP_LT, x, init[i]) } else { T::cond(op::CSWAP_GT, x, init[i]) },
                )
                .unwrap_or(s[(5 * i + 2 + v) % l])
        } else {
            s[(5 * i + 2 * (i % 4) + v) % l]
        }
    };
    let compare: Vec<T> = (0..N)
        .map(|i| match i % 4 {
            0 | 2 => init[i],
            1 => pick(i, true),
            _ => pick(i, false),
        })
        .collect();
    if (op::CSWAP..=op::CSWAP_GT).contains(&o) {
        // The data must exercise both outcomes of the condition.
        let hits = (0..N).filter(|&i| T::cond(o, compare[i], init[i])).count();
        assert!(hits > 0 && hits < N, "test data: op {o} variant {variant} condition holds for {hits}/{N} elements");
    }
    let after: Vec<T> = (0..N).map(|i| T::update(o, init[i], operand[i], compare[i])).collect();
    let ser = |v: &[T]| {
        let mut out = Vec::new();
        for x in v {
            x.put(&mut out);
        }
        assert!(out.len() == v.len() * T::SIZE);
        // Round trip of the (de)serialisation.
        assert!(out.chunks(T::SIZE).zip(v).all(|(c, x)| T::get(c) == *x));
        out
    };
    Bytes { init: ser(&init), operand: ser(&operand), compare: ser(&compare), after: ser(&after), old: ser(&init) }
}

fn build_dt(d: u32, o: u32, variant: usize) -> Bytes {
    match d {
        dt::INT8 => build::<i8>(o, variant),
        dt::UINT8 => build::<u8>(o, variant),
        dt::INT16 => build::<i16>(o, variant),
        dt::UINT16 => build::<u16>(o, variant),
        dt::INT32 => build::<i32>(o, variant),
        dt::UINT32 => build::<u32>(o, variant),
        dt::INT64 => build::<i64>(o, variant),
        dt::UINT64 => build::<u64>(o, variant),
        dt::INT128 => build::<i128>(o, variant),
        dt::UINT128 => build::<u128>(o, variant),
        dt::FLOAT => build::<f32>(o, variant),
        dt::DOUBLE => build::<f64>(o, variant),
        dt::FLOAT_COMPLEX => build::<Complex<f32>>(o, variant),
        dt::DOUBLE_COMPLEX => build::<Complex<f64>>(o, variant),
        _ => unreachable!(),
    }
}

/// A few hand-checked values, so the reference itself is known right.
#[test]
fn reference_sanity() {
    assert_eq!(<u8 as Elem>::update(op::SUM, 250, 10, 0), 4);
    assert_eq!(<i8 as Elem>::update(op::PROD, -128, -1, 0), -128);
    assert_eq!(<i32 as Elem>::update(op::LXOR, 5, 0, 0), 1);
    assert_eq!(<i32 as Elem>::update(op::LXOR, 5, 3, 0), 0);
    assert_eq!(<u16 as Elem>::update(op::MSWAP, 0xFF00, 0x1234, 0x0FF0), 0xF230);
    assert_eq!(<i64 as Elem>::update(op::CSWAP_LE, 10, 99, 10), 99);
    assert_eq!(<i64 as Elem>::update(op::CSWAP_LE, 10, 99, 11), 10);
    assert_eq!(<i64 as Elem>::update(op::CSWAP_GT, 10, 99, 11), 99);
    assert_eq!(<f64 as Elem>::update(op::MIN, 1.0, -2.5, 0.0), -2.5);
    assert_eq!(<f32 as Elem>::update(op::LOR, 0.0, -0.125, 0.0), 1.0);
    assert_eq!(
        <Complex<f32> as Elem>::update(op::PROD, Complex(1.0, 2.0), Complex(3.0, -1.0), Complex(0.0, 0.0)),
        Complex(5.0, 5.0)
    );
    assert_eq!(
        <Complex<f64> as Elem>::update(op::LAND, Complex(0.0, 3.0), Complex(2.0, 0.0), Complex(0.0, 0.0)),
        Complex(1.0, 0.0)
    );
    assert_eq!(
        <Complex<f64> as Elem>::update(op::LOR, Complex(0.0, 0.0), Complex(0.0, 0.0), Complex(0.0, 0.0)),
        Complex(0.0, 0.0)
    );
}

// ---------------------------------------------------------------------------
// Every accepted pair through the engine.
// ---------------------------------------------------------------------------

const ALL_DATATYPES: std::ops::RangeInclusive<u32> = 0..=15;
const ALL_OPS: std::ops::RangeInclusive<u32> = 0..=18;
const RW: Access = Access::REMOTE_READ.union(Access::REMOTE_WRITE);

/// The engine's classification agrees with libfabric's table.
#[test]
fn classify_matches_libfabric_table() {
    for d in ALL_DATATYPES {
        for o in ALL_OPS {
            if family(d) == Family::Refused {
                assert_eq!(atomic_ops::classify(d, o, false), Err(Status::NotSup), "dt {d} op {o}");
                assert_eq!(atomic_ops::classify(d, o, true), Err(Status::NotSup), "dt {d} op {o}");
                continue;
            }
            assert_eq!(atomic_ops::type_size(d), Ok(elem_size(d)), "dt {d}");
            if !valid(d, o) {
                assert_eq!(atomic_ops::classify(d, o, false), Err(Status::NotSup), "dt {d} op {o}");
                assert_eq!(atomic_ops::classify(d, o, true), Err(Status::NotSup), "dt {d} op {o}");
                continue;
            }
            let (w, f) = if is_compare(o) {
                (AtomicClass::Compare, AtomicClass::Compare)
            } else if o == op::ATOMIC_READ {
                (AtomicClass::Fetch, AtomicClass::Fetch)
            } else {
                (AtomicClass::Write, AtomicClass::Fetch)
            };
            assert_eq!(atomic_ops::classify(d, o, false), Ok(w), "dt {d} op {o}");
            assert_eq!(atomic_ops::classify(d, o, true), Ok(f), "dt {d} op {o}");
        }
    }
}

struct Case {
    d: u32,
    o: u32,
    mode: Mode,
    variant: usize,
    requester: usize,
    /// Offset of the case's elements in the target's region.
    off: usize,
    bytes: Bytes,
    operand: OwnedBuf,
    compare: OwnedBuf,
    result: OwnedBuf,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "dt {} op {} {:?} variant {} ({}->{})",
            self.d,
            self.o,
            self.mode,
            self.variant,
            self.requester,
            1 - self.requester
        )
    }
}

/// Every accepted (datatype, op, mode), two data variants, alternating
/// direction between two endpoints. `concurrent`: all posted at once, else
/// one at a time.
fn all_pairs(seed: u64, concurrent: bool) {
    all_pairs_with(seed, concurrent, Config::default());
}

fn all_pairs_with(seed: u64, concurrent: bool, cfg: Config) {
    let mut c = Cluster::new(2, SimConfig::chaotic(seed), cfg);
    let mut cases = Vec::new();
    let mut next_off = [SLOT; 2];
    for d in ALL_DATATYPES {
        if family(d) == Family::Refused {
            continue;
        }
        for o in ALL_OPS {
            if atomic_ops::classify(d, o, false).is_err() {
                continue;
            }
            for mode in modes(o) {
                for variant in 0..2 {
                    let requester = cases.len() % 2;
                    let target = 1 - requester;
                    let bytes = build_dt(d, o, variant);
                    let len = bytes.init.len();
                    let operand =
                        if o == op::ATOMIC_READ { OwnedBuf::zeroed(0) } else { OwnedBuf::from_slice(&bytes.operand) };
                    let compare =
                        if mode == Mode::Compare { OwnedBuf::from_slice(&bytes.compare) } else { OwnedBuf::zeroed(0) };
                    let result =
                        if mode == Mode::Write { OwnedBuf::zeroed(0) } else { OwnedBuf::from_slice(&vec![0xCC; len]) };
                    let off = next_off[target];
                    next_off[target] += SLOT;
                    cases.push(Case { d, o, mode, variant, requester, off, bytes, operand, compare, result });
                }
            }
        }
    }
    // One region per endpoint: guard bytes everywhere but the cases' slots.
    let mut regions: Vec<OwnedBuf> = (0..2).map(|t| OwnedBuf::from_slice(&vec![GUARD; next_off[t] + SLOT])).collect();
    for cs in &cases {
        let t = 1 - cs.requester;
        regions[t].bytes_mut()[cs.off..cs.off + cs.bytes.init.len()].copy_from_slice(&cs.bytes.init);
    }
    let mut expected: Vec<Vec<u8>> = regions.iter().map(|r| r.bytes().to_vec()).collect();
    for cs in &cases {
        let t = 1 - cs.requester;
        expected[t][cs.off..cs.off + cs.bytes.after.len()].copy_from_slice(&cs.bytes.after);
    }
    let bases: Vec<u64> = regions.iter_mut().map(|r| r.buf().addr()).collect();
    let keys: Vec<u64> = (0..2).map(|t| c.eps[t].mr_reg(regions[t].buf(), RW).unwrap()).collect();

    let total = cases.len();
    let mut done = vec![false; total];
    let check_cqes = |c: &mut Cluster, done: &mut Vec<bool>, cases: &[Case]| {
        for i in 0..2 {
            for e in c.take_cq(i) {
                let idx = e.context as usize;
                let cs = cases.get(idx).unwrap_or_else(|| panic!("seed {seed}: unknown completion {e:?}"));
                assert_eq!(cs.requester, i, "seed {seed}: {}: completion on the wrong endpoint", cs.name());
                assert!(!done[idx], "seed {seed}: {}: completed twice", cs.name());
                done[idx] = true;
                assert_eq!(e.status, Status::Success, "seed {seed}: {}: {e:?}", cs.name());
                let mut flags = CqFlags::ATOMIC | CqFlags::WRITE;
                if cs.mode != Mode::Write {
                    flags |= CqFlags::READ;
                }
                assert_eq!(e.flags, flags, "seed {seed}: {}", cs.name());
            }
        }
    };
    for idx in 0..total {
        let (requester, d, o) = (cases[idx].requester, cases[idx].d, cases[idx].o);
        let target = 1 - requester;
        let remote = RemoteBuf { addr: bases[target] + cases[idx].off as u64, key: keys[target] };
        let dest = c.addrs[requester][target];
        let cs = &mut cases[idx];
        let (operand, compare, result) = (cs.operand.buf(), cs.compare.buf(), cs.result.buf());
        c.eps[requester]
            .atomic(dest, d, o, operand, compare, result, remote, idx as u64)
            .unwrap_or_else(|s| panic!("seed {seed}: {}: post failed: {s:?}", cases[idx].name()));
        if concurrent {
            if idx % 7 == 0 {
                c.step();
            }
        } else {
            c.run_until(100_000, |c| c.cqs[requester].len() == 1);
            check_cqes(&mut c, &mut done, &cases);
        }
    }
    c.run_until(1_000_000, |c| c.cqs[0].len() + c.cqs[1].len() + done.iter().filter(|d| **d).count() >= total);
    c.settle(10_000);
    check_cqes(&mut c, &mut done, &cases);
    assert!(done.iter().all(|d| *d), "seed {seed}: not every atomic completed");

    let mut failures = Vec::new();
    for cs in &cases {
        let t = 1 - cs.requester;
        let got = &regions[t].bytes()[cs.off..cs.off + cs.bytes.after.len()];
        if got != cs.bytes.after.as_slice() {
            failures.push(format!(
                "{}: memory\n   init {:?}\n    got {:?}\n   want {:?}",
                cs.name(),
                cs.bytes.init,
                got,
                cs.bytes.after
            ));
        }
        if cs.mode != Mode::Write && cs.result.bytes() != cs.bytes.old.as_slice() {
            failures.push(format!(
                "{}: fetched\n    got {:?}\n   want {:?}",
                cs.name(),
                cs.result.bytes(),
                cs.bytes.old
            ));
        }
    }
    assert!(failures.is_empty(), "seed {seed}: {} of {total} cases wrong:\n{}", failures.len(), failures.join("\n"));
    // Nothing outside the slots was touched.
    for t in 0..2 {
        assert!(regions[t].bytes() == expected[t].as_slice(), "seed {seed}: region {t} differs outside the cases");
    }
    for (i, ep) in c.eps.iter().enumerate() {
        assert_eq!(ep.pending_ops(), 0, "seed {seed}: endpoint {i}");
        let st = ep.stats();
        assert_eq!(
            (st.malformed, st.protocol_errors, st.stale_connid, st.access_errors),
            (0, 0, 0, 0),
            "seed {seed}: endpoint {i}"
        );
    }
    eprintln!("seed {seed} concurrent {concurrent}: {total} atomics, packet types {:?}", c.all_types());
}

#[test]
fn every_accepted_pair_concurrently_seed_1() {
    all_pairs(1, true);
}

#[test]
fn every_accepted_pair_concurrently_seed_2() {
    all_pairs(2, true);
}

#[test]
fn every_accepted_pair_one_at_a_time() {
    all_pairs(3, false);
}

/// Baseline-only peers: write atomics are plain WRITE_RTA (complete on
/// transmit; memory is checked after the network settled).
#[test]
fn every_accepted_pair_between_legacy_peers() {
    all_pairs_with(4, true, Config { legacy: true, ..Config::default() });
}

// ---------------------------------------------------------------------------
// Refusals at post time.
// ---------------------------------------------------------------------------

/// Posts an atomic that must be refused with `want`; asserts nothing was sent
/// and nothing is left behind.
#[allow(clippy::too_many_arguments)]
fn refused(
    c: &mut Cluster,
    d: u32,
    o: u32,
    operand: usize,
    compare: usize,
    result: usize,
    want: Option<Status>,
    what: &str,
) {
    let mut a = OwnedBuf::zeroed(operand);
    let mut b = OwnedBuf::zeroed(compare);
    let mut r = OwnedBuf::zeroed(result);
    let mut mem = OwnedBuf::zeroed(64);
    let key = c.eps[1].mr_reg(mem.buf(), RW).unwrap();
    let remote = RemoteBuf { addr: mem.buf().addr(), key };
    let dest = c.addrs[0][1];
    let got = c.eps[0].atomic(dest, d, o, a.buf(), b.buf(), r.buf(), remote, 77);
    match want {
        Some(s) => assert_eq!(got, Err(s), "{what}: dt {d} op {o}"),
        None => assert!(got.is_err(), "{what}: dt {d} op {o} accepted"),
    }
    c.settle(100);
    assert!(c.net.log().is_empty(), "{what}: dt {d} op {o}: packets sent: {:?}", c.all_types());
    assert_eq!(c.eps[0].pending_ops(), 0, "{what}: dt {d} op {o}");
    assert!(c.cqs[0].is_empty() && c.cqs[1].is_empty(), "{what}: dt {d} op {o}: completions {:?}", c.cqs);
    assert!(mem.bytes().iter().all(|b| *b == 0));
    c.eps[1].mr_dereg(key).unwrap();
}

#[test]
fn long_double_and_unsupported_pairs_are_refused_at_post() {
    let mut c = Cluster::new(2, SimConfig::chaotic(5), Config::default());
    for d in ALL_DATATYPES {
        for o in ALL_OPS {
            let size = elem_size(d);
            let n = 2 * size;
            if family(d) == Family::Refused {
                // Every shape: write, fetch, compare.
                refused(&mut c, d, o, n, 0, 0, Some(Status::NotSup), "long double write");
                refused(&mut c, d, o, n, 0, n, Some(Status::NotSup), "long double fetch");
                refused(&mut c, d, o, n, n, n, Some(Status::NotSup), "long double compare");
            } else if !valid(d, o) {
                refused(&mut c, d, o, n, 0, 0, Some(Status::NotSup), "invalid pair write");
                refused(&mut c, d, o, n, 0, n, Some(Status::NotSup), "invalid pair fetch");
                refused(&mut c, d, o, n, n, n, Some(Status::NotSup), "invalid pair compare");
            }
        }
    }
    // Out of the enums altogether.
    refused(&mut c, 16, op::SUM, 8, 0, 0, None, "datatype 16");
    refused(&mut c, 99, op::SUM, 8, 0, 8, None, "datatype 99");
    refused(&mut c, dt::UINT64, 19, 8, 0, 0, None, "op 19");
    refused(&mut c, dt::UINT64, 1000, 8, 8, 8, None, "op 1000");
}

#[test]
fn malformed_shapes_are_refused_with_inval_and_nothing_is_sent() {
    let mut c = Cluster::new(2, SimConfig::chaotic(6), Config::default());
    let inval = Some(Status::Inval);
    // Operand length not a multiple of the element size.
    refused(&mut c, dt::INT32, op::SUM, 6, 0, 0, inval, "operand 6 bytes of INT32 (write)");
    refused(&mut c, dt::INT32, op::SUM, 6, 0, 6, inval, "operand 6 bytes of INT32 (fetch)");
    refused(&mut c, dt::UINT64, op::ATOMIC_WRITE, 12, 0, 0, inval, "operand 12 bytes of UINT64");
    refused(&mut c, dt::UINT128, op::CSWAP, 24, 24, 24, inval, "operand 24 bytes of UINT128 (compare)");
    refused(&mut c, dt::DOUBLE_COMPLEX, op::SUM, 8, 0, 0, inval, "operand 8 bytes of DOUBLE_COMPLEX");
    refused(&mut c, dt::INT16, op::MSWAP, 3, 3, 3, inval, "operand 3 bytes of INT16 (mswap)");
    refused(&mut c, dt::FLOAT, op::ATOMIC_READ, 0, 0, 6, inval, "read result 6 bytes of FLOAT");
    // Empty operand.
    refused(&mut c, dt::INT32, op::SUM, 0, 0, 0, inval, "empty operand");
    // Result or compare of the wrong length.
    refused(&mut c, dt::INT32, op::SUM, 8, 0, 4, inval, "fetch result shorter than operand");
    refused(&mut c, dt::INT32, op::CSWAP, 8, 4, 8, inval, "compare shorter than operand");
    refused(&mut c, dt::INT32, op::CSWAP, 8, 8, 0, inval, "compare without result");
}

// ---------------------------------------------------------------------------
// Ordering.
// ---------------------------------------------------------------------------

/// 100 fetch-adds of 1 from one requester to one word: the old values are
/// 0, 1, ..., 99 in post order, whatever the network does.
fn fetch_add_order(seed: u64) {
    let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
    let mut word = OwnedBuf::zeroed(8);
    let key = c.eps[1].mr_reg(word.buf(), RW).unwrap();
    let remote = RemoteBuf { addr: word.buf().addr(), key };
    let mut one = OwnedBuf::from_slice(&1u64.to_le_bytes());
    let mut results: Vec<OwnedBuf> = (0..100).map(|_| OwnedBuf::from_slice(&[0xEE; 8])).collect();
    let dest = c.addrs[0][1];
    let mut rng = Rng(seed);
    for (i, r) in results.iter_mut().enumerate() {
        c.eps[0]
            .atomic(dest, dt::UINT64, op::SUM, one.buf(), UserBuf::empty(), r.buf(), remote, 1000 + i as u64)
            .unwrap();
        for _ in 0..rng.below(3) {
            c.step();
        }
    }
    c.run_until(1_000_000, |c| c.cqs[0].len() >= 100);
    c.settle(1000);
    let cq = c.take_cq(0);
    assert_eq!(cq.len(), 100, "seed {seed}");
    let mut seen: Vec<u64> = cq.iter().map(|e| e.context).collect();
    assert!(cq.iter().all(|e| e.status == Status::Success), "seed {seed}: {cq:?}");
    seen.sort();
    assert_eq!(seen, (1000..1100).collect::<Vec<_>>(), "seed {seed}");
    let olds: Vec<u64> = results.iter().map(|r| u64::from_le_bytes(r.bytes().try_into().unwrap())).collect();
    assert_eq!(olds, (0..100).collect::<Vec<u64>>(), "seed {seed}: fetched old values in post order");
    assert_eq!(u64::from_le_bytes(word.bytes().try_into().unwrap()), 100, "seed {seed}");
}

#[test]
fn fetch_add_old_values_follow_post_order() {
    for seed in [21, 22, 23, 24] {
        fetch_add_order(seed);
    }
}

// ---------------------------------------------------------------------------
// Remote access errors.
// ---------------------------------------------------------------------------

#[test]
fn remote_access_errors_fail_the_requester_and_leave_memory_unchanged() {
    for seed in [31, 32] {
        let mut c = Cluster::new(2, SimConfig::chaotic(seed), Config::default());
        // One allocation; the registered regions are slices of it, so
        // out-of-bounds attempts would land on observable bytes.
        let init = pattern(1024, seed);
        let mut mem = OwnedBuf::from_slice(&init);
        let all = mem.buf();
        let good = all.slice(256, 64).unwrap();
        let ro = all.slice(512, 64).unwrap();
        let k_good = c.eps[1].mr_reg(good, RW).unwrap();
        let k_ro = c.eps[1].mr_reg(ro, Access::REMOTE_READ).unwrap();
        let mut bad_key = k_good ^ 0x8000_0000_0000_0001;
        while bad_key == k_ro {
            bad_key = bad_key.wrapping_add(2);
        }
        let targets = [
            ("wrong key", RemoteBuf { addr: good.addr(), key: bad_key }, 4),
            ("past the end", RemoteBuf { addr: good.addr() + 48, key: k_good }, 4),
            ("one element past the end", RemoteBuf { addr: good.addr() + 64, key: k_good }, 1),
            ("before the start", RemoteBuf { addr: good.addr() - 8, key: k_good }, 2),
            ("no REMOTE_WRITE", RemoteBuf { addr: ro.addr(), key: k_ro }, 4),
        ];
        let dest = c.addrs[0][1];
        let mut bufs = Vec::new();
        let mut expect = Vec::new();
        let mut ctx = 0u64;
        for (what, remote, n) in targets {
            for mode in [Mode::Write, Mode::Fetch, Mode::Compare] {
                let len = 8 * n;
                let mut operand = OwnedBuf::from_slice(&pattern(len, ctx));
                let mut compare = OwnedBuf::from_slice(&init[256..256 + len]);
                let mut result = OwnedBuf::from_slice(&vec![0xCC; len]);
                let (o, cmp, res) = match mode {
                    Mode::Write => (op::SUM, UserBuf::empty(), UserBuf::empty()),
                    Mode::Fetch => (op::ATOMIC_WRITE, UserBuf::empty(), result.buf()),
                    Mode::Compare => (op::CSWAP, compare.buf(), result.buf()),
                };
                ctx += 1;
                c.eps[0].atomic(dest, dt::UINT64, o, operand.buf(), cmp, res, remote, ctx).unwrap();
                expect.push((ctx, format!("{what} {mode:?}")));
                bufs.push((operand, compare, result));
                c.step();
            }
        }
        c.run_until(1_000_000, |c| c.cqs[0].len() >= expect.len());
        c.settle(1000);
        let mut cq = c.take_cq(0);
        cq.sort_by_key(|e| e.context);
        assert_eq!(cq.len(), expect.len(), "seed {seed}: {cq:?}");
        for (e, (ctx, what)) in cq.iter().zip(&expect) {
            assert_eq!(e.context, *ctx, "seed {seed}");
            assert_eq!(e.status, Status::RemoteAccess, "seed {seed}: {what}: {e:?}");
        }
        assert!(c.cqs[1].is_empty(), "seed {seed}: target completions {:?}", c.cqs[1]);
        assert!(mem.bytes() == init.as_slice(), "seed {seed}: target memory changed");
        assert_eq!(c.eps[1].stats().access_errors, expect.len() as u64, "seed {seed}");

        // The endpoints are still fine: a valid fetch-add on the good region.
        let mut add = OwnedBuf::from_slice(&5u64.to_le_bytes());
        let mut old = OwnedBuf::zeroed(8);
        let remote = RemoteBuf { addr: good.addr(), key: k_good };
        c.eps[0].atomic(dest, dt::UINT64, op::SUM, add.buf(), UserBuf::empty(), old.buf(), remote, 999).unwrap();
        c.run_until(100_000, |c| !c.cqs[0].is_empty());
        let e = c.take_cq(0);
        assert_eq!((e[0].context, e[0].status), (999, Status::Success), "seed {seed}");
        assert_eq!(old.bytes(), &init[256..264], "seed {seed}");
        let want = u64::from_le_bytes(init[256..264].try_into().unwrap()).wrapping_add(5);
        assert_eq!(&mem.bytes()[256..264], &want.to_le_bytes(), "seed {seed}");
        assert_eq!(&mem.bytes()[264..], &init[264..], "seed {seed}");
        assert_eq!(&mem.bytes()[..256], &init[..256], "seed {seed}");
        for (i, ep) in c.eps.iter().enumerate() {
            assert_eq!(ep.pending_ops(), 0, "seed {seed}: endpoint {i}");
            let st = ep.stats();
            assert_eq!((st.malformed, st.protocol_errors, st.stale_connid), (0, 0, 0), "seed {seed}: endpoint {i}");
        }
        drop(bufs);
    }
}
