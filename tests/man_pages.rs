//! The man pages in `man/`: they render, they cover what they document, and
//! `scripts/install.sh` installs them.
//!
//! - Every page renders with `groff -man -Tutf8 -ww -z` (all warnings on)
//!   with exit status 0 and nothing on stderr, and `lexgrog` (man-db's
//!   parser for the whatis index) reads its NAME line.
//! - `rdm4.3` names every function of `include/rdm4.h` in its synopsis and
//!   describes each, and names every macro, struct and struct field.
//! - `rdm4.7`'s ENVIRONMENT lists exactly the variables the library reads,
//!   each with its default. The rule for "reads": a string literal
//!   `"RDM4_..."` passed as the first argument of `env::var`, `env::var_os`
//!   (std's) or `env::number`, `env::word`, `env::number_or_word` (the
//!   library's strict readers, `src/env.rs`) in a source file of the library,
//!   `src/**/*.rs` without `src/bin/`. Left out on purpose: the tools in
//!   `src/bin/` (`RDM4_PERF_SPAWNED` marks the peer process rdm4-perf
//!   starts; `man/rdm4-perf.1` documents it), `build.rs`
//!   (`RDM4_UPDATE_HEADER`, a build switch) and the tests (`RDM4_TEST_*`,
//!   `RDM4_CHILD_*`, `RDM4_VALGRIND`, ...).
//! - `rdm4-perf.1` describes every option and test the tool's source knows.
//! - `scripts/install.sh` installs every page of `man/` into
//!   `share/man/man<section>/` under `DESTDIR`, with the version filled in.
//!   It runs with stand-in libraries (`--libdir-from`), as this test needs
//!   none of the build.
//!
//! `groff` and `lexgrog` are required: without them the tests fail (CI
//! installs them in `.ci/run`: packages groff-base and man-db).

mod common_tool;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn root() -> &'static Path {
    Path::new(MANIFEST_DIR)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The pages in `man/`: files named `<name>.<section digit>`.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = fs::read_dir(root().join("man"))
        .expect("the man/ directory")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().and_then(|x| x.to_str()).is_some_and(|x| x.len() == 1 && x.as_bytes()[0].is_ascii_digit())
        })
        .collect();
    pages.sort();
    assert!(pages.len() >= 3, "man/ holds {pages:?}");
    pages
}

fn page(name: &str) -> String {
    read(&root().join("man").join(name))
}

/// Fails with a clear message when `tool` cannot be run.
fn require_tool(tool: &str, package: &str) {
    assert!(
        common_tool::installed(tool),
        "`{tool}` is not installed (or `{tool} --version` fails): tests/man_pages.rs needs it to check the \
         man pages. Install it (Debian/Ubuntu: `apt-get install {package}`; .ci/run does this on CI)."
    );
}

/// The lines of section `.SH <name>` of a page, up to the next `.SH`.
fn section<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    let heading = |l: &str| l.strip_prefix(".SH ").map(|h| h.trim().trim_matches('"').to_string());
    let lines: Vec<&str> = page.lines().collect();
    let start = lines
        .iter()
        .position(|l| heading(l).as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no .SH {name} section"));
    lines[start + 1..].iter().take_while(|l| heading(l).is_none()).copied().collect()
}

/// The head lines of the `.TP` entries of `lines` (the line after each
/// `.TP`), with `\-` read as `-`, each with the entry's text up to the next
/// `.TP`, `.SS` or `.PP`.
fn entries(lines: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i] == ".TP" && i + 1 < lines.len() {
            let head = lines[i + 1].replace("\\-", "-");
            let body: Vec<&str> = lines[i + 2..]
                .iter()
                .take_while(|l| ![".TP", ".PP"].contains(l) && !l.starts_with(".SS"))
                .copied()
                .collect();
            out.push((head, body.join("\n")));
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

/// Whether `text` holds `word` with no identifier character on either side.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    text.match_indices(word)
        .any(|(at, _)| !ident(text[..at].chars().last()) && !ident(text[at + word.len()..].chars().next()))
}

