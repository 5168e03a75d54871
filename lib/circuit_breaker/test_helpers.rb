# frozen_string_literal: true

require "circuit_breaker"

class CircuitBreaker
  # Helpers for the test suites of apps that use breakers, shared by
  # `require "circuit_breaker/rspec"` and `require "circuit_breaker/minitest"`
  # (docs/testing.md). A breaker is given as a breaker or as the name of a
  # registered one.
  module TestHelpers
    # Moves the time of every breaker in this process forward by `seconds`,
    # without sleeping: breakers (and TimeWindows) on the monotonic clock,
    # whenever they were created. An open breaker whose `open_duration` has
    # passed is then half-open. Time only moves forward; breakers on a
    # ManualClock follow their clock instead.
    #
    # @example
    #   trip_circuit_breaker("orders")
    #   advance_circuit_breakers(31)
    #   expect("orders").to be_circuit_half_open
    # @param seconds [Numeric] finite, >= 0
    # @return [nil]
    def advance_circuit_breakers(seconds)
      CircuitBreaker.__send__(:__travel, seconds)
      nil
    end

    # Opens a breaker until it is reset (`force_open!`): every call is
    # rejected, as during an outage.
    # @param breaker [CircuitBreaker, String, Symbol]
    # @return [CircuitBreaker]
    def force_circuit_breaker_open(breaker)
      TestHelpers.resolve(breaker).force_open!
    end

    # Keeps a breaker closed until it is reset (`disable!`): every call is
    # admitted, and failures never open it.
    # @param breaker [CircuitBreaker, String, Symbol]
    # @return [CircuitBreaker]
    def force_circuit_breaker_closed(breaker)
      TestHelpers.resolve(breaker).disable!
    end

    # Opens a breaker now (`trip!`), for `open_duration`: after that it
    # admits probes, as after a real outage.
    # @param breaker [CircuitBreaker, String, Symbol]
    # @return [CircuitBreaker]
    def trip_circuit_breaker(breaker)
      TestHelpers.resolve(breaker).trip!
    end

    # Closes every registered breaker and empties its window
    # ({CircuitBreaker.reset_all!}); run between tests.
    # @return [nil]
    def reset_circuit_breakers
      CircuitBreaker.reset_all!
    end

    # Makes ActiveSupport's `travel`/`travel_to` (Rails' time helpers) move
    # breakers too, by as far as they move `Time.now` forward. Breakers'
    # time never moves back: `travel_back` leaves them where they are.
    # Called by the RSpec and Minitest support; does nothing without
    # ActiveSupport::Testing::TimeHelpers, or when done already.
    # @api private
    def self.follow_active_support_travel
      return unless defined?(::ActiveSupport::Testing::TimeHelpers)

      helpers = ::ActiveSupport::Testing::TimeHelpers
      helpers.prepend(FollowTravel) unless helpers <= FollowTravel
    end

    # @api private
    module FollowTravel
      def travel_to(date_or_time, *rest, **options, &block)
        ahead = date_or_time.to_time - Time.now
        CircuitBreaker.__send__(:__travel, ahead) if ahead.positive?
        super
      end
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    # @return [CircuitBreaker] the breaker, or the registered one of that name
    # @raise [ArgumentError] a name nobody registered
    # @api private
    def self.resolve(breaker)
      return breaker if breaker.is_a?(CircuitBreaker)

      CircuitBreaker.__send__(:registered, breaker)
    end

    # Whether a breaker (or a registered name) is in `state`: :open (open
    # or forced open, as `open?`), :closed or :half_open. What
    # `be_circuit_open` and `assert_circuit_open` (and the others) check.
    # @api private
    def self.in_state?(breaker, state)
      resolve(breaker).public_send(:"#{state}?")
    end

    # The failure message of a state matcher or assertion, e.g.
    # `expected circuit open, but circuit "orders" is closed (calls 3, …)`.
    # @api private
    def self.state_message(breaker, state, negated: false)
      "expected #{'not ' if negated}circuit #{state.to_s.tr('_', '-')}, but #{describe(resolve(breaker))}"
    end

    # Runs the block; returns how many calls the breaker rejected meanwhile
    # (its `rejected` count grew: a CircuitBreaker::OpenError, or a fallback
    # answered). A CircuitBreaker::OpenError of that breaker leaving the block is
    # rescued. What `be_rejected_by` and `assert_rejected_by` check.
    # @api private
    def self.rejected_during(breaker)
      breaker = resolve(breaker)
      before = breaker.metrics[:rejected]
      begin
        yield
      rescue CircuitBreaker::OpenError => e
        raise unless e.breaker_name == breaker.name
      end
      breaker.metrics[:rejected] - before
    end

    # The failure message of a rejection matcher or assertion.
    # @api private
    def self.rejection_message(breaker)
      "expected the block to be rejected, but #{describe(resolve(breaker))}"
    end

    # A one-line description for failure messages.
    # @api private
    def self.describe(breaker)
      m = breaker.metrics
      format("circuit %s is %s (calls %d, failures %d, error rate %.0f%%, rejected %d)",
             (breaker.name || "(unnamed)").inspect, m[:state], m[:total], m[:failures], m[:error_rate] * 100,
             m[:rejected])
    end
  end
end
