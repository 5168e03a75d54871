# frozen_string_literal: true

require "rspec/core"
require "rspec/expectations"
require "circuit_breaker/test_helpers"

class CircuitBreaker
  # RSpec support for apps that use breakers (docs/testing.md):
  # `require "circuit_breaker/rspec"` in spec_helper.rb includes
  # {CircuitBreaker::TestHelpers} and these matchers in every example group,
  # and resets every registered breaker before each example.
  #
  # @example
  #   it "serves the cache while the orders API is down" do
  #     force_circuit_breaker_open("orders")
  #     expect { OrdersClient.fetch }.to be_rejected_by("orders")
  #   end
  module Matchers
    extend ::RSpec::Matchers::DSL

    %i[open closed half_open].each do |state|
      # @!method be_circuit_open / be_circuit_closed / be_circuit_half_open
      #   Passes when the breaker (or the registered breaker of that name) is
      #   in that state (open: open or forced open).
      matcher :"be_circuit_#{state}" do
        match { |actual| TestHelpers.in_state?(actual, state) }
        failure_message { |actual| TestHelpers.state_message(actual, state) }
        failure_message_when_negated { |actual| TestHelpers.state_message(actual, state, negated: true) }
      end
    end

    # Passes when the block makes the breaker reject at least one call
    # (a CircuitBreaker::OpenError raised, or a fallback answered): its `rejected`
    # count grew. A CircuitBreaker::OpenError of that breaker leaving the block is
    # rescued here.
    matcher :be_rejected_by do |breaker|
      supports_block_expectations

      match { |block| (@rejected = TestHelpers.rejected_during(breaker, &block)).positive? }
      failure_message { TestHelpers.rejection_message(breaker) }
      failure_message_when_negated do
        "expected the block not to be rejected, but #{@rejected} call(s) were: #{TestHelpers.describe(TestHelpers.resolve(breaker))}"
      end
    end
  end
end

CircuitBreaker::TestHelpers.follow_active_support_travel

RSpec.configure do |config|
  config.before(:suite) { CircuitBreaker::TestHelpers.follow_active_support_travel } # loaded after this file
  config.include CircuitBreaker::TestHelpers
  config.include CircuitBreaker::Matchers
  config.before do
    CircuitBreaker::TestHelpers.keep_workers_apart
    CircuitBreaker::TestHelpers.follow_time(new_test: true)
    CircuitBreaker.reset_all!
  end
end
