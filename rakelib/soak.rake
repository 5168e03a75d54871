# frozen_string_literal: true

# Not part of `rake spec` or CI. Runs SOAK_CALLS operations (default
# 10,000,000) over every path of the gem in a fresh Ruby process and checks
# that its resident memory stays flat: RSS (VmRSS of /proc/self/status,
# after a full GC) at the end within 5 % of RSS after warm-up (the first
# tenth). Exits non-zero when it grew more.
SOAK_SCRIPT = <<~'RUBY'
  require "circuit_breaker"

  total = Integer(ENV.fetch("SOAK_CALLS", "10000000"))
  rss = -> { GC.start; File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i }
  clock = CircuitBreaker::ManualClock.new
  transitions = rejects = 0

  closed = CircuitBreaker.new(name: "closed", clock: clock, error_rate_threshold: 1.0, min_calls: 1_000_000_000)
  failing = CircuitBreaker.new(name: "failing", clock: clock, open_duration: 1, min_calls: 10,
                               window: CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10))
  failing.on_state_change { transitions += 1 }
  failing.on_reject { rejects += 1 }
  open = CircuitBreaker.new(name: "open", clock: clock).force_open!
  probing = CircuitBreaker.new(name: "probing", clock: clock, open_duration: 1, half_open_calls: 4,
                               ramp: [0.5, 1.0], failure_if: ->(v) { v == :bad })
  probing.on_state_change { transitions += 1 }
  manual = CircuitBreaker.new(name: "manual", clock: clock, min_calls: 50, ignore_errors: [KeyError])

  # One step = 10 operations, one per path.
  step = lambda do |i|
    closed.call { i }                                                  # closed success
    begin                                                              # failures (trips, reopens)
      failing.call { raise "down" }
    rescue RuntimeError, CircuitBreaker::OpenError
      nil
    end
    begin                                                              # rejection
      open.call { i }
    rescue CircuitBreaker::OpenError
      nil
    end
    probing.trip! if probing.closed? && i % 7 == 0                     # half-open probes
    clock.advance(0.25)
    begin
      probing.call { i % 11 == 0 ? :bad : i }
    rescue CircuitBreaker::OpenError
      nil
    end
    if manual.allow?                                                   # allow? / record
      i.odd? ? manual.record_success(duration_ms: i % 1000) : manual.record_failure(duration_ms: 1)
    end
    manual.record(true, duration_ms: 900)
    begin                                                              # ignored error
      manual.call { raise KeyError }
    rescue KeyError
      nil
    end
    closed.metrics                                                     # metrics reads
    failing.window.error_rate + closed.window.total
    manual.reset! if i % 1000 == 0
  end

  steps = total / 10
  samples = {}
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  samples[:start] = rss.call
  (1..steps).each do |i|
    step.call(i)
    case i
    when steps / 10 then samples[:warm] = rss.call
    when steps / 2 then samples[:middle] = rss.call
    end
  end
  samples[:end] = rss.call
  seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

  growth = (samples[:end] - samples[:warm]) * 100.0 / samples[:warm]
  puts format("soak: %d operations in %.1fs (%.0f/s); %d transitions, %d on_reject calls",
              steps * 10, seconds, steps * 10 / seconds, transitions, rejects)
  puts "soak: RSS (KiB) " + samples.map { |k, v| "#{k} #{v}" }.join(", ")
  puts format("soak: growth after warm-up %+.2f%% (limit 5%%); GC runs %d, heap live slots %d",
              growth, GC.count, GC.stat(:heap_live_slots))
  puts "soak: metrics #{%i[closed failing open probing manual].zip([closed, failing, open, probing, manual].map { |b| b.metrics.slice(:state, :total, :rejected) }).to_h}"
  exit(growth <= 5.0 ? 0 : 1)
RUBY

desc "Memory soak: 10,000,000 operations over every path; RSS must stay flat (SOAK_CALLS=n)"
task soak: :compile do
  ruby "-I", File.expand_path("../lib", __dir__), "-e", SOAK_SCRIPT
end
