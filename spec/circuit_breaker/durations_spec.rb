# frozen_string_literal: true

# ActiveSupport::Duration wherever the gem takes seconds or milliseconds
# (docs/configuration.md). In a fresh Ruby: ActiveSupport's core extensions
# stay out of this suite's process.
RSpec.describe "ActiveSupport::Duration options" do
  lib = File.expand_path("../../lib", __dir__)

  it "are taken as their seconds (or milliseconds for slow_threshold_ms) everywhere" do
    out, status = ChildProcess.capture2e(RbConfig.ruby, "-I", lib, "-e", <<~RUBY)
      require "active_support"
      require "active_support/core_ext/numeric/time"
      require "circuit_breaker"
      require "circuit_breaker/test_helpers"
      require "circuit_breaker/dashboard"
      clock = CircuitBreaker::ManualClock.new(1.minute)
      breaker = CircuitBreaker.new(clock: clock, open_duration: 30.seconds, half_open_timeout: 2.minutes,
                                   probe_timeout: 10.seconds, min_stage_duration: 1.second, max_open_duration: 1.hour,
                                   window: CircuitBreaker::SlidingWindow.new(slow_threshold_ms: 0.5.seconds))
      breaker.trip!
      seen = [clock.now, breaker.retry_after, breaker.window.slow_threshold_ms]
      clock.advance(30.seconds)
      seen << breaker.state
      window = CircuitBreaker::TimeWindow.new(seconds: 1.minute, buckets: 6, slow_threshold_ms: 0.25.seconds)
      seen += [window.seconds, window.slow_threshold_ms]
      CircuitBreaker.configure { |c| c.defaults = { open_duration: 2.minutes } }
      seen << CircuitBreaker.new(clock: clock).trip!.retry_after
      CircuitBreaker.configure { |c| c.defaults = {} }
      wall = CircuitBreaker.new(open_duration: 5.seconds).trip!
      Object.new.extend(CircuitBreaker::TestHelpers).advance_circuit_breakers(5.seconds)
      seen << wall.state
      CircuitBreaker::Dashboard.new(history_seconds: 10.minutes)
      p seen
      begin
        CircuitBreaker.new(open_duration: -5.seconds)
      rescue ArgumentError => e
        puts e.message
      end
    RUBY

    expect(status).to be_success, out
    lines = out.lines.map(&:chomp)
    expect(lines[0]).to eq("[60.0, 30.0, 500.0, :half_open, 60.0, 250.0, 120.0, :half_open]")
    expect(lines[1]).to start_with("open_duration must be")
  end
end
