//! The README cannot rot: its C example is compiled and run against the
//! library of this build, its environment table is checked against the
//! variables the library reads, and its shape (sections, length) is kept.

#![cfg(target_os = "linux")]

mod common_c;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common_c::{compile, env, link, run_program, Lang, Link, Run, MANIFEST_DIR};

fn readme() -> String {
    fs::read_to_string(Path::new(MANIFEST_DIR).join("README.md")).expect("README.md")
}

/// The text of section `heading` (a `## ` line) up to the next `## `.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(&format!("\n## {heading}\n")).unwrap_or_else(|| panic!("README has no `## {heading}`"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

#[test]
fn the_readme_c_example_builds_and_runs() {
    let text = readme();
    let part = section(&text, "A first program");
    let code = part.split("```c\n").nth(1).and_then(|s| s.split("\n```").next()).expect("a ```c block");
    let dir = env().out.join("readme");
    fs::create_dir_all(&dir).unwrap();
    let src: PathBuf = dir.join("readme_example.c");
    fs::write(&src, code).unwrap();
    let obj = compile(Lang::C, &src, &dir.join("build")).unwrap_or_else(|e| panic!("{e}"));
    let exe = link(Lang::C, &obj, "readme_example", Link::Shared, "README example").unwrap_or_else(|e| panic!("{e}"));
    let prefix = format!("rdm4readme{}", std::process::id());
    let run = Run { wrapper: &[], env: &[("RDM4_SHM_PREFIX", &prefix)], timeout: Duration::from_secs(60), suffix: "" };
    let ran = run_program(&exe, "README example", &run).unwrap_or_else(|e| panic!("{e}"));
    let out = fs::read_to_string(&ran.stdout).unwrap();
    assert_eq!(out, "received: hello from the child\n");
    let left: Vec<_> = fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "the example left segments behind: {left:?}");
}

/// Every `"RDM4_..."` string literal in the library's sources (`src/`,
/// the benchmark tool `src/bin/` aside): the variables it reads.
fn variables_read() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "bin") {
                    walk(&p, out);
                }
                continue;
            }
            if p.extension().is_some_and(|x| x == "rs") {
                let text = fs::read_to_string(&p).unwrap();
                for piece in text.split("\"RDM4_").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    if piece[name.len()..].starts_with('"') {
                        out.insert(format!("RDM4_{name}"));
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&Path::new(MANIFEST_DIR).join("src"), &mut out);
    out
}

#[test]
fn the_readme_environment_table_lists_exactly_the_variables_the_library_reads() {
    let text = readme();
    let table: BTreeSet<String> = section(&text, "Environment")
        .lines()
        .filter_map(|l| l.strip_prefix("| `RDM4_"))
        .map(|l| format!("RDM4_{}", l.split('`').next().unwrap()))
        .collect();
    let read = variables_read();
    assert!(read.len() >= 10, "the scan found too few variables: {read:?}");
    let missing: Vec<_> = read.difference(&table).collect();
    let stale: Vec<_> = table.difference(&read).collect();
    assert!(missing.is_empty(), "read by the library but not in the README's table: {missing:?}");
    assert!(stale.is_empty(), "in the README's table but read nowhere: {stale:?}");
}

#[test]
fn the_readme_is_a_front_door_of_at_most_250_lines_in_its_order() {
    let text = readme();
    let lines = text.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines");
    let order = [
        "Install",
        "A first program",
        "Devices",
        "Environment",
        "How a message moves",
        "Performance",
        "Layout",
        "Glossary",
        "Contributing",
    ];
    let at: Vec<usize> = order.iter().map(|h| text.find(&format!("\n## {h}\n")).expect(h)).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "sections out of order: {order:?}");
    // What it is and the two commands come first.
    let first = text.find("\n## ").unwrap();
    assert!(text[..first].contains("cargo run --release --bin rdm4-perf"));
    assert!(text[..first].contains("cargo test --release"));
    // Nothing points outside the repository.
    assert!(!text.contains("../shared"), "the README points outside the repository");
}
