# frozen_string_literal: true

class CircuitBreaker
  # The articles' two-step API, for code that cannot wrap a block
  # (docs/semantics-permits.md): `allow?` hands the caller a permit, and its
  # next `record_*` settles the caller's oldest permit. The caller is the
  # current fiber (a plain thread's root fiber), so fibers of one thread
  # under a scheduler (async, Falcon: docs/fibers.md) never settle each
  # other's permits. A `record_*` without a permit is recorded while closed
  # (or disabled) and ignored otherwise.
  #
  # Each fiber keeps its permits of a breaker in a list the native methods
  # update (`__acquire`, `__settle`: see `keep` in
  # ext/circuit_breaker/src/breaker/permits.rs): equal permits count together, and a
  # permit of a newer generation drops older ones, which could decide
  # nothing. A permit nobody settles (another fiber or thread reports, the
  # fiber or thread died) is freed by `probe_timeout`. With
  # `max_concurrent:`, each permit also holds a slot of the cap, kept in
  # the list as a `ConcurrencySlot` (native) whose collection with the
  # fiber's storage gives the slot back (docs/concurrency.md).
  #
  # The lists live in `Thread#[]`, which is fiber-local; `Fiber[]` storage
  # would not do: a fiber started inside another inherits it, and would
  # settle its parent's permits.
  module Permits
    KEY = :__circuit_breaker_permits
    private_constant :KEY

    # Takes a permission to run one call. Settle it with exactly one
    # `record_*`, also when the call raises.
    #
    # @example
    #   if breaker.allow?
    #     started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    #     ok = false
    #     begin
    #       ok = do_request
    #     ensure
    #       ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1000
    #       ok ? breaker.record_success(duration_ms: ms) : breaker.record_failure(duration_ms: ms)
    #     end
    #   end
    # @return [Boolean] false when the call is rejected (counted as a rejection)
    def allow?
      permits = (Thread.current[KEY] ||= {}.compare_by_identity)
      __acquire(permits[self] ||= [])
    end

    # Records a success (settling this fiber's oldest permit).
    # @return [nil]
    def record_success(duration_ms: 0)
      record(true, duration_ms: duration_ms)
    end

    # Records a failure (settling this fiber's oldest permit).
    # @return [nil]
    def record_failure(duration_ms: 0)
      record(false, duration_ms: duration_ms)
    end

    # Records one outcome: `success` truthy or falsy.
    # @return [nil]
    def record(success, duration_ms: 0)
      permits = Thread.current[KEY]
      queue = permits && permits[self]
      __settle(queue, success, duration_ms)
      permits.delete(self) if queue&.empty?
      nil
    end
  end
end
