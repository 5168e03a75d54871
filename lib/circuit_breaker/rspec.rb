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

    { be_circuit_open: %i[open forced_open], be_circuit_closed: %i[closed],
      be_circuit_half_open: %i[half_open] }.each do |matcher, states|
      # @!method be_circuit_open / be_circuit_closed / be_circuit_half_open
      #   Passes when the breaker (or the registered breaker of that name) is
      #   in one of these states (open: open or forced open).
      matcher matcher do
        match { |actual| states.include?(TestHelpers.resolve(actual).state) }
        failure_message do |actual|
          "expected #{matcher.to_s.tr('_', ' ').sub('be ', '')}, but #{TestHelpers.describe(TestHelpers.resolve(actual))}"
        end
        failure_message_when_negated do |actual|
          "expected not #{matcher.to_s.tr('_', ' ').sub('be ', '')}, but #{TestHelpers.describe(TestHelpers.resolve(actual))}"
        end
      end
    end

    # Passes when the block makes the breaker reject at least one call
    # (a CircuitOpenError raised, or a fallback answered): its `rejected`
    # count grew. A CircuitOpenError of that breaker leaving the block is
    # rescued here.
    matcher :be_rejected_by do |breaker|
      supports_block_expectations

      match do |block|
        target = TestHelpers.resolve(breaker)
        before = target.metrics[:rejected]
        begin
          block.call
        rescue CircuitBreaker::OpenError => e
          raise unless e.breaker_name == target.name
        end
        (@rejected = target.metrics[:rejected] - before).positive?
      end
      failure_message { "expected the block to be rejected, but #{TestHelpers.describe(TestHelpers.resolve(breaker))}" }
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
  config.before { CircuitBreaker.reset_all! }
end
