//! The one table of stable status codes shared by the Rust API and the C API.
//!
//! Every public C function returns `0` (or a non-negative count) on success and
//! one of these negative codes on failure; failed operations also report one of
//! them in the `status` of their completion entry. Codes are never renumbered:
//! a new code takes the next free number.

/// Declares the status enum, its numeric codes, C constants and messages from one table.
macro_rules! status_table {
    ($( $(#[$doc:meta])* $name:ident = $code:literal, $cname:ident, $msg:literal; )*) => {
        /// A failure reported by rdm4. `code()` gives the stable negative C value.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum Status {
            $( $(#[$doc])* $name = $code, )*
        }

        impl Status {
            /// Every status, in code order (`Success` first).
            pub const ALL: &'static [Status] = &[$(Status::$name),*];

            /// The stable C value of this status.
            pub const fn code(self) -> i32 {
                self as i32
            }

            /// The status for a C value, if it is one of the table's codes.
            pub fn from_code(code: i32) -> Option<Status> {
                match code {
                    $( $code => Some(Status::$name), )*
                    _ => None,
                }
            }

            /// A short English description (what `rdm4_strerror` returns).
            pub const fn message(self) -> &'static str {
                match self {
                    $( Status::$name => $msg, )*
                }
            }

            /// The same description as a NUL-terminated C string.
            pub(crate) const fn c_message(self) -> &'static std::ffi::CStr {
                match self {
                    $( Status::$name => match std::ffi::CStr::from_bytes_with_nul(concat!($msg, "\0").as_bytes()) {
                        Ok(s) => s,
                        Err(_) => panic!("status message contains NUL"),
                    }, )*
                }
            }
        }

        /// C constants, one per status (build.rs writes them into `rdm4.h` as `#define`s).
        pub mod codes {
            $( $(#[$doc])* pub const $cname: i32 = $code; )*
        }
    };
}

include!("status_table.in");

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Status {}

/// Message for an arbitrary C value; unknown values get a fixed text.
pub fn c_message(code: i32) -> &'static std::ffi::CStr {
    match Status::from_code(code) {
        Some(s) => s.c_message(),
        None => c"unknown status code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_dense_and_round_trip() {
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(s.code(), -(i as i32));
            assert_eq!(Status::from_code(s.code()), Some(*s));
            assert_eq!(s.c_message().to_str().unwrap(), s.message());
        }
        assert_eq!(Status::from_code(1), None);
        assert_eq!(c_message(12345).to_str().unwrap(), "unknown status code");
    }
}
