# frozen_string_literal: true

# docs/operating.md: trip!, reset!, force_open!, disable! from every state.
RSpec.describe CircuitBreaker, "control" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:open_duration) { 30 }

  def new_breaker(**options)
    CircuitBreaker.new(name: "control", clock: clock, min_calls: 2, open_duration: open_duration,
                       window: CircuitBreaker::SlidingWindow.new(size: 10), **options)
  end

  def fail_once(breaker)
    breaker.call { raise BreakerHelpers::Boom }
  rescue BreakerHelpers::Boom
    nil
  end

  # A breaker in `state`, reached the way users reach it.
  def breaker_in(state, **options)
    breaker = new_breaker(**options)
    case state
    when :closed then nil
    when :open then 2.times { fail_once(breaker) }
    when :half_open
      2.times { fail_once(breaker) }
      clock.advance(open_duration)
    when :forced_open then breaker.force_open!
    when :disabled then breaker.disable!
    end
    raise "could not reach #{state}: #{breaker.inspect}" unless breaker.state == state

    breaker
  end

  states = %i[closed open half_open forced_open disabled]
  operations = { trip!: :open, reset!: :closed, force_open!: :forced_open, disable!: :disabled }
  # Which operations empty the window: reset!, and those entering closed or open.
  emptying = %i[trip! reset!]

  # One example per (state, operation): the return value, the state left,
  # the event (or none), and the window. (One example each rather than
  # three keeps a GC.stress run short.)
  states.each do |from|
    operations.each do |op, to|
      effects = [from == to ? "no event" : "one :manual event", emptying.include?(op) ? "an emptied window" : "the window kept"]
      it "#{op} from #{from}: returns the breaker, leaves it #{to}, with #{effects.join(' and ')}" do
        breaker = breaker_in(from)
        events = []
        breaker.on_state_change { |e| events << e }
        breaker.window.record(duration_ms: 1, success: false)
        before = breaker.window.total

        expect(breaker.public_send(op)).to be(breaker)
        expect(breaker.state).to eq(to)
        if from == to
          expect(events).to be_empty
        else
          expect(events.map { |e| [e.from, e.to, e.reason, e.name, e.metrics[:state]] }).to eq([[from, to, :manual, "control", to]])
        end
        expect(breaker.window.total).to eq(emptying.include?(op) ? 0 : before)
      end
    end
  end

  describe "the predicates" do
    {
      closed: [true, false, false], open: [false, true, false], half_open: [false, false, true],
      forced_open: [false, true, false], disabled: [false, false, false]
    }.each do |state, answers|
      it "answer closed?/open?/half_open? = #{answers.inspect} when #{state}" do
        breaker = breaker_in(state)
        expect([breaker.closed?, breaker.open?, breaker.half_open?]).to eq(answers)
      end
    end
  end

  describe "#trip!" do
    it "restarts the open duration when already open" do
      breaker = breaker_in(:open)
      clock.advance(open_duration / 2.0)
      expect(breaker.trip!.retry_after).to eq(open_duration.to_f)
    end

    it "ignores backoff" do
      breaker = breaker_in(:open, backoff: 2.0, half_open_calls: 1)
      clock.advance(breaker.retry_after)
      fail_once(breaker) # the probe fails: reopens, backed off
      expect(breaker.retry_after).to eq(open_duration * 2.0)
      expect(breaker.trip!.retry_after).to eq(open_duration.to_f)
    end

    it "ignores jitter" do
      breaker = breaker_in(:closed, jitter: 0.9)
      5.times do
        expect(breaker.trip!.retry_after).to eq(open_duration.to_f)
        breaker.reset!
      end
    end

    it "drops the outcome of a call admitted before it" do
      breaker = breaker_in(:closed)
      expect { breaker.call { breaker.trip!.reset!; raise BreakerHelpers::Boom } }.to raise_error(BreakerHelpers::Boom)
      expect(breaker.metrics.values_at(:state, :total)).to eq([:closed, 0])
    end
  end

  describe "#force_open!" do
    it "ignores records without a permit" do
      breaker = breaker_in(:forced_open)
      breaker.record_failure(duration_ms: 1)
      expect(breaker.window.total).to eq(0)
    end

    it "drops the outcome of a half-open probe in flight" do
      breaker = breaker_in(:half_open)
      expect(breaker.call { breaker.force_open!; :probe }).to eq(:probe)
      expect(breaker.metrics.values_at(:state, :total)).to eq([:forced_open, 0])
    end
  end

  describe "#disable!" do
    it "stays disabled when its open duration would have passed" do
      breaker = breaker_in(:open).disable!
      clock.advance(open_duration * 10)
      expect(breaker.state).to eq(:disabled)
    end
  end

  describe "#reset!" do
    it "empties the window of a closed breaker without an event" do
      breaker = breaker_in(:closed)
      fail_once(breaker)
      events = []
      breaker.on_state_change { |e| events << e }
      breaker.reset!
      expect([breaker.window.total, events]).to eq([0, []])
    end
  end

  describe "#name" do
    it "returns the name as a frozen String, or nil" do
      expect(CircuitBreaker.new(name: :payments).name).to eq("payments").and be_frozen
      expect(CircuitBreaker.new.name).to be_nil
    end
  end
end
