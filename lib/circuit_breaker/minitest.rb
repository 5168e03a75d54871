# frozen_string_literal: true

require "minitest"
require "circuit_breaker/test_helpers"

class CircuitBreaker
  # Minitest support for apps that use breakers (docs/testing.md):
  # `require "circuit_breaker/minitest"` includes {CircuitBreaker::TestHelpers}
  # and these assertions in every Minitest::Test, and resets every
  # registered breaker before each test.
  module Assertions
    # @param breaker [CircuitBreaker, String, Symbol] a breaker or a registered name
    def assert_circuit_open(breaker, message = nil)
      b = TestHelpers.resolve(breaker)
      assert b.open?, message || "expected open, but #{TestHelpers.describe(b)}"
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    def assert_circuit_closed(breaker, message = nil)
      b = TestHelpers.resolve(breaker)
      assert b.closed?, message || "expected closed, but #{TestHelpers.describe(b)}"
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    def assert_circuit_half_open(breaker, message = nil)
      b = TestHelpers.resolve(breaker)
      assert b.half_open?, message || "expected half-open, but #{TestHelpers.describe(b)}"
    end

    # Passes when the block makes the breaker reject a call (its `rejected`
    # count grew); a CircuitOpenError of that breaker is rescued.
    # @param breaker [CircuitBreaker, String, Symbol]
    def assert_rejected_by(breaker, message = nil)
      b = TestHelpers.resolve(breaker)
      before = b.metrics[:rejected]
      begin
        yield
      rescue CircuitBreaker::OpenError => e
        raise unless e.breaker_name == b.name
      end
      assert b.metrics[:rejected] > before, message || "expected the block to be rejected, but #{TestHelpers.describe(b)}"
    end

    # @api private
    def before_setup
      super
      CircuitBreaker::TestHelpers.follow_active_support_travel
      CircuitBreaker.reset_all!
    end
  end
end

Minitest::Test.include(CircuitBreaker::TestHelpers, CircuitBreaker::Assertions)
