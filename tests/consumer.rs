//! Installs the library with `scripts/install.sh` into a private prefix and
//! builds programs against the installed copy the way users do: with
//! `pkg-config` and with CMake's `find_package(rdm4)`.
//!
//! - The prefix is `target/consumer/<profile>/prefix`, rebuilt by each run.
//! - Which libraries are installed: the ones built for this test run, from
//!   `target/<profile>/deps/` (`--libdir-from`), checked to be at least as new
//!   as the rlib beside them. `cargo test` does not copy them up to
//!   `target/<profile>/`, where `cargo build` leaves older ones (see the top
//!   of `tests/c_programs.rs`); and a nested `cargo build` would fight the
//!   outer cargo, so the script runs with `--no-build`.
//! - `c_tests/consumer/consumer.c` is built with
//!   `cc $(pkg-config --cflags --libs rdm4)` and by
//!   `c_tests/consumer/CMakeLists.txt` twice, against `rdm4::rdm4` (shared)
//!   and `rdm4::rdm4_static`; every binary is run and must report the
//!   library file it was meant to use.
//! - `c_tests/consumer/version/` checks the version rules of
//!   `rdm4ConfigVersion.cmake` with `find_package(rdm4 <request>)`, for this
//!   version and for made-up 0.x and 2.x ones.
//!
//! `cmake` and `pkg-config` are required: without them the tests fail (CI
//! installs them in `.ci/run`). Outputs are kept in `target/consumer/<profile>/`.

#![cfg(target_os = "linux")]

mod common_c;
mod common_tool;

use common_c::command_line;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");

/// How long one consumer program may run before it is killed.
const TIMEOUT: Duration = Duration::from_secs(60);

struct Env {
    /// `target/<profile>/deps`, holding this test and the fresh libraries.
    deps: PathBuf,
    /// `target/consumer/<profile>`.
    out: PathBuf,
    /// `out/prefix`, where the script installed.
    prefix: PathBuf,
}

/// Installs once per test process; every test uses the result.
fn installed() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let exe = std::env::current_exe().expect("path of the test executable");
        let deps = exe.parent().expect("test executable has a directory").to_path_buf();
        assert_eq!(
            deps.file_name().and_then(|n| n.to_str()),
            Some("deps"),
            "expected the test executable in target/<profile>/deps, it is {}",
            exe.display()
        );
        let profile_dir = deps.parent().unwrap();
        let profile = profile_dir.file_name().unwrap().to_str().unwrap();
        let out = profile_dir.parent().unwrap().join("consumer").join(profile);
        fs::create_dir_all(&out).unwrap();
        let prefix = out.join("prefix");
        if prefix.exists() {
            fs::remove_dir_all(&prefix).unwrap_or_else(|e| panic!("remove {}: {e}", prefix.display()));
        }

        check_fresh(&deps, "librdm4.so");
        check_fresh(&deps, "librdm4.a");

        let mut cmd = Command::new("bash");
        cmd.arg(Path::new(MANIFEST_DIR).join("scripts/install.sh"))
            .arg("--prefix")
            .arg(&prefix)
            .arg("--no-build")
            .arg("--libdir-from")
            .arg(&deps)
            .env_remove("DESTDIR");
        let log = run_ok(&mut cmd, "scripts/install.sh");
        print!("{log}");
        Env { deps, out, prefix }
    })
}

/// Fails unless `deps/<name>` is at least as new as the rlib this test linked
/// (as `tests/c_programs.rs` checks).
fn check_fresh(deps: &Path, name: &str) {
    let mtime = |p: &Path| {
        fs::metadata(p)
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("{}: {e} (is `{name}` still among the crate types?)", p.display()))
    };
    let lib = mtime(&deps.join(name));
    let rlib = mtime(&deps.join("librdm4.rlib"));
    assert!(
        lib + Duration::from_secs(30) >= rlib,
        "{} is older than the librdm4.rlib beside it: it was not rebuilt with the lib. \
         `touch src/lib.rs` and rerun the tests.",
        deps.join(name).display()
    );
}

