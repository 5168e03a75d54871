# frozen_string_literal: true

require "circuit_breaker"

class CircuitBreaker
  # Helpers for the test suites of apps that use breakers, shared by
  # `require "circuit_breaker/rspec"` and `require "circuit_breaker/minitest"`
  # (docs/testing.md). A breaker is given as a breaker or as the name of a
  # registered one.
  module TestHelpers
    # Moves the time of every breaker of this process forward by `seconds`,
    # without sleeping: breakers (and TimeWindows) on the monotonic clock,
    # whenever they were created. An open breaker whose `open_duration` has
    # passed is then half-open. It lasts until the end of the test: the
    # next one starts at the real time again (docs/testing.md). Breakers on
    # a ManualClock follow their clock instead, and `shared:` and `fleet:`
    # breakers keep the real time (other processes and hosts read them).
    #
    # @example
    #   trip_circuit_breaker("orders")
    #   advance_circuit_breakers(31)
    #   expect("orders").to be_circuit_half_open
    # @param seconds [Numeric, ActiveSupport::Duration] finite, >= 0
    # @return [nil]
    def advance_circuit_breakers(seconds)
      TimeTravel.advance(Durations.seconds(seconds))
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

    # The process that loaded the helpers: a test run in another one was
    # forked from it (Rails' `parallelize`, which sets no TEST_ENV_NUMBER).
    LOADED_IN = Process.pid

    # In a forked test worker, once: `shared:` breakers built from now on,
    # and the registered ones (rebuilt), live under the default namespace
    # plus `.worker<pid>`, apart from the other workers'. Run before each
    # test by the RSpec and Minitest support (docs/testing.md).
    # @api private
    def self.keep_workers_apart
      return if Process.pid == LOADED_IN || @apart_in == Process.pid

      @apart_in = Process.pid
      suffix = ".worker#{Process.pid}"
      old_default = CircuitBreaker.default_namespace
      CircuitBreaker.default_namespace = "#{old_default}#{suffix}"
      Registry.move_shared_apart(suffix, old_default)
    end

    # Makes ActiveSupport's time helpers (`travel`, `travel_to`,
    # `freeze_time`, `travel_back`, Rails' `ActiveSupport::Testing::TimeHelpers`)
    # and Timecop's (`travel`, `freeze`, `scale`, `return`) move breakers
    # too: after each move of `Time.now`, breakers are as far ahead of the
    # real time as it is, and with it back they see the real time again
    # (docs/testing.md). Called by the RSpec and Minitest support; follows
    # each library that is loaded, once.
    # @api private
    def self.follow_active_support_travel
      if defined?(::ActiveSupport::Testing::TimeHelpers) && !(::ActiveSupport::Testing::TimeHelpers <= FollowTravel)
        ::ActiveSupport::Testing::TimeHelpers.prepend(FollowTravel)
      end
      ::Timecop.singleton_class.prepend(FollowTimecop) if defined?(::Timecop) && !(::Timecop.singleton_class <= FollowTimecop)
    end

    # Sets how far breakers are ahead of the real time: as far as `at` (the
    # test's time: `Time.now`) is, plus what `advance_circuit_breakers`
    # added in this test, unless `new_test` (each test starts afresh). The
    # offset is set, never added to: it never grows past the furthest time
    # one test travels to (docs/testing.md).
    # @api private
    def self.follow_time(at = Time.now, new_test: false)
      # Timecop 0.9.9+ with mock_process_clock moves Process.clock_gettime too.
      real = Process.respond_to?(:clock_gettime_without_mock) ? :clock_gettime_without_mock : :clock_gettime
      ahead = at.to_f - Process.public_send(real, Process::CLOCK_REALTIME)
      TimeTravel.follow(ahead, new_test)
    end

    # ActiveSupport's time helpers, followed. `travel` and `freeze_time`
    # call `travel_to`; a block's end puts back the time before it
    # (`travel_back` on Rails 6.1, the outer travel on Rails 7.1+), which is
    # followed once the block is over.
    # @api private
    module FollowTravel
      # Breakers follow the time asked for: ActiveSupport drops its
      # microseconds from `Time.now` (Rails 6.1: its fraction of a second),
      # which would leave breakers up to a second short of the travel.
      def travel_to(date_or_time, *rest, **options)
        at = date_or_time.respond_to?(:to_time) ? date_or_time.to_time : Time.now
        return super.tap { TestHelpers.follow_time(at) } unless block_given?

        begin
          super(date_or_time, *rest, **options) do |*args|
            TestHelpers.follow_time(at)
            yield(*args)
          end
        ensure
          TestHelpers.follow_time
        end
      end

      %i[travel_back unfreeze_time].each do |name|
        define_method(name) do |&block|
          return super().tap { TestHelpers.follow_time } unless block

          begin
            super() do
              TestHelpers.follow_time
              block.call
            end
          ensure
            TestHelpers.follow_time
          end
        end
      end
    end

    # Timecop, followed; with a block, Timecop moves `Time.now` only around
    # it: breakers are moved once it has, inside the block, and back after.
    # @api private
    module FollowTimecop
      %i[travel freeze scale return unfreeze return_to_baseline].each do |name|
        define_method(name) do |*args, &block|
          return super(*args).tap { TestHelpers.follow_time } unless block

          begin
            super(*args) do |*yielded|
              TestHelpers.follow_time
              block.call(*yielded)
            end
          ensure
            TestHelpers.follow_time
          end
        end
      end
    end

    # @param breaker [CircuitBreaker, String, Symbol]
    # @return [CircuitBreaker] the breaker, or the registered one of that name
    # @raise [ArgumentError] a name nobody registered
    # @api private
    def self.resolve(breaker)
      return breaker if breaker.is_a?(CircuitBreaker)

      Registry.registered(breaker)
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
