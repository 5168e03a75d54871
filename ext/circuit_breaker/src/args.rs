//! Converting Ruby arguments to plain values. Type checks only: ranges are
//! the core's to check (`circuit_breaker_core::config`).

use magnus::{prelude::*, Error, Integer, RArray, Ruby, TryConvert, Value};

use crate::errors::type_error;

/// A Numeric (Integer, Float, Rational) as f64. NaN and infinities pass
/// through for the core's range check to name.
pub fn float(ruby: &Ruby, name: &str, v: Value) -> Result<f64, Error> {
    if !v.is_kind_of(ruby.class_numeric()) {
        return Err(type_error(ruby, name, "a Numeric", v));
    }
    f64::try_convert(v).map_err(|_| type_error(ruby, name, "a real Numeric", v))
}

/// `nil` or a Numeric.
pub fn opt_float(ruby: &Ruby, name: &str, v: Value) -> Result<Option<f64>, Error> {
    if v.is_nil() {
        Ok(None)
    } else {
        float(ruby, name, v).map(Some)
    }
}

/// An Integer as i64; a Bignum saturates, so the core's range check still
/// names it as out of range.
pub fn integer(ruby: &Ruby, name: &str, v: Value) -> Result<i64, Error> {
    let Some(i) = Integer::from_value(v) else {
        return Err(type_error(ruby, name, "an Integer", v));
    };
    let negative = f64::try_convert(v).is_ok_and(|f| f < 0.0);
    Ok(i.to_i64().unwrap_or(if negative { i64::MIN } else { i64::MAX }))
}

/// nil, or an Integer as in [`integer`].
pub fn opt_integer(ruby: &Ruby, name: &str, v: Value) -> Result<Option<i64>, Error> {
    if v.is_nil() {
        Ok(None)
    } else {
        integer(ruby, name, v).map(Some)
    }
}

/// An Array of Numerics.
pub fn floats(ruby: &Ruby, name: &str, v: Value) -> Result<Vec<f64>, Error> {
    let Some(ary) = RArray::from_value(v) else {
        return Err(type_error(ruby, name, "an Array of Numerics", v));
    };
    ary.into_iter().map(|x| float(ruby, name, x)).collect()
}

/// A call's duration: a finite Numeric >= 0, in milliseconds.
pub fn duration_ms(ruby: &Ruby, v: Value) -> Result<f64, Error> {
    let ms = float(ruby, "duration_ms", v)?;
    if ms.is_finite() && ms >= 0.0 {
        Ok(ms)
    } else {
        Err(crate::errors::arg_error(
            ruby,
            format!("duration_ms must be a finite Numeric >= 0 (got {})", crate::errors::shown(v)),
        ))
    }
}
