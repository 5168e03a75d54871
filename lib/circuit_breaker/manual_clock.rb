# frozen_string_literal: true

class CircuitBreaker
  # A clock that moves only when told, for tests: time never passes by
  # itself, so no spec sleeps.
  class ManualClock
    # @param start [Numeric, ActiveSupport::Duration] the initial reading, in seconds (finite)
    # @example
    #   clock = CircuitBreaker::ManualClock.new
    #   clock.advance(30).now # => 30.0
    def initialize(start = 0.0)
      __setup(Durations.seconds(start))
    end

    # Takes ActiveSupport::Duration too (`clock.advance(30.seconds)`), ahead
    # of the native advance(seconds).
    # @api private
    module AdvanceDuration
      def advance(seconds)
        super(Durations.seconds(seconds))
      end
    end
    prepend AdvanceDuration
  end
end
