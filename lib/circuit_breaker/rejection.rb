# frozen_string_literal: true

class CircuitBreaker
  # Included in the error each adapter raises when its breaker rejects a
  # call. That error is a subclass of the library's own connection error
  # (so an app's existing `rescue Redis::BaseConnectionError` keeps
  # degrading) and carries what {CircuitBreaker::OpenError} carries.
  # Ruby gives a class one superclass, so `rescue CircuitBreaker::OpenError`
  # (and `rescue CircuitBreaker::Error`) recognise these errors through
  # `===`, which the first adapter required extends (docs/adapters.md,
  # "Rejections"). `is_a?(CircuitBreaker::OpenError)` stays false: ask
  # `is_a?(CircuitBreaker::Rejection)`.
  module Rejection
    # The readers: `breaker_name` (String, nil), `state` (:open,
    # :half_open or :forced_open; any state at the concurrency cap),
    # `retry_after` (Float seconds until the breaker may admit this caller
    # again; nil when forced open), `reason` (as {OpenError#reason}:
    # :concurrency_limit when refused at the `max_concurrent:` cap) and
    # `limit` (that cap; nil for other rejections).

    # @param open_error [CircuitBreaker::OpenError, String, nil] the
    #   breaker's rejection; a String is the message (a library that
    #   re-raises errors as its own classes, like redis-rb 5, passes one:
    #   the readers then answer from the `cause`)
    def initialize(open_error = nil)
      if open_error.is_a?(OpenError)
        @breaker_name = open_error.breaker_name
        @state = open_error.state
        @retry_after = open_error.retry_after
        @reason = open_error.reason
        @limit = open_error.is_a?(ConcurrencyLimitError) ? open_error.limit : nil
        super(open_error.message)
      else
        super(open_error || "circuit is open")
      end
    end

    def breaker_name
      defined?(@state) ? @breaker_name : from_cause(:breaker_name)
    end

    def state
      defined?(@state) ? @state : (from_cause(:state) || :open)
    end

    def retry_after
      defined?(@state) ? @retry_after : from_cause(:retry_after)
    end

    def reason
      defined?(@state) ? @reason : (from_cause(:reason) || :open)
    end

    def limit
      defined?(@state) ? @limit : from_cause(:limit)
    end

    private

    def from_cause(reader)
      cause.respond_to?(reader) ? cause.public_send(reader) : nil
    end
  end

  # The rule, in one place: an adapter's rejection is a
  # `CircuitBreaker::OpenError` (and a `CircuitBreaker::Error`; one refused
  # at the `max_concurrent:` cap, reason :concurrency_limit, a
  # `CircuitBreaker::ConcurrencyLimitError` too) for `rescue`, `case` and a
  # breaker's `record_errors:`/`ignore_errors:`, which ask `===` of the
  # gem's errors when the exception comes
  # (ext/circuit_breaker/src/breaker/matchers.rs), whenever the breaker was
  # built. Prepended to `CircuitBreaker::Error`'s singleton class (so that
  # `OpenError`, which inherits it, sees it too) by `require`ing an adapter:
  # the gem alone keeps Ruby's own `Module#===` on its rejection path.
  #
  # @api private
  module RejectionMatching
    def ===(other)
      super || (Rejection === other &&
                (equal?(OpenError) || equal?(Error) || (equal?(ConcurrencyLimitError) && other.reason == :concurrency_limit)))
    end
  end
  Error.singleton_class.prepend(RejectionMatching) unless Error.singleton_class < RejectionMatching
  private_constant :RejectionMatching
end
