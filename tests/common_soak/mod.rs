//! Reading rdm4-soak's report: its lines are `key=value` words.

/// The value of `key` in a report line; panics when it has none.
pub fn field(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
        .parse()
        .unwrap()
}
