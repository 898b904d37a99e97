//! What the examples that call the C API share.

use rdm4::capi::*;

/// Panics with `what` when `rc` is an error status; returns `rc`.
pub fn ok(what: &str, rc: i32) -> i32 {
    assert!(rc >= 0, "{what}: {rc}");
    rc
}

/// Opens an endpoint as `rdm4-perf` does (manual progress, one thread);
/// returns it and its raw address.
pub fn open() -> (*mut rdm4_ep, [u8; 32]) {
    let mut attr = std::mem::MaybeUninit::<rdm4_ep_attr>::uninit();
    ok("attr", rdm4_ep_attr_init(attr.as_mut_ptr()));
    // SAFETY: initialised by rdm4_ep_attr_init.
    let mut attr = unsafe { attr.assume_init() };
    attr.progress = RDM4_PROGRESS_MANUAL;
    attr.threading = RDM4_THREAD_SINGLE;
    let mut ep = std::ptr::null_mut();
    ok("open", rdm4_ep_open(&attr, &mut ep));
    let mut name = [0u8; 32];
    let mut len = name.len();
    ok("getname", rdm4_ep_getname(ep, name.as_mut_ptr().cast(), &mut len));
    (ep, name)
}