#[test]
fn every_page_renders_without_warnings_and_has_a_name_line() {
    require_tool("groff", "groff-base");
    require_tool("lexgrog", "man-db");
    for path in pages() {
        let out = Command::new("groff").args(["-man", "-Tutf8", "-ww", "-z"]).arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.is_empty(),
            "groff -man -Tutf8 -ww -z {}: {}\n{stderr}",
            path.display(),
            out.status
        );

        let out = Command::new("lexgrog").arg(&path).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let name = path.file_stem().unwrap().to_str().unwrap();
        assert!(
            out.status.success() && stdout.contains(&format!(": \"{name} - ")),
            "lexgrog {}: {}\n{stdout}{}",
            path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The functions `include/rdm4.h` declares: top-level lines (cbindgen writes
/// declarations at column 0) that are no comment, macro or typedef, the
/// identifier before their `(`.
fn header_functions(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in header.lines() {
        let skip = ["#", "/*", "//", "*", "typedef", "}", "extern"];
        if line.is_empty() || line.starts_with(char::is_whitespace) || skip.iter().any(|s| line.starts_with(s)) {
            continue;
        }
        let Some(open) = line.find('(') else { continue };
        let before = line[..open].trim_end();
        let start = before.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        names.push(before[start..].to_string());
    }
    names
}

/// The names `rdm4_...` right before a `(` in `text`.
fn declared_in(text: &str) -> Vec<String> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices("rdm4_")
        .filter(|(at, _)| !text[..*at].ends_with(ident))
        .filter_map(|(at, _)| {
            let name: String = text[at..].chars().take_while(|c| ident(*c)).collect();
            text[at + name.len()..].starts_with('(').then_some(name)
        })
        .collect()
}

#[test]
fn rdm4_3_describes_every_function_macro_and_struct_of_the_header() {
    let header = read(&root().join("include/rdm4.h"));
    let man = page("rdm4.3");
    let synopsis = section(&man, "SYNOPSIS").join("\n");

    let functions = header_functions(&header);
    assert!(functions.len() >= 30 && functions.iter().all(|f| f.starts_with("rdm4_")), "{functions:?}");
    let described = entries(&section(&man, "DESCRIPTION"));
    for f in &functions {
        assert!(declared_in(&synopsis).contains(f), "rdm4.3's SYNOPSIS has no prototype of {f}");
        assert!(
            described.iter().any(|(head, _)| *head == format!(".BR {f} ()")),
            "rdm4.3's DESCRIPTION has no `.TP` entry `.BR {f} ()` describing it"
        );
    }
    // And no function the header does not declare.
    for name in declared_in(&synopsis) {
        assert!(functions.contains(&name), "rdm4.3's SYNOPSIS declares {name}, which the header does not");
    }

    // Every macro but the include guard.
    let macros: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|m| *m != "RDM4_H")
        .collect();
    assert!(macros.contains(&"RDM4_MSG_MAX") && macros.contains(&"RDM4_CQ_SEND") && macros.contains(&"RDM4_EAGAIN"));
    let missing: Vec<&&str> = macros.iter().filter(|m| !has_word(&man, m)).collect();
    assert!(missing.is_empty(), "rdm4.3 does not name these macros of the header: {missing:?}");

    // Every struct, with a `.SS struct <name>` subsection whose `.TP`
    // entries name its fields.
    let mut structs = 0;
    let mut lines = header.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("typedef struct ").and_then(|l| l.strip_suffix(" {")) else { continue };
        structs += 1;
        let fields: Vec<String> = lines
            .by_ref()
            .take_while(|l| !l.starts_with('}'))
            .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with(['/', '*']) && l.ends_with(';'))
            .map(|l| {
                let decl = l.trim_end_matches(';');
                let decl = &decl[..decl.find('[').unwrap_or(decl.len())];
                decl.rsplit([' ', '*']).next().unwrap().to_string()
            })
            .collect();
        let sub: Vec<&str> = man
            .lines()
            .skip_while(|l| *l != format!(".SS struct {name}"))
            .skip(1)
            .take_while(|l| !l.starts_with(".SS") && !l.starts_with(".SH"))
            .collect();
        assert!(!sub.is_empty(), "rdm4.3 has no `.SS struct {name}` subsection");
        let documented: Vec<String> = entries(&sub).into_iter().map(|(head, _)| head).collect();
        for f in &fields {
            assert!(documented.contains(&format!(".I {f}")), "rdm4.3: struct {name} field {f} is not described");
        }
    }
    assert_eq!(structs, 4, "the header's structs (rdm4_msg, rdm4_ep_attr, rdm4_cqe, rdm4_ep_info)");
}

/// The `RDM4_*` variables the library reads (see the rule at the top), each
/// with the file that reads it.
fn variables_read() -> Vec<(String, PathBuf)> {
    const READERS: [&str; 6] =
        ["env::var", "env::var_os", "env::number", "env::word", "env::number_or_word", "env::bits"];
    let mut files = vec![root().join("src")];
    let mut found = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            if path != root().join("src/bin") {
                files.extend(fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            }
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let src = read(&path);
        for reader in READERS {
            for (at, _) in src.match_indices(reader) {
                let rest = &src[at + reader.len()..];
                // `env::number::<u32>(` as well as `env::number(`.
                let rest = match rest.strip_prefix("::<") {
                    Some(r) => &r[r.find('>').map_or(0, |i| i + 1)..],
                    None => rest,
                };
                let Some(args) = rest.strip_prefix('(') else { continue };
                let Some(name) = args.trim_start().strip_prefix('"').and_then(|a| a.split('"').next()) else {
                    continue;
                };
                if name.starts_with("RDM4_") {
                    found.push((name.to_string(), path.clone()));
                }
            }
        }
    }
    found.sort();
    found.dedup_by(|a, b| a.0 == b.0);
    found
}

