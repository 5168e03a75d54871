# frozen_string_literal: true

class CircuitBreaker
  # ActiveSupport::Duration (`30.seconds`, `500.milliseconds`) wherever the
  # gem takes seconds or milliseconds, without loading ActiveSupport: a
  # Duration is turned into its number of seconds (or milliseconds) before
  # the native code converts it; anything else passes unchanged, so a wrong
  # type is still reported by the option it was given to.
  #
  # @api private
  module Durations
    module_function

    # @param value [Object]
    # @return [Object] a Duration's seconds (Integer or Float, as it holds
    #   them), else value itself
    def seconds(value)
      duration?(value) ? value.value : value
    end

    # @param value [Object]
    # @return [Object] a Duration's milliseconds, else value itself
    def millis(value)
      duration?(value) ? value.value * 1000 : value
    end

    def duration?(value)
      defined?(::ActiveSupport::Duration) && ::ActiveSupport::Duration === value
    end

    # @return [Boolean] whether there can be a Duration to convert
    #   (ActiveSupport is loaded)
    def loaded?
      defined?(::ActiveSupport::Duration) ? true : false
    end
  end
  private_constant :Durations
end
