//! rdm4: the EFA RDM communication protocol v4 as a library.
//!
//! Layers, bottom up (docs/architecture.md): [`status`] and [`atomic_ops`]
//! (the status codes and the arithmetic of atomics, used by every layer);
//! [`mem`] (application memory); [`wire`] knows the bytes of every packet;
//! [`device`] moves packets and RDMA; [`engine`] runs the protocol over a
//! device; [`capi`] is the C API.

/// cbindgen:ignore
pub mod atomic_ops;
pub mod capi;
/// cbindgen:ignore
pub mod device;
/// cbindgen:ignore
pub mod engine;
mod env;
mod fxhash;
mod log;
/// cbindgen:ignore
pub mod mem;
/// cbindgen:ignore
pub mod pcap;
pub mod status;
/// cbindgen:ignore
pub mod wire;

pub use status::Status;

/// The crate version (from Cargo.toml, the single source of the version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `(major << 16) | (minor << 8) | patch`, as the C header's `RDM4_VERSION`.
pub const VERSION_NUMBER: u32 = parse_u32(env!("CARGO_PKG_VERSION_MAJOR")) << 16
    | parse_u32(env!("CARGO_PKG_VERSION_MINOR")) << 8
    | parse_u32(env!("CARGO_PKG_VERSION_PATCH"));

pub(crate) const VERSION_CSTR: &std::ffi::CStr =
    match std::ffi::CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => panic!("version contains NUL"),
    };

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}
