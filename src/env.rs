//! Reading `RDM4_*` environment variables strictly: a value that is set
//! must parse and lie within its bounds, or the open that reads it fails
//! with `Status::Inval` after a line on stderr naming the variable, its
//! value and what it must be. An empty value counts as unset.

use std::ops::RangeInclusive;
use std::str::FromStr;

use crate::status::Status;

/// The value of `name`, `None` when unset or empty.
pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()).filter(|v| !v.is_empty())
}

/// Refuses `value` of `name`: logs why and returns `Status::Inval`.
pub(crate) fn reject(name: &str, value: &str, want: &str) -> Status {
    eprintln!("rdm4: {name}={value:?} is not valid: expected {want}; the endpoint is not opened (RDM4_EINVAL)");
    Status::Inval
}

/// A whole number within `range` (decimal), `None` when unset.
pub(crate) fn number<T>(name: &str, range: RangeInclusive<T>) -> Result<Option<T>, Status>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    Ok(number_or_word(name, range, &[])?.and_then(Result::ok))
}

/// One of `words` (exactly), `None` when unset; returns its index.
pub(crate) fn word(name: &str, words: &[&str]) -> Result<Option<usize>, Status> {
    let Some(v) = var(name) else { return Ok(None) };
    match words.iter().position(|w| *w == v) {
        Some(i) => Ok(Some(i)),
        None => Err(reject(name, &v, &format!("one of {}", words.join(", ")))),
    }
}

/// A comma-separated list of names from `table`, as the union of their
/// bits; `None` when unset.
pub(crate) fn bits(name: &str, table: &[(&str, u64)]) -> Result<Option<u64>, Status> {
    let Some(v) = var(name) else { return Ok(None) };
    let mut out = 0;
    for part in v.split(',') {
        match table.iter().find(|(n, _)| *n == part.trim()) {
            Some((_, b)) => out |= b,
            None => {
                let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
                return Err(reject(name, &v, &format!("a comma-separated list of {}", names.join(", "))));
            }
        }
    }
    Ok(Some(out))
}

/// A whole number within `range`, or one of `words` (as `Err(index)`);
/// `None` when unset.
pub(crate) fn number_or_word<T>(
    name: &str,
    range: RangeInclusive<T>,
    words: &[&str],
) -> Result<Option<Result<T, usize>>, Status>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let Some(v) = var(name) else { return Ok(None) };
    if let Some(i) = words.iter().position(|w| *w == v) {
        return Ok(Some(Err(i)));
    }
    match v.parse::<T>() {
        Ok(n) if range.contains(&n) => Ok(Some(Ok(n))),
        _ => {
            let mut want = format!("a whole number from {} to {}", range.start(), range.end());
            for w in words {
                want += &format!(" or {w:?}");
            }
            Err(reject(name, &v, &want))
        }
    }
}
