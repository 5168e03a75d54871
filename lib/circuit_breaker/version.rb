# frozen_string_literal: true

class CircuitBreaker
  VERSION = "0.1.0"
end