/// Fails with a clear message when `tool` cannot be run.
fn require_tool(tool: &str) {
    assert!(
        common_tool::installed(tool),
        "`{tool}` is not installed (or `{tool} --version` fails): tests/consumer.rs needs cmake and \
         pkg-config to build programs against the installed library. Install them (Debian/Ubuntu: \
         `apt-get install cmake pkg-config`; .ci/run does this on CI)."
    );
}

/// Runs `cmd`; returns its stdout and stderr, or panics with both and the command line.
fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", command_line(cmd)));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "FAILED {what}: {}\ncommand: {}\n{text}", out.status, command_line(cmd));
    text
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn pkg_config(env: &Env) -> Command {
    let mut cmd = Command::new("pkg-config");
    cmd.env("PKG_CONFIG_PATH", env.prefix.join("lib/pkgconfig"));
    cmd
}

/// The C compiler the `cc` crate picks (honouring `CC` and `CFLAGS`).
fn c_compiler() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(&cargo).arg("-vV").output().expect("run `cargo -vV`");
    let host = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_string())
        .expect("a `host:` line in `cargo -vV`");
    cc::Build::new()
        .target(&host)
        .host(&host)
        .opt_level(2)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler()
        .to_command()
}

/// Compiles c_tests/consumer/consumer.c into `exe` with pkg-config's
/// `flags` (and `extra`), warnings as errors.
fn cc_consumer(exe: &Path, flags: &str, extra: Option<&str>, what: &str) {
    let mut cmd = c_compiler();
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(Path::new(MANIFEST_DIR).join("c_tests/consumer/consumer.c"))
        .arg("-o")
        .arg(exe)
        .args(flags.split_whitespace())
        .args(extra);
    run_ok(&mut cmd, what);
}

/// How a consumer program is expected to have librdm4.
enum Linked<'a> {
    /// Loaded from this file.
    Shared(&'a Path),
    Static,
}

/// Runs a consumer program with only the prefix's lib/ on LD_LIBRARY_PATH
/// (cargo's, which includes target/<profile>/, is replaced), checks it passes
/// and that it has the library the expected way.
fn run_consumer(env: &Env, exe: &Path, linked: Linked) {
    run_consumer_with(env, exe, linked, true)
}

/// [`run_consumer`]; without `ld_path`, with no LD_LIBRARY_PATH at all (the
/// program must find the library by its rpath).
fn run_consumer_with(env: &Env, exe: &Path, linked: Linked, ld_path: bool) {
    let what = exe.display().to_string();
    let stdout_path = exe.with_extension("stdout");
    let stderr_path = exe.with_extension("stderr");
    let mut cmd = Command::new(exe);
    if ld_path {
        cmd.env("LD_LIBRARY_PATH", env.prefix.join("lib"));
    } else {
        cmd.env_remove("LD_LIBRARY_PATH");
    }
    let mut child = cmd
        .current_dir(exe.parent().unwrap())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).unwrap())
        .stderr(fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = read(&stdout_path);
    let output = format!("--- stdout ---\n{stdout}--- stderr ---\n{}", read(&stderr_path));
    match status {
        Some(s) if s.success() => {}
        Some(s) => panic!("FAILED {what}: {s}\n{output}"),
        None => panic!("FAILED {what}: killed after {TIMEOUT:?}\n{output}"),
    }
    let file = stdout
        .lines()
        .find_map(|l| l.strip_prefix("librdm4: "))
        .unwrap_or_else(|| panic!("{what} printed no `librdm4:` line\n{output}"));
    match linked {
        Linked::Shared(expected) => {
            let expected = fs::canonicalize(expected).unwrap();
            assert_eq!(Path::new(file), expected, "{what} loaded the wrong librdm4\n{output}");
        }
        Linked::Static => assert_eq!(file, "static", "{what} should have librdm4 linked in\n{output}"),
    }
    println!("ok   {what}");
}

