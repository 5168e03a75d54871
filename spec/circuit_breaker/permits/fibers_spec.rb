# frozen_string_literal: true

# Fibers are callers (docs/fibers.md, docs/semantics-permits.md): the
# permits of allow?/record_* belong to the fiber that took them, under a
# fiber scheduler (the suite's own, the async gem) as with threads, so
# fibers of one thread never settle each other's permits.
RSpec.describe CircuitBreaker, "with fibers as callers" do
  include BreakerHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }

  def breaker_with_events
    breaker = build_breaker(clock: clock, open_duration: 10, half_open_calls: 1)
    events = []
    breaker.on_state_change { |e| events << [e.from, e.to, e.reason] }
    [breaker, events]
  end

  # Starts a caller: a scheduled fiber, or a thread.
  def start(callers, &block)
    callers == :threads ? Thread.new(&block) : Fiber.schedule(&block)
  end

  # Caller Q is admitted while the breaker is closed; the breaker trips and
  # cools down; caller P takes the one half-open probe; then Q's outcome
  # comes (a failure, stale: of the generation before the trip), then P's
  # success. Q's failure must be dropped and P's success close the breaker.
  def stale_failure_beside_a_probe(callers)
    breaker, events = breaker_with_events
    q_go = Thread::Queue.new
    p_go = Thread::Queue.new
    done = Thread::Queue.new
    admitted = Thread::Queue.new
    start(callers) do
      admitted << [:q, breaker.allow?]
      q_go.pop
      breaker.record_failure
      done << :q
    end
    expect(admitted.pop).to eq([:q, true])
    breaker.trip!
    clock.advance(10)
    start(callers) do
      admitted << [:p, breaker.allow?]
      p_go.pop
      breaker.record_success
      done << :p
    end
    expect(admitted.pop).to eq([:p, true])
    q_go << :go
    expect(done.pop).to eq(:q)
    p_go << :go
    expect(done.pop).to eq(:p)
    [events, breaker.state]
  end

  def expect_probe_settled_by_its_own_caller(outcome)
    events, state = outcome
    expect(events).to eq([%i[closed open manual], %i[open half_open cool_down_elapsed],
                          %i[half_open closed probes_passed]])
    expect(state).to eq(:closed)
  end

  it "drops a stale failure beside a half-open probe, with threads" do
    expect_probe_settled_by_its_own_caller(stale_failure_beside_a_probe(:threads))
  end

  FiberSchedulers::KINDS.each do |kind|
    it "drops a stale failure beside a half-open probe, with fibers under the #{kind} scheduler" do
      expect_probe_settled_by_its_own_caller(under_scheduler(kind) { stale_failure_beside_a_probe(:fibers) })
    end

    it "keeps each fiber's permits apart under the #{kind} scheduler: a fiber without one settles none" do
      breaker, events = breaker_with_events
      breaker.trip!
      clock.advance(10)
      states = under_scheduler(kind) do
        taken = Thread::Queue.new
        go = Thread::Queue.new
        done = Thread::Queue.new
        start(:fibers) do
          taken << breaker.allow? # the one probe
          go.pop
          breaker.record_success
          done << breaker.state
        end
        expect(taken.pop).to be(true)
        breaker.record_failure # this fiber holds no permit: ignored in half-open
        before = breaker.state
        go << :go
        [before, done.pop]
      end
      expect(states).to eq(%i[half_open closed])
      expect(events.last).to eq(%i[half_open closed probes_passed])
    end
  end

  FiberSchedulers::CALLERS.each do |callers|
    who = callers == :threads ? "threads" : "fibers under the #{callers} scheduler"
    it "admits half_open_calls probes to #{who} that hold them across turns, each settling its own" do
      breaker = build_breaker(clock: clock, open_duration: 10, half_open_calls: 4, ramp: [1.0])
      events = []
      breaker.on_state_change { |e| events << [e.from, e.to, e.reason] }
      breaker.trip!
      clock.advance(10)
      asked = ThreadHelpers::Barrier.new(16)
      outcomes = in_callers(callers, 16) do |i|
        admitted = breaker.allow?
        asked.wait # every caller asks while the admitted probes are out
        next :rejected unless admitted

        pass_turn
        breaker.record_success(duration_ms: i)
        :probe
      end
      expect(outcomes.count(:probe)).to eq(4)
      expect(breaker.metrics[:rejected]).to eq(12)
      expect(events).to eq([%i[closed open manual], %i[open half_open cool_down_elapsed],
                            %i[half_open closed probes_passed]])
    end
  end

  it "does not hand a fiber's permits to the fibers it starts (Thread#[], not Fiber[], storage)" do
    breaker, events = breaker_with_events
    breaker.trip!
    clock.advance(10)
    expect(breaker.allow?).to be(true) # the root fiber's probe
    Fiber.new { breaker.record_failure }.resume # a child fiber: no permit, ignored in half-open
    expect(breaker.state).to eq(:half_open)
    breaker.record_success
    expect(breaker.state).to eq(:closed)
    expect(events.last).to eq(%i[half_open closed probes_passed])
  end

  it "files a permit taken inside an Enumerator's block under that Enumerator's fiber" do
    breaker, = breaker_with_events
    breaker.trip!
    clock.advance(10)
    probes = Enumerator.new { |y| y << breaker.allow? }
    expect(probes.next).to be(true)
    breaker.record_success # not the Enumerator's fiber: no permit here, ignored in half-open
    expect(breaker.state).to eq(:half_open)
    expect(breaker.allow?).to be(false) # the probe slot is the Enumerator's

    settled = Enumerator.new do |y|
      y << breaker.allow?
      breaker.record_success # inside the block: the Enumerator's own permit
      y << breaker.state
    end
    clock.advance(10) # probe_timeout frees the abandoned probe: open again
    expect(breaker.state).to eq(:open)
    clock.advance(10)
    expect(breaker.state).to eq(:half_open)
    expect([settled.next, settled.next]).to eq([true, :closed])
  end
end
