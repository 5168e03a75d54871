//! Range checks, and the error that names the argument, its accepted range
//! and the value received. At the bottom of the crate: the clock, the
//! configuration and the windows all check what users pass with them.

/// A value outside its accepted range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{name} must be {range} (got {got})")]
pub struct ConfigError {
    /// The argument, spelled as the Ruby keyword.
    pub name: &'static str,
    /// The accepted range, in words.
    pub range: &'static str,
    /// The value received, printed.
    pub got: String,
}

/// The error for `got`, outside `range`.
pub fn out_of_range(name: &'static str, range: &'static str, got: impl ToString) -> ConfigError {
    ConfigError { name, range, got: got.to_string() }
}

/// Checks `lo < x <= hi` (`lo_open`) or `lo <= x <= hi`, rejecting NaN.
pub fn check_f64(
    name: &'static str,
    range: &'static str,
    x: f64,
    lo: f64,
    lo_open: bool,
    hi: f64,
) -> Result<f64, ConfigError> {
    let above = if lo_open { x > lo } else { x >= lo };
    if above && x <= hi {
        Ok(x)
    } else {
        Err(out_of_range(name, range, x))
    }
}

/// Checks `lo <= x <= hi`, as a u32.
pub fn check_int(name: &'static str, range: &'static str, x: i64, lo: i64, hi: i64) -> Result<u32, ConfigError> {
    if (lo..=hi).contains(&x) {
        u32::try_from(x).map_err(|_| out_of_range(name, range, x))
    } else {
        Err(out_of_range(name, range, x))
    }
}