#[test]
fn install_layout() {
    let env = installed();
    let lib = env.prefix.join("lib");
    let real = format!("librdm4.so.{VERSION}");
    let soname = format!("librdm4.so.{MAJOR}");

    assert!(lib.join(&real).is_file() && !lib.join(&real).is_symlink(), "{real} is a file");
    assert_eq!(fs::read_link(lib.join(&soname)).unwrap(), Path::new(&real));
    assert_eq!(fs::read_link(lib.join("librdm4.so")).unwrap(), Path::new(&soname));
    for (installed, built) in [(real.as_str(), "librdm4.so"), ("librdm4.a", "librdm4.a")] {
        assert!(
            fs::read(lib.join(installed)).unwrap() == fs::read(env.deps.join(built)).unwrap(),
            "lib/{installed} is not a copy of {}",
            env.deps.join(built).display()
        );
    }
    assert_eq!(
        read(&env.prefix.join("include/rdm4.h")),
        read(&Path::new(MANIFEST_DIR).join("include/rdm4.h")),
        "include/rdm4.h is the committed header"
    );
    let files = [
        "lib/pkgconfig/rdm4.pc",
        "lib/pkgconfig/rdm4-static.pc",
        "lib/cmake/rdm4/rdm4Config.cmake",
        "lib/cmake/rdm4/rdm4ConfigVersion.cmake",
    ];
    for f in files {
        let text = read(&env.prefix.join(f));
        assert!(!text.contains("@VERSION@") && !text.contains("@PREFIX@"), "{f} has unfilled placeholders");
    }

    // The .pc's private libraries are tests/common_c's list (less -lc, which
    // the compiler driver adds): the two must move together.
    let pc = read(&env.prefix.join("lib/pkgconfig/rdm4.pc"));
    assert!(pc.contains(&format!("\nVersion: {VERSION}\n")), "rdm4.pc has Version: {VERSION}\n{pc}");
    let private: Vec<&str> = pc
        .lines()
        .find_map(|l| l.strip_prefix("Libs.private:"))
        .expect("rdm4.pc has Libs.private")
        .split_whitespace()
        .collect();
    let expected: Vec<&str> = common_c::NATIVE_STATIC_LIBS.iter().copied().filter(|l| *l != "-lc").collect();
    assert_eq!(private, expected, "rdm4.pc Libs.private vs NATIVE_STATIC_LIBS in tests/common_c/mod.rs");
}

#[test]
fn pkg_config_consumer_builds_and_runs() {
    require_tool("pkg-config");
    let env = installed();

    let modversion = run_ok(pkg_config(env).args(["--modversion", "rdm4"]), "pkg-config --modversion rdm4");
    assert_eq!(modversion.trim(), VERSION);
    let prefix = run_ok(pkg_config(env).args(["--variable=prefix", "rdm4"]), "pkg-config --variable=prefix");
    assert_eq!(Path::new(prefix.trim()), env.prefix, "pkg-config found another rdm4.pc");
    let flags = run_ok(pkg_config(env).args(["--cflags", "--libs", "rdm4"]), "pkg-config --cflags --libs rdm4");

    let dir = env.out.join("pkg-config");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("consumer");
    cc_consumer(&exe, &flags, None, "cc consumer.c $(pkg-config --cflags --libs rdm4)");
    let so = env.prefix.join(format!("lib/librdm4.so.{VERSION}"));
    run_consumer(env, &exe, Linked::Shared(&so));

    // The README's recipe for a prefix outside the system directories: an
    // rpath from pkg-config's libdir, and no LD_LIBRARY_PATH.
    let libdir = run_ok(pkg_config(env).args(["--variable=libdir", "rdm4"]), "pkg-config --variable=libdir rdm4");
    let exe = dir.join("consumer_rpath");
    let rpath = format!("-Wl,-rpath,{}", libdir.trim());
    cc_consumer(&exe, &flags, Some(&rpath), "cc consumer.c $(pkg-config --cflags --libs rdm4) -Wl,-rpath,<libdir>");
    run_consumer_with(env, &exe, Linked::Shared(&so), false);

    // rdm4-static.pc links the archive itself, with what it needs.
    let flags = run_ok(pkg_config(env).args(["--cflags", "--libs", "rdm4-static"]), "pkg-config rdm4-static");
    let exe = dir.join("consumer_static");
    cc_consumer(&exe, &flags, None, "cc consumer.c $(pkg-config --cflags --libs rdm4-static)");
    run_consumer_with(env, &exe, Linked::Static, false);
}

