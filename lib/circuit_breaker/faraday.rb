# frozen_string_literal: true

require "faraday"
require "circuit_breaker"

class CircuitBreaker
  # Faraday 1.x middleware: every request of the connection goes through a
  # breaker. Loaded only by `require "circuit_breaker/faraday"`; the core
  # gem never loads Faraday.
  #
  # - A response whose status is a failure status (default 500..599) is
  #   returned to the caller as Faraday would return it, and recorded as a
  #   failure. Other statuses (4xx included) are successes.
  # - `Faraday::ConnectionFailed`, `Faraday::TimeoutError` and any other
  #   exception are raised as Faraday raises them, and recorded the way the
  #   breaker records exceptions (`record_errors`/`ignore_errors`: with the
  #   defaults, every StandardError is a failure).
  # - When the breaker rejects the call, no request is made:
  #   {CircuitBreaker::OpenError} (`CircuitOpenError`) is raised, or the
  #   `fallback:`'s response is returned.
  #
  # The request runs inside `breaker.call`, so durations are measured with
  # the breaker's clock (slow calls count, a ManualClock works in tests), a
  # half-open probe slot is released whatever ends the request, and the
  # breaker's own `failure_if` also applies (to the Faraday::Response).
  #
  # Put it before (outside) `response :raise_error`, so that it sees the
  # responses rather than the exceptions raise_error makes of them: placed
  # after (inside) it, a 4xx reaches the breaker as a Faraday::ClientError,
  # a failure unless the breaker has `ignore_errors: [Faraday::ClientError]`.
  #
  # @example A breaker object
  #   breaker = CircuitBreaker.new(window: SlidingWindow.new(size: 50), min_calls: 10)
  #   conn = Faraday.new("http://orders.internal") do |f|
  #     f.use CircuitBreaker::Faraday, breaker: breaker
  #     f.adapter :net_http
  #   end
  #   conn.get("/api/orders")   # a 503 is returned, and counted as a failure
  # @example A registry name and a fallback
  #   CircuitBreaker.for("orders", window: SlidingWindow.new(size: 50))   # e.g. in an initializer
  #   conn = Faraday.new("http://orders.internal") do |f|
  #     f.use CircuitBreaker::Faraday,
  #           breaker: "orders",
  #           fallback: ->(error, env) { [503, { "Retry-After" => error.retry_after.to_i.to_s }, "[]"] }
  #   end
  #   conn.get("/api/orders").status   # => 503 while open, without a request
  class Faraday < ::Faraday::Middleware
    # Statuses recorded as failures unless `failure_statuses:` or
    # `failure_if:` says otherwise.
    DEFAULT_FAILURE_STATUSES = (500..599)

    # Carries a failed response out of `breaker.call`, which records it as
    # a failure; the middleware returns the response it carries.
    # A Faraday::ServerError, so `record_errors: [Faraday::Error]` counts it.
    # @api private
    class FailedResponse < ::Faraday::ServerError
      attr_reader :faraday_response, :owner

      def initialize(faraday_response, owner)
        @faraday_response = faraday_response
        @owner = owner
        status = faraday_response.status
        super("the server responded with status #{status}",
              { status: status, headers: faraday_response.headers, body: faraday_response.body })
        set_backtrace([]) # never raised past the middleware: spare the capture
      end
    end

    # @param app [#call] the rest of the Faraday stack
    # @param breaker [CircuitBreaker, String, Symbol] a breaker, or the name
    #   of a registry breaker, looked up with `CircuitBreaker.for(name)` on
    #   each request (register it with its options beforehand, e.g. in an
    #   initializer)
    # @param failure_statuses [Range, Array<Integer>, Integer] response
    #   statuses recorded as failures (default 500..599)
    # @param failure_if [#call, nil] given the Faraday::Response, true when
    #   it is a failure; replaces `failure_statuses`
    # @param fallback [#call, nil] given the {CircuitBreaker::OpenError} and
    #   the Faraday env when the breaker rejects a call; returns a
    #   Faraday::Response or a `[status, headers, body]` triple, returned
    #   instead of raising. nil: raise the OpenError.
    # @raise [ArgumentError, TypeError] on bad arguments
    def initialize(app, breaker:, failure_statuses: nil, failure_if: nil, fallback: nil)
      super(app)
      @breaker = check_breaker(breaker)
      if failure_if && failure_statuses
        raise ArgumentError, "give failure_statuses: or failure_if:, not both"
      end

      @failure_if = failure_if && check_callable(failure_if, :failure_if)
      @failure_statuses = check_statuses(failure_statuses || DEFAULT_FAILURE_STATUSES)
      @fallback = fallback && check_callable(fallback, :fallback)
    end

    # @param env [Faraday::Env]
    # @return [Faraday::Response]
    # @raise [CircuitBreaker::OpenError] when the breaker rejects the call
    #   and no fallback is set
    def call(env)
      breaker = resolve_breaker
      ran = false
      breaker.call do
        ran = true
        response = @app.call(env)
        raise FailedResponse.new(response, self) if failure?(response)

        response
      end
    rescue FailedResponse => e
      raise unless e.owner.equal?(self)

      e.faraday_response
    rescue CircuitBreaker::OpenError => e
      # An OpenError from inside the request (another breaker) is not ours.
      raise if ran || @fallback.nil?

      fallback_response(e, env)
    end

    # @return [CircuitBreaker] the breaker this middleware uses now
    def breaker
      resolve_breaker
    end

    private

    def failure?(response)
      return false if response.status.nil? # not finished (parallel requests)

      @failure_if ? @failure_if.call(response) : @failure_statuses.include?(response.status)
    end

    def resolve_breaker
      return @breaker if @breaker.is_a?(CircuitBreaker)
      unless CircuitBreaker.respond_to?(:for)
        raise NotImplementedError, "breaker: #{@breaker.inspect} needs the registry (CircuitBreaker.for)"
      end

      CircuitBreaker.for(@breaker)
    end

    def fallback_response(error, env)
      result = @fallback.call(error, env)
      case result
      when ::Faraday::Response then result
      when Array
        unless result.size == 3
          raise TypeError, "fallback must return a Faraday::Response or [status, headers, body], got #{result.inspect}"
        end

        build_response(env, *result)
      else
        raise TypeError, "fallback must return a Faraday::Response or [status, headers, body], got #{result.class}"
      end
    end

    def build_response(env, status, headers, body)
      env.status = Integer(status)
      env.reason_phrase = nil
      env.response_headers = ::Faraday::Utils::Headers.new.update(headers || {})
      env.body = body
      response = ::Faraday::Response.new
      env.response = response
      response.finish(env)
    end

    def check_breaker(breaker)
      case breaker
      when CircuitBreaker then breaker
      when String, Symbol then breaker
      else raise TypeError, "breaker must be a CircuitBreaker or a registry name (String/Symbol), got #{breaker.class}"
      end
    end

    def check_callable(value, what)
      return value if value.respond_to?(:call)

      raise TypeError, "#{what} must respond to #call, got #{value.class}"
    end

    def check_statuses(statuses)
      case statuses
      when Integer then [statuses]
      when Range, Array then statuses
      else raise TypeError, "failure_statuses must be a Range, an Array of Integers or an Integer, got #{statuses.class}"
      end
    end
  end
end

Faraday::Request.register_middleware(circuit_breaker: -> { CircuitBreaker::Faraday })
