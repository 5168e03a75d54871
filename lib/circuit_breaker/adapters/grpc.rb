# frozen_string_literal: true

require "grpc"
require "circuit_breaker/adapters"

class CircuitBreaker
  module Adapters
    # A gRPC client interceptor: the calls of the stubs built with it go
    # through a breaker. Loaded by `require "circuit_breaker/grpc"`, which
    # patches nothing: the app passes the interceptor to the stubs it wants
    # protected (docs/adapters.md, "gRPC").
    #
    # @example
    #   require "circuit_breaker/grpc"
    #   interceptor = CircuitBreaker::Adapters::GRPC::Interceptor.new("payments.internal:50051", open_duration: 10)
    #   stub = Payments::Stub.new("payments.internal:50051", :this_channel_is_insecure, interceptors: [interceptor])
    module GRPC
      # Raised instead of a call when the breaker is open: a GRPC::Unavailable
      # (what the app already rescues when the server is down) and a
      # {CircuitBreaker::OpenError}.
      class OpenError < ::GRPC::Unavailable
        include CircuitBreaker::Rejection
      end

      # UNAVAILABLE (the server is down or unreachable), DEADLINE_EXCEEDED
      # (too slow) and RESOURCE_EXHAUSTED (overloaded, rate limited).
      DEFAULT_FAILURE_ERRORS = [::Timeout::Error, ::GRPC::Unavailable, ::GRPC::DeadlineExceeded, ::GRPC::ResourceExhausted].freeze

      # One breaker per target: max_breakers, max_breakers= and clear!
      # (interceptors built before keep theirs).
      @breakers = BreakerSet.new("grpc")
      extend OwnBreakers

      class << self
        # @api private
        def breaker_for(target, options)
          @breakers.fetch(target, options)
        end
      end

      # The interceptor. Unary and client-streaming calls (one response)
      # are calls of the breaker; server-streaming and bidirectional calls,
      # whose responses arrive after the interceptor has returned, pass
      # unprotected.
      class Interceptor < ::GRPC::ClientInterceptor
        # @param target [String, nil] the server, "host:port": names the
        #   breaker "grpc:TARGET" (capped, docs/adapters.md)
        # @param breaker [CircuitBreaker, String, Symbol, nil] a breaker or
        #   a registry name instead
        # @param failure_errors [Array<Class, Proc>] errors recorded as
        #   failures; any other GRPC::BadStatus is the server answering
        # @param breaker_options [Hash] options of {CircuitBreaker.new}
        def initialize(target = nil, breaker: nil, failure_errors: DEFAULT_FAILURE_ERRORS, **breaker_options)
          super()
          @failures = Adapters.check_failures(failure_errors, "GRPC::Interceptor")
          @breaker =
            case breaker
            when nil
              unless target.is_a?(String) && !target.empty?
                raise ArgumentError, "GRPC::Interceptor: give the target (\"host:port\") or breaker:"
              end

              GRPC.breaker_for(target, breaker_options)
            when CircuitBreaker then breaker
            when String, Symbol then CircuitBreaker.for(breaker, **breaker_options)
            else raise TypeError, "GRPC::Interceptor: breaker: must be a CircuitBreaker, a registry name or nil (got #{breaker.class})"
            end
        end

        # @return [CircuitBreaker]
        attr_reader :breaker

        def request_response(**_context, &block)
          Adapters.run(@breaker, OpenError, @failures, &block)
        end

        def client_streamer(**_context, &block)
          Adapters.run(@breaker, OpenError, @failures, &block)
        end
      end
    end
  end
end
