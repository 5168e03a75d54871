# frozen_string_literal: true

# A window and its breaker never disagree about time: a window that has not
# recorded takes its breaker's clock (reading it decides nothing); one that
# recorded on another clock is an ArgumentError (docs/semantics-permits.md).
RSpec.describe CircuitBreaker, "a window and its breaker's clock" do
  include BreakerHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }

  it "is not blinded by a TimeWindow read before it was handed over" do
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10)
    window.inspect # `p window`: read on the monotonic clock
    window.total
    breaker = build_breaker(clock: clock, window: window, min_calls: 10, consecutive_failures: nil)
    fail_calls(breaker, 9)
    expect(window.total).to eq(9)
    fail_calls(breaker, 1)
    expect(breaker.state).to eq(:open)
  end

  it "makes a window with a clock of its own that has recorded nothing follow the breaker's clock" do
    own = CircuitBreaker::ManualClock.new(500)
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10, clock: own)
    breaker = build_breaker(clock: clock, window: window, min_calls: 100)
    fail_calls(breaker, 3)
    expect(window.total).to eq(3)
    own.advance(60) # not the breaker's clock: changes nothing
    expect(window.total).to eq(3)
    clock.advance(10) # the breaker's: the calls expire
    expect(window.total).to eq(0)
  end

  it "lets a breaker without clock: use its TimeWindow's clock" do
    own = CircuitBreaker::ManualClock.new
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10, clock: own)
    breaker = CircuitBreaker.new(window: window, min_calls: 1, open_duration: 30)
    expect { breaker.call { raise "boom" } }.to raise_error(RuntimeError)
    expect(breaker.retry_after).to eq(30.0)
    own.advance(30)
    expect(breaker.state).to eq(:half_open)
  end

  it "refuses a TimeWindow that recorded on another clock, naming the window and the clock" do
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10)
    window.record(duration_ms: 1, success: false) # on the monotonic clock
    expect { CircuitBreaker.new(window: window, clock: clock) }
      .to raise_error(ArgumentError, /window: has recorded calls on another clock than the breaker's/)
    # Still free for a breaker on its clock, and it keeps its calls.
    breaker = CircuitBreaker.new(window: window, min_calls: 2)
    expect(window.total).to eq(1)
    expect { breaker.call { raise "boom" } }.to raise_error(RuntimeError)
    expect(breaker.state).to eq(:open)
  end

  it "accepts a TimeWindow that recorded on the breaker's own ManualClock" do
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10, clock: clock)
    window.record(duration_ms: 1, success: false)
    breaker = build_breaker(clock: clock, window: window, min_calls: 2)
    fail_calls(breaker, 1)
    expect(breaker.state).to eq(:open)
  end

  it "lets a SlidingWindow that recorded go to a breaker on any clock (it counts calls, not time)" do
    window = CircuitBreaker::SlidingWindow.new(size: 10)
    window.record(duration_ms: 1, success: false)
    breaker = build_breaker(clock: clock, window: window, min_calls: 2)
    fail_calls(breaker, 1)
    expect(breaker.state).to eq(:open)
  end
end
