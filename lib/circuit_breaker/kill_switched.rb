# frozen_string_literal: true

class CircuitBreaker
  # A breaker built while `CIRCUIT_BREAKER_DISABLED=1`: admits every call,
  # records nothing, never changes state, not even on `trip!`; `metrics`
  # says so.
  #
  # @api private
  module KillSwitched
    # Runs the block, unrecorded: nothing is rejected, and nothing is a
    # failure, so a fallback never answers.
    def call(fallback: nil, fallback_on: :rejection) # rubocop:disable Lint/UnusedMethodArgument
      raise ArgumentError, "call needs a block" unless block_given?

      yield
    end

    def allow?
      true
    end

    def record(_success, duration_ms: 0) # rubocop:disable Lint/UnusedMethodArgument
      nil
    end

    def state
      :disabled
    end

    # Control changes nothing either (no event, no log): the switch decides.
    %i[trip! reset! force_open! disable!].each { |control| define_method(control) { self } }

    def retry_after
      0.0
    end

    # The window's counts, with `state: :disabled` and `kill_switch: true`.
    def metrics
      super.merge(state: :disabled, admit_share: 1.0, retry_after: 0.0, kill_switch: true).freeze
    end
  end
  private_constant :KillSwitched

  class << self
    # Whether breakers are built as pass-throughs: the environment variable
    # CIRCUIT_BREAKER_DISABLED is 1, true, yes or on (an incident's kill
    # switch; read when each breaker is built). Unset, empty, 0, false, no
    # or off leave breakers on; case and surrounding spaces do not matter.
    # @return [Boolean]
    # @raise [ArgumentError] any other value: a switch that was meant to be
    #   thrown must not be ignored silently
    def kill_switch?
      value = ENV["CIRCUIT_BREAKER_DISABLED"]
      return false if value.nil?

      case value.strip.downcase
      when "1", "true", "yes", "on" then true
      when "", "0", "false", "no", "off" then false
      else
        raise ArgumentError, "CIRCUIT_BREAKER_DISABLED must be 1, true, yes or on (breakers stand aside), " \
                             "or 0, false, no, off or empty (got #{value.inspect})"
      end
    end
  end
end
