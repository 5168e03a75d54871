//! Validated configuration.
//!
//! Everything a user passes is checked here, once, before any state exists:
//! the state machine then trusts its configuration and never fails. Errors
//! name the argument, the accepted range and the value received, so the
//! binding can raise them unchanged as `ArgumentError`.

pub use crate::check::ConfigError;
use crate::check::{check_f64, check_int, out_of_range};
use crate::concurrency::AdaptiveSettings;
use crate::hashing::Fnv;
use crate::time::{nanos_from_secs, Nanos};

/// Seconds as a positive, finite duration, at least one nanosecond.
pub(crate) fn check_secs(name: &'static str, range: &'static str, secs: f64) -> Result<Nanos, ConfigError> {
    let secs = check_f64(name, range, secs, 0.0, true, f64::MAX)?;
    Ok(nanos_from_secs(secs).max(1))
}

/// Shares are compared as integers in parts per billion so that decimal
/// shares such as 0.3 space admissions exactly.
pub const PPB: u64 = 1_000_000_000;

/// `probe_timeout:` as given (docs/semantics.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProbeTimeout {
    /// `nil`, the default: as long as `open_duration`.
    OpenDuration,
    /// `false`: a probe may stay unsettled forever (resilience4j).
    Never,
    /// This many seconds.
    Seconds(f64),
}

/// `max_concurrent:` as given (docs/concurrency.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MaxConcurrent {
    /// `nil`, the default: no cap.
    Unlimited,
    /// An Integer, to be checked.
    Fixed(i64),
    /// `:adaptive`: the cap follows the dependency's latency.
    Adaptive,
}

/// The concurrency cap, validated (docs/concurrency.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Concurrency {
    /// No cap: calls in flight are not counted.
    Unlimited,
    /// At most this many calls in flight (1..=[`MAX_CONCURRENT`]).
    Fixed(u32),
    /// A cap the adaptive rule sets (crate::concurrency), with its
    /// settings.
    Adaptive(AdaptiveSettings),
}

impl Concurrency {
    /// The cap a breaker starts with; None: no cap.
    pub fn initial(self) -> Option<u32> {
        match self {
            Concurrency::Unlimited => None,
            Concurrency::Fixed(n) => Some(n),
            Concurrency::Adaptive(s) => Some(s.initial),
        }
    }
}

/// The largest fixed `max_concurrent:`.
pub const MAX_CONCURRENT: i64 = 100_000;
/// The longest `max_wait:`, in seconds.
pub const MAX_WAIT_SECS: f64 = 60.0;

/// The breaker's options as plain values, before validation. Field meanings
/// and defaults are those of docs/configuration.md; see [`Config`].
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub error_rate_threshold: f64,
    pub slow_rate_threshold: f64,
    pub min_calls: i64,
    pub open_duration: f64,
    pub half_open_calls: i64,
    pub ramp: Vec<f64>,
    pub advance_rate: f64,
    /// None: the same as `advance_rate`.
    pub reopen_rate: Option<f64>,
    /// None: a half-open stage may take forever.
    pub half_open_timeout: Option<f64>,
    /// How long a probe may stay unsettled.
    pub probe_timeout: ProbeTimeout,
    /// Seconds a half-open stage lasts at least before it may advance
    /// (0: advance on probes alone).
    pub min_stage_duration: f64,
    pub backoff: f64,
    /// None: no cap.
    pub max_open_duration: Option<f64>,
    pub jitter: f64,
    /// With `fleet:`, the share of the live hosts' reported calls carried
    /// by hosts that opened on their own windows that opens the fleet.
    pub fleet_quorum: f64,
    /// Failed calls in a row that open a closed breaker whatever the
    /// window says; None: no such rule.
    pub consecutive_failures: Option<i64>,
    /// The cap on calls in flight.
    pub max_concurrent: MaxConcurrent,
    /// Seconds a call waits for a slot at the cap (0: none).
    pub max_wait: f64,
    /// The adaptive cap's settings (None: not given, the default); only
    /// with `max_concurrent: :adaptive` (crate::concurrency).
    pub adaptive_initial: Option<i64>,
    pub adaptive_min: Option<i64>,
    pub adaptive_max: Option<i64>,
    pub adaptive_smoothing: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            error_rate_threshold: 0.5,
            slow_rate_threshold: 0.8,
            min_calls: 20,
            open_duration: 30.0,
            half_open_calls: 2,
            ramp: vec![1.0],
            advance_rate: 1.0,
            reopen_rate: None,
            half_open_timeout: None,
            probe_timeout: ProbeTimeout::OpenDuration,
            min_stage_duration: 0.0,
            backoff: 1.0,
            max_open_duration: None,
            jitter: 0.0,
            fleet_quorum: 0.5,
            consecutive_failures: DEFAULT_CONSECUTIVE_FAILURES,
            max_concurrent: MaxConcurrent::Unlimited,
            max_wait: 0.0,
            adaptive_initial: None,
            adaptive_min: None,
            adaptive_max: None,
            adaptive_smoothing: None,
        }
    }
}

