# frozen_string_literal: true

class CircuitBreaker
  # A count-based window: the last `size` recorded calls (docs/configuration.md).
  class SlidingWindow
    # @param size [Integer] calls kept, 1..1_000_000
    # @param slow_threshold_ms [Numeric, ActiveSupport::Duration] a call is
    #   slow from this duration on, in milliseconds or a Duration (> 0)
    # @example
    #   CircuitBreaker::SlidingWindow.new(size: 50, slow_threshold_ms: 500)
    def initialize(size: 100, slow_threshold_ms: 800)
      __setup(size, Durations.millis(slow_threshold_ms)) # native: converts; the core checks the ranges
    end
  end

  # A time-based window: the calls of the last `seconds`, in `buckets` that
  # expire whole (docs/configuration.md).
  class TimeWindow
    # @param seconds [Numeric, ActiveSupport::Duration] span of the window (> 0)
    # @param buckets [Integer] 1..3600
    # @param slow_threshold_ms [Numeric, ActiveSupport::Duration] a call is
    #   slow from this duration on, in milliseconds or a Duration (> 0)
    # @param clock [ManualClock, nil] nil: its breaker's clock, else the monotonic clock
    # @example
    #   CircuitBreaker::TimeWindow.new(seconds: 60, buckets: 12)
    def initialize(seconds: 10, buckets: 10, slow_threshold_ms: 800, clock: nil)
      __setup(Durations.seconds(seconds), buckets, Durations.millis(slow_threshold_ms), clock)
    end
  end
end
