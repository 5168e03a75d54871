# frozen_string_literal: true

# docs/operating.md: CircuitBreaker#metrics.
RSpec.describe CircuitBreaker, "#metrics" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:window) { CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 800) }
  let(:ramp) { [0.25, 0.5, 1.0] }
  subject(:breaker) do
    CircuitBreaker.new(clock: clock, window: window, min_calls: 4, open_duration: 30, ramp: ramp, half_open_calls: 1)
  end

  def fail_once
    breaker.call { raise BreakerHelpers::Boom }
  rescue BreakerHelpers::Boom
    nil
  end

  def open_it
    4.times { fail_once }
    expect(breaker.state).to eq(:open)
  end

  it "is a new snapshot on every read" do
    first = breaker.metrics
    fail_once
    expect(first[:total]).to eq(0)
    expect(breaker.metrics[:total]).to eq(1)
  end

  it "shows the window's counts and rates" do
    breaker.call { :ok }
    breaker.call { clock.advance(0.8) } # slow: exactly the threshold
    fail_once
    m = breaker.metrics
    expect(m.values_at(:total, :failures, :slow_calls)).to eq([window.total, window.failures, window.slow_calls])
    expect(m.values_at(:total, :failures, :slow_calls)).to eq([3, 1, 1])
    expect(m[:error_rate]).to eq(1.0 / 3).and eq(window.error_rate)
    expect(m[:slow_call_rate]).to eq(1.0 / 3).and eq(window.slow_call_rate)
    expect([m[:total], m[:error_rate]]).to match([an_instance_of(Integer), an_instance_of(Float)])
  end

  describe "per state" do
    it "disabled: admit_share 1.0, retry_after 0.0, stage nil" do
      breaker.disable!
      expect(breaker.metrics.values_at(:state, :admit_share, :retry_after, :stage)).to eq([:disabled, 1.0, 0.0, nil])
    end

    it "open: admit_share 0.0, retry_after the time remaining, stage nil" do
      open_it
      clock.advance(12.5)
      m = breaker.metrics
      expect(m.values_at(:state, :admit_share, :stage)).to eq([:open, 0.0, nil])
      expect(m[:retry_after]).to be_within(1e-9).of(30 - 12.5)
      expect(m[:retry_after]).to eq(breaker.retry_after)
    end

    it "forced open: admit_share 0.0, retry_after nil, stage nil" do
      breaker.force_open!
      expect(breaker.metrics.values_at(:state, :admit_share, :retry_after, :stage)).to eq([:forced_open, 0.0, nil, nil])
    end

    it "half-open: admit_share ramp[stage], retry_after 1.0 (at least a second: docs/semantics.md), stage the ramp index" do
      open_it
      clock.advance(30)
      seen = []
      ramp.size.times do
        m = breaker.metrics
        seen << m.values_at(:state, :stage, :admit_share, :retry_after)
        breaker.call { :probe } # passes the stage
      end
      expect(seen).to eq(ramp.each_with_index.map { |share, i| [:half_open, i, share, 1.0] })
      expect(breaker.metrics.values_at(:state, :stage)).to eq([:closed, nil])
    end
  end

  it "applies the timers due before answering" do
    open_it
    clock.advance(30)
    expect(breaker.metrics[:state]).to eq(:half_open)
  end

  # Issue #34: inspect applied the timers, and so delivered open -> half_open.
  it "is not applied by inspect, which reads a snapshot and changes nothing" do
    breaker = build_breaker(clock: clock, open_duration: 10, name: "peek")
    breaker.trip!
    events = transitions_of(breaker)
    clock.advance(10)
    expect(breaker.inspect).to eq('#<CircuitBreaker "peek" state=open total=0 error_rate=0.000 slow_call_rate=0.000>')
    expect(events).to be_empty
    expect(breaker.state).to eq(:half_open)
    expect(moves(events)).to eq([%i[open half_open cool_down_elapsed]])
  end

  describe ":rejected" do
    it "counts every rejection since creation, across states and reset!" do
      open_it
      3.times { expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError) }
      expect(breaker.allow?).to be(false)
      expect(breaker.metrics[:rejected]).to eq(4)
      breaker.reset!.force_open!
      expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError)
      breaker.reset!
      breaker.call { :ok }
      expect(breaker.metrics[:rejected]).to eq(5)
    end

    it "counts half-open calls turned away by the ramp" do
      open_it
      clock.advance(30)
      # stage 0 admits one call in four; its only probe slot is taken by the
      # first call, so the next three are rejected.
      outcomes = []
      breaker.call do
        3.times { outcomes << (breaker.allow? ? :admitted : :rejected) }
        :probe
      end
      expect(outcomes).to eq(%i[rejected rejected rejected])
      expect(breaker.metrics[:rejected]).to eq(3)
    end

    it "does not count admitted calls" do
      5.times { breaker.call { :ok } }
      expect(breaker.metrics[:rejected]).to eq(0)
    end
  end
end