/// The breaker's validated configuration. Immutable once built.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Opens when the window's error rate is at least this (0 < x <= 1).
    pub error_rate_threshold: f64,
    /// Opens when the window's slow-call rate is at least this (0 < x <= 1).
    pub slow_rate_threshold: f64,
    /// No verdict while the window holds fewer calls (>= 1).
    pub min_calls: u32,
    /// How long the first opening lasts.
    pub open_duration: Nanos,
    /// Probes judged per ramp stage (>= 1).
    pub half_open_calls: u32,
    /// Admitted share per half-open stage, in parts per billion (each > 0).
    pub ramp: Vec<u64>,
    /// The ramp as given, for reporting.
    pub ramp_shares: Vec<f64>,
    /// Probe success share needed to advance a stage.
    pub advance_rate: f64,
    /// Below this probe success share the breaker reopens (<= advance_rate).
    pub reopen_rate: f64,
    /// How long a round of a half-open stage may take; None: no limit.
    pub half_open_timeout: Option<Nanos>,
    /// How long a probe may stay unsettled before it counts as failed;
    /// None: forever.
    pub probe_timeout: Option<Nanos>,
    /// How long a half-open stage lasts at least before it may advance
    /// (0: no minimum).
    pub min_stage_duration: Nanos,
    /// Multiplier of the open duration for each reopen from half-open (>= 1).
    pub backoff: f64,
    /// Cap of the backed-off open duration; None: no cap.
    pub max_open_duration: Option<Nanos>,
    /// Open durations are shortened by a random share in [0, jitter).
    pub jitter: f64,
    /// With `fleet:`, the fleet also opens when hosts that opened on their
    /// own windows carry at least this share of the live hosts' reported
    /// calls (0 < x <= 1; docs/fleet.md, "When hosts open alone").
    pub fleet_quorum: f64,
    /// Failed calls in a row that open a closed breaker (>= 1); None: no
    /// such rule (docs/semantics.md).
    pub consecutive_failures: Option<u32>,
    /// The cap on calls in flight (docs/concurrency.md).
    pub max_concurrent: Concurrency,
    /// How long a call waits for a slot at the cap (0: it is refused at
    /// once).
    pub max_wait: Nanos,
}

/// The default of `consecutive_failures` (docs/choices.md says why).
pub const DEFAULT_CONSECUTIVE_FAILURES: Option<i64> = Some(8);

