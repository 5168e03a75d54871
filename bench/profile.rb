# frozen_string_literal: true

# A tight loop over one of the gem's paths, to run under a profiler, on the
# build with symbols (docs/install.md):
#
#   CIRCUIT_BREAKER_PROFILE=profiling rake compile
#   perf record -g ruby -Ilib bench/profile.rb success 20000000
#   valgrind --tool=callgrind ruby -Ilib bench/profile.rb failure 200000
#
# PATH is one of: bare_yield, success, bare_raise_yield, failure,
# bare_raise, rejection, error_rate, metrics. The optional second argument
# is the number of iterations (default 5_000_000).

require "circuit_breaker"
require_relative "support/bare"

path = ARGV.fetch(0) { abort "usage: ruby -Ilib bench/profile.rb PATH [ITERATIONS]" }
n = Integer(ARGV.fetch(1, "5000000"))

window = CircuitBreaker::SlidingWindow.new(size: 100)
breaker =
  case path
  when "failure" # as in bench/scenarios.rb: records every failure, never trips
    CircuitBreaker.new(window: CircuitBreaker::TimeWindow.new(seconds: 600, buckets: 10),
                       error_rate_threshold: 1.0, min_calls: 1_000_000_000, consecutive_failures: nil)
  when "rejection"
    CircuitBreaker.new(window: window, open_duration: 3600).trip!
  else
    CircuitBreaker.new(window: window)
  end
yielder = Bench::Bare::Yield.new
raiser = Bench::Bare::Raise.new

i = 0
case path
when "bare_yield"
  while i < n
    yielder.run { 1 }
    i += 1
  end
when "success"
  while i < n
    breaker.call { 1 }
    i += 1
  end
when "bare_raise_yield"
  while i < n
    begin
      yielder.run { raise Bench::Boom, "boom" }
    rescue Bench::Boom
      nil
    end
    i += 1
  end
when "failure"
  while i < n
    begin
      breaker.call { raise Bench::Boom, "boom" }
    rescue Bench::Boom
      nil
    end
    i += 1
  end
when "bare_raise"
  while i < n
    begin
      raiser.run { 1 }
    rescue StandardError
      nil
    end
    i += 1
  end
when "rejection"
  while i < n
    begin
      breaker.call { 1 }
    rescue CircuitBreaker::OpenError
      nil
    end
    i += 1
  end
when "error_rate"
  while i < n
    window.error_rate
    i += 1
  end
when "metrics"
  while i < n
    breaker.metrics
    i += 1
  end
else
  abort "unknown path #{path.inspect}"
end
m = breaker.metrics
warn "#{path}: #{n} iterations; breaker #{m[:state]}, total #{m[:total]}, failures #{m[:failures]}, rejected #{m[:rejected]}"
