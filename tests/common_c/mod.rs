//! Building and running the C and C++ programs of `c_tests/` against the
//! library of this build; shared by `tests/c_programs.rs` (every program,
//! linked shared and static) and `tests/c_valgrind.rs` (the shared-linked
//! programs under valgrind).
//!
//! Every `c_tests/*.c` is one C11 program; every `c_tests/*.cpp` one C++17
//! program. Each is compiled once with `-Wall -Wextra -Werror -Iinclude` (the
//! committed header, which `tests/header.rs` keeps equal to the generated one),
//! then linked:
//!
//! - shared: `-L<lib> -lrdm4 -Wl,-rpath,<lib>` against `librdm4.so`;
//! - static: against `librdm4.a` plus [`NATIVE_STATIC_LIBS`].
//!
//! Naming conventions (see `c_tests/README.md`): `NAME.shared.c` is linked
//! only against the shared library; files starting with `_` are skipped.
//!
//! Which library files are used: the ones built for this test run. `cargo
//! test` compiles the lib once with all its crate types (rlib, cdylib,
//! staticlib), so `librdm4.so` and `librdm4.a` are rebuilt whenever the rlib
//! linked into this test is; but it leaves them in `target/<profile>/deps/`
//! and does *not* copy them up to `target/<profile>/` (only `cargo build` does
//! that, so the copies there may be stale). Checked by hand with
//! `touch src/lib.rs && cargo test --release --test c_programs`. The harness
//! therefore takes the libraries from the `deps/` directory that holds the
//! test executable and refuses them if they are older than the rlib beside
//! them. It does not run `cargo build` itself: a nested cargo would fight the
//! outer one over the same (unhashed) files whenever features or flags differ.
//!
//! The soname of `librdm4.so` is `librdm4.so.<major>` (build.rs), which cargo
//! does not create, so the harness links through a private directory
//! `target/c_tests/<profile>/lib/` holding `librdm4.so` and
//! `librdm4.so.<major>` as symlinks to the library in `deps/`. The rpath is an
//! old-style RPATH (`--disable-new-dtags`) because cargo runs tests with
//! `LD_LIBRARY_PATH` including `target/<profile>/`, where a stale copy may sit,
//! and a RUNPATH would let that win.

#![allow(dead_code)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What a program statically linked with `librdm4.a` needs besides it, from
/// `cargo rustc --lib --crate-type staticlib -- --print native-static-libs`
/// (the Rust standard library's needs; rerun it after adding a dependency
/// with native code and update this list).
pub const NATIVE_STATIC_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];

/// Warnings are errors in every program: the header must be clean.
pub const C_FLAGS: &[&str] = &["-std=c11", "-Wall", "-Wextra", "-Werror"];
pub const CXX_FLAGS: &[&str] = &["-std=c++17", "-Wall", "-Wextra", "-Werror"];

pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Lang {
    C,
    Cxx,
}

impl Lang {
    pub fn ext(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Cxx => "cpp",
        }
    }
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Lang::C => C_FLAGS,
            Lang::Cxx => CXX_FLAGS,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Link {
    Shared,
    Static,
}

/// Where this test run's build lives.
pub struct Env {
    /// `target/<profile>/deps`, holding this test and the fresh libraries.
    pub deps: PathBuf,
    /// `target/c_tests/<profile>`.
    pub out: PathBuf,
    /// `out/lib`: symlinks that make the soname resolvable.
    pub lib: PathBuf,
    pub static_lib: PathBuf,
    /// The host triple, for the `cc` crate's choice of compiler and flags.
    pub host: String,
}

pub fn env() -> &'static Env {
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
        let profile = profile_dir.file_name().unwrap().to_str().unwrap().to_string();
        let target = profile_dir.parent().unwrap();
        let out = target.join("c_tests").join(&profile);

        let shared_lib = fresh_library(&deps, "librdm4.so");
        let static_lib = fresh_library(&deps, "librdm4.a");
        let lib = out.join("lib");
        fs::create_dir_all(&lib).unwrap();
        let soname = concat!("librdm4.so.", env!("CARGO_PKG_VERSION_MAJOR"));
        for name in ["librdm4.so", soname] {
            replace_symlink(&shared_lib, &lib.join(name));
        }
        Env { deps, out, lib, static_lib, host: host_triple() }
    })
}

/// `deps/<name>`, checked to be at least as new as the rlib this test linked.
fn fresh_library(deps: &Path, name: &str) -> PathBuf {
    let path = deps.join(name);
    let mtime = |p: &Path| {
        fs::metadata(p)
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("{}: {e} (is `{name}` still among the crate types?)", p.display()))
    };
    let lib = mtime(&path);
    let rlib = mtime(&deps.join("librdm4.rlib"));
    // One rustc run writes the rlib, the cdylib and the staticlib moments apart;
    // a library older than that is left over from another build.
    if lib + Duration::from_secs(30) < rlib {
        panic!(
            "{} is older than the librdm4.rlib beside it: it was not rebuilt with the lib \
             (did a tool rebuild only the rlib?). `touch src/lib.rs` and rerun the tests.",
            path.display()
        );
    }
    path
}

/// Makes `link` point at `target`, atomically (tests may run in parallel).
fn replace_symlink(target: &Path, link: &Path) {
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    fs::rename(&tmp, link).unwrap();
}

/// The host triple from `cargo -vV` (the programs run here, so host = target).
fn host_triple() -> String {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let out = Command::new(&cargo).arg("-vV").output().expect("run `cargo -vV`");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|| panic!("no `host:` line in `{} -vV` output", Path::new(&cargo).display()))
}