impl Config {
    /// Validates `o`; the error names the first bad option. One check per
    /// option, in the order of docs/configuration.md: its length is the
    /// option list's, and split it would scatter the ranges.
    pub fn new(o: &Options) -> Result<Self, ConfigError> {
        const RATE: &str = "a Float in (0.0, 1.0]";
        let error_rate_threshold = check_f64("error_rate_threshold", RATE, o.error_rate_threshold, 0.0, true, 1.0)?;
        let slow_rate_threshold = check_f64("slow_rate_threshold", RATE, o.slow_rate_threshold, 0.0, true, 1.0)?;
        let min_calls = check_int("min_calls", "an Integer in 1..1_000_000_000", o.min_calls, 1, 1_000_000_000)?;
        let open_duration = check_secs("open_duration", "a finite number of seconds > 0", o.open_duration)?;
        let half_open_calls =
            check_int("half_open_calls", "an Integer in 1..1_000_000", o.half_open_calls, 1, 1_000_000)?;
        let ramp = check_ramp(&o.ramp)?;
        let advance_rate = check_f64("advance_rate", RATE, o.advance_rate, 0.0, true, 1.0)?;
        let reopen_rate = match o.reopen_rate {
            None => advance_rate,
            Some(r) => check_f64("reopen_rate", "a Float in 0.0..advance_rate", r, 0.0, false, advance_rate)?,
        };
        let half_open_timeout = o
            .half_open_timeout
            .map(|s| check_secs("half_open_timeout", "nil or a finite number of seconds > 0", s))
            .transpose()?;
        let probe_timeout = match o.probe_timeout {
            ProbeTimeout::OpenDuration => Some(open_duration),
            ProbeTimeout::Never => None,
            ProbeTimeout::Seconds(s) => {
                Some(check_secs("probe_timeout", "nil, false or a finite number of seconds > 0", s)?)
            }
        };
        const STAGE: &str = "a finite number of seconds >= 0, at most half_open_timeout";
        let min_stage_duration = check_f64("min_stage_duration", STAGE, o.min_stage_duration, 0.0, false, f64::MAX)?;
        if o.half_open_timeout.is_some_and(|h| min_stage_duration > h) {
            return Err(out_of_range("min_stage_duration", STAGE, min_stage_duration));
        }
        let min_stage_duration = nanos_from_secs(min_stage_duration);
        let backoff = check_f64("backoff", "a finite Float >= 1.0", o.backoff, 1.0, false, f64::MAX)?;
        let max_open_duration = match o.max_open_duration {
            None => None,
            Some(s) if s >= o.open_duration => {
                Some(check_secs("max_open_duration", "nil or a finite number of seconds >= open_duration", s)?)
            }
            Some(s) => {
                return Err(out_of_range("max_open_duration", "nil or a finite number of seconds >= open_duration", s))
            }
        };
        let jitter = if (0.0..1.0).contains(&o.jitter) {
            o.jitter
        } else {
            return Err(out_of_range("jitter", "a Float in 0.0...1.0 (1.0 excluded)", o.jitter));
        };
        let fleet_quorum = check_f64("fleet_quorum", RATE, o.fleet_quorum, 0.0, true, 1.0)?;
        let consecutive_failures = o
            .consecutive_failures
            .map(|n| check_int("consecutive_failures", "nil or an Integer in 1..1_000_000_000", n, 1, 1_000_000_000))
            .transpose()?;
        const CAP: &str = "nil, an Integer in 1..100_000 or :adaptive";
        let max_concurrent = match o.max_concurrent {
            MaxConcurrent::Unlimited => Concurrency::Unlimited,
            MaxConcurrent::Fixed(n) => Concurrency::Fixed(check_int("max_concurrent", CAP, n, 1, MAX_CONCURRENT)?),
            MaxConcurrent::Adaptive => Concurrency::Adaptive(AdaptiveSettings::check(
                o.adaptive_initial,
                o.adaptive_min,
                o.adaptive_max,
                o.adaptive_smoothing,
            )?),
        };
        if !matches!(max_concurrent, Concurrency::Adaptive(_)) {
            const ONLY: &str = "given only with max_concurrent: :adaptive";
            let given = [
                ("adaptive_initial", o.adaptive_initial.map(|v| v.to_string())),
                ("adaptive_min", o.adaptive_min.map(|v| v.to_string())),
                ("adaptive_max", o.adaptive_max.map(|v| v.to_string())),
                ("adaptive_smoothing", o.adaptive_smoothing.map(|v| v.to_string())),
            ];
            if let Some((name, Some(v))) = given.into_iter().find(|(_, v)| v.is_some()) {
                return Err(out_of_range(name, ONLY, v));
            }
        }
        let max_wait =
            check_f64("max_wait", "a finite number of seconds in 0..60", o.max_wait, 0.0, false, MAX_WAIT_SECS)?;
        let max_wait = nanos_from_secs(max_wait);
        Ok(Self {
            error_rate_threshold,
            slow_rate_threshold,
            min_calls,
            open_duration,
            half_open_calls,
            ramp_shares: o.ramp.clone(),
            ramp,
            advance_rate,
            reopen_rate,
            half_open_timeout,
            probe_timeout,
            min_stage_duration,
            backoff,
            max_open_duration,
            jitter,
            fleet_quorum,
            consecutive_failures,
            max_concurrent,
            max_wait,
        })
    }
}

