//! Whether a command-line tool a test needs is installed.

use std::process::{Command, Stdio};

/// True when `tool --version` runs and succeeds.
pub fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}
