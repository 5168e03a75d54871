# frozen_string_literal: true

# Documentation of the methods the Rust extension defines
# (ext/circuit_breaker/src/), written where rdoc and ri look: rdoc reads
# `##` comments with a `:method:` directive as methods of the enclosing
# class. Nothing requires this file; loading it would define nothing.
# spec/circuit_breaker/native_spec.rb checks that every native method
# has its entry here. The behaviour is described in docs/semantics.md, the
# options in docs/configuration.md. The constructors are Ruby:
# lib/circuit_breaker/options.rb, windows.rb and manual_clock.rb.

class CircuitBreaker
  ##
  # :singleton-method: shared_supported?
  # :call-seq:
  #   CircuitBreaker.shared_supported? -> true or false
  #
  # Whether this build shares breakers between processes (<tt>shared:</tt>,
  # docs/shared.md): true on Linux. Elsewhere (macOS, the BSDs), and in a
  # build made with <tt>CIRCUIT_BREAKER_PORTABLE=1</tt>,
  # <tt>CircuitBreaker.new(shared: ...)</tt> raises NotImplementedError
  # naming the platform (docs/install.md).
  #
  #   shared = CircuitBreaker.shared_supported? ? "payments" : nil
  #   CircuitBreaker.new(name: "payments", shared: shared)

  ##
  # :method: shared_path
  # :call-seq:
  #   shared_path -> String or nil
  #
  # The file that holds a <tt>shared:</tt> breaker (docs/shared.md), e.g.
  # <tt>/dev/shm/circuit_breaker-1000/circuit_breaker-1000-payments-3f9c0d2a71b4e865</tt>: its
  # name holds a hash of the options, so it is a method of the breaker. nil
  # for a breaker of one process.

  ##
  # :method: call
  # :call-seq:
  #   call { ... } -> obj
  #   call(fallback: ->(error) { ... }, fallback_on: :rejection) { ... } -> obj
  #
  # Runs the block if the breaker admits the call, and returns its value.
  # Rejected (open, forced open, or half-open without a probe slot): raises
  # CircuitBreaker::OpenError without running the block.
  #
  # The block runs with no lock held, timed with the breaker's clock. Its
  # outcome is recorded: a value is a success (unless +failure_if+ says
  # otherwise); an exception is a failure when +record_errors+ matches it
  # (default StandardError) and is re-raised unchanged; +ignore_errors+,
  # non-StandardError exceptions and a killed thread record nothing; a
  # CircuitBreaker::Failure and Timeout::Error are always failures;
  # +break+/+next+/+throw+/+return+ are successes. A call that took
  # +slow_threshold_ms+ or longer is also slow. docs/semantics.md has the
  # whole table.
  #
  #   begin
  #     breaker.call { http.get("/orders") }
  #   rescue CircuitBreaker::OpenError => e
  #     cached_orders   # e.retry_after: seconds until probes are admitted
  #   end
  #
  # With +fallback:+ (anything that responds to +call+), a rejection
  # returns <tt>fallback.call(open_error)</tt> instead of raising; with
  # <tt>fallback_on: :failure</tt> too, so does an exception the breaker
  # recorded as a failure (given to the fallback). What the fallback raises
  # goes on to the caller.
  #
  #   breaker.call(fallback: ->(_error) { cached_orders }) { http.get("/orders") }

  ##
  # :method: state
  # :call-seq:
  #   state -> :closed, :open, :half_open, :forced_open or :disabled
  #
  # The state now, after applying the timers that are due (an open breaker
  # whose +open_duration+ has passed answers +:half_open+).

  ##
  # :method: metrics
  # :call-seq:
  #   metrics -> Hash (frozen)
  #
  # The state and the window's counts at this instant: +:state+, +:total+,
  # +:failures+, +:slow_calls+, +:error_rate+, +:slow_call_rate+,
  # +:rejected+ (since creation), +:stage+ (the half-open ramp stage or nil),
  # +:admit_share+ and +:retry_after+. docs/operating.md describes each key.

  ##
  # :method: retry_after
  # :call-seq:
  #   retry_after -> Float or nil
  #
  # Seconds until an open breaker admits probes; 0.0 when closed, half-open
  # or disabled; nil when forced open.

  ##
  # :method: trip!
  # :call-seq:
  #   trip! -> self
  #
  # Opens the breaker now, from any state, for +open_duration+ (no backoff,
  # no jitter). The event's reason is +:manual+.

  ##
  # :method: reset!
  # :call-seq:
  #   reset! -> self
  #
  # Closes the breaker and empties its window, from any state (the way out
  # of +force_open!+ and +disable!+).

  ##
  # :method: force_open!
  # :call-seq:
  #   force_open! -> self
  #
  # Rejects every call until +reset!+, whatever the time; +retry_after+ is
  # nil meanwhile.

  ##
  # :method: disable!
  # :call-seq:
  #   disable! -> self
  #
  # Admits every call until +reset!+: calls are still recorded, the breaker
  # never trips.

  ##
  # :method: name
  # :call-seq:
  #   name -> String or nil
  #
  # The breaker's name (a frozen String), shown in errors, events and logs.

  ##
  # :method: window
  # :call-seq:
  #   window -> SlidingWindow or TimeWindow
  #
  # The live window the breaker records into: its readers show what the
  # breaker sees.

  class SlidingWindow
    ##
    # :method: size
    # :call-seq:
    #   size -> Integer
    #
    # How many calls the window keeps.

    ##
    # :method: record
    # :call-seq:
    #   record(duration_ms:, success:) -> self
    #
    # Records one call: +success+ truthy or falsy, +duration_ms+ a finite
    # Numeric >= 0.

    ##
    # :method: total
    # :call-seq:
    #   total -> Integer
    #
    # Calls in the window.

    ##
    # :method: failures
    # :call-seq:
    #   failures -> Integer
    #
    # Failed calls in the window.

    ##
    # :method: slow_calls
    # :call-seq:
    #   slow_calls -> Integer
    #
    # Slow calls in the window (a slow call may also be a failure).

    ##
    # :method: error_rate
    # :call-seq:
    #   error_rate -> Float
    #
    # +failures+ / +total+; 0.0 when empty.

    ##
    # :method: slow_call_rate
    # :call-seq:
    #   slow_call_rate -> Float
    #
    # +slow_calls+ / +total+; 0.0 when empty.

    ##
    # :method: reset
    # :call-seq:
    #   reset -> self
    #
    # Empties the window.

    ##
    # :method: slow_threshold_ms
    # :call-seq:
    #   slow_threshold_ms -> Float
    #
    # The duration from which a call is slow.

    ##
    # :method: inspect
    # :call-seq:
    #   inspect -> String
    #
    # The configuration and the counts.
  end

  class TimeWindow
    ##
    # :method: seconds
    # :call-seq:
    #   seconds -> Float
    #
    # The span of the window.

    ##
    # :method: buckets
    # :call-seq:
    #   buckets -> Integer
    #
    # How many buckets the span is cut into.

    ##
    # :method: record
    # :call-seq:
    #   record(duration_ms:, success:) -> self
    #
    # Records one call, finished now.

    ##
    # :method: total
    # :call-seq:
    #   total -> Integer
    #
    # Calls in the window.

    ##
    # :method: failures
    # :call-seq:
    #   failures -> Integer
    #
    # Failed calls in the window.

    ##
    # :method: slow_calls
    # :call-seq:
    #   slow_calls -> Integer
    #
    # Slow calls in the window.

    ##
    # :method: error_rate
    # :call-seq:
    #   error_rate -> Float
    #
    # +failures+ / +total+; 0.0 when empty.

    ##
    # :method: slow_call_rate
    # :call-seq:
    #   slow_call_rate -> Float
    #
    # +slow_calls+ / +total+; 0.0 when empty.

    ##
    # :method: reset
    # :call-seq:
    #   reset -> self
    #
    # Empties the window.

    ##
    # :method: slow_threshold_ms
    # :call-seq:
    #   slow_threshold_ms -> Float
    #
    # The duration from which a call is slow.

    ##
    # :method: inspect
    # :call-seq:
    #   inspect -> String
    #
    # The configuration and the counts.
  end

  class ManualClock
    ##
    # :method: now
    # :call-seq:
    #   now -> Float
    #
    # The clock's time, in seconds.

    ##
    # :method: advance
    # :call-seq:
    #   advance(seconds) -> self
    #
    # Moves the clock forward by +seconds+ (a finite Numeric >= 0).

    ##
    # :method: inspect
    # :call-seq:
    #   inspect -> String
    #
    # The clock's time.
  end
end
