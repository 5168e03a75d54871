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
  # half-open with no probe slot for this call. Raised without a backtrace
  # capture, so rejecting stays cheap during an outage.
  #
  # @example
  #   begin
  #     breaker.call { client.get("/orders") }
  #   rescue CircuitBreaker::OpenError => e
  #     e.retry_after # => 12.4 (seconds until probes may be admitted)
  #   end
  class OpenError < Error
    # @return [String, nil] the breaker's name
    attr_reader :breaker_name
    # @return [Symbol] :open, :half_open or :forced_open
    attr_reader :state
    # @return [Float, nil] seconds until the breaker may admit probes again
    #   (0.0 in half-open, nil when forced open)
    attr_reader :retry_after

    def initialize(message = nil, breaker_name: nil, state: :open, retry_after: nil)
      @message = message
      @breaker_name = breaker_name
      @state = state
      @retry_after = retry_after
      super(message)
    end

    # @return [String] e.g. `circuit "payments" is open; retry after 12.4s`
    def to_s
      @message || default_message
    end

    private

    def default_message
      circuit = @breaker_name ? "circuit #{@breaker_name.to_s.inspect}" : "circuit"
      case @state
      when :forced_open then "#{circuit} is forced open"
      when :half_open then "#{circuit} is half-open and has no probe slot free; retry after #{format('%.1f', @retry_after.to_f)}s"
      else "#{circuit} is open; retry after #{format('%.1f', @retry_after.to_f)}s"
      end
    end
  end

  # A `shared:` breaker's lock stayed busy past its bound (a process holding
  # it is stopped or frozen), so a step that cannot be skipped (`metrics`,
  # `trip!`, `reset!`, `force_open!`, `disable!`, window readers) did not
  # run. Calls never raise it: they are decided from the published state.
  # See docs/shared.md.
  class LockTimeoutError < Error; end
end