#[test]
fn rdm4_7_lists_exactly_the_variables_the_library_reads() {
    let read_by_library = variables_read();
    let names: Vec<&str> = read_by_library.iter().map(|(n, _)| n.as_str()).collect();
    // The scan works: it finds the variables of both places that read them.
    for v in ["RDM4_DEVICE", "RDM4_SHM_PREFIX", "RDM4_SHM_PEER_CHECK_MS"] {
        assert!(names.contains(&v), "{v} not found by the scan of src/: {read_by_library:?}");
    }

    let man = page("rdm4.7");
    let env = section(&man, "ENVIRONMENT");
    let text = env.join("\n");
    assert!(
        text.contains("RDM4_EINVAL") && text.contains("standard error"),
        "rdm4.7's ENVIRONMENT says that an invalid value fails rdm4_ep_open with RDM4_EINVAL and a line on stderr"
    );
    let mut listed = Vec::new();
    for (head, body) in entries(&env) {
        let Some(name) = head.strip_prefix(".B ") else { panic!("rdm4.7 ENVIRONMENT entry {head:?} is not `.B NAME`") };
        assert!(body.contains("Default"), "rdm4.7: {name} has no default");
        listed.push(name.to_string());
    }
    for (name, file) in &read_by_library {
        assert!(listed.contains(name), "rdm4.7's ENVIRONMENT does not list {name}, which {} reads", file.display());
    }
    for name in &listed {
        assert!(names.contains(&name.as_str()), "rdm4.7's ENVIRONMENT lists {name}, which the library does not read");
    }
}

/// What the tool's source knows: every string literal of
/// `src/bin/rdm4-perf.rs` (before its unit tests) that is a whole
/// `--name`, and the names in its `TESTS` array.
fn perf_options_and_tests() -> (Vec<String>, Vec<String>) {
    let src = read(&root().join("src/bin/rdm4-perf.rs"));
    let src = &src[..src.find("#[cfg(test)]").unwrap_or(src.len())];
    let mut options: Vec<String> = src
        .match_indices("\"--")
        .filter_map(|(at, _)| {
            let rest = &src[at + 1..];
            let name = &rest[..rest.find('"')?];
            (name.len() > 2 && name[2..].bytes().all(|b| b.is_ascii_lowercase() || b == b'-')).then(|| name.to_string())
        })
        .collect();
    options.sort();
    options.dedup();
    let tests_at = src.find("const TESTS").expect("const TESTS in src/bin/rdm4-perf.rs");
    let list = &src[tests_at..];
    let list = &list[list.find('=').unwrap()..];
    let list = &list[..list.find(';').unwrap()];
    let tests: Vec<String> = list.split('"').skip(1).step_by(2).map(str::to_string).collect();
    (options, tests)
}

#[test]
fn rdm4_perf_1_describes_every_option_and_test() {
    let (options, tests) = perf_options_and_tests();
    assert!(options.len() >= 14 && options.contains(&"--oob-port".to_string()), "{options:?}");
    assert_eq!(tests.len(), 9, "{tests:?}");

    let man = page("rdm4-perf.1");
    let described = entries(&section(&man, "OPTIONS"));
    for o in &options {
        let (_, body) = described
            .iter()
            .find(|(head, _)| {
                head.split([' ', '"']).nth(1) == Some(o.as_str()) || (o == "--help" && head.contains("--help"))
            })
            .unwrap_or_else(|| panic!("rdm4-perf.1's OPTIONS does not describe {o}"));
        if o != "--help" {
            assert!(body.contains("Default"), "rdm4-perf.1: {o} has no default");
        }
    }
    let described = entries(&section(&man, "TESTS"));
    for t in &tests {
        assert!(
            described.iter().any(|(head, _)| *head == format!(".B {t}")),
            "rdm4-perf.1's TESTS does not describe {t}"
        );
    }
}

#[test]
fn install_sh_installs_every_page_under_destdir_with_the_version() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("man_pages-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    // Stand-ins for the libraries: the script copies them and reads the ELF
    // class (byte 4) of the shared one.
    let libs = dir.join("libs");
    fs::create_dir_all(&libs).unwrap();
    fs::write(libs.join("librdm4.so"), b"\x7fELF\x02\x01\x01\x00").unwrap();
    fs::write(libs.join("librdm4.a"), b"!<arch>\n").unwrap();
    let stage = dir.join("stage");

    let mut cmd = Command::new("bash");
    cmd.arg(root().join("scripts/install.sh"))
        .args(["--prefix", "/usr/local", "--no-provider", "--libdir-from"])
        .arg(&libs)
        .env("DESTDIR", &stage);
    let out = cmd.output().expect("run bash scripts/install.sh");
    assert!(
        out.status.success(),
        "scripts/install.sh: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    for path in pages() {
        let name = path.file_name().unwrap().to_str().unwrap();
        let section = path.extension().unwrap().to_str().unwrap();
        let installed = stage.join(format!("usr/local/share/man/man{section}/{name}"));
        let text = read(&installed);
        assert!(!text.contains("@VERSION@"), "{}: the version is not filled in", installed.display());
        assert!(
            text.lines().any(|l| l.starts_with(".TH ") && l.contains(&format!("\"rdm4 {VERSION}\""))),
            "{}",
            installed.display()
        );
        assert_eq!(
            text,
            read(&path).replace("@VERSION@", VERSION),
            "{} is man/{name} with the version",
            installed.display()
        );
    }
    fs::remove_dir_all(&dir).unwrap();
}
