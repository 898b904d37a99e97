//! Runs the C and C++ programs of `c_tests/`, linked against `librdm4.so`,
//! under valgrind's memcheck: no invalid access, no use of uninitialised
//! memory, no definite leak, in the program or in any process it forks.
//!
//! The programs are built exactly as `tests/c_programs.rs` builds them (the
//! shared code is `tests/common_c/mod.rs`), into
//! `target/c_tests/<profile>/valgrind/<file name>/`, where each run's stdout
//! and stderr (valgrind's report) are kept.
//!
//! Valgrind options: `--error-exitcode=99 --leak-check=full
//! --errors-for-leak-kinds=definite`: only definite leaks count as errors;
//! the Rust standard library and the library's process-wide registry keep
//! allocations that show as "still reachable" or "possibly lost" at exit,
//! which are not bugs. Forked children are traced too (valgrind follows
//! fork; `--trace-children=yes` would also follow exec). A forked child's
//! errors do not reach the parent's exit status, so besides the exit status
//! the harness reads every `ERROR SUMMARY` line valgrind printed (one per
//! process) and fails on any non-zero count.
//!
//! Without `valgrind` on the PATH the tests print a note and pass
//! (`.ci/run` installs it). Set `RDM4_VALGRIND=0` to skip them anyway.
//! Programs get `RDM4_TEST_TIMEOUT_S` so that their own alarms allow for
//! valgrind's slowdown.

#![cfg(target_os = "linux")]

mod common_c;

use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common_c::{compile, compiler, env, file_name, link, programs, run_program, stem_and_links, Lang, Link, Run};

/// How long one program may run under valgrind.
const TIMEOUT: Duration = Duration::from_secs(110);
/// The programs' own time limit (their alarm), in seconds.
const PROGRAM_TIMEOUT_S: &str = "100";
/// Valgrind's exit status when it found errors.
const VALGRIND_ERROR_EXIT: i32 = 99;

