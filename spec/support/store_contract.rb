# frozen_string_literal: true

# The breaker contract every store of a breaker's state keeps: process
# memory (the default), a file every process of the host maps (`shared:`,
# docs/shared.md) and a fleet mirror kept in step through Redis (`fleet:`,
# docs/fleet.md). The rules are the Rust core's whatever holds the state, so
# each expectation below is docs/semantics.md, docs/semantics-permits.md or
# docs/operating.md, and holds for every store alike.
#
# The including group defines:
# - `store_options`: the options that choose the store (called once per
#   breaker, so each breaker may get a key of its own);
# - `connect(breaker)`: waits until a new breaker uses its store;
# - `settle(breaker)`: waits until the store has taken in what the breaker
#   did (a fleet's round trips); the expectations that follow must hold
#   both before and after.
# and passes `counters:` (metrics[:counters]), `extra_metrics:` (keys only
# this store adds) and `disagreements:` (known departures from the contract:
# each names the bug; the example is skipped with that reason when the bug
# shows).
#
# Time moves only through the ManualClock; nothing sleeps for timing.
RSpec.shared_examples "a breaker store" do |counters:, extra_metrics: {}, disagreements: {}|
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:name) { "contract-#{SecureRandom.hex(6)}" }

  # A window of 10 calls whose slow line is 100 ms, opening at 4 calls,
  # open for 10 s; `options` override.
  def build(**options)
    defaults = { window: CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100), min_calls: 4,
                 open_duration: 10 }
    breaker = build_breaker(clock: clock, name: name, **store_options, **defaults, **options)
    connect(breaker)
    breaker
  end

  # A breaker opened by failed calls and then half-open: the way a store
  # sees an outage, with no manual action.
  def half_open_breaker(**options)
    breaker = build(**options)
    fail_calls(breaker, 4)
    clock.advance(breaker.retry_after)
    expect(breaker.state).to eq(:half_open)
    settle(breaker)
    breaker
  end

  # Runs the block, an example's body. Where this store is known to depart
  # from it (`disagreements`), a failed expectation skips the example with
  # the reason; a pass passes, since the bugs named there are races.
  define_method(:unless_known_disagreement) do |key, &body|
    reason = disagreements[key]
    next body.call unless reason

    begin
      body.call
    rescue RSpec::Expectations::ExpectationNotMetError => e
      skip "known disagreement: #{reason} (here: #{e.message.strip.lines.first.strip})"
    end
  end

  describe "opening" do
    it "opens on the error rate exactly at the threshold, not one call before" do
      breaker = build(error_rate_threshold: 0.5)
      events = transitions_of(breaker)
      succeed_calls(breaker, 3)
      fail_calls(breaker, 2) # 2 of 5
      settle(breaker)
      expect(breaker.state).to eq(:closed)
      fail_calls(breaker, 1) # 3 of 6: exactly 0.5
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[closed open error_rate]])
      expect(breaker.metrics).to include(total: 0, tripped_error_rate: 0.5, opened: 1, admit_share: 0.0)
      settle(breaker)
      expect([breaker.state, moves(events).size]).to eq([:open, 1])
    end

    it "opens on the slow-call rate exactly at the threshold, with no failure, not one call before" do
      breaker = build(slow_rate_threshold: 0.75)
      events = transitions_of(breaker)
      succeed_calls(breaker, 2)
      succeed_calls(breaker, 5, ms: 100) # exactly the slow line: 5 of 7
      settle(breaker)
      expect(breaker.state).to eq(:closed)
      succeed_calls(breaker, 1, ms: 100) # 6 of 8: exactly 0.75
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[closed open slow_call_rate]])
      expect(breaker.metrics).to include(tripped_slow_call_rate: 0.75, failures_total: 0)
    end

    it "gives no verdict below min_calls, however bad the calls" do
      breaker = build
      fail_calls(breaker, 3, ms: 200)
      settle(breaker)
      expect(breaker.state).to eq(:closed)
      expect(breaker.metrics).to include(total: 3, error_rate: 1.0, slow_call_rate: 1.0)
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "a TimeWindow" do
    it "forgets the calls of a bucket once it expires on the breaker's clock, and judges what is left" do
      breaker = build(window: CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10, slow_threshold_ms: 100))
      fail_calls(breaker, 3)
      clock.advance(9.999)
      settle(breaker)
      expect(breaker.metrics).to include(total: 3, failures: 3)
      clock.advance(0.001) # the whole bucket of those calls has left the window
      expect(breaker.metrics).to include(total: 0, failures: 0, state: :closed)
      fail_calls(breaker, 3)
      settle(breaker)
      expect(breaker.state).to eq(:closed) # 3 calls: below min_calls
      fail_calls(breaker, 1)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "open" do
    it "rejects with an OpenError naming the breaker, its state and retry_after, without running the block" do
      breaker = build
      rejections = []
      breaker.on_reject { |e| rejections << e }
      fail_calls(breaker, 4)
      clock.advance(4)
      settle(breaker)
      ran = false
      expect { breaker.call { ran = true } }.to raise_error(CircuitBreaker::OpenError) { |e|
        expect([e.breaker_name, e.state]).to eq([name, :open])
        expect(e.retry_after).to be_within(1e-9).of(6.0)
        expect(e.message).to eq(%(circuit "#{name}" is open))
      }
      expect(ran).to be(false)
      expect(breaker.allow?).to be(false)
      expect(breaker.open?).to be(true)
      expect(breaker.metrics).to include(rejected: 2, calls: 4)
      expect(rejections.map { |e| [e.class, e.state] }).to eq([[CircuitBreaker::OpenError, :open]] * 2)
    end

    it "turns half-open once open_duration has passed, not a moment before" do
      breaker = build
      fail_calls(breaker, 4)
      events = transitions_of(breaker)
      clock.advance(9.999)
      settle(breaker)
      expect(breaker.state).to eq(:open)
      expect(breaker.retry_after).to be_within(1e-9).of(0.001)
      clock.advance(0.001)
      expect(breaker.state).to eq(:half_open)
      expect(moves(events)).to eq([%i[open half_open cool_down_elapsed]])
      expect(breaker.metrics).to include(state: :half_open, stage: 0, admit_share: 1.0, retry_after: 1.0)
    end

    it "ignores a record_* without a permit" do
      breaker = build
      fail_calls(breaker, 4)
      breaker.record_failure(duration_ms: 500)
      settle(breaker)
      expect(breaker.metrics).to include(state: :open, total: 0)
    end
  end

  describe "half-open" do
    it "runs the ramp: each stage admits its share of calls and half_open_calls probes, then the next; after the last, closed" do
      ramp = [0.25, 0.5, 1.0]
      breaker = half_open_breaker(ramp: ramp, half_open_calls: 2)
      events = transitions_of(breaker)
      seen = ramp.each_index.map do
        snapshot = breaker.metrics.slice(:state, :stage, :admit_share, :retry_after)
        admitted = drive_probes(breaker, [true, true], clock: clock, limit: 100)
        settle(breaker)
        [snapshot, admitted]
      end
      expect(seen).to eq(ramp.each_with_index.map do |share, k|
        [{ state: :half_open, stage: k, admit_share: share, retry_after: 1.0 }, [0, (1 / share).ceil]]
      end)
      expect(moves(events)).to eq([%i[half_open closed probes_passed]])
      expect(breaker.metrics).to include(state: :closed, stage: nil, admit_share: 1.0, total: 0)
    end

    it "never issues more than half_open_calls probes per stage, in flight or finished" do
      breaker = half_open_breaker(half_open_calls: 3)
      expect(Array.new(5) { breaker.allow? }).to eq([true, true, true, false, false])
      2.times { breaker.record_success }
      settle(breaker)
      expect(breaker.state).to eq(:half_open)
      expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError) { |e|
        expect([e.state, e.retry_after, e.breaker_name]).to eq([:half_open, 1.0, name])
      }
      breaker.record_success
      expect(breaker.state).to eq(:closed)
      expect(breaker.metrics[:rejected]).to eq(3)
    end

    it "reopens as soon as a probe fails, for the backed-off duration; the other probe's outcome decides nothing" do
      breaker = half_open_breaker(backoff: 2)
      events = transitions_of(breaker)
      expect([breaker.allow?, breaker.allow?]).to eq([true, true])
      breaker.record_failure
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[half_open open probe_failed]])
      expect(breaker.retry_after).to eq(20.0)
      breaker.record_success # the other probe: an earlier generation
      settle(breaker)
      expect(breaker.state).to eq(:open)
      expect(breaker.metrics).to include(opened: 2, total: 0)
    end

    it "counts a slow probe as a failed one" do
      breaker = half_open_breaker
      events = transitions_of(breaker)
      expect(breaker.call { clock.advance(0.1) && :slow }).to eq(:slow)
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[half_open open probe_failed]])
    end

    it "starts the stage over when the probes land between reopen_rate and advance_rate" do
      breaker = half_open_breaker(ramp: [0.5, 1.0], half_open_calls: 4, advance_rate: 1.0, reopen_rate: 0.5)
      events = transitions_of(breaker)
      drive_probes(breaker, [true, true, false, true], clock: clock, limit: 100) # 3 of 4
      settle(breaker)
      expect(breaker.metrics).to include(state: :half_open, stage: 0, admit_share: 0.5)
      expect(drive_probes(breaker, [true] * 4, clock: clock, limit: 100)).to eq([0, 2, 4, 6])
      expect(breaker.metrics).to include(stage: 1, admit_share: 1.0)
      expect(events).to be_empty
    end

    it "counts a probe not settled within probe_timeout as failed, and reopens" do
      breaker = half_open_breaker(half_open_calls: 1, probe_timeout: 5)
      events = transitions_of(breaker)
      expect(Thread.new { breaker.allow? }.value).to be(true) # a thread that never reports
      clock.advance(4.999)
      settle(breaker)
      expect(breaker.allow?).to be(false)
      expect(breaker.state).to eq(:half_open)
      clock.advance(0.001)
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[half_open open probe_timeout]])
    end

    it "reopens a stage that outlives half_open_timeout" do
      breaker = half_open_breaker(half_open_calls: 1, half_open_timeout: 5, probe_timeout: false)
      events = transitions_of(breaker)
      expect(breaker.allow?).to be(true) # the probe hangs
      clock.advance(4.999)
      settle(breaker)
      expect(breaker.state).to eq(:half_open)
      clock.advance(0.001)
      expect(breaker.state).to eq(:open)
      expect(moves(events)).to eq([%i[half_open open half_open_timeout]])
    end
  end

  describe "manual control" do
    it "trip! opens for open_duration (no backoff, no jitter) and empties the window, then probes as after an outage" do
      unless_known_disagreement(:trip_then_clock) do
        breaker = build(backoff: 2, jitter: 0.5)
        events = transitions_of(breaker)
        succeed_calls(breaker, 2)
        expect(breaker.trip!).to be(breaker)
        settle(breaker)
        expect(breaker.metrics).to include(state: :open, retry_after: 10.0, total: 0)
        expect(attempt(breaker)).to eq(:rejected)
        clock.advance(10)
        expect(breaker.state).to eq(:half_open)
        settle(breaker)
        expect(breaker.allow?).to be(true)
        breaker.record_success
        expect(breaker.call { :probe }).to eq(:probe)
        expect(moves(events)).to eq([%i[closed open manual], %i[open half_open cool_down_elapsed],
                                     %i[half_open closed probes_passed]])
      end
    end

    it "force_open! rejects every call until reset!, whatever the time, with retry_after nil" do
      breaker = build
      expect(breaker.force_open!).to be(breaker)
      settle(breaker)
      clock.advance(1_000)
      expect([breaker.state, breaker.open?, breaker.retry_after]).to eq([:forced_open, true, nil])
      expect(breaker.metrics).to include(admit_share: 0.0, retry_after: nil)
      expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError) { |e|
        expect([e.state, e.retry_after, e.breaker_name, e.message]).to eq([:forced_open, nil, name, %(circuit "#{name}" is forced open)])
      }
      expect(breaker.allow?).to be(false)
      breaker.reset!
      settle(breaker)
      expect(breaker.call { :ran }).to eq(:ran)
      expect(breaker.metrics).to include(state: :closed, rejected: 2)
    end

    it "disable! admits and records every call, and never trips, until reset!" do
      breaker = build
      expect(breaker.disable!).to be(breaker)
      settle(breaker)
      fail_calls(breaker, 6)
      breaker.record_failure(duration_ms: 500) # no permit: still recorded while disabled
      settle(breaker)
      clock.advance(1_000)
      expect(breaker.metrics).to include(state: :disabled, total: 7, failures: 7, slow_calls: 1, admit_share: 1.0,
                                         retry_after: 0.0, opened: 0)
      expect(breaker.allow?).to be(true)
      breaker.record_success
      breaker.reset!
      settle(breaker)
      expect(breaker.metrics).to include(state: :closed, total: 0)
      fail_calls(breaker, 4)
      expect(breaker.state).to eq(:open)
    end

    it "reset! closes, empties the window and keeps the counters; the calls after it count" do
      breaker = build
      events = transitions_of(breaker)
      fail_calls(breaker, 4)
      expect(attempt(breaker)).to eq(:rejected)
      expect(breaker.reset!).to be(breaker)
      succeed_calls(breaker, 2)
      fail_calls(breaker, 1)
      settle(breaker)
      expect(breaker.metrics).to include(state: :closed, total: 3, failures: 1, rejected: 1, calls: 7, opened: 1)
      expect(moves(events)).to eq([%i[closed open error_rate], %i[open closed manual]])
    end

    it "tells each manual transition with the reason :manual, and none for the state it is already in" do
      breaker = build
      events = transitions_of(breaker)
      breaker.trip!.force_open!.force_open!.disable!.reset!
      settle(breaker)
      expect(moves(events)).to eq([%i[closed open manual], %i[open forced_open manual],
                                   %i[forced_open disabled manual], %i[disabled closed manual]])
      expect(breaker.state).to eq(:closed)
    end
  end

  describe "metrics" do
    it "has the keys of docs/operating.md, frozen, with the window's counts and the counters" do
      breaker = build(min_calls: 100)
      succeed_calls(breaker, 2)
      succeed_calls(breaker, 1, ms: 100)
      fail_calls(breaker, 1)
      settle(breaker)
      metrics = breaker.metrics
      expect(metrics).to be_frozen
      expect(metrics).to eq(
        state: :closed, total: 4, failures: 1, slow_calls: 1, error_rate: 0.25, slow_call_rate: 0.25, rejected: 0,
        stage: nil, admit_share: 1.0, retry_after: 0.0, calls: 4, successes: 3, failures_total: 1, slow_total: 1,
        opened: 0, tripped_error_rate: nil, tripped_slow_call_rate: nil, counters: counters, dropped_records: 0,
        scope: counters, in_flight: nil, concurrency_limit: nil, limited: 0, **extra_metrics
      )
      expect([breaker.window.total, breaker.window.failures, breaker.window.slow_calls]).to eq([4, 1, 1])
    end
  end

  describe "events" do
    it "tells on_state_change of each transition once, in order, with the name and the metrics just after it" do
      breaker = build
      events = transitions_of(breaker)
      fail_calls(breaker, 4)
      clock.advance(10)
      fail_calls(breaker, 1) # the first probe fails
      clock.advance(10)
      succeed_calls(breaker, 2)
      settle(breaker)
      expect(moves(events)).to eq([%i[closed open error_rate], %i[open half_open cool_down_elapsed],
                                   %i[half_open open probe_failed], %i[open half_open cool_down_elapsed],
                                   %i[half_open closed probes_passed]])
      expect(events.map(&:name)).to all(eq(name))
      expect(events.map { |e| e.metrics[:state] }).to eq(events.map(&:to))
      expect(events.map(&:metrics)).to all(be_frozen)
    end
  end

  describe "permits (allow? and record_*)" do
    it "while closed: allow? hands out permits, record_* settles them with their duration, and records without one" do
      breaker = build
      expect(breaker.allow?).to be(true)
      breaker.record_success(duration_ms: 20)
      expect(breaker.allow?).to be(true)
      breaker.record_failure(duration_ms: 150)
      breaker.record(true) # no permit: recorded while closed
      settle(breaker)
      expect(breaker.metrics).to include(total: 3, failures: 1, slow_calls: 1, state: :closed)
      breaker.record(false) # 2 of 4
      expect(breaker.state).to eq(:open)
    end

    it "while half-open: each record_* settles one of the thread's probes, and one without a permit is ignored" do
      breaker = half_open_breaker(half_open_calls: 2)
      breaker.record_failure # no permit: ignored in half-open
      expect([breaker.allow?, breaker.allow?, breaker.allow?]).to eq([true, true, false])
      breaker.record_success
      settle(breaker)
      expect(breaker.state).to eq(:half_open)
      breaker.record_failure
      expect(breaker.state).to eq(:open)
    end

    it "keeps permits per thread: another thread's record_* does not settle them" do
      breaker = half_open_breaker(half_open_calls: 1)
      with_actor do |other|
        expect(other.run { breaker.allow? }).to be(true)
        breaker.record_failure # this thread holds no permit
        settle(breaker)
        expect(breaker.state).to eq(:half_open)
        other.run { breaker.record_success }
        expect(breaker.state).to eq(:closed)
      end
    end

    it "drops a permit of an earlier generation: an abandoned one never settles a later probe" do
      breaker = build(half_open_calls: 1)
      expect(breaker.allow?).to be(true) # its call raised before any record_*
      fail_calls(breaker, 4)
      clock.advance(10)
      settle(breaker)
      expect(breaker.allow?).to be(true) # the probe
      breaker.record_success # settles the probe, not the abandoned permit
      expect(breaker.state).to eq(:closed)
    end
  end

  describe "calls from many threads" do
    it "opens exactly once when threads fail together, and never hands out more than half_open_calls probes" do
      breaker = build(window: CircuitBreaker::SlidingWindow.new(size: 100), min_calls: 40, half_open_calls: 3)
      events = transitions_of(breaker)
      in_threads(8) { 10.times { fail_calls(breaker, 1) rescue CircuitBreaker::OpenError } } # rubocop:disable Style/RescueModifier
      # The default streak (8 failures in a row) comes before min_calls 40.
      expect(moves(events)).to eq([%i[closed open consecutive_failures]])
      # The opening settles before time moves on, as it does in real time: a
      # fleet's opening that this host's counts led to comes a round trip
      # later (docs/fleet.md, "When hosts open alone").
      settle(breaker)
      clock.advance(10)
      settle(breaker)
      grants = in_threads(8) { Array.new(5) { breaker.allow? }.count(true) }
      expect(grants.sum).to eq(3)
      metrics = breaker.metrics
      expect(metrics[:state]).to eq(:half_open)
      # Every call asked of it, but for the 3 probes still out (docs/operating.md).
      expect(metrics[:calls] + metrics[:rejected]).to eq(80 + 40 - 3)
    end

    it "loses no count, and lets a block call its own breaker" do
      breaker = build(min_calls: 1_000)
      in_threads(4) { 250.times { breaker.call { :ok } } }
      expect(breaker.call { breaker.call { :inner } }).to eq(:inner)
      settle(breaker)
      expect(breaker.metrics).to include(calls: 1_002, successes: 1_002, total: 10, state: :closed)
    end
  end
end
