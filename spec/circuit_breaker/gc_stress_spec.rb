# frozen_string_literal: true

# Every path through the native code once, with objects only the native side
# references: under GC_STRESS=1 (bin/test runs this file that way) a missing
# mark or a moved handle shows up here as a crash or a wrong answer.
RSpec.describe CircuitBreaker, "under GC.stress", :gc_stress do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:matched) { Class.new(StandardError) }

  def build
    events = []
    breaker = described_class.new(
      window: CircuitBreaker::SlidingWindow.new(size: 10), clock: clock, name: "gc#{rand(1000)}",
      min_calls: 4, open_duration: 5, half_open_calls: 1,
      record_errors: [matched, ->(e) { e.message == "counted" }],
      ignore_errors: [->(e) { e.message == "ignored" }],
      failure_if: ->(value) { value == :bad }
    )
    breaker.on_state_change { |e| events << [e.from, e.to, e.reason] }
    [breaker, events]
  end

  it "keeps matchers, failure_if and listeners alive and working" do
    breaker, events = build
    GC.start
    expect(breaker.call { :bad }).to eq(:bad)
    expect { breaker.call { raise matched, "x" } }.to raise_error(matched)
    expect { breaker.call { raise "counted" } }.to raise_error(RuntimeError)
    expect { breaker.call { raise "ignored" } }.to raise_error(RuntimeError)
    expect(breaker.metrics[:failures]).to eq(3)
    expect { breaker.call { raise matched } }.to raise_error(matched)
    expect(events).to eq([%i[closed open error_rate]])
    expect { breaker.call { :never } }.to raise_error(CircuitBreaker::OpenError) { |e| expect(e.breaker_name).to start_with("gc") }
  end

  it "runs jumps, probes and the low-level API" do
    breaker, events = build
    breaker.trip!
    clock.advance(5)
    expect(breaker.call { break :broke }).to eq(:broke)
    expect(breaker.state).to eq(:closed)
    expect(catch(:out) { breaker.call { throw :out, :thrown } }).to eq(:thrown)
    expect(breaker.allow?).to be(true)
    breaker.record_failure(duration_ms: 1)
    expect(breaker.metrics).to include(total: 2, failures: 1)
    expect(events.map { |e| e[1] }).to eq(%i[open half_open closed])
  end

  it "keeps windows, clocks and shared records readable" do
    window = CircuitBreaker::TimeWindow.new(seconds: 1, buckets: 2, clock: clock)
    window.record(duration_ms: 900, success: false)
    clock.advance(0.5)
    expect([window.total, window.slow_calls, window.error_rate]).to eq([1, 1, 1.0])
    clock.advance(1)
    expect(window.total).to eq(0)
  end
end