fn valgrind() -> Option<String> {
    if std::env::var("RDM4_VALGRIND").as_deref() == Ok("0") {
        println!("note: RDM4_VALGRIND=0: valgrind tests skipped");
        return None;
    }
    match Command::new("valgrind").arg("--version").output() {
        Ok(out) if out.status.success() => Some(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        _ => {
            println!("note: valgrind is not installed: valgrind tests skipped (.ci/run installs it)");
            None
        }
    }
}

fn valgrind_args() -> Vec<OsString> {
    [
        "valgrind",
        "--tool=memcheck",
        &format!("--error-exitcode={VALGRIND_ERROR_EXIT}"),
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
        "--trace-children=yes",
        "--child-silent-after-fork=no",
        "--num-callers=40",
    ]
    .iter()
    .map(OsString::from)
    .collect()
}

/// The error counts of every `==pid== ERROR SUMMARY: N errors ...` line.
fn error_summaries(stderr: &str) -> Vec<(String, u64)> {
    stderr
        .lines()
        .filter_map(|l| {
            let (pid, rest) = l.split_once("ERROR SUMMARY: ")?;
            let n = rest.split_whitespace().next()?.parse().ok()?;
            Some((pid.trim().to_string(), n))
        })
        .collect()
}

/// Builds `src` linked shared and runs it under valgrind.
fn check_program(lang: Lang, src: &Path) -> Result<Duration, String> {
    let name = file_name(src);
    let (stem, links) = stem_and_links(lang, src);
    assert!(links.contains(&Link::Shared));
    let dir = env().out.join("valgrind").join(name);
    let obj = compile(lang, src, &dir)?;
    let exe = link(lang, &obj, &stem, Link::Shared, name)?;
    let wrapper = valgrind_args();
    let run =
        Run { wrapper: &wrapper, env: &[("RDM4_TEST_TIMEOUT_S", PROGRAM_TIMEOUT_S)], timeout: TIMEOUT, suffix: "" };
    let what = format!("{name} (shared) under valgrind");
    let result = run_program(&exe, &what, &run);
    let stderr = fs::read_to_string(exe.with_extension("stderr")).unwrap_or_default();
    let summaries = error_summaries(&stderr);
    let with_errors: Vec<_> = summaries.iter().filter(|(_, n)| *n > 0).collect();
    match result {
        Err(e) => {
            let cause = if e.contains(&format!("exit status: {VALGRIND_ERROR_EXIT}")) || !with_errors.is_empty() {
                "valgrind found errors"
            } else {
                "the program itself failed (valgrind found no errors; does it pass outside valgrind?)"
            };
            Err(format!("{cause}: {e}"))
        }
        Ok(ran) => {
            if summaries.is_empty() {
                return Err(format!("{what}: no valgrind ERROR SUMMARY in its stderr\n{}", ran.output()));
            }
            if !with_errors.is_empty() {
                return Err(format!(
                    "{what}: valgrind found errors in a forked process ({with_errors:?})\n{}",
                    ran.output()
                ));
            }
            Ok(ran.elapsed)
        }
    }
}

fn run_all(lang: Lang) {
    let Some(version) = valgrind() else { return };
    let (programs, skipped) = programs(lang);
    for p in &skipped {
        println!("skip {} (name starts with `_`)", file_name(p));
    }
    println!("{version}");
    let start = Instant::now();
    let mut failures = Vec::new();
    for src in &programs {
        match check_program(lang, src) {
            Ok(t) => println!("ok   {} (shared) under valgrind, {:.1} s", file_name(src), t.as_secs_f64()),
            Err(e) => failures.push(e),
        }
    }
    println!("{} programs in {:.1} s", programs.len(), start.elapsed().as_secs_f64());
    assert!(
        failures.is_empty(),
        "{} of {} c_tests/*.{} programs failed under valgrind:\n\n{}",
        failures.len(),
        programs.len(),
        lang.ext(),
        failures.join("\n\n")
    );
}

#[test]
fn c_programs_are_clean_under_valgrind() {
    run_all(Lang::C);
}

#[test]
fn cxx_programs_are_clean_under_valgrind() {
    run_all(Lang::Cxx);
}

/// The options catch what they must: a definite leak and an invalid read,
/// in the process and in a forked child, and accept a still-reachable block.
#[test]
fn valgrind_options_catch_leaks_and_invalid_accesses() {
    if valgrind().is_none() {
        return;
    }
    let dir = env().out.join("valgrind").join("_self_test");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("clean", "static void *keep; int main(void) { keep = malloc(10); return 0; }", true),
        ("leak", "int main(void) { void *p = malloc(10); p = 0; return p != 0; }", false),
        (
            "invalid_read",
            "int main(void) { volatile char *p = malloc(4); char c = p[4]; free((void *)p); return c == 7; }",
            false,
        ),
        (
            "child_leak",
            "int main(void) { pid_t pid = fork(); if (pid == 0) { void *p = malloc(10); p = 0; return p != 0; } \
             int st; waitpid(pid, &st, 0); return 0; }",
            false,
        ),
    ];
    for (name, body, clean) in cases {
        let src = dir.join(format!("{name}.c"));
        fs::write(
            &src,
            format!(
                "#define _POSIX_C_SOURCE 200809L\n#include <stdlib.h>\n#include <sys/types.h>\n\
                 #include <sys/wait.h>\n#include <unistd.h>\n{body}\n"
            ),
        )
        .unwrap();
        let exe = dir.join(name);
        let status = compiler(Lang::C).args(["-O0", "-o"]).arg(&exe).arg(&src).status().expect("run the C compiler");
        assert!(status.success(), "compile {}", src.display());
        let wrapper = valgrind_args();
        let run = Run { wrapper: &wrapper, env: &[], timeout: Duration::from_secs(60), suffix: "" };
        let result = run_program(&exe, name, &run);
        let stderr = fs::read_to_string(exe.with_extension("stderr")).unwrap_or_default();
        let errors: u64 = error_summaries(&stderr).iter().map(|(_, n)| n).sum();
        let caught = result.is_err() || errors > 0;
        assert_eq!(
            !caught,
            clean,
            "{name}: expected {} (exit: {:?}, error summaries: {:?})\n{stderr}",
            if clean { "no valgrind error" } else { "a valgrind error" },
            result.as_ref().err(),
            error_summaries(&stderr)
        );
    }
}