impl Config {
    /// The open duration after a reopen from half-open, given the last
    /// one's backed-off length: `base × backoff`, capped by
    /// `max_open_duration` (a host's breaker and the fleet's, fleet/decide.rs).
    pub fn backed_off(&self, base: Nanos) -> Nanos {
        let grown = (base as f64 * self.backoff) as Nanos;
        self.max_open_duration.map_or(grown, |max| grown.min(max)).max(1)
    }
}

/// A `probe_ratio:` (the seeds' one-stage ramp), checked under its own name.
pub fn probe_ratio(r: f64) -> Result<f64, ConfigError> {
    check_f64("probe_ratio", "a Float in (0.0, 1.0]", r, 0.0, true, 1.0)
}

/// The articles' probe quota: `max(1, floor(half_open_window * probe_ratio))`
/// (the floor-to-zero pitfall of a small window avoided).
pub fn probe_quota(half_open_window: i64, probe_ratio: f64) -> Result<i64, ConfigError> {
    let w = check_int("half_open_window", "an Integer in 1..1_000_000_000", half_open_window, 1, 1_000_000_000)?;
    let r = self::probe_ratio(probe_ratio)?;
    Ok(((f64::from(w) * r).floor() as i64).max(1))
}

fn check_ramp(ramp: &[f64]) -> Result<Vec<u64>, ConfigError> {
    const RANGE: &str = "a non-empty, strictly ascending Array of shares in (0.0, 1.0]";
    let show = || format!("{ramp:?}");
    if ramp.is_empty() || ramp.len() > 1_000 {
        return Err(out_of_range("ramp", RANGE, show()));
    }
    let mut last = 0.0;
    ramp.iter()
        .map(|&share| {
            if !(share > last && share <= 1.0) {
                return Err(out_of_range("ramp", RANGE, show()));
            }
            last = share;
            // A tiny share still admits the first call of each stage.
            Ok(((share * PPB as f64).round() as u64).clamp(1, PPB))
        })
        .collect()
}

impl Config {
    /// A hash of every option: processes sharing a record, and hosts
    /// sharing a fleet, must agree on it.
    pub fn fingerprint(&self) -> u64 {
        // Exhaustive on purpose (no `..`): an option added to `Config` and
        // not hashed here fails to compile.
        let Config {
            error_rate_threshold,
            slow_rate_threshold,
            min_calls,
            open_duration,
            half_open_calls,
            ramp,
            ramp_shares: _, // `ramp` as floats: hashed through `ramp`
            advance_rate,
            reopen_rate,
            half_open_timeout,
            probe_timeout,
            min_stage_duration,
            backoff,
            max_open_duration,
            jitter,
            fleet_quorum,
            consecutive_failures,
            max_concurrent,
            // How long one caller waits: processes that wait differently
            // still share one cap.
            max_wait: _,
        } = self;
        let mut h = Fnv::default()
            .f64(*error_rate_threshold)
            .f64(*slow_rate_threshold)
            .i64((*min_calls).into())
            .i64(*open_duration)
            .i64((*half_open_calls).into())
            .i64(ramp.len() as i64);
        for &share in ramp {
            h = h.i64(share as i64);
        }
        h = h
            .f64(*advance_rate)
            .f64(*reopen_rate)
            .i64(half_open_timeout.unwrap_or(-1))
            .i64(probe_timeout.unwrap_or(-1))
            .i64(*min_stage_duration)
            .f64(*backoff)
            .i64(max_open_duration.unwrap_or(-1))
            .f64(*jitter)
            .f64(*fleet_quorum)
            .i64(consecutive_failures.map_or(-1, i64::from))
            .i64(match max_concurrent {
                Concurrency::Unlimited => -1,
                Concurrency::Fixed(n) => i64::from(*n),
                Concurrency::Adaptive(_) => -2,
            });
        if let Concurrency::Adaptive(s) = max_concurrent {
            h = s.fingerprint(h);
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut Options)) -> Result<Config, ConfigError> {
        let mut o = Options::default();
        f(&mut o);
        Config::new(&o)
    }

