# frozen_string_literal: true

# Declared in Ruby before the native library loads, which looks them up.
class CircuitBreaker
  # Root of the gem's errors.
  class Error < StandardError; end

  # Raise it (or a subclass) inside {CircuitBreaker#call} to record the call
  # as a failure whatever `record_errors:` and `ignore_errors:` say: the
  # caller has decided. It leaves `call` as any exception does. The Faraday
  # middleware carries a failed response out of `call` this way, so that
  # which statuses fail stays independent of the breaker's error lists.
  #
  # @example A client that reports errors as values
  #   breaker.call do
  #     result = client.fetch
  #     raise CircuitBreaker::Failure, result.error if result.error?
  #     result
  #   end
  class Failure < Error; end

  # A call was rejected because the breaker is open, forced open, or
  # half-open with no probe slot for this call. Its message depends only on
  # the breaker's name and state (`circuit "payments" is open`), so error
  # trackers group every rejection of a breaker as one error; its backtrace
  # is one line, the caller's frame outside the gem, set before raising: no
  # backtrace capture, so rejecting stays cheap during an outage, at any
  # stack depth.
  #
  # @example
  #   begin
  #     breaker.call { client.get("/orders") }
  #   rescue CircuitBreaker::OpenError => e
  #     e.retry_after # => 12.4 (seconds until probes may be admitted)
  #   end
  class OpenError < Error
    # What the gem's own files start with (lib/circuit_breaker.rb and
    # lib/circuit_breaker/): a rejection's one-line backtrace is the first
    # frame outside them, the caller's.
    GEM_FILES = File.join(File.expand_path("..", __dir__), "circuit_breaker")
    # The native library's cache of those lines, by call site.
    BACKTRACE_LINES = {}
    private_constant :GEM_FILES, :BACKTRACE_LINES

    # @return [String, nil] the breaker's name
    attr_reader :breaker_name
    # @return [Symbol] the breaker's state when it refused: :open,
    #   :half_open or :forced_open (a {ConcurrencyLimitError}'s may be any)
    attr_reader :state
    # @return [Float, nil] seconds until the breaker may admit probes again
    #   (at least 1.0 in half-open, nil when forced open)
    attr_reader :retry_after

    def initialize(message = nil, breaker_name: nil, state: :open, retry_after: nil)
      @message = message
      @breaker_name = breaker_name
      @state = state
      @retry_after = retry_after
      super(message)
    end

    # Why the call was refused: :open, :forced_open, :half_open (no probe
    # slot for this call), or :concurrency_limit ({ConcurrencyLimitError}).
    # @return [Symbol]
    def reason
      case @state
      when :forced_open, :half_open then @state
      else :open
      end
    end

    # @return [String] e.g. `circuit "payments" is open`: the name and the
    #   state only (the time to wait is {#retry_after})
    def to_s
      @message || default_message
    end

    private

    def default_message
      circuit = @breaker_name ? "circuit #{@breaker_name.to_s.inspect}" : "circuit"
      case @state
      when :forced_open then "#{circuit} is forced open"
      when :half_open then "#{circuit} is half-open"
      else "#{circuit} is open"
      end
    end
  end

  # A call was refused because the breaker's calls in flight were at its
  # `max_concurrent:` cap (docs/concurrency.md), after waiting up to
  # `max_wait:` for a slot. The block did not run and nothing was recorded
  # in the window: the dependency did not fail. `rescue OpenError` catches
  # it like any rejection; `state` is the breaker's state (often :closed).
  #
  # @example
  #   begin
  #     breaker.call { client.get("/orders") }
  #   rescue CircuitBreaker::ConcurrencyLimitError => e
  #     e.limit       # => 8
  #     e.retry_after # => 1.0
  #   end
  class ConcurrencyLimitError < OpenError
    # Seconds a caller refused at the cap is told to wait: slots free as
    # calls finish, at a time nobody knows, and a zero made clients retry
    # in a loop (docs/concurrency.md).
    RETRY_AFTER = 1.0

    # @return [Integer, nil] the cap the calls in flight were at
    attr_reader :limit

    def initialize(message = nil, breaker_name: nil, state: :closed, retry_after: RETRY_AFTER, limit: nil)
      @limit = limit
      super(message, breaker_name: breaker_name, state: state, retry_after: retry_after)
    end

    # @return [Symbol] :concurrency_limit
    def reason
      :concurrency_limit
    end

    private

    def default_message
      circuit = @breaker_name ? "circuit #{@breaker_name.to_s.inspect}" : "circuit"
      "#{circuit} is at its concurrency limit#{" (#{@limit})" if @limit}"
    end
  end

  # A `shared:` breaker's lock stayed busy past its bound (a process holding
  # it is stopped or frozen), so a step that cannot be skipped (`metrics`,
  # `trip!`, `reset!`, `force_open!`, `disable!`, window readers) did not
  # run. Calls never raise it: they are decided from the published state.
  # See docs/shared.md.
  class LockTimeoutError < Error; end
end
