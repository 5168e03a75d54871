# frozen_string_literal: true

module Bench
  # The bare baselines: what the same call costs with no breaker at all.
  module Bare
    # `call { 1 }` without a breaker.
    class Yield
      def run
        yield
      end
    end

    # A rejection without a breaker: a method that raises.
    class Raise
      def run
        raise StandardError, "circuit is open"
      end
    end

    # Rates kept as running counts in plain Ruby: the O(1) reader a breaker
    # could not beat.
    class Counts
      def initialize(size)
        @size = size
        @ring = Array.new(size)
        @next = 0
        @total = 0
        @failures = 0
        @slow = 0
      end

      def record(duration_ms:, success:)
        old = @ring[@next]
        if old
          @total -= 1
          @failures -= 1 unless old[0]
          @slow -= 1 if old[1] >= 800
        end
        @ring[@next] = [success, duration_ms]
        @next = (@next + 1) % @size
        @total += 1
        @failures += 1 unless success
        @slow += 1 if duration_ms >= 800
        self
      end

      def error_rate
        @total.zero? ? 0.0 : @failures.fdiv(@total)
      end

      def metrics
        {
          state: :closed, total: @total, failures: @failures, slow_calls: @slow,
          error_rate: error_rate, slow_call_rate: @total.zero? ? 0.0 : @slow.fdiv(@total),
          rejected: 0, stage: nil, admit_share: 1.0, retry_after: 0.0
        }.freeze
      end
    end
  end

  # The error the failure scenario's block raises.
  class Boom < StandardError; end
end
