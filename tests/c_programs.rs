//! Builds and runs the C and C++ programs in `c_tests/` against the real library.
//!
//! Every `c_tests/*.c` is one C11 program; every `c_tests/*.cpp` one C++17
//! program. Each is compiled once with `-Wall -Wextra -Werror -Iinclude` (the
//! committed header, which `tests/header.rs` keeps equal to the generated one),
//! then linked twice and run:
//!
//! - shared: `-L<lib> -lrdm4 -Wl,-rpath,<lib>` against `librdm4.so`;
//! - static: against `librdm4.a` plus the Rust standard library's native libraries.
//!
//! Each binary runs once over every device of [`DEVICES`] (shm, udp and auto on
//! loopback), with `RDM4_DEVICE` naming it: the programs are device-agnostic
//! (they use the device of the environment), and where a check belongs to one
//! device they ask which one they run on (`rdm4_ep_query`).
//!
//! A program passes when every run exits with status 0 within [`TIMEOUT`].
//! Naming conventions (see `c_tests/README.md`): `NAME.shared.c` is linked
//! only against the shared library; files starting with `_` are skipped.
//!
//! How the programs are built, and which library files they use (the fresh
//! ones in `target/<profile>/deps/`, through a private soname directory with
//! an old-style RPATH), is in `tests/common_c/mod.rs`, shared with
//! `tests/c_valgrind.rs`.
//!
//! Outputs (objects, executables, each run's stdout and stderr as
//! `<exe>.<device>.stdout` / `.stderr`) are kept in
//! `target/c_tests/<profile>/<file name>/` for inspection.

#![cfg(target_os = "linux")]

mod common_c;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common_c::{compile, env, file_name, link, programs, run_program, stem_and_links, Lang, Run};

/// How long one program may run before it is killed and counted as failed.
const TIMEOUT: Duration = Duration::from_secs(120);

/// A device every program runs over, and the environment that selects it.
struct Device {
    /// Its `RDM4_DEVICE` value; also names the run's output files.
    name: &'static str,
    /// `RDM4_DEVICE` and the device's own settings.
    env: &'static [(&'static str, &'static str)],
}

/// Every program runs over each of these, in this order (a new device is one
/// more entry).
const DEVICES: &[Device] = &[
    Device { name: "shm", env: &[("RDM4_DEVICE", "shm")] },
    Device { name: "udp", env: &[("RDM4_DEVICE", "udp"), ("RDM4_UDP_ADDR", "127.0.0.1")] },
    Device { name: "auto", env: &[("RDM4_DEVICE", "auto"), ("RDM4_UDP_ADDR", "127.0.0.1")] },
];

#[test]
fn c_programs_pass_linked_shared_and_static() {
    run_all(Lang::C);
}

#[test]
fn cxx_programs_pass_linked_shared_and_static() {
    run_all(Lang::Cxx);
}

fn run_all(lang: Lang) {
    let (programs, skipped) = programs(lang);
    for p in &skipped {
        println!("skip {} (name starts with `_`)", file_name(p));
    }
    assert!(!programs.is_empty(), "no c_tests/*.{} programs found", lang.ext());
    let mut failures = Vec::new();
    for src in &programs {
        if let Err(e) = build_and_run(lang, src) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} c_tests/*.{} programs failed:\n\n{}",
        failures.len(),
        programs.len(),
        lang.ext(),
        failures.join("\n\n")
    );
}

/// Compiles `src`, links it each way its name allows, runs each binary over
/// each device; every run is made, and all their failures are returned.
fn build_and_run(lang: Lang, src: &Path) -> Result<(), String> {
    let name = file_name(src);
    let (stem, links) = stem_and_links(lang, src);
    let dir = env().out.join(name);
    let obj = compile(lang, src, &dir)?;
    let mut failures = Vec::new();
    for &l in links {
        let exe = match link(lang, &obj, &stem, l, name) {
            Ok(exe) => exe,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        for dev in DEVICES {
            let suffix = format!("{}.", dev.name);
            let run = Run { wrapper: &[], env: dev.env, timeout: TIMEOUT, suffix: &suffix };
            let what = format!("{name} ({l:?}, {})", dev.name);
            match run_program(&exe, &what, &run) {
                Ok(ran) => println!("ok   {what} {:.1} s", ran.elapsed.as_secs_f64()),
                Err(e) => failures.push(e),
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n\n"))
    }
}

#[test]
fn harness_uses_the_libraries_of_this_build() {
    let env = env();
    assert!(env.static_lib.starts_with(&env.deps));
    let so = fs::canonicalize(env.lib.join("librdm4.so")).unwrap();
    assert_eq!(so, fs::canonicalize(env.deps.join("librdm4.so")).unwrap());
}
