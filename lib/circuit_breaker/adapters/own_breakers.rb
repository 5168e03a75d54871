# frozen_string_literal: true

class CircuitBreaker
  module Adapters
    # The class methods of an adapter that creates breakers by itself, over
    # its {BreakerSet} in `@breakers`: each such adapter extends it.
    module OwnBreakers
      # @return [Integer] how many keyed breakers the adapter may create
      #   (default 100); later keys share "<adapter>:overflow"
      def max_breakers
        @breakers.max
      end

      # @param max [Integer] 1..1_000_000
      def max_breakers=(max)
        @breakers.max = max
      end

      # Forgets the breakers the adapter created (for test suites; the
      # registry keeps them until `CircuitBreaker.forget_all!`). Clients
      # find theirs again at their next call.
      # @return [nil]
      def clear!
        @breakers.clear
        nil
      end

      # Moves on at each {clear!}.
      # @api private
      def generation
        @breakers.generation
      end
    end
  end
end
