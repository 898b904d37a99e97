//! The C API: opaque handles, status codes, no protocol logic (DESIGN §4).

use std::ffi::c_char;

use crate::status;

/// The version of the library that is loaded, as `(major << 16) | (minor << 8) | patch`.
///
/// Compare with the header's `RDM4_VERSION` to detect a program built against
/// another version. Never fails; callable from any thread at any time.
#[no_mangle]
pub extern "C" fn rdm4_version() -> u32 {
    crate::VERSION_NUMBER
}

/// The version of the loaded library as a static NUL-terminated string, e.g. "0.1.0".
///
/// The string is owned by the library and valid for the life of the process;
/// do not free it. Never fails; callable from any thread at any time.
#[no_mangle]
pub extern "C" fn rdm4_version_string() -> *const c_char {
    crate::VERSION_CSTR.as_ptr()
}

/// A static English description of a status code (`0` or any `RDM4_E*` value).
///
/// Unknown codes give "unknown status code". The string is owned by the
/// library and valid for the life of the process; do not free it. Never
/// returns NULL; callable from any thread at any time.
#[no_mangle]
pub extern "C" fn rdm4_strerror(status: i32) -> *const c_char {
    status::c_message(status).as_ptr()
}
