//! The only place where errors become Ruby exceptions: core configuration
//! errors, argument type errors, and the gem's own exception classes (declared
//! in Ruby, `lib/circuit_breaker/errors.rb`, and looked up lazily here).

use circuit_breaker_core::ConfigError;
use magnus::{prelude::*, value::Lazy, Error, ExceptionClass, RClass, Ruby, Value};

/// `CircuitBreaker::OpenError`, which `check_declared` found at load time.
pub static OPEN_ERROR: Lazy<ExceptionClass> =
    Lazy::new(|ruby| open_error_class(ruby).unwrap_or_else(|_| ruby.exception_standard_error()));

/// `CircuitBreaker::ConcurrencyLimitError`: a call refused at the cap.
pub static CONCURRENCY_LIMIT_ERROR: Lazy<ExceptionClass> =
    Lazy::new(|ruby| declared(ruby, "ConcurrencyLimitError").unwrap_or_else(|_| ruby.get_inner(&OPEN_ERROR)));

/// `CircuitBreaker::Error`, the root of the gem's errors.
pub static ERROR: Lazy<ExceptionClass> =
    Lazy::new(|ruby| declared(ruby, "Error").unwrap_or_else(|_| ruby.exception_standard_error()));

/// `CircuitBreaker::Failure`: raised inside `call`, always a failure.
pub static FAILURE: Lazy<ExceptionClass> =
    Lazy::new(|ruby| declared(ruby, "Failure").unwrap_or_else(|_| ruby.exception_standard_error()));

/// `CircuitBreaker::LockTimeoutError`: a step that cannot be skipped
/// (control, metrics) found the shared lock busy past its bound.
pub static LOCK_TIMEOUT_ERROR: Lazy<ExceptionClass> =
    Lazy::new(|ruby| declared(ruby, "LockTimeoutError").unwrap_or_else(|_| ruby.exception_standard_error()));

fn open_error_class(ruby: &Ruby) -> Result<ExceptionClass, Error> {
    declared(ruby, "OpenError")
}

fn declared(ruby: &Ruby, name: &str) -> Result<ExceptionClass, Error> {
    let breaker: RClass = ruby.class_object().const_get("CircuitBreaker")?;
    breaker.const_get(name)
}

/// Refuses to load unless lib/circuit_breaker/errors.rb declared the errors
/// first (requiring the native library alone is a mistake, said plainly).
pub fn check_declared(ruby: &Ruby) -> Result<(), Error> {
    open_error_class(ruby).and_then(|_| declared(ruby, "Failure")).map(|_| ()).map_err(|_| {
        Error::new(
            ruby.exception_load_error(),
            "load the gem with `require \"circuit_breaker\"`, not its native library alone",
        )
    })
}

/// A value outside its range: `ArgumentError` naming the argument.
pub fn config_error(ruby: &Ruby, e: ConfigError) -> Error {
    Error::new(ruby.exception_arg_error(), e.to_string())
}

/// `ArgumentError` with the given message.
pub fn arg_error(ruby: &Ruby, message: String) -> Error {
    Error::new(ruby.exception_arg_error(), message)
}

/// A value of the wrong type: `TypeError` naming the argument, the
/// accepted type and the class received.
pub fn type_error(ruby: &Ruby, name: &str, expected: &str, got: Value) -> Error {
    let got = if got.is_nil() { "nil".to_owned() } else { got.class().inspect() };
    Error::new(ruby.exception_type_error(), format!("{name} must be {expected} (got {got})"))
}

/// A system call failed: the matching `Errno::*` (a SystemCallError).
pub fn system_error(ruby: &Ruby, context: &str, source: std::io::Error) -> Error {
    let errno = source.raw_os_error().unwrap_or(0);
    let class = ruby.exception_system_call_error();
    match class.new_instance((ruby.str_new(context), errno)) {
        Ok(ex) => ex.into(),
        Err(e) => e,
    }
}

/// A method called on an object whose `initialize` never ran
/// (`allocate`, or a subclass's `initialize` that did not call `super`).
pub fn not_initialized(ruby: &Ruby, class: &str) -> Error {
    Error::new(
        ruby.exception_runtime_error(),
        format!("uninitialized {class}: its initialize did not run (a subclass's initialize must call super)"),
    )
}

/// What `inspect` shows of an object whose `initialize` never ran: a
/// string, not an error (a debugger or an error message may inspect it).
pub fn not_initialized_inspect(class: &str) -> String {
    format!("#<{class} (not initialized)>")
}

/// `initialize_copy` of the native classes: their state is not Ruby data
/// that `dup` or `clone` could copy.
pub fn refuse_copy(ruby: &Ruby, rb_self: Value, _original: Value) -> Result<(), Error> {
    Err(Error::new(ruby.exception_type_error(), format!("can't copy {}", rb_self.class().inspect())))
}

/// A value as the caller wrote it, for an error message: its `inspect`,
/// cut short (an Array shows its first elements and its length), so an
/// Integer too big for the core shows whole and a huge Array stays short.
pub fn shown(v: Value) -> String {
    const MAX: usize = 64;
    let cut = |s: String| {
        if s.chars().count() > MAX {
            format!("{}...", s.chars().take(MAX - 3).collect::<String>())
        } else {
            s
        }
    };
    if let Some(ary) = magnus::RArray::from_value(v) {
        if ary.len() > 4 {
            let head: Vec<String> =
                (0..3).filter_map(|i| ary.entry::<Value>(i).ok()).map(|x| cut(x.inspect())).collect();
            return format!("[{}, ... ({} elements)]", head.join(", "), ary.len());
        }
    }
    cut(v.inspect())
}

/// A value outside its range, shown as the caller passed it: `given`
/// looks the value up by the option's name.
pub fn config_error_given(ruby: &Ruby, mut e: ConfigError, given: impl Fn(&str) -> Option<Value>) -> Error {
    if let Some(v) = given(e.name) {
        e.got = shown(v);
    }
    config_error(ruby, e)
}
