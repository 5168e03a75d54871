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
      assert TestHelpers.in_state?(breaker, :open), message || -> { TestHelpers.state_message(breaker, :open) }
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    def assert_circuit_closed(breaker, message = nil)
      assert TestHelpers.in_state?(breaker, :closed), message || -> { TestHelpers.state_message(breaker, :closed) }
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    def assert_circuit_half_open(breaker, message = nil)
      assert TestHelpers.in_state?(breaker, :half_open),
             message || -> { TestHelpers.state_message(breaker, :half_open) }
    end

    # Passes when the block makes the breaker reject a call (its `rejected`
    # count grew); a CircuitBreaker::OpenError of that breaker is rescued.
    # @param breaker [CircuitBreaker, String, Symbol]
    def assert_rejected_by(breaker, message = nil, &block)
      assert TestHelpers.rejected_during(breaker, &block).positive?,
             message || -> { TestHelpers.rejection_message(breaker) }
    end

    # The negations, as Minitest spells them (`refute_…`) and as Rails does
    # (`assert_not_…`).

    # @param breaker [CircuitBreaker, String, Symbol]
    def refute_circuit_open(breaker, message = nil)
      refute TestHelpers.in_state?(breaker, :open), message || -> { TestHelpers.state_message(breaker, :open, negated: true) }
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    def refute_circuit_closed(breaker, message = nil)
      refute TestHelpers.in_state?(breaker, :closed),
             message || -> { TestHelpers.state_message(breaker, :closed, negated: true) }
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    def refute_circuit_half_open(breaker, message = nil)
      refute TestHelpers.in_state?(breaker, :half_open),
             message || -> { TestHelpers.state_message(breaker, :half_open, negated: true) }
    end

    # Passes when the block runs without the breaker rejecting a call.
    # @param breaker [CircuitBreaker, String, Symbol]
    def refute_rejected_by(breaker, message = nil, &block)
      rejected = TestHelpers.rejected_during(breaker, &block)
      refute rejected.positive?, message || lambda {
        "expected the block not to be rejected, but #{rejected} call(s) were: " \
          "#{TestHelpers.describe(TestHelpers.resolve(breaker))}"
      }
    end

    alias assert_not_circuit_open refute_circuit_open
    alias assert_not_circuit_closed refute_circuit_closed
    alias assert_not_circuit_half_open refute_circuit_half_open
    alias assert_not_rejected_by refute_rejected_by

    # @api private
    def before_setup
      super
      CircuitBreaker::TestHelpers.follow_active_support_travel
      CircuitBreaker::TestHelpers.keep_workers_apart
      CircuitBreaker::TestHelpers.follow_time(new_test: true)
      CircuitBreaker.reset_all!
    end
  end
end

Minitest::Test.include(CircuitBreaker::TestHelpers, CircuitBreaker::Assertions)
