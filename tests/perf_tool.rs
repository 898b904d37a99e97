//! rdm4-perf: every test mode on every device that exists, with tiny sizes
//! and iteration counts, and the JSON contract `shared/bench/peers.py` reads.

use std::process::Command;

const TESTS: [&str; 9] =
    ["tag_lat", "msg_lat", "tag_bw", "msg_rate", "put_lat", "put_bw", "get_lat", "get_bw", "atomic_lat"];

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let at = line.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 3;
    line[at..].split([',', '}']).next().unwrap().trim_matches('"')
}

/// Segment prefix of one test (tests run in parallel: each has its own).
fn prefix(test: &str) -> String {
    format!("rdm4perf{}{test}", std::process::id())
}

fn run(test: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdm4-perf"));
    cmd.args(args).env("RDM4_SHM_PREFIX", prefix(test));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn every_test_mode_on_shm_prints_the_json_contract() {
    // Both RMA paths, the locked endpoints of `--thread-safe` with the
    // streams' sends injected (`--inject`), and memory from rdm4_mr_alloc
    // (`--alloc`: the tool verifies the data and atomic totals itself), on
    // its own and with the calls done in the call (`--now`).
    let modes = [
        ("1", false, None),
        ("0", false, None),
        ("1", true, None),
        ("1", false, Some("--alloc")),
        ("1", false, Some("--now")),
    ];
    for (cma, locked, mode) in modes {
        let mut args = vec![
            "--device",
            "shm",
            "--sizes",
            "8,5000",
            "--iters",
            "20",
            "--warmup",
            "2",
            "--window",
            "4",
            "--json",
            "--no-pin",
            "--settle-ms",
            "0",
        ];
        if locked {
            args.extend(["--thread-safe", "--inject"]);
        }
        match mode {
            Some("--now") => args.extend(["--alloc", "--now"]),
            Some(a) => args.push(a),
            None => {}
        }
        let out = run("json", &args, &[("RDM4_SHM_CMA", cma)]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "cma={cma}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = stdout.lines().collect();
        // Every test at every size (atomics at 8 bytes only).
        assert_eq!(lines.len(), 8 * 2 + 1, "{stdout}");
        for t in TESTS {
            assert!(lines.iter().any(|l| field(l, "test") == t), "missing {t}");
        }
        for l in &lines {
            assert!(l.starts_with('{') && l.ends_with('}'), "{l}");
            assert_eq!(field(l, "device"), "shm");
            let size: usize = field(l, "size").parse().unwrap();
            assert!(size == 8 || size == 5000);
            for k in ["lat_us_median", "lat_us_avg", "bw_mbps", "msg_rate"] {
                let v: f64 = field(l, k).parse().unwrap_or_else(|_| panic!("{k} not a number in {l}"));
                assert!(v >= 0.0 && v.is_finite(), "{k} in {l}");
            }
            let t = field(l, "test");
            let lat: f64 = field(l, "lat_us_median").parse().unwrap();
            let bw: f64 = field(l, "bw_mbps").parse().unwrap();
            if t.ends_with("_lat") {
                assert!(lat > 0.0, "{l}");
            } else {
                // Bandwidth and rate count the same completed operations.
                let rate: f64 = field(l, "msg_rate").parse().unwrap();
                assert!(rate > 0.0, "{l}");
                let want = size as f64 * rate / 1e6;
                assert!((bw - want).abs() <= 0.01 + want * 0.01, "bw {bw} vs size x rate {want}: {l}");
            }
        }
    }
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{}-", prefix("json"))))
        .collect();
    assert!(left.is_empty(), "segments left behind");
}

#[test]
fn the_default_run_settles_before_the_first_test_and_prints_a_table() {
    let t = std::time::Instant::now();
    let out = run(
        "table",
        &["--sizes", "8,64", "--iters", "10", "--warmup", "1", "--test", "tag_lat,tag_bw", "--no-pin"],
        &[],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("test") && s.contains("lat med") && s.contains("tag_bw"), "{s}");
    // Both processes polled for the default half second first.
    assert!(t.elapsed() >= std::time::Duration::from_millis(500), "{:?}", t.elapsed());
}

#[test]
fn bad_arguments_get_usage_and_a_non_zero_exit() {
    for args in [
        &["--test", "nope"][..],
        &["--sizes", "x"],
        &["--bogus"],
        &["--window", "0"],
        &["--device", "ib"],
        &["--settle-ms", "-1"],
    ] {
        let out = run("usage", args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage"), "{args:?}");
    }
}

#[test]
fn a_library_failure_is_reported_with_strerror() {
    let out = run("badenv", &["--sizes", "8", "--iters", "2", "--test", "tag_lat"], &[("RDM4_SHM_SLOTS", "3")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid argument"), "{err}");
    // Reported once, by the process the user started: the endpoint opens
    // before a peer process is spawned, so no second copy interleaves.
    assert_eq!(err.matches("rdm4_ep_open failed").count(), 1, "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "nothing printed before the failure");
}

/// The options the parser accepts, taken from its source: every string
/// literal of `src/bin/rdm4-perf.rs` that is a whole `--name` (the option
/// table, `--help`, the arguments it passes to the peer it starts, option
/// names in its messages). So any `--name` the source knows must be in the
/// help, however the parser comes to accept it. The unit tests at the end
/// (`#[cfg(test)]`) are left out: they pass made-up options on purpose.
fn options_in_source() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/rdm4-perf.rs");
    let src = std::fs::read_to_string(path).unwrap();
    let src = &src[..src.find("#[cfg(test)]").unwrap_or(src.len())];
    let mut names: Vec<String> = src
        .match_indices("\"--")
        .filter_map(|(at, _)| {
            let rest = &src[at + 1..];
            let name = &rest[..rest.find('"')?];
            let word = name[2..].bytes().all(|b| b.is_ascii_lowercase() || b == b'-');
            (name.len() > 2 && word).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn help_lists_every_option_the_parser_accepts_with_its_default() {
    let options = options_in_source();
    // The scan itself works: it finds the options of the table and --help.
    for o in ["--device", "--oob-port", "--settle-ms", "--inject", "--help"] {
        assert!(options.iter().any(|n| n == o), "{o} not found in the source: {options:?}");
    }
    for flag in ["--help", "-h"] {
        let out = run("help", &[flag], &[]);
        assert!(out.status.success(), "{flag}: {}", out.status);
        assert!(out.stderr.is_empty(), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.starts_with("usage: rdm4-perf"), "{help}");
        for o in &options {
            // The line of the options list that describes it starts with its name.
            let line = help
                .lines()
                .skip_while(|l| *l != "options:")
                .take_while(|l| !l.is_empty())
                .map(str::trim_start)
                .find(|l| {
                    l.split([' ', ',']).next() == Some(o.as_str()) || (o == "--help" && l.starts_with("-h, --help"))
                })
                .unwrap_or_else(|| panic!("{flag}: no line for {o}\n{help}"));
            if o != "--help" {
                assert!(line.contains("(default: "), "{flag}: {o} without its default: {line}");
            }
        }
        for t in TESTS {
            assert!(help.contains(t), "{flag}: test {t} missing\n{help}");
        }
    }
}
