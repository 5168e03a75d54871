# frozen_string_literal: true

require "timeout"

# max_wait: (docs/concurrency.md, "Waiting for a slot"): a call at the cap
# waits for a slot, bounded, without the GVL; and fibers as callers of a
# capped breaker. Waits are bounded; no assertion depends on how long
# anything takes.
RSpec.describe CircuitBreaker, "max_wait:" do
  include ThreadHelpers

  # A thread inside `breaker.call` until `release` is popped.
  def holder(breaker, release)
    inside = Queue.new
    t = Thread.new { breaker.call { inside << true; release.pop } }
    wait_until(what: "the holder inside") { inside.size == 1 }
    t
  end

  it "waits for a slot given back meanwhile, and runs the call" do
    breaker = described_class.new(max_concurrent: 1, max_wait: 30)
    release = Queue.new
    held = holder(breaker, release)
    waiter = Thread.new { breaker.call { :ran } }
    wait_until(what: "the waiter asleep") { waiter.status == "sleep" }
    expect(breaker.metrics[:limited]).to eq(0)
    release << true
    expect(waiter.join(30)&.value).to eq(:ran)
    held.join(30)
    expect(breaker.metrics).to include(in_flight: 0, limited: 0, calls: 2)
  end

  it "keeps the time it waited for a slot out of the call's duration (the window's slow calls, the adaptive cap)" do
    clock = CircuitBreaker::ManualClock.new
    window = CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100)
    breaker = described_class.new(max_concurrent: 1, max_wait: 30, clock: clock, window: window)
    release = Queue.new
    held = holder(breaker, release)
    waiter = Thread.new { breaker.call { :ran } }
    wait_until(what: "the waiter asleep") { waiter.status == "sleep" }
    clock.advance(1)
    release << true
    expect(waiter.join(30)&.value).to eq(:ran)
    held.join(30)
    # The holder's call lasted the second; the waiter's none of it.
    expect(breaker.metrics).to include(calls: 2, slow_calls: 1)
  end

  it "refuses the call once max_wait: ran out" do
    breaker = described_class.new(max_concurrent: 1, max_wait: 0.05)
    release = Queue.new
    held = holder(breaker, release)
    ran = false
    expect { breaker.call { ran = true } }.to raise_error(CircuitBreaker::ConcurrencyLimitError)
    expect(ran).to be(false)
    expect(breaker.metrics).to include(limited: 1, rejected: 1, in_flight: 1)
    release << true
    held.join(30)
  end

  it "lets Timeout cut the wait: the interrupt is raised and no slot is taken" do
    breaker = described_class.new(max_concurrent: 1, max_wait: 60)
    release = Queue.new
    held = holder(breaker, release)
    expect { Timeout.timeout(0.1) { breaker.call { :ran } } }.to raise_error(Timeout::Error)
    expect(breaker.metrics).to include(in_flight: 1, limited: 0)
    release << true
    held.join(30)
    expect(breaker.metrics[:in_flight]).to eq(0)
  end

  it "waits with the other threads running (without the GVL)" do
    breaker = described_class.new(max_concurrent: 1, max_wait: 0.3)
    release = Queue.new
    held = holder(breaker, release)
    ticks = 0
    ticker = Thread.new { loop { ticks += 1; sleep 0.001 } }
    expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::ConcurrencyLimitError)
    ticker.kill.join
    expect(ticks).to be > 10
    release << true
    held.join(30)
  end

  FiberSchedulers::KINDS.each do |kind|
    it "counts each fiber's call as a slot of its own under the #{kind} scheduler" do
      breaker = described_class.new(max_concurrent: 2)
      outcomes = under_scheduler(kind) do
        go = false
        results = []
        3.times do
          Fiber.schedule do
            results << breaker.call do
              sleep 0.01 until go
              :ran
            end
          rescue CircuitBreaker::ConcurrencyLimitError
            results << :limited
          end
        end
        held = breaker.metrics[:in_flight]
        go = true
        sleep 0.01 until results.size == 3
        [held, results.sort, breaker.metrics[:in_flight]]
      end
      expect(outcomes).to eq([2, %i[limited ran ran], 0])
    end
  end

  describe "under a fiber scheduler with blocking_operation_wait (Ruby 3.4)", :offloading do
    it "waits off the reactor: another fiber of the thread gives the slot back meanwhile" do
      breaker = described_class.new(max_concurrent: 1, max_wait: 10)
      outcome, offloaded = under_scheduler(:offloading) do |scheduler|
        holder = Fiber.schedule { breaker.call { sleep 0.05 } }
        waited = breaker.call { :ran }
        holder.alive? # the holder finished while the call waited
        [waited, scheduler.offloaded]
      end
      expect(outcome).to eq(:ran)
      expect(offloaded).to be >= 1
    end
  end
end
