# frozen_string_literal: true

require "monitor"

# The breaker of the first article (seed 000), ported to plain Ruby for
# `rake bench`: the same algorithm, in its own namespace so it can run next
# to the gem. It is deliberately NOT optimised:
#
# - the window is a ring of small Hashes (one allocated per recorded call)
#   guarded by a Monitor;
# - each rate is recomputed by scanning the ring (and copying it with
#   `first(count)`), so `error_rate` and `slow_call_rate` are O(window size);
# - `call` takes the breaker's Monitor, evaluates the transition (two scans
#   once `min_calls` calls are in the window), runs the block outside the
#   lock, times it and records the outcome under the window's Monitor;
# - trips on `>` (the article's comparison), reads `Time.now` when open, and
#   raises a fresh `OpenError` (with a backtrace) for every rejected call.
module ArticleBreaker
  # The article's CircuitOpenError (its own class, not the gem's).
  class OpenError < StandardError; end

  # Ring of the last `size` calls, each a Hash of its duration and outcome.
  class SlidingWindow
    def initialize(size: 100, slow_threshold_ms: 800)
      @size = size
      @slow_threshold_ms = slow_threshold_ms
      @ring = Array.new(size)
      @next = 0
      @filled = 0
      @monitor = Monitor.new
    end

    def record(duration_ms:, success:)
      @monitor.synchronize do
        @ring[@next] = { duration: duration_ms, success: success }
        @next = (@next + 1) % @size
        @filled += 1 if @filled < @size
      end
    end

    def total
      @filled
    end

    def error_rate
      scan[0]
    end

    def slow_call_rate
      scan[1]
    end

    private

    # Both rates from one pass over the recorded calls.
    def scan
      seen = 0
      failed = 0
      slow = 0
      @monitor.synchronize do
        @ring.first(@filled).each do |entry|
          next if entry.nil?

          seen += 1
          failed += 1 unless entry[:success]
          slow += 1 if entry[:duration] >= @slow_threshold_ms
        end
      end
      return [0.0, 0.0] if seen.zero?

      [failed.to_f / seen, slow.to_f / seen]
    end
  end

  # Closed / open / half-open, judged from the window's rates at the start
  # of every call.
  class Breaker
    def initialize(window:, error_rate_threshold: 0.5, slow_rate_threshold: 0.8, min_calls: 20, open_duration: 30)
      @window = window
      @error_rate_threshold = error_rate_threshold
      @slow_rate_threshold = slow_rate_threshold
      @min_calls = min_calls
      @open_duration = open_duration
      @state = :closed
      @opened_at = nil
      @monitor = Monitor.new
    end

    attr_reader :state

    def call
      @monitor.synchronize do
        transition
        raise OpenError if @state == :open
      end

      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      begin
        value = yield
        elapsed_ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000
        @window.record(duration_ms: elapsed_ms, success: true)
        value
      rescue => e # rubocop:disable Style/RescueStandardError -- the article's bare rescue
        elapsed_ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000
        @window.record(duration_ms: elapsed_ms, success: false)
        raise e
      end
    end

    private

    def transition
      case @state
      when :open
        @state = :half_open if Time.now - @opened_at >= @open_duration
      when :half_open
        if @window.total >= @min_calls &&
           @window.error_rate <= @error_rate_threshold &&
           @window.slow_call_rate <= @slow_rate_threshold
          @state = :closed
        end
      when :closed
        if @window.total >= @min_calls &&
           (@window.error_rate > @error_rate_threshold || @window.slow_call_rate > @slow_rate_threshold)
          @state = :open
          @opened_at = Time.now
        end
      end
    end
  end
end
