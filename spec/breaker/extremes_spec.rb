# frozen_string_literal: true

# The extremes a caller can reach from Ruby. A Rust panic in the extension
# would end the process (Ruby's `fatal`), so every example here passing
# means no panic; each also checks that the answers stay sensible: a clock
# holds about ±292 years and refuses to go past them, durations saturate
# there instead of overflowing, counts stay exact, rates stay in [0, 1].
RSpec.describe CircuitBreaker, "at the extremes" do
  end_of_time = 2**63 / 1e9 # seconds a saturated duration reads
  edge = 9.2e9 # seconds: a clock reading near the end of what it can hold

  def expect_sane(breaker)
    m = breaker.metrics
    expect(%i[closed open half_open forced_open disabled]).to include(m[:state])
    expect([m[:total], m[:failures], m[:slow_calls], m[:rejected]]).to all(be_an(Integer).and(be >= 0))
    expect([m[:error_rate], m[:slow_call_rate], m[:admit_share]]).to all(be_between(0.0, 1.0))
    expect(m[:retry_after]).to be_nil.or(be_finite.and(be >= 0)) if m[:retry_after]
    expect(m[:failures]).to be <= m[:total]
    m
  end

  it "runs a breaker on a clock near the end of time, and refuses to move the clock past it" do
    clock = CircuitBreaker::ManualClock.new(edge)
    breaker = described_class.new(clock: clock, min_calls: 1, half_open_calls: 1,
                                  window: CircuitBreaker::TimeWindow.new(seconds: 10))
    expect(breaker.call { :ok }).to eq(:ok)
    expect { breaker.call { raise "down" } }.to raise_error(RuntimeError)
    expect { clock.advance(1e300) }.to raise_error(ArgumentError, /seconds/)
    expect(clock.now).to eq(edge)
    clock.advance(30)
    expect(expect_sane(breaker)[:state]).to eq(:half_open)
    expect(breaker.call { :probe }).to eq(:probe)
    expect(breaker.state).to eq(:closed)
  end

  it "runs a breaker on a clock near the start of time and jumps across the whole range" do
    clock = CircuitBreaker::ManualClock.new(-edge)
    breaker = described_class.new(clock: clock, open_duration: 30, min_calls: 1, half_open_calls: 1)
    breaker.trip!
    expect(breaker.retry_after).to eq(30.0)
    clock.advance(29.5)
    expect(breaker.retry_after).to be_within(1e-6).of(0.5)
    clock.advance(edge)
    clock.advance(edge - 30)
    expect(expect_sane(breaker)[:state]).to eq(:half_open)
    expect(breaker.call { :probe }).to eq(:probe)
    expect(breaker.state).to eq(:closed)
  end

  it "expires a TimeWindow's buckets correctly when time jumps across the whole range" do
    clock = CircuitBreaker::ManualClock.new(-edge)
    window = CircuitBreaker::TimeWindow.new(seconds: 1e9, buckets: 3600, clock: clock)
    window.record(duration_ms: 1e300, success: false)
    expect([window.total, window.failures, window.slow_calls]).to eq([1, 1, 1])
    clock.advance(edge)
    expect(window.total).to eq(0)
    window.record(duration_ms: 0, success: true)
    clock.advance(edge)
    window.record(duration_ms: 0, success: true)
    expect([window.total, window.failures, window.error_rate]).to eq([1, 0, 0.0])
  end

  it "backs off with open_duration 1e300 and backoff 1e300 without overflowing" do
    clock = CircuitBreaker::ManualClock.new(-edge)
    breaker = described_class.new(clock: clock, open_duration: 1e300, backoff: 1e300, half_open_calls: 1,
                                  jitter: 0.5, window: CircuitBreaker::TimeWindow.new(seconds: 1e9, buckets: 3600))
    breaker.trip!
    expect(breaker.retry_after).to be_within(1).of(end_of_time) # saturated
    2.times { clock.advance(edge) } # the longest opening, from the start of time, ends near +0.02 years
    expect(breaker.state).to eq(:half_open)
    expect { breaker.call { raise "still down" } }.to raise_error(RuntimeError)
    # Backed off by 1e300, shortened by jitter up to half: still until the end of time.
    expect(expect_sane(breaker)[:state]).to eq(:open)
    expect(breaker.retry_after).to be_within(1).of(end_of_time - clock.now)
    breaker.reset!
    expect(breaker.call { :ok }).to eq(:ok)
  end

  it "caps a huge backoff with max_open_duration" do
    clock = CircuitBreaker::ManualClock.new
    breaker = described_class.new(clock: clock, open_duration: 1, backoff: 1e300, max_open_duration: 1e300,
                                  half_open_calls: 1)
    breaker.trip!
    clock.advance(1)
    expect { breaker.call { raise "down" } }.to raise_error(RuntimeError)
    # 1 s x 1e300, capped at 1e300 s: saturated at the end of time.
    expect(breaker.retry_after).to be_within(2).of(end_of_time - clock.now)
    clock.advance(edge)
    expect(expect_sane(breaker)[:state]).to eq(:open)
  end

  it "keeps exact counts in a 1_000_000-call SlidingWindow filled past capacity" do
    window = CircuitBreaker::SlidingWindow.new(size: 1_000_000, slow_threshold_ms: 1)
    n = scaled(1_000_000)
    breaker = described_class.new(window: window, min_calls: 1_000_000_000, error_rate_threshold: 1.0,
                                  slow_rate_threshold: 1.0)
    (n + 10).times { |i| breaker.record(i.odd?, duration_ms: i % 3) }
    kept = [n + 10, 1_000_000].min
    failures = ((n + 10 - kept)...(n + 10)).count(&:even?)
    slow = ((n + 10 - kept)...(n + 10)).count { |i| i % 3 >= 1 }
    expect([window.total, window.failures, window.slow_calls]).to eq([kept, failures, slow])
    expect(expect_sane(breaker)[:state]).to eq(:closed)
    expect(window.reset.total).to eq(0)
  end

  it "clamps min_calls 1_000_000_000 to a SlidingWindow of 1" do
    breaker = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 1), min_calls: 1_000_000_000)
    expect { breaker.call { raise "down" } }.to raise_error(RuntimeError)
    expect(breaker.state).to eq(:open)
  end

  it "runs a TimeWindow of 3600 buckets of one nanosecond each" do
    clock = CircuitBreaker::ManualClock.new
    window = CircuitBreaker::TimeWindow.new(seconds: 3.6e-6, buckets: 3600, clock: clock)
    100.times do
      window.record(duration_ms: 0, success: false)
      clock.advance(1e-9)
    end
    expect([window.total, window.failures]).to eq([100, 100])
    clock.advance(3.6e-6)
    expect(window.total).to eq(0)
    clock.advance(edge)
    window.record(duration_ms: 1, success: true)
    expect(window.total).to eq(1)
  end

  it "walks a ramp of 1000 stages to closed, one probe per stage" do
    clock = CircuitBreaker::ManualClock.new
    ramp = Array.new(1000) { |i| (i + 1) / 1000.0 }
    breaker = described_class.new(clock: clock, ramp: ramp, half_open_calls: 1, open_duration: 1)
    breaker.trip!
    clock.advance(1)
    walk = scaled(1000) # all 1000 stages (10 under GC_STRESS=1)
    seen = Array.new(walk) { [breaker.metrics[:stage], breaker.call { :probe }] }
    expect(seen).to eq(Array.new(walk) { |i| [i, :probe] })
    expect(breaker.state).to eq(walk == 1000 ? :closed : :half_open)
  end

  it "admits a tiny ramp share of 1e-300 (the first call of a stage) and half_open_calls 1_000_000" do
    clock = CircuitBreaker::ManualClock.new
    breaker = described_class.new(clock: clock, ramp: [1e-300], half_open_calls: 1_000_000, open_duration: 1)
    breaker.trip!
    clock.advance(1)
    expect(breaker.call { :first }).to eq(:first)
    expect { breaker.call { :second } }.to raise_error(CircuitBreaker::OpenError)
    expect(expect_sane(breaker)).to include(state: :half_open, admit_share: 1e-300)
  end

  it "records durations of 1e300 ms and 2**64 ms as slow calls" do
    breaker = described_class.new(min_calls: 1_000)
    breaker.record_success(duration_ms: 1e300)
    breaker.record_failure(duration_ms: 2**64)
    expect(expect_sane(breaker)).to include(total: 2, failures: 1, slow_calls: 2)
  end

  it "survives nesting calls until the Ruby stack overflows (nothing recorded, no probe held)" do
    breaker = described_class.new
    depth = 0
    dive = lambda do |d|
      depth = d
      breaker.call { dive.call(d + 1) }
    end
    expect { dive.call(0) }.to raise_error(SystemStackError)
    expect(depth).to be > 100
    expect(expect_sane(breaker)).to include(state: :closed, total: 0)
    expect(breaker.call { :fine }).to eq(:fine)
  end

  it "survives a ManualClock advanced many times to the end of time and a window asked about it" do
    clock = CircuitBreaker::ManualClock.new
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10, clock: clock)
    breaker = described_class.new(window: window, clock: clock, min_calls: 1, half_open_calls: 1)
    100.times { clock.advance(edge / 100) }
    expect(clock.now).to be_within(1).of(edge)
    expect { breaker.call { raise "down" } }.to raise_error(RuntimeError)
    expect_sane(breaker)
    clock.advance(30)
    expect(breaker.call { :probe }).to eq(:probe)
    expect(breaker.state).to eq(:closed)
  end
end
