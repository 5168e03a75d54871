# frozen_string_literal: true

# docs/semantics.md min_stage_duration: a half-open stage advances only when its
# probes pass at or after it has lasted that long; an earlier pass starts a
# new round of the same stage (the rules crate: cargo test, breaker/tests.rs).
RSpec.describe CircuitBreaker, "min_stage_duration" do
  include BreakerHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:events) { [] }

  def lasting(**options)
    breaker = build_breaker(clock: clock, min_calls: 1, open_duration: 10, ramp: [0.5, 1.0], half_open_calls: 2,
                            min_stage_duration: 5, **options)
    breaker.on_state_change { |e| events << [e.to, e.reason] }
    trip!(breaker)
    cool_down(breaker)
    breaker
  end

  # Lets the stage's two probes pass now; returns how many calls it took.
  def pass_round(breaker)
    drive_probes(breaker, [true, true], limit: 100)
  end

  it "keeps a stage whose probes pass early, as new rounds, until it has lasted min_stage_duration" do
    breaker = lasting
    expect(breaker.metrics.values_at(:state, :stage, :admit_share)).to eq([:half_open, 0, 0.5])
    clock.advance(1)
    expect(pass_round(breaker)).to eq([0, 2]) # the first call of a round is admitted, then one in two
    expect(breaker.metrics.values_at(:state, :stage)).to eq([:half_open, 0])
    clock.advance(3.999)
    expect(pass_round(breaker)).to eq([0, 2]) # a fresh quota of probes
    expect(breaker.metrics[:stage]).to eq(0)
    clock.advance(0.001) # 5 s after the stage was entered
    pass_round(breaker)
    expect(breaker.metrics[:stage]).to eq(1)
    clock.advance(5)
    pass_round(breaker)
    expect(breaker.state).to eq(:closed)
    expect(events.last).to eq(%i[closed probes_passed])
  end

  it "reopens at once on a failed probe, however young the stage" do
    breaker = lasting
    drive_probes(breaker, [false], limit: 10)
    expect(breaker.state).to eq(:open)
    expect(events.last).to eq(%i[open probe_failed])
  end

  it "waits without traffic: no timer advances a stage" do
    breaker = lasting
    clock.advance(1_000)
    expect(breaker.metrics.values_at(:state, :stage)).to eq([:half_open, 0])
  end

  it "is a finite Numeric >= 0, at most half_open_timeout" do
    expect { CircuitBreaker.new(min_stage_duration: -1) }.to raise_error(ArgumentError, /min_stage_duration/)
    expect { CircuitBreaker.new(min_stage_duration: Float::INFINITY) }.to raise_error(ArgumentError, /min_stage_duration/)
    expect { CircuitBreaker.new(min_stage_duration: "1") }.to raise_error(TypeError, /min_stage_duration/)
    expect { CircuitBreaker.new(min_stage_duration: 6, half_open_timeout: 5) }
      .to raise_error(ArgumentError, /min_stage_duration must be .* at most half_open_timeout \(got 6/)
    expect(CircuitBreaker.new(min_stage_duration: 5, half_open_timeout: 5).state).to eq(:closed)
  end

  it "advances on probes alone with the default 0" do
    breaker = build_breaker(clock: clock, min_calls: 1, open_duration: 10, ramp: [0.5, 1.0], half_open_calls: 2)
    trip!(breaker)
    cool_down(breaker)
    pass_round(breaker)
    expect(breaker.metrics[:stage]).to eq(1)
  end
end
