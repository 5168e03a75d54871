# frozen_string_literal: true

class CircuitBreaker
  # Loaded by `require "circuit_breaker"` when Rails is (docs/rails.md).
  # Before the app's initializers run, breakers built without `logger:` log
  # their transitions to Rails.logger (unless CircuitBreaker.configure set
  # another logger). Transitions and rejections are also instrumented with
  # ActiveSupport::Notifications (`state_change.circuit_breaker`,
  # `rejected.circuit_breaker`), as wherever ActiveSupport is loaded.
  class Railtie < ::Rails::Railtie
    initializer "circuit_breaker.logger" do
      CircuitBreaker.configure { |config| config.logger ||= ::Rails.logger }
    end
  end
end
