# frozen_string_literal: true

RSpec.shared_examples "a window" do
  it "starts empty with zero rates" do
    expect([window.total, window.failures, window.slow_calls]).to eq([0, 0, 0])
    expect([window.error_rate, window.slow_call_rate]).to eq([0.0, 0.0])
  end

  it "counts a slow failure as both a failure and a slow call" do
    expect(window.record(duration_ms: 900, success: false)).to be(window)
    expect([window.error_rate, window.slow_call_rate]).to eq([1.0, 1.0])
  end

  it "calls a call slow from exactly the threshold on" do
    window.record(duration_ms: 799.999, success: true)
    window.record(duration_ms: 800, success: true)
    expect(window.slow_calls).to eq(1)
    expect(window.slow_call_rate).to eq(0.5)
  end

  it "takes any truthy value as success and nil/false as failure" do
    window.record(duration_ms: 1, success: "yes")
    window.record(duration_ms: 1, success: nil)
    window.record(duration_ms: 1, success: false)
    expect([window.total, window.failures]).to eq([3, 2])
    expect(window.error_rate).to eq(2.0 / 3)
  end

  it "empties on reset and returns itself" do
    window.record(duration_ms: 900, success: false)
    expect(window.reset).to be(window)
    expect([window.total, window.error_rate]).to eq([0, 0.0])
  end

  it "reports its slow-call threshold" do
    expect(window.slow_threshold_ms).to eq(800)
  end

  describe "#record with bad arguments" do
    it "names the argument in the error and records nothing" do
      expect { window.record(duration_ms: -1, success: true) }.to raise_error(ArgumentError, /duration_ms must be a finite Numeric >= 0/)
      expect { window.record(duration_ms: Float::NAN, success: true) }.to raise_error(ArgumentError, /duration_ms/)
      expect { window.record(duration_ms: Float::INFINITY, success: true) }.to raise_error(ArgumentError, /duration_ms/)
      expect { window.record(duration_ms: "5", success: true) }.to raise_error(TypeError, /duration_ms must be a Numeric/)
      expect { window.record(duration_ms: nil, success: true) }.to raise_error(TypeError, /duration_ms/)
      expect { window.record(success: true) }.to raise_error(ArgumentError, /duration_ms/)
      expect { window.record(duration_ms: 1) }.to raise_error(ArgumentError, /success/)
      expect { window.record(duration_ms: 1, success: true, extra: 1) }.to raise_error(ArgumentError, /extra/)
      expect(window.total).to eq(0)
    end
  end

  it "loses no count when many threads record at once" do
    threads = 8.times.map do |i|
      Thread.new { 1_000.times { |n| window.record(duration_ms: n.even? ? 900 : 1, success: i.even?) } }
    end
    threads.each(&:join)
    expect(window.total).to eq([8_000, capacity].min)
  end
end

RSpec.describe CircuitBreaker::SlidingWindow do
  subject(:window) { described_class.new(size: 100_000) }
  let(:capacity) { 100_000 }

  include_examples "a window"

  it "defaults to 100 calls and an 800 ms slow line" do
    w = described_class.new
    expect([w.size, w.slow_threshold_ms]).to eq([100, 800])
  end

  it "keeps only the last size calls" do
    w = described_class.new(size: 3)
    w.record(duration_ms: 900, success: false)
    3.times { w.record(duration_ms: 1, success: true) }
    expect([w.total, w.failures, w.slow_calls]).to eq([3, 0, 0])
  end

  it "answers rates of a large window as a full one" do
    w = described_class.new(size: 10_000)
    20_000.times { |i| w.record(duration_ms: 1, success: i % 4 != 0) }
    expect([w.total, w.error_rate]).to eq([10_000, 0.25])
  end

  it "refuses bad sizes and thresholds, naming them" do
    expect { described_class.new(size: 0) }.to raise_error(ArgumentError, /size must be an Integer in 1..1_000_000 \(got 0\)/)
    expect { described_class.new(size: 1_000_001) }.to raise_error(ArgumentError, /size/)
    expect { described_class.new(size: 2**70) }.to raise_error(ArgumentError, /size/)
    expect { described_class.new(size: 1.5) }.to raise_error(TypeError, /size must be an Integer \(got Float\)/)
    expect { described_class.new(size: nil) }.to raise_error(TypeError, /size/)
    expect { described_class.new(slow_threshold_ms: 0) }.to raise_error(ArgumentError, /slow_threshold_ms/)
    expect { described_class.new(slow_threshold_ms: -Float::INFINITY) }.to raise_error(ArgumentError, /slow_threshold_ms/)
    expect { described_class.new(slow_threshold_ms: :fast) }.to raise_error(TypeError, /slow_threshold_ms/)
    expect { described_class.new(sise: 3) }.to raise_error(ArgumentError, /sise/)
  end
end

RSpec.describe CircuitBreaker::TimeWindow do
  subject(:window) { described_class.new(seconds: 10, buckets: 10, clock: clock) }
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:capacity) { Float::INFINITY }

  include_examples "a window"

  it "defaults to 10 seconds in 10 buckets" do
    w = described_class.new
    expect([w.seconds, w.buckets, w.slow_threshold_ms]).to eq([10, 10, 800])
  end

  it "expires whole buckets as time passes" do
    window.record(duration_ms: 1, success: false)
    clock.advance(0.5)
    window.record(duration_ms: 900, success: true)
    clock.advance(5)
    window.record(duration_ms: 1, success: true)
    clock.advance(4)
    expect(window.total).to eq(3)
    # At 10 s the first bucket ([0, 1) s) leaves, with both of its calls.
    clock.advance(0.5)
    expect([window.total, window.failures, window.slow_calls]).to eq([1, 0, 0])
    clock.advance(100)
    expect([window.total, window.error_rate]).to eq([0, 0.0])
  end

  it "refuses bad configuration, naming it" do
    expect { described_class.new(seconds: 0) }.to raise_error(ArgumentError, /seconds must be/)
    expect { described_class.new(seconds: -1) }.to raise_error(ArgumentError, /seconds/)
    expect { described_class.new(seconds: Float::NAN) }.to raise_error(ArgumentError, /seconds/)
    expect { described_class.new(seconds: "10") }.to raise_error(TypeError, /seconds/)
    expect { described_class.new(buckets: 0) }.to raise_error(ArgumentError, /buckets must be an Integer in 1..3600/)
    expect { described_class.new(buckets: 3601) }.to raise_error(ArgumentError, /buckets/)
    expect { described_class.new(buckets: 2.0) }.to raise_error(TypeError, /buckets/)
    expect { described_class.new(clock: Object.new) }.to raise_error(TypeError, /clock must be nil or a CircuitBreaker::ManualClock/)
  end
end
