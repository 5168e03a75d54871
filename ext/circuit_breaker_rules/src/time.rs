//! Time as plain integers: [`Nanos`] and conversions from and to seconds.
//! The rules never read a clock: every entry point takes `now`, read once
//! by the caller (the clocks live in the core crate, `clock.rs`).

/// A point in time or a duration, in nanoseconds. Arithmetic on it saturates.
pub type Nanos = i64;

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: f64 = 1e9;

/// Converts seconds to [`Nanos`], rounding to the nearest nanosecond and
/// saturating at the ends of the range (about ±292 years). NaN becomes 0;
/// callers validate before they convert.
pub fn nanos_from_secs(secs: f64) -> Nanos {
    (secs * NANOS_PER_SEC).round() as Nanos
}

/// Converts seconds to [`Nanos`] when they are finite and fit (about ±292
/// years); None otherwise.
pub fn checked_nanos_from_secs(secs: f64) -> Option<Nanos> {
    let nanos = secs * NANOS_PER_SEC;
    // i64::MAX as f64 rounds up to 2^63, so `<` keeps the cast in range.
    (nanos.is_finite() && nanos.abs() < i64::MAX as f64).then(|| nanos.round() as Nanos)
}

/// Converts [`Nanos`] to seconds.
pub fn secs_from_nanos(nanos: Nanos) -> f64 {
    nanos as f64 / NANOS_PER_SEC
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_trip_to_the_nanosecond() {
        assert_eq!(nanos_from_secs(0.1) * 3, 300_000_000);
        assert_eq!(secs_from_nanos(nanos_from_secs(12.5)), 12.5);
    }

    #[test]
    fn conversions_saturate_instead_of_overflowing() {
        assert_eq!(nanos_from_secs(1e300), i64::MAX);
        assert_eq!(nanos_from_secs(-1e300), i64::MIN);
        assert_eq!(nanos_from_secs(f64::NAN), 0);
    }
}
