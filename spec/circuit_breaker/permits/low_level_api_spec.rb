# frozen_string_literal: true

# docs/semantics-permits.md: allow? / record_success / record_failure / record, for code
# that cannot wrap a block.
RSpec.describe CircuitBreaker, "low-level API" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:window) { CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100) }

  def make(**options)
    build_breaker(**{ clock: clock, window: window }.merge(options))
  end

  def half_open(**options)
    breaker = make(**{ min_calls: 1, open_duration: 10 }.merge(options))
    breaker.trip!
    cool_down(breaker)
    breaker
  end

  def counts
    [window.total, window.failures, window.slow_calls]
  end

  describe "closed" do
    let(:breaker) { make(min_calls: 3) }

    it "takes duration_ms: 0 by default" do
      breaker.allow?
      breaker.record_success
      breaker.allow?
      breaker.record_failure
      expect(counts).to eq([2, 1, 0])
    end

    it "records with record(success, duration_ms:), success being truthy or falsy" do
      breaker = make(min_calls: 100)
      [true, "yes", false, nil].each do |success|
        breaker.allow?
        breaker.record(success, duration_ms: 5)
      end
      breaker.allow?
      breaker.record(true)
      expect(counts).to eq([5, 2, 0])
    end

    it "trips the breaker like call does" do
      events = transitions_of(breaker)
      3.times do
        breaker.allow?
        breaker.record_failure
      end
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[closed open error_rate]])
      expect(breaker.allow?).to be(false)
    end
  end

  describe "rejections" do
    it "counts allow? false in metrics[:rejected] and passes an OpenError to on_reject" do
      breaker = make(min_calls: 1, open_duration: 10, name: "ledger")
      errors = []
      breaker.on_reject { |e| errors << e }
      breaker.trip!
      clock.advance(4)
      expect([breaker.allow?, breaker.allow?]).to eq([false, false])
      expect(breaker.metrics[:rejected]).to eq(2)
      expect(errors.size).to eq(2)
      expect(errors.first).to be_a(CircuitBreaker::OpenError)
      expect(errors.first).to have_attributes(state: :open, breaker_name: "ledger", retry_after: 6.0)
    end

    it "counts a half-open allow? without a free slot as a rejection" do
      breaker = half_open(half_open_calls: 1)
      states = []
      breaker.on_reject { |e| states << e.state }
      expect([breaker.allow?, breaker.allow?]).to eq([true, false])
      expect(breaker.metrics[:rejected]).to eq(1)
      expect(states).to eq([:half_open])
    end

    it "counts a forced-open allow? as a rejection" do
      breaker = make
      breaker.force_open!
      expect(breaker.allow?).to be(false)
      expect(breaker.metrics[:rejected]).to eq(1)
    end
  end

  describe "half-open" do
    it "ignores a record_* without a permit while half-open" do
      breaker = half_open(half_open_calls: 1)
      breaker.record_success
      breaker.record_failure
      expect(breaker.state).to eq(:half_open)
      expect(counts).to eq([0, 0, 0])
      expect(breaker.allow?).to be(true) # the slot was never taken
    end

    it "ignores a record_* without a permit while open or forced open" do
      breaker = make(min_calls: 1)
      breaker.trip!
      breaker.record_failure
      breaker.force_open!
      breaker.record_failure
      expect(counts).to eq([0, 0, 0])
    end
  end

  describe "permits" do
    it "keeps permits per thread: each thread's record_* settles its own, with threads interleaved" do
      breaker = make(min_calls: 2, open_duration: 10, half_open_calls: 1)
      with_actor do |first|
        with_actor do |second|
          expect(first.run { breaker.allow? }).to be(true) # closed: an ordinary permit
          breaker.trip!
          cool_down(breaker)
          expect(second.run { breaker.allow? }).to be(true) # the probe
          expect(first.run { breaker.allow? }).to be(false) # the only slot is taken

          # The second thread's success settles its own probe, not the
          # first thread's older permit.
          second.run { breaker.record_success }
          expect(breaker.state).to eq(:closed)

          # The first thread's old permit is settled (dropped) by its own record.
          first.run { breaker.record_failure }
          expect(counts).to eq([0, 0, 0])
          first.run { breaker.record_failure } # no permit left: recorded, closed
          expect(counts).to eq([1, 1, 0])
        end
      end
    end

    it "keeps permits per breaker" do
      a = half_open(half_open_calls: 1)
      b = make(min_calls: 1, window: CircuitBreaker::SlidingWindow.new(size: 10))
      expect(a.allow?).to be(true)
      b.record_failure # no permit of b: recorded as b is closed
      expect(a.state).to eq(:half_open)
      expect(b.state).to eq(:open)
      a.record_success
      expect(a.state).to eq(:closed)
    end
  end

  describe "bad duration_ms" do
    [-1, -0.001, Float::NAN, Float::INFINITY].each do |bad|
      it "refuses #{bad} with ArgumentError naming duration_ms, leaving the permit in place" do
        breaker = half_open(half_open_calls: 1)
        breaker.allow?
        expect { breaker.record_success(duration_ms: bad) }.to raise_error(ArgumentError, /duration_ms/)
        expect { breaker.record(true, duration_ms: bad) }.to raise_error(ArgumentError, /duration_ms/)
        expect(breaker.state).to eq(:half_open)
        breaker.record_success(duration_ms: 1)
        expect(breaker.state).to eq(:closed)
      end
    end

    it "refuses a non-Numeric with TypeError, leaving the permit in place" do
      breaker = half_open(half_open_calls: 1)
      breaker.allow?
      expect { breaker.record_failure(duration_ms: "5") }.to raise_error(TypeError, /duration_ms/)
      expect { breaker.record_failure(duration_ms: nil) }.to raise_error(TypeError, /duration_ms/)
      breaker.record_success
      expect(breaker.state).to eq(:closed)
    end

    it "records nothing for a refused duration while closed" do
      breaker = make
      expect { breaker.record_failure(duration_ms: -5) }.to raise_error(ArgumentError)
      expect(counts).to eq([0, 0, 0])
    end
  end
end