    #[test]
    fn defaults_are_valid_and_reopen_rate_follows_advance_rate() {
        let c = with(|o| o.advance_rate = 0.9).unwrap();
        assert_eq!(c.reopen_rate, 0.9);
        assert_eq!(c.open_duration, 30_000_000_000);
        assert_eq!(c.ramp, vec![PPB]);
    }

    #[test]
    fn errors_name_the_option_and_the_range() {
        let e = with(|o| o.error_rate_threshold = 0.0).unwrap_err();
        assert_eq!(e.to_string(), "error_rate_threshold must be a Float in (0.0, 1.0] (got 0)");
        assert_eq!(with(|o| o.min_calls = 0).unwrap_err().name, "min_calls");
        assert_eq!(with(|o| o.open_duration = f64::NAN).unwrap_err().name, "open_duration");
        assert_eq!(with(|o| o.open_duration = f64::INFINITY).unwrap_err().name, "open_duration");
        assert_eq!(with(|o| o.half_open_calls = 1_000_001).unwrap_err().name, "half_open_calls");
        assert_eq!(with(|o| o.reopen_rate = Some(1.1)).unwrap_err().name, "reopen_rate");
        assert_eq!(with(|o| o.backoff = 0.5).unwrap_err().name, "backoff");
        assert_eq!(with(|o| o.max_open_duration = Some(1.0)).unwrap_err().name, "max_open_duration");
        assert_eq!(with(|o| o.jitter = 1.0).unwrap_err().name, "jitter");
        assert_eq!(with(|o| o.fleet_quorum = 0.0).unwrap_err().name, "fleet_quorum");
        assert_eq!(with(|o| o.fleet_quorum = 1.5).unwrap_err().name, "fleet_quorum");
        assert_eq!(with(|o| o.half_open_timeout = Some(-1.0)).unwrap_err().name, "half_open_timeout");
        assert_eq!(with(|o| o.probe_timeout = ProbeTimeout::Seconds(0.0)).unwrap_err().name, "probe_timeout");
        assert_eq!(with(|o| o.probe_timeout = ProbeTimeout::Seconds(f64::NAN)).unwrap_err().name, "probe_timeout");
        assert_eq!(with(|o| o.min_stage_duration = -1.0).unwrap_err().name, "min_stage_duration");
        assert_eq!(with(|o| o.min_stage_duration = f64::INFINITY).unwrap_err().name, "min_stage_duration");
    }

