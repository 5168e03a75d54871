# frozen_string_literal: true

require "faraday"
require "circuit_breaker"
# Faraday 2 moved its retry middleware to the faraday-retry gem. Loaded
# where installed, so that docs/faraday.md's stack (`f.request :retry`
# before the breaker) works on Faraday 2 as on Faraday 1, where it is built in.
if ::Faraday::VERSION.to_i >= 2
  begin
    require "faraday/retry"
  rescue LoadError
    nil # not installed: `f.request :retry` fails as it does on Faraday 2 without it
  end
end

class CircuitBreaker
  # Faraday middleware: every request of the connection goes through a
  # breaker. Loaded only by `require "circuit_breaker/faraday"`; the core
  # gem never loads Faraday. Tested with Faraday 1 and Faraday 2 (with
  # faraday-retry), one per CI leg (docs/faraday.md says what was tested).
  #
  # - A response whose status is a failure status (default 500..599) is
  #   returned to the caller as Faraday would return it, and recorded as a
  #   failure, whatever the breaker's `record_errors:`/`ignore_errors:` say.
  #   Other statuses (4xx included) are successes. The same holds when
  #   `response :raise_error` sits inside this middleware: the error it
  #   raises is judged by its status, then raised on.
  # - `Faraday::ConnectionFailed`, `Faraday::TimeoutError` and any other
  #   exception are raised as Faraday raises them, and recorded the way the
  #   breaker records exceptions (`record_errors`/`ignore_errors`: with the
  #   defaults, every StandardError is a failure).
  # - When the breaker rejects the call, no request is made:
  #   {CircuitBreaker::OpenError} is raised, or the
  #   `fallback:`'s response is returned.
  #
  # The request runs inside `breaker.call`, so durations are measured with
  # the breaker's clock (slow calls count, a ManualClock works in tests), a
  # half-open probe slot is released whatever ends the request, and the
  # breaker's own `failure_if` also applies (to the Faraday::Response).
  #
  # @example A breaker object
  #   breaker = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 50), min_calls: 10)
  #   conn = Faraday.new("http://orders.internal") do |f|
  #     f.request :circuit_breaker, breaker: breaker
  #   end
  #   conn.get("/api/orders")   # a 503 is returned, and counted as a failure
  # @example A registry name and a synthetic 503 when open
  #   CircuitBreaker.for("orders", window: CircuitBreaker::SlidingWindow.new(size: 50))   # e.g. in an initializer
  #   conn = Faraday.new("http://orders.internal") do |f|
  #     f.use :circuit_breaker, breaker: "orders", fallback: 503
  #   end
  #   conn.get("/api/orders").status   # => 503 while open, without a request
  # @example One breaker per host
  #   f.request :circuit_breaker, breaker: ->(env) { "api-#{env.url.host}" }
  class Faraday < ::Faraday::Middleware
    # Statuses recorded as failures unless `failure_statuses:` or
    # `failure_if:` says otherwise.
    DEFAULT_FAILURE_STATUSES = (500..599)

    # Carries a failed outcome out of `breaker.call` (a {Failure}, so it is
    # recorded as a failure whatever the breaker's error lists say): the
    # response to return, or the error `raise_error` made of it.
    # @api private
    class FailedResponse < CircuitBreaker::Failure
      attr_reader :result, :owner

      def initialize(result, owner)
        @result = result
        @owner = owner
        super("a failed response")
        set_backtrace([]) # never raised past the middleware: spare the capture
      end
    end

    # An error `raise_error` made of a response that is not a failure: the
    # block returns it (a success), and the middleware raises it on.
    Passed = Struct.new(:error)
    private_constant :Passed

    # @param app [#call] the rest of the Faraday stack
    # @param breaker [CircuitBreaker, String, Symbol, #call] a breaker; the
    #   name of a registry breaker (registered beforehand with
    #   {CircuitBreaker.for}, e.g. in an initializer; an unknown name is an
    #   ArgumentError at the request); or a callable given the Faraday env
    #   that returns either, to choose a breaker per request (e.g. per host)
    # @param failure_statuses [Range, Array<Integer>, Integer] response
    #   statuses recorded as failures (default 500..599)
    # @param failure_if [#call, nil] given the Faraday::Response, true when
    #   it is a failure; replaces `failure_statuses`
    # @param fallback [#call, Integer, nil] what a rejected request returns
    #   instead of raising: an Integer status (e.g. 503, with a Retry-After
    #   header and an empty body), or a callable given the
    #   {CircuitBreaker::OpenError} and the Faraday env that returns a
    #   Faraday::Response or `[status, headers, body]`. nil: raise the
    #   OpenError.
    # @raise [ArgumentError, TypeError] on bad arguments
    def initialize(app, breaker:, failure_statuses: nil, failure_if: nil, fallback: nil)
      super(app)
      @breaker = check_breaker(breaker)
      if failure_if && failure_statuses
        raise ArgumentError, "give failure_statuses: or failure_if:, not both"
      end

      @failure_if = failure_if && check_callable(failure_if, :failure_if)
      @failure_statuses = check_statuses(failure_statuses || DEFAULT_FAILURE_STATUSES)
      @fallback = check_fallback(fallback)
    end

    # @param env [Faraday::Env]
    # @return [Faraday::Response]
    # @raise [CircuitBreaker::OpenError] when the breaker rejects the call
    #   and no fallback is set
    def call(env)
      breaker = resolve_breaker(env)
      ran = false
      result = breaker.call do
        ran = true
        attempt(env)
      end
      result.is_a?(Passed) ? raise(result.error) : result
    rescue FailedResponse => e
      raise unless e.owner.equal?(self)

      e.result.is_a?(Exception) ? raise(e.result) : e.result
    rescue CircuitBreaker::OpenError => e
      # An OpenError from inside the request (another breaker) is not ours.
      raise if ran || @fallback.nil?

      fallback_response(e, env)
    end

    # @return [CircuitBreaker] the breaker this middleware uses now (for a
    #   per-request breaker, call it with the env)
    def breaker(env = nil)
      resolve_breaker(env)
    end

    private

    # Runs the rest of the stack; a failed outcome leaves as FailedResponse.
    def attempt(env)
      response = @app.call(env)
      raise FailedResponse.new(response, self) if failure?(response)

      response
    rescue ::Faraday::ClientError, ::Faraday::ServerError => e
      # `raise_error` inside this middleware: judged by the response's
      # status. Without one (a timeout), as the breaker records exceptions.
      raise unless response_status(e)
      raise FailedResponse.new(e, self) if failure?(::Faraday::Response.new(env))

      Passed.new(e)
    end

    def response_status(error)
      error.response.is_a?(Hash) ? error.response[:status] : nil
    end

    def failure?(response)
      return false if response.status.nil? # not finished (parallel requests)

      @failure_if ? @failure_if.call(response) : @failure_statuses.include?(response.status)
    end

    def resolve_breaker(env)
      found = @breaker
      found = found.call(env) if found.respond_to?(:call) && !found.is_a?(CircuitBreaker)
      case found
      when CircuitBreaker then found
      when String, Symbol then Registry.registered(found)
      else
        raise TypeError, "CircuitBreaker::Faraday: breaker: returned #{found.class}, not a CircuitBreaker or a name"
      end
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
      when CircuitBreaker, String, Symbol then breaker
      else
        return breaker if breaker.respond_to?(:call)

        raise TypeError, "breaker must be a CircuitBreaker, a registry name (String/Symbol) " \
                         "or a callable given the env, got #{breaker.class}"
      end
    end

    def check_fallback(fallback)
      case fallback
      when nil then nil
      when Integer
        unless (100..599).cover?(fallback)
          raise ArgumentError, "fallback: a status must be in 100..599, got #{fallback}"
        end

        lambda do |error, _env|
          headers = error.retry_after ? { "Retry-After" => error.retry_after.ceil.to_s } : {}
          [fallback, headers, ""]
        end
      else check_callable(fallback, :fallback)
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

# `f.request :circuit_breaker` and `f.use :circuit_breaker` (Faraday 1 and 2
# look up `use` symbols in Faraday::Middleware, `request` ones in
# Faraday::Request).
Faraday::Request.register_middleware(circuit_breaker: CircuitBreaker::Faraday)
Faraday::Middleware.register_middleware(circuit_breaker: CircuitBreaker::Faraday)
