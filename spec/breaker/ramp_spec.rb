# frozen_string_literal: true

# docs/semantics.md, half-open: ramp stages, admission spacing, probe quota and
# verdicts (advance, restart, reopen), with the spacing rule of docs/choices.md.
RSpec.describe CircuitBreaker, "half-open ramp" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:window) { CircuitBreaker::SlidingWindow.new(size: 100, slow_threshold_ms: 100) }

  # A breaker that has just turned half-open.
  def half_open(**options)
    breaker = build_breaker(**{ clock: clock, window: window, min_calls: 1, open_duration: 10 }.merge(options))
    breaker.trip!
    cool_down(breaker)
    expect(breaker.state).to eq(:half_open)
    breaker
  end

  describe "admission spacing" do
    [0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.7, 1.0].each do |share|
      it "admits calls at #{share} evenly, the first call of the stage included" do
        breaker = half_open(ramp: [share], half_open_calls: 7)
        admitted = drive_probes(breaker, [true] * 7)
        expect(admitted).to eq((0..).lazy.select { |n| on_beat?(n, share) }.first(7))
        expect(admitted.first).to eq(0)
        expect(breaker.state).to eq(:closed)
      end
    end

    it "admits exactly one call in five at 0.2 (0, 5, 10…)" do
      breaker = half_open(ramp: [0.2], half_open_calls: 4)
      expect(drive_probes(breaker, [true] * 4)).to eq([0, 5, 10, 15])
    end

    it "admits 3 calls in 10 at 0.3, deterministically" do
      breaker = half_open(ramp: [0.3], half_open_calls: 3)
      expect(drive_probes(breaker, [true] * 3)).to eq([0, 4, 7])
    end

    it "rejects the calls between beats with an OpenError in state :half_open, counted as rejections" do
      breaker = half_open(ramp: [0.25], half_open_calls: 10)
      rejected = []
      breaker.on_reject { |e| rejected << e }
      results = Array.new(8) { attempt(breaker) }
      expect(results).to eq(%i[ran rejected rejected rejected ran rejected rejected rejected])
      expect(rejected.map(&:state)).to all(eq(:half_open))
      expect(rejected.map(&:retry_after)).to all(eq(1.0))
      expect(breaker.metrics[:rejected]).to eq(6)
    end
  end

  describe "probe quota" do
    it "counts nested calls from inside a probe against the quota" do
      breaker = half_open(half_open_calls: 2)
      inner = []
      breaker.call do
        inner << attempt(breaker) << attempt(breaker)
        :probe
      end
      expect(inner).to eq(%i[ran rejected])
      expect(breaker.state).to eq(:closed)
    end
  end

  describe "verdicts" do
    it "advances at exactly advance_rate, once all probes are in" do
      breaker = half_open(half_open_calls: 2, advance_rate: 0.5, reopen_rate: 0.0)
      2.times { breaker.allow? }
      breaker.record_failure
      expect(breaker.state).to eq(:half_open)
      breaker.record_success
      expect(breaker.state).to eq(:closed)
    end

    it "reopens as soon as reopen_rate can no longer be reached" do
      breaker = half_open(half_open_calls: 4, advance_rate: 1.0, reopen_rate: 0.5)
      4.times { breaker.allow? }
      2.times { breaker.record_failure } # at best 2 of 4 = 0.5: not below
      expect(breaker.state).to eq(:half_open)
      breaker.record_failure # at best 1 of 4
      expect(breaker.state).to eq(:open)
    end

    # Issue #25: a stage whose probes kept landing between the two rates
    # started over forever, rejecting most calls of a recovered dependency.
    it "starts a stage over once between reopen_rate and advance_rate, and reopens at a second round in a row there" do
      breaker = half_open(ramp: [1.0], half_open_calls: 4, advance_rate: 1.0, reopen_rate: 0.5)
      events = transitions_of(breaker)
      drive_probes(breaker, [true, true, false, true]) # 3 of 4: between the rates
      expect(breaker.metrics).to include(state: :half_open, stage: 0)
      drive_probes(breaker, [true, false]) # again: out of advance_rate's reach, it reopens at once
      expect(moves(events)).to eq([%i[half_open open probe_failed]])
    end

    # Issue #34: a round after one between the rates can only pass or
    # reopen, so it reopens once advance_rate is out of reach, admitting no
    # probe whose outcome can change nothing.
    it "reopens a round after one between the rates as soon as it can no longer reach advance_rate" do
      breaker = half_open(ramp: [1.0], half_open_calls: 4, advance_rate: 0.75, reopen_rate: 0.5)
      events = transitions_of(breaker)
      drive_probes(breaker, [false, true, false]) # a first round: 2 failures, at best 2 of 4, between
      expect(breaker.state).to eq(:half_open)
      drive_probes(breaker, [true]) # 2 of 4: between the rates, a new round
      expect(breaker.metrics).to include(state: :half_open, stage: 0)
      drive_probes(breaker, [false]) # at best 3 of 4 = advance_rate: it may still pass
      expect(breaker.state).to eq(:half_open)
      drive_probes(breaker, [false]) # at best 2 of 4
      expect(moves(events)).to eq([%i[half_open open probe_failed]])
      expect(attempt(breaker)).to eq(:rejected)
    end

    it "reopens such a round at its first failed probe with min_stage_duration, unless a pass broke the streak" do
      breaker = half_open(ramp: [1.0], half_open_calls: 4, advance_rate: 1.0, reopen_rate: 0.5, min_stage_duration: 60)
      events = transitions_of(breaker)
      drive_probes(breaker, [false, true, true, true]) # between the rates
      drive_probes(breaker, [true] * 4) # passes, before min_stage_duration: the streak ends
      drive_probes(breaker, [false]) # a first round again: it goes on
      expect(breaker.state).to eq(:half_open)
      drive_probes(breaker, [true] * 3) # 3 of 4: between the rates
      drive_probes(breaker, [false])
      expect(moves(events)).to eq([%i[half_open open probe_failed]])
    end

    it "keeps the stage when a passing round breaks the streak of rounds between the rates" do
      breaker = half_open(ramp: [1.0], half_open_calls: 4, advance_rate: 1.0, reopen_rate: 0.5, min_stage_duration: 60)
      events = transitions_of(breaker)
      drive_probes(breaker, [true, true, false, true]) # between the rates
      drive_probes(breaker, [true] * 4) # passes, before min_stage_duration: a new round
      drive_probes(breaker, [true, false, true, true]) # between the rates, once again
      expect(breaker.metrics).to include(state: :half_open, stage: 0)
      expect(events).to be_empty
    end

    it "counts a probe cut short by a slow `throw` as a failed probe" do
      breaker = half_open
      catch(:deadline) do
        breaker.call do
          clock.advance(5)
          throw :deadline
        end
      end
      expect(breaker.state).to eq(:open)
    end

    it "judges record_* probes' duration_ms by the window's slow line too" do
      breaker = half_open(half_open_calls: 1)
      breaker.allow?
      breaker.record_success(duration_ms: 100)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "stages" do
    let(:ramp) { [0.25, 0.5, 1.0] }

    it "starts again from the first stage after a reopen from a later one" do
      breaker = half_open(ramp: ramp, half_open_calls: 2)
      drive_probes(breaker, [true, true])
      expect(breaker.metrics[:stage]).to eq(1)
      drive_probes(breaker, [false])
      expect(breaker.state).to eq(:open)
      expect(breaker.metrics).to include(stage: nil, admit_share: 0.0)
      cool_down(breaker)
      expect(breaker.metrics).to include(stage: 0, admit_share: 0.25)
    end

    it "gives each stage a fresh quota of probe slots" do
      breaker = half_open(ramp: [0.5, 1.0], half_open_calls: 2, advance_rate: 0.5, reopen_rate: 0.0)
      # Calls 0 and 2 of stage 0: the second allow? is another call.
      2.times { breaker.allow? || breaker.allow? } # rubocop:disable Lint/BinaryOperatorWithIdenticalOperands
      breaker.record_success # 1 of 2 finished
      breaker.record_failure # 2 of 2: 50% → stage 1
      expect(breaker.metrics[:stage]).to eq(1)
      expect(Array.new(2) { breaker.allow? }).to eq([true, true])
    end

    it "restarts half_open_timeout with each stage" do
      breaker = half_open(ramp: [0.5, 1.0], half_open_calls: 1, half_open_timeout: 5)
      clock.advance(4)
      drive_probes(breaker, [true]) # stage 1 begins 4 s into half-open
      clock.advance(4)
      expect(breaker.state).to eq(:half_open)
      clock.advance(1)
      expect(breaker.state).to eq(:open)
    end
  end
end
