//! `RDM4_LOG=warn|info|debug`: one line to stderr per event that matters,
//! off by default.
//!
//! - warn: a peer lost (closed, dead, given up), a device that failed.
//! - info: an endpoint opened or closed, a peer added, the endpoint
//!   holding senders back at its unexpected limit.
//! - debug: every packet dropped, with its reason.
//!
//! The level is read at the first endpoint's open (`rdm4_ep_open` fails
//! with `RDM4_EINVAL` on another value). A disabled event costs one relaxed
//! load and a branch, and none sits on the path of a packet that is
//! received or sent normally.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::status::Status;

/// How much is logged: 0 nothing, then warn, info, debug.
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// Levels of [`LEVEL`].
pub(crate) const WARN: u8 = 1;
pub(crate) const INFO: u8 = 2;
pub(crate) const DEBUG: u8 = 3;

/// Reads `RDM4_LOG` (unset: off).
pub(crate) fn init() -> Result<(), Status> {
    let level = match crate::env::word("RDM4_LOG", &["off", "warn", "info", "debug"])? {
        Some(i) => i as u8,
        None => 0,
    };
    LEVEL.store(level, Ordering::Relaxed);
    Ok(())
}

/// Whether events of `level` are logged.
#[inline(always)]
pub(crate) fn enabled(level: u8) -> bool {
    LEVEL.load(Ordering::Relaxed) >= level
}

/// Writes one line: `rdm4[PID] LEVEL: message`.
#[cold]
pub(crate) fn write(level: u8, args: std::fmt::Arguments<'_>) {
    let name = match level {
        WARN => "warn",
        INFO => "info",
        _ => "debug",
    };
    // One write per line, so that lines of processes sharing the
    // terminal do not interleave.
    let line = format!("rdm4[{}] {name}: {args}\n", std::process::id());
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
}

/// Logs `format!(...)` at `level` when it is enabled.
macro_rules! log {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::write($level, format_args!($($arg)*));
        }
    };
}
pub(crate) use log;