#[test]
fn cmake_consumer_builds_and_runs_shared_and_static() {
    require_tool("cmake");
    let env = installed();
    let build = env.out.join("cmake");
    let _ = fs::remove_dir_all(&build);

    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(Path::new(MANIFEST_DIR).join("c_tests/consumer"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", env.prefix.display()))
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .arg(format!("-DRDM4_FIND_VERSION={VERSION}"));
    print!("{}", run_ok(&mut configure, "cmake configure c_tests/consumer"));
    print!("{}", run_ok(Command::new("cmake").arg("--build").arg(&build), "cmake --build"));

    let cache = read(&build.join("CMakeCache.txt"));
    let rdm4_dir = cache.lines().find_map(|l| l.strip_prefix("rdm4_DIR:PATH=")).expect("rdm4_DIR in CMakeCache.txt");
    assert_eq!(Path::new(rdm4_dir), env.prefix.join("lib/cmake/rdm4"), "find_package(rdm4) found another rdm4");

    run_consumer(
        env,
        &build.join("consumer_shared"),
        Linked::Shared(&env.prefix.join(format!("lib/librdm4.so.{VERSION}"))),
    );
    run_consumer(env, &build.join("consumer_static"), Linked::Static);
}

/// Runs `c_tests/consumer/version` against `prefix` with `requests`; returns
/// (request, found) per request.
fn find_package_results(build: &Path, prefix: &Path, requests: &[&str]) -> Vec<(String, bool)> {
    let _ = fs::remove_dir_all(build);
    let mut cmd = Command::new("cmake");
    cmd.arg("-S")
        .arg(Path::new(MANIFEST_DIR).join("c_tests/consumer/version"))
        .arg("-B")
        .arg(build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg(format!("-DRDM4_REQUESTS={}", requests.join(";")));
    let log = run_ok(&mut cmd, "cmake configure c_tests/consumer/version");
    let results: Vec<(String, bool)> = log
        .lines()
        .filter_map(|l| l.strip_prefix("-- rdm4-request '"))
        .map(|l| {
            let (request, found) = l.split_once("' found=").unwrap();
            (request.to_string(), found == "1")
        })
        .collect();
    assert_eq!(results.len(), requests.len(), "one result per request\n{log}");
    results
}

/// Checks `find_package(rdm4 <request>)` against an expectation per request.
fn check_requests(build: &Path, prefix: &Path, installed: &str, cases: &[(&str, bool)]) {
    let requests: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let results = find_package_results(build, prefix, &requests);
    let wrong: Vec<String> = cases
        .iter()
        .zip(&results)
        .filter(|((_, want), (_, got))| want != got)
        .map(|((req, want), _)| format!("  find_package(rdm4 {req}) with {installed} installed: want found={want}"))
        .collect();
    assert!(wrong.is_empty(), "rdm4ConfigVersion.cmake decided wrongly:\n{}", wrong.join("\n"));
}

#[test]
fn cmake_version_rules_for_this_version() {
    require_tool("cmake");
    let env = installed();
    let v: Vec<u32> = VERSION.split('.').map(|n| n.parse().unwrap()).collect();
    let (major, minor, patch) = (v[0], v[1], v[2]);
    let series = if major == 0 { format!("0.{minor}") } else { format!("{major}") };
    let next = if major == 0 { format!("0.{}", minor + 1) } else { format!("{}", major + 1) };
    let mut cases: Vec<(String, bool)> = vec![
        ("any".into(), true),
        (VERSION.into(), true),
        (format!("exact:{VERSION}"), true),
        (format!("{major}.{minor}"), true),
        (format!("{major}.{minor}.{}", patch + 1), false),
        (next.clone(), false),
        (format!("{series}...<{next}"), true),
        (format!("{}", major + 1), false),
    ];
    if major == 0 && minor > 0 {
        cases.push((format!("0.{}", minor - 1), false));
    }
    let cases: Vec<(&str, bool)> = cases.iter().map(|(r, f)| (r.as_str(), *f)).collect();
    check_requests(&env.out.join("cmake-version"), &env.prefix, VERSION, &cases);
}

/// A prefix holding only a version file made from the template for
/// `version`, and an empty config file.
fn fake_prefix(dir: &Path, version: &str) -> PathBuf {
    let v: Vec<&str> = version.split('.').collect();
    let cmake_dir = dir.join("lib/cmake/rdm4");
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(&cmake_dir).unwrap();
    let template = read(&Path::new(MANIFEST_DIR).join("cmake/rdm4ConfigVersion.cmake.in"));
    let filled = template
        .replace("@VERSION@", version)
        .replace("@MAJOR@", v[0])
        .replace("@MINOR@", v[1])
        .replace("@SIZEOF_VOID_P@", &std::mem::size_of::<usize>().to_string());
    assert!(!filled.contains("@"), "the version template has a placeholder this test does not know");
    fs::write(cmake_dir.join("rdm4ConfigVersion.cmake"), filled).unwrap();
    fs::write(cmake_dir.join("rdm4Config.cmake"), "").unwrap();
    dir.to_path_buf()
}

#[test]
fn cmake_version_rules_for_0_x_and_later_majors() {
    require_tool("cmake");
    let env = installed();
    let zero = fake_prefix(&env.out.join("fake-0.3.1"), "0.3.1");
    #[rustfmt::skip]
    check_requests(&env.out.join("cmake-version-0.3.1"), &zero, "0.3.1", &[
        ("any", true), ("0.3", true), ("0.3.0", true), ("0.3.1", true), ("exact:0.3.1", true),
        ("exact:0.3", false), ("0.3.2", false), ("0.2", false), ("0.2.9", false), ("0.4", false),
        ("0", false), ("1", false), ("0.3...<0.4", true), ("0.3...0.3.9", true), ("0.2...<0.4", false),
        ("0.3...<1", false), ("0.3...<0.3.1", false),
    ]);
    let two = fake_prefix(&env.out.join("fake-2.3.4"), "2.3.4");
    #[rustfmt::skip]
    check_requests(&env.out.join("cmake-version-2.3.4"), &two, "2.3.4", &[
        ("any", true), ("2", true), ("2.0", true), ("2.3", true), ("2.3.4", true), ("exact:2.3.4", true),
        ("exact:2.3", false), ("2.3.5", false), ("2.4", false), ("1", false), ("1.9", false), ("3", false),
        ("0.3", false), ("2.0...<3", true), ("2.0...2.9", true), ("1.0...<3", false), ("2.0...<4", false),
        ("2.4...<3", false),
    ]);
}

/// Where libfabric's headers are installed, the prefix holds the provider
/// `lib/libfabric/librdm4-fi.so`, and libfabric loads it from there.
#[test]
fn the_installed_libfabric_provider_loads() {
    let env = installed();
    let provider = env.prefix.join("lib/libfabric/librdm4-fi.so");
    if !Path::new("/usr/include/rdma/fabric.h").exists() {
        assert!(!provider.exists(), "a provider was built without libfabric's headers");
        eprintln!("SKIPPED: libfabric's headers are not installed");
        return;
    }
    assert!(provider.exists(), "{} is not installed", provider.display());
    if !common_tool::installed("fi_info") {
        eprintln!("SKIPPED the load: fi_info is not installed");
        return;
    }
    let out =
        run_ok(Command::new("fi_info").arg("-l").env("FI_PROVIDER_PATH", provider.parent().unwrap()), "fi_info -l");
    assert!(out.contains("rdm4:"), "fi_info -l does not list rdm4 from the prefix:\n{out}");
}
