# frozen_string_literal: true

# Error messages show the value the caller passed, short even for huge
# Arrays; a ManualClock refuses times it cannot hold instead of saturating.
RSpec.describe CircuitBreaker, "bad input, as the caller wrote it" do
  cb = CircuitBreaker
  big = 2**64

  {
    "CircuitBreaker.new(min_calls: 2**64)" => -> { cb.new(min_calls: big) },
    "CircuitBreaker.new(half_open_calls: -2**64)" => -> { cb.new(half_open_calls: -big) },
    "CircuitBreaker.new(threshold: 2**64)" => -> { cb.new(threshold: big) },
    "CircuitBreaker.new(probe_ratio: 0.5, half_open_window: 2**64)" => -> { cb.new(probe_ratio: 0.5, half_open_window: big) },
    "SlidingWindow.new(size: 2**64)" => -> { cb::SlidingWindow.new(size: big) },
    "TimeWindow.new(buckets: -2**64)" => -> { cb::TimeWindow.new(buckets: -big) }
  }.each do |call, run|
    it "shows the Integer #{call} was given, not a saturated one" do
      expect(&run).to raise_error(ArgumentError) { |e| expect(e.message).to end_with("(got #{call[/-?2\*\*64/] == '2**64' ? big : -big})") }
    end
  end

  it "keeps the message short for a huge Array" do
    ramp = Array.new(100_000) { |i| 1.0 - (i * 1e-6) } # descending: refused
    expect { cb.new(ramp: ramp) }.to raise_error(ArgumentError) do |e|
      expect(e.message).to include("(got [1.0, 0.999999, 0.999998, ... (100000 elements)])")
      expect(e.message.size).to be < 200
    end
  end

  it "refuses a ManualClock start it cannot hold" do
    expect { cb::ManualClock.new(1e10) }.to raise_error(ArgumentError, /start must be .*292 years.*\(got 10000000000.0\)/)
    expect { cb::ManualClock.new(-big) }.to raise_error(ArgumentError, /start .*\(got -18446744073709551616\)/)
    expect(cb::ManualClock.new(9e9).now).to eq(9e9)
  end

  it "refuses an advance past the time a ManualClock can hold, and keeps its time" do
    clock = cb::ManualClock.new(9e9)
    expect { clock.advance(1e9) }.to raise_error(ArgumentError, /seconds must be .*292 years/)
    expect { clock.advance(big) }.to raise_error(ArgumentError, /\(got 18446744073709551616\)/)
    expect(clock.now).to eq(9e9)
    breaker = CircuitBreaker.new(clock: clock, min_calls: 1, open_duration: 30)
    breaker.trip!
    clock.advance(30)
    expect(breaker.state).to eq(:half_open)
  end
end
