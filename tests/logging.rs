//! `RDM4_LOG`: off by default, one whole line per event at the chosen
//! level, an invalid value refused at open (issue 30). Runs `rdm4-perf`,
//! whose two processes each log to the shared stderr.

use std::process::Command;

/// Runs a short rdm4-perf ping-pong with `RDM4_LOG` set to `level` (or
/// unset); returns (exit status success, stderr).
fn run(level: Option<&str>) -> (bool, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rdm4-perf"));
    c.args(["--test", "tag_lat", "--sizes", "8", "--iters", "200", "--settle-ms", "0", "--no-pin"]);
    c.env_remove("RDM4_LOG");
    c.env("RDM4_SHM_PREFIX", format!("rdm4log{}", std::process::id()));
    if let Some(l) = level {
        c.env("RDM4_LOG", l);
    }
    let out = c.output().expect("rdm4-perf runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn log_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("rdm4[")).collect()
}

#[test]
fn nothing_is_logged_by_default_or_when_off() {
    for level in [None, Some("off"), Some("")] {
        let (ok, err) = run(level);
        assert!(ok, "{level:?}: {err}");
        assert!(log_lines(&err).is_empty(), "{level:?} logged: {err}");
    }
}

#[test]
fn info_logs_each_endpoint_and_peer_in_whole_lines() {
    let (ok, err) = run(Some("info"));
    assert!(ok, "{err}");
    let lines = log_lines(&err);
    // Two processes on the default device (auto): each opens, adds the
    // other, closes.
    for (what, n) in [("info: endpoint opened on auto", 2), ("info: peer added", 2), ("info: endpoint closed", 2)] {
        let got = lines.iter().filter(|l| l.contains(what)).count();
        assert_eq!(got, n, "{what}: {lines:#?}");
    }
    // Whole lines: every one starts with the prefix and names its process.
    for l in &lines {
        assert!(l.starts_with("rdm4[") && l.matches("rdm4[").count() == 1, "a broken line: {l:?}");
    }
    // warn shows none of these.
    let (ok, err) = run(Some("warn"));
    assert!(ok && !err.contains("info:"), "{err}");
}

#[test]
fn an_invalid_level_refuses_the_open_and_names_the_variable() {
    let (ok, err) = run(Some("loud"));
    assert!(!ok);
    assert!(err.contains("RDM4_LOG") && err.contains("off, warn, info, debug"), "{err}");
}
