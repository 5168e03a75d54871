# frozen_string_literal: true

class CircuitBreaker
  # Loaded by `require "circuit_breaker"` when Rails is (docs/rails.md).
  class Railtie < ::Rails::Railtie
  end
end
