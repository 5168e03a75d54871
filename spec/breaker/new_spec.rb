# frozen_string_literal: true

# docs/configuration.md (options and their defaults) (the articles' spellings included).
RSpec.describe CircuitBreaker, ".new" do
  let(:clock) { CircuitBreaker::ManualClock.new }

  def window(size = 100)
    CircuitBreaker::SlidingWindow.new(size: size)
  end

  describe "defaults" do
    it "starts closed and empty: every metric at its resting value, in a frozen Hash" do
      metrics = CircuitBreaker.new.metrics
      expect(metrics).to eq(state: :closed, total: 0, failures: 0, slow_calls: 0, error_rate: 0.0,
                            slow_call_rate: 0.0, rejected: 0, stage: nil, admit_share: 1.0, retry_after: 0.0,
                            calls: 0, successes: 0, failures_total: 0, slow_total: 0, opened: 0,
                            tripped_error_rate: nil, tripped_slow_call_rate: nil, counters: :process,
                            dropped_records: 0, scope: :process, in_flight: nil, concurrency_limit: nil,
                            limited: 0)
      expect(metrics).to be_frozen
    end

    it "gives a breaker without window: its own SlidingWindow of 100 calls, slow from 800 ms" do
      a = CircuitBreaker.new
      b = CircuitBreaker.new
      expect(a.window).to be_a(CircuitBreaker::SlidingWindow)
      expect([a.window.size, a.window.slow_threshold_ms]).to eq([100, 800])
      expect(a.window).not_to be(b.window)
      a.call { :ok }
      expect([a.window.total, b.window.total]).to eq([1, 0])
    end

    it "takes window: nil as not given" do
      breaker = CircuitBreaker.new(window: nil)
      expect(breaker.window).to be_a(CircuitBreaker::SlidingWindow)
      expect(breaker.window.size).to eq(100)
    end

    it "has no name" do
      breaker = CircuitBreaker.new
      expect(breaker.name).to be_nil
    end

    context "on a ManualClock" do
      let(:breaker) { build_breaker(clock: clock) }

      it "needs min_calls 20 and an error rate of 0.5 to open (failures never 8 in a row)" do
        9.times do
          fail_calls(breaker, 1)
          succeed_calls(breaker, 1)
        end
        fail_calls(breaker, 1)
        expect(breaker.state).to eq(:closed) # 10 of 19 failed: below min_calls
        succeed_calls(breaker, 1)
        expect(breaker.state).to eq(:open) # 10 of 20
      end

      it "opens at a slow-call rate of 0.8 (slow from 800 ms)" do
        succeed_calls(breaker, 4, ms: 799)
        succeed_calls(breaker, 15, ms: 800)
        expect(breaker.state).to eq(:closed)
        succeed_calls(breaker, 1, ms: 800)
        expect(breaker.state).to eq(:open)
      end

      it "opens for 30 s, with no jitter" do
        trip!(breaker)
        expect(breaker.retry_after).to eq(30.0)
        clock.advance(30)
        expect(breaker.state).to eq(:half_open)
      end

      it "probes with 2 calls at a time in one stage, all of which must pass" do
        trip!(breaker)
        cool_down(breaker)
        expect(breaker.metrics).to include(stage: 0, admit_share: 1.0)
        expect(Array.new(3) { breaker.allow? }).to eq([true, true, false])
        breaker.record_success
        breaker.record_failure
        expect(breaker.state).to eq(:open)
      end

      it "does not back off: every reopen lasts 30 s" do
        trip!(breaker)
        3.times do
          cool_down(breaker)
          fail_calls(breaker, 1)
          expect(breaker.retry_after).to eq(30.0)
        end
      end

      it "has no half-open timeout, and a probe left unsettled fails after open_duration (probe_timeout)" do
        trip!(breaker)
        cool_down(breaker)
        breaker.allow?
        clock.advance(29.999)
        expect(breaker.state).to eq(:half_open)
        clock.advance(0.001)
        expect(breaker.state).to eq(:open)
      end

      it "records StandardErrors, ignores nothing else, and judges no return value" do
        expect { breaker.call { raise "plain RuntimeError" } }.to raise_error(RuntimeError)
        expect { breaker.call { raise Interrupt } }.to raise_error(Interrupt)
        breaker.call { false }
        breaker.call { nil }
        expect(breaker.metrics).to include(total: 3, failures: 1)
      end
    end

    it "has no cap on a backed-off open duration" do
      breaker = build_breaker(clock: clock, min_calls: 1, open_duration: 10, backoff: 10)
      trip!(breaker)
      durations = Array.new(4) do
        cool_down(breaker)
        fail_calls(breaker, 1)
        breaker.retry_after
      end
      expect(durations).to eq([100.0, 1_000.0, 10_000.0, 100_000.0])
    end

    it "reads the monotonic clock without clock:" do
      breaker = CircuitBreaker.new(window: window, min_calls: 1, open_duration: 30)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
      expect(breaker.retry_after).to be > 0.0
      expect(breaker.retry_after).to be <= 30.0
    end
  end

  describe "name:" do
    it "accepts a String" do
      breaker = CircuitBreaker.new(name: "payments")
      expect(breaker.name).to eq("payments")
    end

    it "accepts a Symbol, reported as a String in name, errors and events" do
      breaker = build_breaker(clock: clock, name: :payments, min_calls: 1)
      events = transitions_of(breaker)
      trip!(breaker)
      expect(breaker.name).to eq("payments")
      expect(events.first.name).to eq("payments")
      expect { breaker.call { :ok } }.to raise_error(CircuitBreaker::OpenError, /"payments"/) do |e|
        expect(e.breaker_name).to eq("payments")
      end
    end

    it "is unaffected by later changes to the String given" do
      name = +"payments"
      breaker = CircuitBreaker.new(name: name)
      name << "-v2"
      expect(breaker.name).to eq("payments")
    end
  end

  describe "the articles' spellings (docs/configuration.md)" do
    it "takes threshold: for error_rate_threshold:" do
      breaker = build_breaker(clock: clock, window: window(10), min_calls: 10, threshold: 0.3)
      succeed_calls(breaker, 7)
      fail_calls(breaker, 2)
      expect(breaker.state).to eq(:closed)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
    end

    it "takes retry_time: for open_duration:" do
      breaker = build_breaker(clock: clock, min_calls: 1, retry_time: 5)
      trip!(breaker)
      expect(breaker.retry_after).to eq(5.0)
    end

    it "takes probe_ratio: with half_open_window: for ramp: [r], half_open_calls: max(1, floor(w * r))" do
      breaker = build_breaker(clock: clock, min_calls: 1, probe_ratio: 0.25, half_open_window: 14)
      trip!(breaker)
      cool_down(breaker)
      expect(breaker.metrics[:admit_share]).to eq(0.25)
      grants = Array.new(100) { breaker.allow? }
      expect(grants.count(true)).to eq(3) # floor(14 * 0.25)
    end

    it "takes probe_ratio: alone for ramp: [r], keeping half_open_calls" do
      breaker = build_breaker(clock: clock, min_calls: 1, probe_ratio: 0.5, half_open_calls: 3)
      trip!(breaker)
      cool_down(breaker)
      expect(breaker.metrics[:admit_share]).to eq(0.5)
      expect(Array.new(100) { breaker.allow? }.count(true)).to eq(3)
    end

    it "refuses half_open_window: without probe_ratio:" do
      expect { CircuitBreaker.new(half_open_window: 10) }.to raise_error(ArgumentError, /half_open_window/)
      expect { CircuitBreaker.new(half_open_window: 10, probe_ratio: nil) }
        .to raise_error(ArgumentError, /half_open_window/)
    end

    {
      { threshold: 0.5, error_rate_threshold: 0.5 } => /threshold/,
      { retry_time: 5, open_duration: 5 } => /retry_time|open_duration/,
      { probe_ratio: 0.2, ramp: [0.2] } => /probe_ratio|ramp/,
      { probe_ratio: 0.2, half_open_window: 10, half_open_calls: 2 } => /half_open_window|half_open_calls/
    }.each do |options, message|
      it "refuses an alias together with its own name: #{options.keys.join(', ')}" do
        expect { CircuitBreaker.new(**options) }.to raise_error(ArgumentError, message)
      end
    end

    it "counts an alias given as nil as not given" do
      breaker = build_breaker(clock: clock, threshold: nil, retry_time: nil, probe_ratio: nil,
                              half_open_window: nil, error_rate_threshold: 0.3, open_duration: 7, ramp: [0.5, 1.0],
                              half_open_calls: 1, min_calls: 1)
      trip!(breaker)
      expect(breaker.retry_after).to eq(7.0)
      cool_down(breaker)
      expect(breaker.metrics[:admit_share]).to eq(0.5)
      expect(CircuitBreaker.new(threshold: nil).metrics[:state]).to eq(:closed)
    end
  end

  describe "bad arguments" do
    it "refuses an unknown keyword, naming it" do
      expect { CircuitBreaker.new(error_threshold: 0.5) }.to raise_error(ArgumentError, /error_threshold/)
    end

    it "refuses positional arguments" do
      expect { CircuitBreaker.new(window) }.to raise_error(ArgumentError)
    end

    {
      { error_rate_threshold: 0 } => [ArgumentError, /error_rate_threshold/],
      { error_rate_threshold: 1.01 } => [ArgumentError, /error_rate_threshold/],
      { slow_rate_threshold: -0.1 } => [ArgumentError, /slow_rate_threshold/],
      { threshold: "0.5" } => [TypeError, /error_rate_threshold|threshold/],
      { min_calls: 0 } => [ArgumentError, /min_calls/],
      { min_calls: 2.5 } => [TypeError, /min_calls/],
      { open_duration: 0 } => [ArgumentError, /open_duration/],
      { open_duration: Float::NAN } => [ArgumentError, /open_duration/],
      { half_open_calls: 0 } => [ArgumentError, /half_open_calls/],
      { ramp: [] } => [ArgumentError, /ramp/],
      { ramp: [0.6, 0.3] } => [ArgumentError, /ramp/],
      { ramp: [0.5, 1.5] } => [ArgumentError, /ramp/],
      { advance_rate: 0.9, reopen_rate: 0.95 } => [ArgumentError, /reopen_rate/],
      { backoff: 0.5 } => [ArgumentError, /backoff/],
      { open_duration: 30, max_open_duration: 10 } => [ArgumentError, /max_open_duration/],
      { jitter: 1.0 } => [ArgumentError, /jitter/],
      { half_open_timeout: 0 } => [ArgumentError, /half_open_timeout/],
      { probe_ratio: 0.2, half_open_window: 0 } => [ArgumentError, /half_open_window/],
      { record_errors: [String] } => [TypeError, /record_errors/],
      { failure_if: 42 } => [TypeError, /failure_if/],
      { name: 42 } => [TypeError, /name/],
      { clock: Object.new } => [TypeError, /clock/],
      { logger: 5 } => [TypeError, /logger must be nil or an object with warn and info/]
    }.each do |options, (error, message)|
      it "refuses #{options.inspect} with #{error}, naming the option" do
        expect { CircuitBreaker.new(**options) }.to raise_error(error, message)
      end
    end

    it "names the alias the caller wrote when an alias's value is out of range" do
      expect { CircuitBreaker.new(probe_ratio: 0) }.to raise_error(ArgumentError, /probe_ratio/)
      expect { CircuitBreaker.new(probe_ratio: 1.5) }.to raise_error(ArgumentError, /probe_ratio/)
      expect { CircuitBreaker.new(retry_time: -1) }.to raise_error(ArgumentError, /retry_time/)
      expect { CircuitBreaker.new(threshold: 2) }.to raise_error(ArgumentError, /\bthreshold\b/)
    end

    it "refuses a window that another breaker already uses, and the first keeps working" do
      shared = window(10)
      first = CircuitBreaker.new(window: shared)
      expect { CircuitBreaker.new(window: shared) }.to raise_error(ArgumentError, /window/)
      first.call { :ok }
      expect(shared.total).to eq(1)
      expect(first.window).to be(shared)
    end
  end

  describe "window: a TimeWindow" do
    it "follows the breaker's ManualClock when it has no clock of its own" do
      time_window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10)
      breaker = build_breaker(clock: clock, window: time_window, min_calls: 5, consecutive_failures: nil)
      fail_calls(breaker, 4)
      expect(time_window.total).to eq(4)
      clock.advance(10)
      expect(time_window.total).to eq(0) # expired on the breaker's clock
      fail_calls(breaker, 4)
      expect(breaker.state).to eq(:closed) # the old failures no longer count
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
    end
  end
end
