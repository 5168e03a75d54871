# frozen_string_literal: true

# The articles' top-level SlidingWindow and CircuitOpenError; no other spec
# may rely on them (spec/circuit_breaker/articles_spec.rb checks, in fresh
# Rubies, that the gem alone defines neither).
require "circuit_breaker/articles"

# The four source articles behind the gem (docs/semantics.md), each as a scenario
# written in the article's own spelling (docs/configuration.md).
RSpec.describe CircuitBreaker, "the articles' scenarios" do
  let(:clock) { CircuitBreaker::ManualClock.new }

  # Stands in for the HTTP client of the articles.
  downstream_error = Class.new(StandardError)
  let(:downstream_error) { downstream_error }

  describe "seed 000: error rate and slow-call rate over a sliding window" do
    it "runs the article's code unchanged: fails through, then degrades with CircuitOpenError" do
      orders_api = -> { raise downstream_error, "connection refused" }
      breaker = CircuitBreaker.new(window: SlidingWindow.new(size: 100))
      served = Array.new(25) do
        response = breaker.call { orders_api.call }
        response
      rescue CircuitOpenError
        :cached_orders # degrade
      rescue downstream_error
        :please_retry
      end
      # The article's window needs min_calls (20) calls; the gem's default
      # consecutive_failures (8, docs/choices.md) opens it first: the first
      # 8 failures reach the caller, then it degrades.
      expect(served.first(8)).to all(eq(:please_retry))
      expect(served.last(17)).to all(eq(:cached_orders))
      expect(breaker.state).to eq(:open)
      expect(breaker.retry_after).to be_between(0.0, 30.0)
    end

    it "returns the block's value while the dependency answers" do
      breaker = CircuitBreaker.new(window: SlidingWindow.new(size: 100))
      response = breaker.call { { status: 200, body: "[]" } }
      expect(response).to eq(status: 200, body: "[]")
      expect(breaker.window.total).to eq(1)
    end

    # The article's algorithm judges the window alone: the gem's streak rule
    # (consecutive_failures, on by default, docs/choices.md) is off here.
    context "with the article's defaults (0.5, 0.8, min_calls 20, 800 ms)" do
      let(:breaker) { CircuitBreaker.new(window: SlidingWindow.new(size: 100), consecutive_failures: nil, clock: clock) }

      def call_taking(breaker, ms, fail: false)
        breaker.call do
          clock.advance(ms / 1000.0)
          raise downstream_error if fail

          :ok
        end
      rescue downstream_error
        :failed
      end

      it "gives no verdict below min_calls: 19 failures in a row leave it closed, the 20th opens it" do
        19.times { call_taking(breaker, 5, fail: true) }
        expect(breaker.state).to eq(:closed)
        call_taking(breaker, 5, fail: true)
        expect(breaker.state).to eq(:open)
      end

      it "opens at an error rate of exactly 50% (>=, where the article's snippet used >)" do
        10.times { call_taking(breaker, 5) }
        9.times { call_taking(breaker, 5, fail: true) }
        expect(breaker.state).to eq(:closed)
        call_taking(breaker, 5, fail: true)
        expect(breaker.state).to eq(:open)
      end

      it "opens on a slow-call rate of 80% with every call succeeding" do
        events = transitions_of(breaker)
        4.times { call_taking(breaker, 300) }
        15.times { call_taking(breaker, 800) } # 800 ms is slow (>=)
        expect(breaker.state).to eq(:closed)
        call_taking(breaker, 2_000)
        expect(breaker.state).to eq(:open)
        expect(moves(events)).to eq([%i[closed open slow_call_rate]])
      end

      it "stays closed at 75% slow calls" do
        5.times { call_taking(breaker, 300) }
        15.times { call_taking(breaker, 900) }
        expect(breaker.state).to eq(:closed)
        expect(breaker.metrics[:slow_call_rate]).to eq(0.75)
      end

      it "rejects for open_duration (30 s), then probes and recovers" do
        20.times { call_taking(breaker, 5, fail: true) }
        clock.advance(29.9)
        expect { breaker.call { :ok } }.to raise_error(CircuitOpenError)
        clock.advance(0.1)
        2.times { expect(call_taking(breaker, 5)).to eq(:ok) }
        expect(breaker.state).to eq(:closed)
      end
    end
  end

  describe "seed 002: resilience4j's configuration and timeline" do
    # failureRateThreshold 50, slowCallRateThreshold 30, slowCallDuration 2 s,
    # minimumNumberOfCalls 5, slidingWindowSize 10, waitDurationInOpenState
    # 10 s, permittedNumberOfCallsInHalfOpenState 2 (= the gem's defaults
    # ramp [1.0], half_open_calls 2).
    let(:breaker) do
      CircuitBreaker.new(window: SlidingWindow.new(size: 10, slow_threshold_ms: 2_000),
                         error_rate_threshold: 0.5, slow_rate_threshold: 0.3, min_calls: 5,
                         open_duration: 10, clock: clock)
    end

    def run(breaker, outcome)
      breaker.call do
        clock.advance(outcome == :slow ? 2.5 : 0.01)
        raise BreakerHelpers::Boom if outcome == :fail

        :ok
      end
    rescue BreakerHelpers::Boom
      :failed
    rescue CircuitOpenError
      :rejected
    end

    def open_it(breaker)
      5.times { run(breaker, :fail) }
      expect(breaker.state).to eq(:open)
    end

    it "opens once at least 5 calls are in and half of them failed (1. Closed → Open)" do
      results = (%i[ok] * 4 + %i[fail] * 6).map { |o| run(breaker, o) }
      # At the 8th call 4 of 8 have failed: 50%. The last two are rejected.
      expect(results).to eq(%i[ok ok ok ok failed failed failed failed rejected rejected])
    end

    it "waits for minimumNumberOfCalls: 4 failures alone do not open" do
      4.times { run(breaker, :fail) }
      expect(breaker.state).to eq(:closed)
      run(breaker, :fail)
      expect(breaker.state).to eq(:open)
    end

    it "opens on 30% slow calls (2 s and more)" do
      4.times { run(breaker, :ok) }
      run(breaker, :slow) # 1 of 5 = 20%
      expect(breaker.state).to eq(:closed)
      run(breaker, :slow) # 2 of 6 = 33%
      expect(breaker.state).to eq(:open)
    end

    it "rejects everything for 10 s (2. Open), then half-opens" do
      open_it(breaker)
      clock.advance(9.999)
      expect(run(breaker, :ok)).to eq(:rejected)
      clock.advance(0.001)
      expect(breaker.state).to eq(:half_open)
    end

    it "permits 2 probes; both succeed → closed, with an empty window (3. Half-Open)" do
      open_it(breaker)
      clock.advance(10)
      expect([breaker.allow?, breaker.allow?, breaker.allow?]).to eq([true, true, false])
      breaker.record_success
      expect(breaker.state).to eq(:half_open)
      breaker.record_success
      expect(breaker.state).to eq(:closed)
      expect(breaker.window.total).to eq(0)
    end

    it "reopens as soon as one probe fails, for another 10 s" do
      events = transitions_of(breaker)
      open_it(breaker)
      clock.advance(10)
      expect(run(breaker, :fail)).to eq(:failed)
      expect(breaker.state).to eq(:open)
      expect(breaker.retry_after).to eq(10.0)
      expect(moves(events)).to eq([%i[closed open error_rate], %i[open half_open cool_down_elapsed],
                                   %i[half_open open probe_failed]])
    end

    it "reopens when the second probe fails after the first succeeded" do
      open_it(breaker)
      clock.advance(10)
      expect(run(breaker, :ok)).to eq(:ok)
      expect(run(breaker, :fail)).to eq(:failed)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "seed 003: gradual recovery 10% → 30% → 60% → 100%" do
    let(:ramp) { [0.1, 0.3, 0.6, 1.0] }
    let(:breaker) do
      CircuitBreaker.new(window: SlidingWindow.new(size: 100), min_calls: 20, open_duration: 30,
                         ramp: ramp, half_open_calls: 20, advance_rate: 0.9, reopen_rate: 0.5,
                         consecutive_failures: nil, clock: clock) # the article's algorithm: no streak rule
    end

    def beats(share, count)
      (0..).lazy.select { |n| on_beat?(n, share) }.first(count)
    end

    def half_open!(breaker)
      trip!(breaker)
      cool_down(breaker, clock: clock)
      expect(breaker.state).to eq(:half_open)
    end

    it "ramps stage by stage: spacing, advance, restart, reopen, and finally close" do
      events = transitions_of(breaker)
      half_open!(breaker)

      # Stage 0, 10%: one call in ten, 20 probes, all pass → stage 1.
      expect(breaker.metrics).to include(stage: 0, admit_share: 0.1)
      expect(drive_probes(breaker, [true] * 20)).to eq(beats(0.1, 20))
      expect(breaker.metrics).to include(state: :half_open, stage: 1, admit_share: 0.3)

      # Stage 1, 30%: 17 of 20 (85%) is between 50% and 90%: start over.
      plan = [true] * 17 + [false] * 3
      expect(drive_probes(breaker, plan.shuffle(random: Random.new(3)))).to eq(beats(0.3, 20))
      expect(breaker.metrics).to include(state: :half_open, stage: 1)
      # 18 of 20 is exactly 90%: advance.
      expect(drive_probes(breaker, [false, false] + [true] * 18)).to eq(beats(0.3, 20))
      expect(breaker.metrics).to include(stage: 2, admit_share: 0.6)

      # Stage 2, 60%: 10 failures leave 10 probes that could still make 50%;
      # the 11th failure makes it certain: reopen at once.
      drive_probes(breaker, [false] * 10)
      expect(breaker.state).to eq(:half_open)
      drive_probes(breaker, [false])
      expect(breaker.state).to eq(:open)
      expect(breaker.retry_after).to eq(30.0)

      # Back to 10% after the cool-down; all stages pass → closed.
      cool_down(breaker, clock: clock)
      ramp.each_with_index do |share, k|
        expect(breaker.metrics).to include(stage: k, admit_share: share)
        expect(drive_probes(breaker, [true] * 20)).to eq(beats(share, 20))
      end
      expect(breaker.state).to eq(:closed)
      expect(moves(events)).to eq([
                                    %i[closed open error_rate],
                                    %i[open half_open cool_down_elapsed],
                                    %i[half_open open probe_failed],
                                    %i[open half_open cool_down_elapsed],
                                    %i[half_open closed probes_passed]
                                  ])
    end

    it "admits exactly the stage's share of the calls, and never more than 20 probes per stage" do
      half_open!(breaker)
      grants = Array.new(300) { breaker.allow? }
      admitted = grants.each_index.select { |n| grants[n] }
      expect(admitted).to eq(beats(0.1, 20)) # calls 200, 210… are on the beat but over quota
      expect(breaker.metrics[:rejected]).to eq(280)
      20.times { breaker.record_success }
      expect(breaker.metrics[:stage]).to eq(1)
    end

    it "counts slow probes as failures on the way up" do
      half_open!(breaker)
      drive_probes(breaker, [:slow] * 11, slow_ms: 900, clock: clock)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "seed 004: the half-open probe ratio" do
    # The article's RubyCircuitBreaker keywords.
    def article_breaker(**options)
      CircuitBreaker.new(window: SlidingWindow.new(size: 10), min_calls: 2, clock: clock,
                         threshold: 0.5, retry_time: 5, **options)
    end

    it "turns probe_ratio: 0.2, half_open_window: 50 into a 20% stage of 10 probes" do
      breaker = article_breaker(probe_ratio: 0.2, half_open_window: 50)
      trip!(breaker)
      clock.advance(5)
      expect(breaker.metrics).to include(state: :half_open, stage: 0, admit_share: 0.2)
      expect(drive_probes(breaker, [true] * 10)).to eq([0, 5, 10, 15, 20, 25, 30, 35, 40, 45])
      expect(breaker.state).to eq(:closed)
    end

    it "admits exactly one call in five and never exceeds the quota of 10" do
      breaker = article_breaker(probe_ratio: 0.2, half_open_window: 50)
      trip!(breaker)
      clock.advance(5)
      grants = Array.new(100) { breaker.allow? }
      expect(grants.each_slice(5).first(10)).to all(eq([true, false, false, false, false]))
      expect(grants.count(true)).to eq(10)
      expect(grants.drop(50)).to all(be(false))
      9.times { breaker.record_success }
      expect(breaker.state).to eq(:half_open)
      breaker.record_failure
      expect(breaker.state).to eq(:open)
    end

    it "avoids the floor-to-zero pitfall: probe_ratio 0.2 over a window of 3 still allows 1 probe" do
      breaker = article_breaker(probe_ratio: 0.2, half_open_window: 3)
      trip!(breaker)
      clock.advance(5)
      grants = Array.new(20) { breaker.allow? }
      expect(grants.count(true)).to eq(1)
      expect(grants.first).to be(true)
      breaker.record_success
      expect(breaker.state).to eq(:closed)
    end

    it "keeps the default quota of 2 with probe_ratio alone" do
      breaker = article_breaker(probe_ratio: 0.2)
      trip!(breaker)
      clock.advance(5)
      expect(drive_probes(breaker, [true, true])).to eq([0, 5])
      expect(breaker.state).to eq(:closed)
    end

    it "uses threshold: as error_rate_threshold and retry_time: as open_duration" do
      breaker = article_breaker(probe_ratio: 0.2, half_open_window: 10)
      succeed_calls(breaker, 1)
      fail_calls(breaker, 1) # 1 of 2 = 0.5 >= threshold
      expect(breaker.state).to eq(:open)
      expect(breaker.retry_after).to eq(5.0)
    end
  end
end