    #[test]
    fn max_concurrent_is_nil_an_integer_in_range_or_adaptive() {
        assert_eq!(with(|_| ()).unwrap().max_concurrent, Concurrency::Unlimited);
        assert_eq!(with(|o| o.max_concurrent = MaxConcurrent::Fixed(3)).unwrap().max_concurrent, Concurrency::Fixed(3));
        let adaptive = with(|o| o.max_concurrent = MaxConcurrent::Adaptive).unwrap().max_concurrent;
        assert_eq!(adaptive, Concurrency::Adaptive(AdaptiveSettings::default()));
        assert_eq!(adaptive.initial(), Some(20));
        for bad in [0, -1, 100_001, i64::MAX] {
            let e = with(|o| o.max_concurrent = MaxConcurrent::Fixed(bad)).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("max_concurrent must be nil, an Integer in 1..100_000 or :adaptive (got {bad})")
            );
        }
        let fixed = |n| with(|o| o.max_concurrent = MaxConcurrent::Fixed(n)).unwrap().fingerprint();
        assert_ne!(fixed(3), fixed(4), "processes with other caps never share a file");
    }

    #[test]
    fn adaptive_settings_are_checked_and_only_with_adaptive() {
        let adaptive = |f: &dyn Fn(&mut Options)| {
            with(|o| {
                o.max_concurrent = MaxConcurrent::Adaptive;
                f(o)
            })
        };
        let c = adaptive(&|o| {
            o.adaptive_min = Some(2);
            o.adaptive_max = Some(40);
            o.adaptive_initial = Some(10);
            o.adaptive_smoothing = Some(0.5);
        })
        .unwrap();
        assert_eq!(
            c.max_concurrent,
            Concurrency::Adaptive(AdaptiveSettings { initial: 10, min: 2, max: 40, smoothing: 0.5 })
        );
        let e = adaptive(&|o| o.adaptive_max = Some(0)).unwrap_err();
        assert_eq!(e.to_string(), "adaptive_max must be an Integer in adaptive_min..100_000 (got 0)");
        for fixed in [MaxConcurrent::Unlimited, MaxConcurrent::Fixed(3)] {
            let e = with(|o| {
                o.max_concurrent = fixed;
                o.adaptive_smoothing = Some(0.5);
            })
            .unwrap_err();
            assert_eq!(e.to_string(), "adaptive_smoothing must be given only with max_concurrent: :adaptive (got 0.5)");
            let e = with(|o| {
                o.max_concurrent = fixed;
                o.adaptive_min = Some(2);
            })
            .unwrap_err();
            assert_eq!(e.name, "adaptive_min");
        }
        let smoothing = |x| adaptive(&|o| o.adaptive_smoothing = Some(x)).unwrap().fingerprint();
        assert_ne!(smoothing(0.2), smoothing(0.3), "processes with other settings never share a file");
    }

    #[test]
    fn max_wait_is_zero_to_sixty_seconds_and_not_hashed() {
        assert_eq!(with(|o| o.max_wait = 0.25).unwrap().max_wait, 250_000_000);
        for bad in [-0.1, 60.5, f64::NAN, f64::INFINITY] {
            assert_eq!(with(|o| o.max_wait = bad).unwrap_err().name, "max_wait", "{bad}");
        }
        let waiting = with(|o| o.max_wait = 1.0).unwrap().fingerprint();
        assert_eq!(waiting, with(|_| ()).unwrap().fingerprint());
    }

    #[test]
    fn probe_timeout_defaults_to_open_duration_and_false_means_never() {
        let c = with(|o| o.open_duration = 7.0).unwrap();
        assert_eq!(c.probe_timeout, Some(7_000_000_000));
        assert_eq!(with(|o| o.probe_timeout = ProbeTimeout::Never).unwrap().probe_timeout, None);
        assert_eq!(with(|o| o.probe_timeout = ProbeTimeout::Seconds(0.5)).unwrap().probe_timeout, Some(500_000_000));
    }

    #[test]
    fn min_stage_duration_is_at_most_half_open_timeout() {
        assert_eq!(with(|o| o.min_stage_duration = 2.0).unwrap().min_stage_duration, 2_000_000_000);
        let e = with(|o| {
            o.half_open_timeout = Some(1.0);
            o.min_stage_duration = 2.0
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "min_stage_duration must be a finite number of seconds >= 0, at most half_open_timeout (got 2)"
        );
        assert!(with(|o| {
            o.half_open_timeout = Some(2.0);
            o.min_stage_duration = 2.0
        })
        .is_ok());
    }

    #[test]
    fn reopen_rate_may_not_exceed_advance_rate() {
        assert!(with(|o| {
            o.advance_rate = 0.5;
            o.reopen_rate = Some(0.6)
        })
        .is_err());
        assert!(with(|o| o.reopen_rate = Some(0.0)).is_ok());
    }

    #[test]
    fn probe_quota_is_at_least_one() {
        assert_eq!(probe_quota(10, 0.2), Ok(2));
        assert_eq!(probe_quota(3, 0.2), Ok(1));
        assert_eq!(probe_quota(0, 0.2).unwrap_err().name, "half_open_window");
        assert_eq!(probe_quota(10, 0.0).unwrap_err().name, "probe_ratio");
    }

    #[test]
    fn ramp_must_ascend_strictly_within_zero_and_one() {
        for bad in [vec![], vec![0.0], vec![0.5, 0.5], vec![0.6, 0.3], vec![1.5], vec![f64::NAN]] {
            assert_eq!(with(|o| o.ramp = bad.clone()).unwrap_err().name, "ramp", "{bad:?}");
        }
        let c = with(|o| o.ramp = vec![0.1, 0.3, 0.6, 1.0]).unwrap();
        assert_eq!(c.ramp, vec![100_000_000, 300_000_000, 600_000_000, PPB]);
        assert_eq!(with(|o| o.ramp = vec![1e-12]).unwrap().ramp, vec![1]);
    }
}