/// The C or C++ compiler the `cc` crate picks (honouring `CC`, `CXX`,
/// `CFLAGS`, `CXXFLAGS`), with its default flags.
pub fn compiler(lang: Lang) -> Command {
    let env = env();
    cc::Build::new()
        .cpp(lang == Lang::Cxx)
        .target(&env.host)
        .host(&env.host)
        .opt_level(2)
        .debug(true)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler()
        .to_command()
}

/// The programs in `c_tests/` for `lang`, and the skipped files.
pub fn programs(lang: Lang) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let dir = Path::new(MANIFEST_DIR).join("c_tests");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(lang.ext()))
        .collect();
    files.sort();
    files.into_iter().partition(|p| !file_name(p).starts_with('_'))
}

pub fn file_name(p: &Path) -> &str {
    p.file_name().unwrap().to_str().expect("UTF-8 file name")
}

/// The stem of a program (`NAME` of `NAME.c` / `NAME.shared.c`) and the ways
/// its name allows it to be linked.
pub fn stem_and_links(lang: Lang, src: &Path) -> (String, &'static [Link]) {
    let name = file_name(src);
    let stem = name.strip_suffix(&format!(".{}", lang.ext())).unwrap();
    match stem.strip_suffix(".shared") {
        Some(stem) => (stem.to_string(), &[Link::Shared][..]),
        None => (stem.to_string(), &[Link::Shared, Link::Static][..]),
    }
}

/// Compiles `src` into `dir` (emptied first); returns the object file.
pub fn compile(lang: Lang, src: &Path, dir: &Path) -> Result<PathBuf, String> {
    let name = file_name(src);
    let (stem, _) = stem_and_links(lang, src);
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    let obj = dir.join(format!("{stem}.o"));
    let mut cmd = compiler(lang);
    cmd.args(lang.flags()).arg(format!("-I{MANIFEST_DIR}/include")).arg("-c").arg(src).arg("-o").arg(&obj);
    exec(&mut cmd, &format!("compile {name}"))?;
    Ok(obj)
}

/// Links `obj` into `<dir of obj>/<stem>-shared` or `-static`; returns the executable.
pub fn link(lang: Lang, obj: &Path, stem: &str, link: Link, what: &str) -> Result<PathBuf, String> {
    let env = env();
    let exe = obj.with_file_name(format!("{stem}-{}", format!("{link:?}").to_lowercase()));
    let mut cmd = compiler(lang);
    cmd.arg(obj).arg("-o").arg(&exe);
    match link {
        Link::Shared => {
            // An old-style RPATH (not RUNPATH) is searched before
            // LD_LIBRARY_PATH, so an installed librdm4 cannot stand in.
            cmd.arg(format!("-L{}", env.lib.display()))
                .arg("-lrdm4")
                .arg(format!("-Wl,-rpath,{}", env.lib.display()))
                .arg("-Wl,--disable-new-dtags");
        }
        Link::Static => {
            cmd.arg(&env.static_lib).args(NATIVE_STATIC_LIBS);
        }
    }
    exec(&mut cmd, &format!("link {what} ({link:?})"))?;
    Ok(exe)
}

/// Runs a compiler or linker; on failure returns its command line and output.
pub fn exec(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{what}: cannot run {}: {e}", command_line(cmd)))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "FAILED to {what}: {status}\ncommand: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        command_line(cmd),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        status = out.status,
    ))
}

/// `cmd` as a shell command line (without the environment, which `{:?}` would
/// print in full).
pub fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let a = a.to_string_lossy();
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_=+,./:@".contains(c)) {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How to run a built program.
pub struct Run<'a> {
    /// A command the program runs under (e.g. valgrind and its options); empty: none.
    pub wrapper: &'a [OsString],
    /// Extra environment variables.
    pub env: &'a [(&'a str, &'a str)],
    /// Killed and counted as failed after this long.
    pub timeout: Duration,
    /// Where stdout and stderr go: `<exe>.<suffix>stdout` / `<exe>.<suffix>stderr`.
    pub suffix: &'a str,
}

/// What a finished run left behind.
pub struct Ran {
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    pub elapsed: Duration,
}

impl Ran {
    /// Its stdout and stderr, for a failure message.
    pub fn output(&self) -> String {
        format!(
            "--- stdout ({}) ---\n{}\n--- stderr ({}) ---\n{}",
            self.stdout.display(),
            fs::read_to_string(&self.stdout).unwrap_or_default(),
            self.stderr.display(),
            fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }
}

/// Runs a built program in its own directory with `RDM4_SOURCE_DIR` set and
/// its output in files next to it, killing it after `run.timeout`; on
/// failure (non-zero exit, signal, timeout) returns its status and output.
pub fn run_program(exe: &Path, what: &str, run: &Run) -> Result<Ran, String> {
    let stdout_path = exe.with_extension(format!("{}stdout", run.suffix));
    let stderr_path = exe.with_extension(format!("{}stderr", run.suffix));
    let mut cmd = match run.wrapper.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.current_dir(exe.parent().unwrap())
        .env("RDM4_SOURCE_DIR", MANIFEST_DIR)
        .envs(run.env.iter().copied())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).unwrap())
        .stderr(fs::File::create(&stderr_path).unwrap());
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| format!("FAILED to start {what}: {}: {e}", command_line(&cmd)))?;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Ok(status);
        }
        if start.elapsed() > run.timeout {
            let _ = child.kill();
            let _ = child.wait();
            break Err(format!("killed after {:?}", run.timeout));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let ran = Ran { stdout: stdout_path, stderr: stderr_path, elapsed: start.elapsed() };
    match status {
        Ok(s) if s.success() => Ok(ran),
        Ok(s) => Err(format!("FAILED {what}: {s}\ncommand: {}\n{}", command_line(&cmd), ran.output())),
        Err(e) => Err(format!("FAILED {what}: {e}\ncommand: {}\n{}", command_line(&cmd), ran.output())),
    }
}
