# frozen_string_literal: true

class CircuitBreaker
  module Adapters
    # The breakers one adapter creates, keyed ("host:port", a socket path,
    # a database), at most `max` of them; past it, one overflow breaker.
    # Names are "<adapter>:<key>" and "<adapter>:overflow"; they are
    # registry breakers ({CircuitBreaker.for}), so `CircuitBreaker.configure`
    # defaults apply. A `window:` option is a template: each breaker gets a
    # window of its own with the same settings.
    #
    # @api private
    class BreakerSet
      # @return [Integer] moves on at each {clear}: clients that memoised a
      #   breaker of the set look it up again
      attr_reader :max, :generation

      def initialize(prefix)
        @prefix = prefix
        @max = DEFAULT_MAX_BREAKERS
        @lock = Mutex.new
        @generation = 0
        clear
      end

      # @param max [Integer] 1..1_000_000
      def max=(max)
        unless max.is_a?(Integer) && max.between?(1, 1_000_000)
          raise ArgumentError, "#{@prefix}: max_breakers must be an Integer in 1..1_000_000 (got #{max.inspect})"
        end

        @max = max
      end

      # Forgets the breakers this set created (the registry keeps them
      # until `CircuitBreaker.forget_all!`).
      def clear
        @lock.synchronize do
          @breakers = {}
          @overflow = nil
          @generation += 1
        end
      end

      # @return [CircuitBreaker] the breaker of `key`, created with `options`
      #   on first use
      def fetch(key, options)
        @breakers[key] || @lock.synchronize do
          @breakers[key] || if @breakers.size < @max
                              @breakers[key] = CircuitBreaker.for("#{@prefix}:#{key}", **Adapters.options_for_one(options))
                            else
                              overflow(key, options)
                            end
        end
      end

      # @return [Integer] how many keyed breakers exist (the overflow aside)
      def size
        @breakers.size
      end

      private

      def overflow(key, options)
        @overflow ||= begin
          warn "circuit_breaker: #{@prefix} has #{@max} breakers (max_breakers); #{key} and every later one " \
               "share the breaker #{@prefix}:overflow (docs/adapters.md)"
          CircuitBreaker.for("#{@prefix}:overflow", **Adapters.options_for_one(options))
        end
      end
    end
  end
end
