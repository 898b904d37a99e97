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
//! A program passes when it exits with status 0 within [`TIMEOUT`]. Naming
//! conventions (see `c_tests/README.md`): `NAME.shared.c` is linked only
//! against the shared library; files starting with `_` are skipped.
//!
//! How the programs are built, and which library files they use (the fresh
//! ones in `target/<profile>/deps/`, through a private soname directory with
//! an old-style RPATH), is in `tests/common_c/mod.rs`, shared with
//! `tests/c_valgrind.rs`.
//!
//! Outputs (objects, executables, each run's stdout and stderr) are kept in
//! `target/c_tests/<profile>/<file name>/` for inspection.

#![cfg(target_os = "linux")]

mod common_c;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common_c::{compile, env, file_name, link, programs, run_program, stem_and_links, Lang, Run};

/// How long one program may run before it is killed and counted as failed.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Programs run a second time over the udp device (on loopback).
const OVER_UDP: &[&str] = &["interop_shm.c", "query.c", "trywait.c"];
const UDP_ENV: &[(&str, &str)] = &[("RDM4_DEVICE", "udp"), ("RDM4_UDP_ADDR", "127.0.0.1")];

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

/// Compiles `src`, links it each way its name allows, runs each binary.
fn build_and_run(lang: Lang, src: &Path) -> Result<(), String> {
    let name = file_name(src);
    let (stem, links) = stem_and_links(lang, src);
    let dir = env().out.join(name);
    let obj = compile(lang, src, &dir)?;
    for &l in links {
        let exe = link(lang, &obj, &stem, l, name)?;
        let run = Run { wrapper: &[], env: &[], timeout: TIMEOUT, suffix: "" };
        run_program(&exe, &format!("{name} ({l:?})"), &run)?;
        println!("ok   {name} ({l:?})");
        // The programs that exercise the data path run over every device.
        if OVER_UDP.contains(&name) {
            let run = Run { wrapper: &[], env: UDP_ENV, timeout: TIMEOUT, suffix: "udp." };
            run_program(&exe, &format!("{name} ({l:?}, udp)"), &run)?;
            println!("ok   {name} ({l:?}, udp)");
        }
    }
    Ok(())
}

#[test]
fn harness_uses_the_libraries_of_this_build() {
    let env = env();
    assert!(env.static_lib.starts_with(&env.deps));
    let so = fs::canonicalize(env.lib.join("librdm4.so")).unwrap();
    assert_eq!(so, fs::canonicalize(env.deps.join("librdm4.so")).unwrap());
}
