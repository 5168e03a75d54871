# frozen_string_literal: true

# docs/semantics.md: states, transitions, timers, generations, backoff and jitter.
RSpec.describe CircuitBreaker, "states" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:window) { CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100) }

  def make(**options)
    build_breaker(**{ clock: clock, window: window }.merge(options))
  end

  describe "closed → open" do
    it "opens after consecutive_failures failures in a row, whatever the window holds (reason :consecutive_failures)" do
      breaker = build_breaker(clock: clock, window: CircuitBreaker::SlidingWindow.new(size: 100), min_calls: 20,
                              consecutive_failures: 3)
      events = []
      breaker.on_state_change { |e| events << e.reason }
      succeed_calls(breaker, 50)
      fail_calls(breaker, 2)
      succeed_calls(breaker, 1)
      fail_calls(breaker, 2)
      expect(breaker.state).to eq(:closed)
      fail_calls(breaker, 1)
      expect([breaker.state, events]).to eq([:open, [:consecutive_failures]])
      expect { make(consecutive_failures: 0) }.to raise_error(ArgumentError, /consecutive_failures must be nil or an Integer in 1\.\.1_000_000_000/)
      expect { make(consecutive_failures: "3") }.to raise_error(TypeError, /consecutive_failures/)
    end

    it "opens by default after 8 failures in a row, with a window full of successes (docs/choices.md)" do
      breaker = build_breaker(clock: clock)
      succeed_calls(breaker, 100)
      fail_calls(breaker, 7)
      expect(breaker.state).to eq(:closed)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
      expect(build_breaker(clock: clock, consecutive_failures: nil).tap { |b| fail_calls(b, 19) }.state).to eq(:closed)
    end

    it "stays closed just below the threshold" do
      breaker = make(min_calls: 10, error_rate_threshold: 0.5)
      succeed_calls(breaker, 6)
      fail_calls(breaker, 4)
      expect(breaker.state).to eq(:closed)
      expect(breaker.metrics[:error_rate]).to eq(0.4)
    end

    it "clamps min_calls to a SlidingWindow's size (a full window can always give a verdict)" do
      small = CircuitBreaker::SlidingWindow.new(size: 5)
      breaker = build_breaker(clock: clock, window: small, min_calls: 20)
      fail_calls(breaker, 4)
      expect(breaker.state).to eq(:closed)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
    end

    it "does not clamp min_calls for a TimeWindow" do
      time_window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10)
      breaker = build_breaker(clock: clock, window: time_window, min_calls: 20, consecutive_failures: nil)
      fail_calls(breaker, 19)
      expect(breaker.state).to eq(:closed)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
    end

    it "opens on the error rate while the slow-call rate is low (error rate OR slow-call rate)" do
      breaker = make(min_calls: 4, error_rate_threshold: 0.75, slow_rate_threshold: 0.5)
      events = transitions_of(breaker)
      fail_calls(breaker, 3)
      succeed_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[closed open error_rate]])
      expect(events.first.reason).to eq(:error_rate)
    end

    it "returns the block's value from the success that opens it, after a GC in its listener" do
      breaker = make(min_calls: 4, error_rate_threshold: 0.75)
      seen = []
      breaker.on_state_change do |e|
        seen << e.to
        GC.start
      end
      fail_calls(breaker, 3)
      value = breaker.call { +"made by the block" }
      expect(seen).to eq([:open])
      expect(value).to eq("made by the block")
    end

    it "judges only what is in the window: old failures scroll out of a SlidingWindow" do
      breaker = make(min_calls: 10, error_rate_threshold: 0.5)
      fail_calls(breaker, 4)
      succeed_calls(breaker, 10) # the 4 failures are gone from the last 10 calls
      fail_calls(breaker, 4)
      expect(breaker.state).to eq(:closed)
      expect(window.failures).to eq(4)
    end
  end

  describe "open → half_open" do
    let(:breaker) { make(min_calls: 1, open_duration: 10) }

    before do
      trip!(breaker)
      clock.advance(9.999)
    end

    it "rejects until open_duration has passed, not a millisecond before" do
      expect(breaker.state).to eq(:open)
      expect(attempt(breaker)).to eq(:rejected)
      expect(breaker.allow?).to be(false)
      expect(breaker.metrics[:state]).to eq(:open)
      expect(breaker.retry_after).to be_within(1e-9).of(0.001)
    end

    it "is seen by `call`, which runs as a probe" do
      clock.advance(0.001)
      expect(breaker.call { :probe }).to eq(:probe)
    end

    it "is seen by `allow?`, which hands out a probe permit" do
      events = transitions_of(breaker)
      clock.advance(0.001)
      expect(breaker.allow?).to be(true)
      expect(moves(events)).to eq([%i[open half_open cool_down_elapsed]])
    end

    it "is seen by `metrics`" do
      clock.advance(0.001)
      expect(breaker.metrics).to include(state: :half_open, stage: 0, admit_share: 1.0, retry_after: 1.0)
    end

    it "is seen by `record_*` (which is then ignored: it has no permit)" do
      events = transitions_of(breaker)
      clock.advance(0.001)
      breaker.record_success
      expect(moves(events)).to eq([%i[open half_open cool_down_elapsed]])
      expect(window.total).to eq(0)
    end

    it "happens however late it is noticed, and needs no thread" do
      clock.advance(1_000_000)
      expect(breaker.state).to eq(:half_open)
    end
  end

  describe "the window across transitions" do
    it "is emptied when the breaker opens, and the user's window object shows it" do
      breaker = make(min_calls: 5)
      succeed_calls(breaker, 3)
      expect(window.total).to eq(3)
      fail_calls(breaker, 2)
      expect(breaker.state).to eq(:closed)
      expect(window.total).to eq(5)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
      expect([window.total, window.failures, window.error_rate]).to eq([0, 0, 0.0])
      expect(breaker.window).to be(window)
    end

    it "records half-open probes, and is emptied again when the breaker closes" do
      breaker = make(min_calls: 1, open_duration: 10)
      trip!(breaker)
      cool_down(breaker)
      succeed_calls(breaker, 1)
      expect(breaker.state).to eq(:half_open)
      expect(window.total).to eq(1)
      expect(breaker.metrics[:total]).to eq(1)
      succeed_calls(breaker, 1)
      expect(breaker.state).to eq(:closed)
      expect(window.total).to eq(0)
    end

    it "shows what the breaker records, live, in the object the user passed" do
      breaker = make(min_calls: 100)
      fail_calls(breaker, 2)
      succeed_calls(breaker, 1, ms: 150)
      expect([window.total, window.failures, window.slow_calls]).to eq([3, 2, 1])
      expect(window.error_rate).to eq(breaker.metrics[:error_rate])
    end
  end

  describe "generations: stale outcomes" do
    it "drops a failure that began closed and ended after the breaker opened (re-entrant trip)" do
      breaker = make(min_calls: 2, open_duration: 10)
      expect do
        breaker.call do
          fail_calls(breaker, 2) # trips the breaker from inside
          raise BreakerHelpers::Boom
        end
      end.to raise_error(BreakerHelpers::Boom)
      expect(breaker.state).to eq(:open)
      expect(window.total).to eq(0)
      expect(breaker.retry_after).to eq(10.0)
    end

    it "lets a call that began before the breaker opened neither close nor reopen it" do
      breaker = make(min_calls: 2, open_duration: 10, half_open_calls: 1)
      events = transitions_of(breaker)
      result = breaker.call do
        fail_calls(breaker, 2)
        cool_down(breaker)
        expect(breaker.state).to eq(:half_open)
        :old_call_succeeds
      end
      expect(result).to eq(:old_call_succeeds)
      expect(breaker.state).to eq(:half_open) # one probe would have closed it

      breaker.reset!
      expect do
        breaker.call do
          fail_calls(breaker, 2)
          cool_down(breaker)
          raise BreakerHelpers::Boom
        end
      end.to raise_error(BreakerHelpers::Boom)
      expect(breaker.state).to eq(:half_open) # one failed probe would have reopened it
      expect(moves(events).count { |_, to, _| to == :open }).to eq(2) # both trips, no reopen
    end

    it "drops a late record_* whose permit was taken before a trip and reset" do
      breaker = make(min_calls: 2)
      expect(breaker.allow?).to be(true) # permit taken while closed
      breaker.trip!
      breaker.reset!
      breaker.record_failure(duration_ms: 500) # settles that old permit: dropped
      expect(breaker.state).to eq(:closed)
      expect(window.total).to eq(0)
      breaker.record_failure # no permit left: recorded, the breaker is closed
      expect(window.total).to eq(1)
    end

    it "does not let a probe from an earlier half-open period close the breaker" do
      breaker = make(min_calls: 1, open_duration: 10, half_open_calls: 1)
      trip!(breaker)
      cool_down(breaker)
      with_actor do |late|
        expect(late.run { breaker.allow? }).to be(true) # probe of the first half-open period
        breaker.trip!
        cool_down(breaker)
        expect(breaker.allow?).to be(true) # a new period: its own slot
        late.run { breaker.record_success } # settles the earlier period's probe: dropped
        expect(breaker.state).to eq(:half_open)
        breaker.record_success
        expect(breaker.state).to eq(:closed)
      end
    end
  end

  describe "half_open_timeout" do
    let(:breaker) { make(min_calls: 1, open_duration: 10, half_open_timeout: 5, half_open_calls: 1) }

    it "is seen by `call` and by `allow?` as well" do
      trip!(breaker)
      cool_down(breaker)
      breaker.allow?
      clock.advance(5)
      expect(attempt(breaker)).to eq(:rejected)
      expect(breaker.metrics[:state]).to eq(:open)

      cool_down(breaker)
      breaker.allow?
      clock.advance(5)
      expect(breaker.allow?).to be(false)
      expect(breaker.state).to eq(:open)
    end

    it "is applied by record_* before settling: the hung probe's late success does not close it" do
      events = transitions_of(breaker)
      trip!(breaker)
      cool_down(breaker)
      breaker.allow?
      clock.advance(5)
      breaker.record_success
      expect(breaker.state).to eq(:open)
      expect(moves(events).last).to eq(%i[half_open open half_open_timeout])
    end

    it "counts from when half-open was noticed, not from when open_duration ended" do
      trip!(breaker)
      clock.advance(100) # nobody looks
      expect(breaker.state).to eq(:half_open)
      clock.advance(4.9)
      expect(breaker.state).to eq(:half_open)
    end

    it "frees the next half-open period from the hung probe, whose late outcome is dropped" do
      trip!(breaker)
      cool_down(breaker)
      hung = Thread.new { breaker.allow? }.value
      expect(hung).to be(true)
      clock.advance(5)
      cool_down(breaker)
      expect(breaker.call { :new_probe }).to eq(:new_probe)
      expect(breaker.state).to eq(:closed)
    end

    it "never fires without a timeout (the default); with probe_timeout: false a hung probe keeps the breaker half-open" do
      patient = make(min_calls: 1, open_duration: 10, half_open_calls: 1, probe_timeout: false)
      trip!(patient)
      cool_down(patient)
      patient.allow?
      clock.advance(1_000_000)
      expect(patient.state).to eq(:half_open)
    end
  end

  describe "backoff" do
    let(:breaker) { make(min_calls: 1, open_duration: 10, backoff: 2, max_open_duration: 50, half_open_calls: 1) }

    def reopen_from_half_open(breaker)
      cool_down(breaker)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
      breaker.retry_after
    end

    it "multiplies each reopen from half-open, capped by max_open_duration" do
      trip!(breaker)
      expect(breaker.retry_after).to eq(10.0)
      durations = Array.new(4) { reopen_from_half_open(breaker) }
      expect(durations).to eq([20.0, 40.0, 50.0, 50.0])
    end

    it "counts a half-open timeout as a reopen" do
      timed = make(min_calls: 1, open_duration: 10, backoff: 3, half_open_timeout: 1)
      trip!(timed)
      cool_down(timed)
      timed.allow?
      clock.advance(1)
      expect(timed.retry_after).to eq(30.0)
    end

    it "is reset by closing" do
      trip!(breaker)
      2.times { reopen_from_half_open(breaker) }
      cool_down(breaker)
      succeed_calls(breaker, 1)
      expect(breaker.state).to eq(:closed)
      trip!(breaker)
      expect(breaker.retry_after).to eq(10.0)
      expect(reopen_from_half_open(breaker)).to eq(20.0)
    end

    it "opens exactly for the backed-off duration" do
      trip!(breaker)
      reopen_from_half_open(breaker) # 20 s
      clock.advance(19.999)
      expect(breaker.state).to eq(:open)
      clock.advance(0.001)
      expect(breaker.state).to eq(:half_open)
    end

    it "does not apply to trip!, which opens for open_duration from any state" do
      trip!(breaker)
      reopen_from_half_open(breaker)
      cool_down(breaker)
      breaker.trip! # from half-open, after a backed-off reopen
      expect(breaker.retry_after).to eq(10.0)
    end
  end

  describe "jitter" do
    it "shortens each opening by up to its share, and retry_after is the real remaining time" do
      openings = Array.new(12) do
        breaker = build_breaker(clock: clock, window: CircuitBreaker::SlidingWindow.new(size: 4),
                                min_calls: 1, open_duration: 10, jitter: 0.5)
        breaker.record_failure # opens it, by error rate
        [breaker, breaker.retry_after]
      end
      retry_afters = openings.map(&:last)
      expect(retry_afters).to all(be_between(5.0, 10.0))
      expect(retry_afters.uniq.size).to be > 1 # spread, not all the same

      breaker, remaining = openings.first
      clock.advance(remaining / 2)
      expect(breaker.retry_after).to be_within(1e-6).of(remaining / 2)
      expect(breaker.state).to eq(:open)
      # What it reports is exactly what is left (two float halves of a random
      # duration need not add up to it to the nanosecond).
      clock.advance(breaker.retry_after)
      expect(breaker.state).to eq(:half_open)
    end

    it "does not shorten trip!" do
      breaker = make(min_calls: 1, open_duration: 10, jitter: 0.9)
      breaker.trip!
      expect(breaker.retry_after).to eq(10.0)
    end

    it "applies to reopens from half-open too, within the backed-off duration" do
      breakers = Array.new(10) do
        build_breaker(clock: clock, window: CircuitBreaker::SlidingWindow.new(size: 4),
                      min_calls: 1, open_duration: 10, backoff: 2, jitter: 0.25, half_open_calls: 1)
      end
      breakers.each(&:trip!)
      clock.advance(10)
      breakers.each { |b| fail_calls(b, 1) }
      expect(breakers.map(&:retry_after)).to all(be_between(15.0, 20.0))
    end
  end
end
