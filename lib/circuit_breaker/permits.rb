# frozen_string_literal: true

class CircuitBreaker
  # The articles' two-step API, for code that cannot wrap a block: `allow?`
  # hands the calling thread a permit, and its next `record_*` settles the
  # thread's oldest permit. A `record_*` without a permit is recorded while
  # closed (or disabled) and ignored otherwise.
  module Permits
    KEY = :__circuit_breaker_permits
    private_constant :KEY

    # Takes a permission to run one call.
    #
    # @example
    #   if breaker.allow?
    #     ok = do_request
    #     ok ? breaker.record_success(duration_ms: 12) : breaker.record_failure(duration_ms: 12)
    #   end
    # @return [Boolean] false when the call is rejected (counted as a rejection)
    def allow?
      permit = __acquire
      return false unless permit

      permits = Thread.current.thread_variable_get(KEY) ||
                Thread.current.thread_variable_set(KEY, {}.compare_by_identity)
      (permits[self] ||= []) << permit
      true
    end

    # Records a success (settling this thread's oldest permit).
    # @return [nil]
    def record_success(duration_ms: 0)
      record(true, duration_ms: duration_ms)
    end

    # Records a failure (settling this thread's oldest permit).
    # @return [nil]
    def record_failure(duration_ms: 0)
      record(false, duration_ms: duration_ms)
    end

    # Records one outcome: `success` truthy or falsy.
    # @return [nil]
    def record(success, duration_ms: 0)
      permits = Thread.current.thread_variable_get(KEY)
      queue = permits && permits[self]
      permit = queue&.first
      __settle(permit, success, duration_ms)
      # Only a settled permit is used up: a bad duration_ms raises above and
      # leaves it in place.
      if queue
        queue.shift
        permits.delete(self) if queue.empty?
      end
      nil
    end
  end
end
