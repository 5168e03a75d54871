# frozen_string_literal: true

require "weakref"

# The objects a breaker holds (window, name, error matchers, failure_if,
# listeners) survive full GCs and heap compaction while only the breaker
# references them, and still work afterwards. Breakers nobody references are
# collected. GC_STRESS=1 and GC_COMPACT=1 runs of the whole suite complement
# this file.
RSpec.describe CircuitBreaker, "and the garbage collector" do
  # Builds breaker `i`, referencing its matchers, classes, procs, window and
  # name only through the breaker; returns the breaker, its clock, the
  # listener log and weak references to everything it holds.
  def build(i)
    recorded = Class.new(StandardError)
    ignored = Class.new(StandardError)
    log = []
    clock = CircuitBreaker::ManualClock.new
    window = i.even? ? CircuitBreaker::SlidingWindow.new(size: 10) : CircuitBreaker::TimeWindow.new(seconds: 10)
    record_by_proc = ->(e) { e.message == "record #{i}" }
    ignore_by_proc = ->(e) { e.message == "ignore #{i}" }
    failure_if = ->(value) { value == "bad #{i}" }
    name = +"gc-#{i}"
    breaker = described_class.new(window: window, clock: clock, name: name, min_calls: 4, open_duration: 5,
                                  half_open_calls: 1, record_errors: [recorded, record_by_proc],
                                  ignore_errors: [ignored, ignore_by_proc], failure_if: failure_if)
    breaker.on_state_change { |e| log << [e.name, e.from, e.to] }
    breaker.on_reject { |e| log << [e.breaker_name, :rejected] }
    held = [recorded, ignored, window, record_by_proc, ignore_by_proc, failure_if].map { |o| WeakRef.new(o) }
    [breaker, clock, log, held]
  end

  # Full GCs, a compaction, then Ruby's own check that moves every movable
  # object (toward: :empty, on a doubled heap) and verifies the references.
  # GC.stress (GC_STRESS=1) is paused meanwhile: it would only repeat it.
  def compact_everything
    stress = GC.stress
    GC.stress = false
    3.times { GC.start(full_mark: true, immediate_sweep: true) }
    GC.compact
    # Ruby 3.2 renamed double_heap to expand_heap (3.3 warns at the old name).
    grow = RUBY_VERSION >= "3.2" ? :expand_heap : :double_heap
    GC.verify_compaction_references(grow => true, toward: :empty)
    GC.start
  ensure
    GC.stress = stress
  end

  # Uses everything the breaker holds and checks the outcome.
  def exercise(i, breaker, clock, log, held)
    recorded, ignored, window = held.take(3).map(&:__getobj__)
    expect(breaker.name).to eq("gc-#{i}")
    expect(breaker.window).to be(window)

    expect { breaker.call { raise ignored } }.to raise_error(ignored)
    expect { breaker.call { raise StandardError, "ignore #{i}" } }.to raise_error(StandardError)
    expect { breaker.call { raise StandardError, "not matched" } }.to raise_error(StandardError)
    expect(window.total).to eq(0) # ignored, or not a recorded error

    expect { breaker.call { raise recorded } }.to raise_error(recorded)
    expect { breaker.call { raise StandardError, "record #{i}" } }.to raise_error(StandardError)
    expect(breaker.call { "bad #{i}" }).to eq("bad #{i}")
    expect([window.total, window.failures]).to eq([3, 3])
    expect(breaker.call { :fine }).to eq(:fine) # 4 calls, 75 % failures: open
    expect(breaker.state).to eq(:open)
    expect { breaker.call { :rejected } }.to raise_error(CircuitBreaker::OpenError, /gc-#{i}/)
    clock.advance(5)
    expect(breaker.call { :probe }).to eq(:probe)
    expect(log).to eq([["gc-#{i}", :closed, :open], ["gc-#{i}", :rejected],
                       ["gc-#{i}", :open, :half_open], ["gc-#{i}", :half_open, :closed]])
  end

  it "keeps what breakers hold alive and working through GC and compaction" do
    built = Array.new(scaled(20) * 2) { |i| build(i) } # both window kinds
    compact_everything
    built.each { |(_, _, _, held)| expect(held).to all(be_weakref_alive) }
    built.each_with_index { |args, i| exercise(i, *args) }
    compact_everything
    built.each { |(breaker, *)| breaker.reset! }
    built.each_with_index { |(breaker, clock, log, held), i| log.clear || exercise(i, breaker, clock, log, held) }
  end

  it "keeps a default window (created natively) and a breaker's listeners across compaction" do
    breaker = described_class.new(min_calls: 1)
    window = WeakRef.new(breaker.window)
    seen = []
    breaker.on_state_change { |e| seen << e.to }
    compact_everything
    expect(window).to be_weakref_alive
    expect { breaker.call { raise "down" } }.to raise_error(RuntimeError)
    expect(breaker.window.failures).to eq(0) # opened: emptied
    expect(seen).to eq([:open])
  end

  it "uses a ManualClock's time after the clock object itself was collected" do
    clock = CircuitBreaker::ManualClock.new(100)
    window = CircuitBreaker::TimeWindow.new(seconds: 1, buckets: 1, clock: clock)
    breaker = described_class.new(clock: CircuitBreaker::ManualClock.new, open_duration: 1)
    clock.advance(1)
    clock = nil # rubocop:disable Lint/UselessAssignment
    compact_everything
    window.record(duration_ms: 1, success: true)
    expect(window.total).to eq(1)
    expect(breaker.trip!.state).to eq(:open)
  end

  it "collects breakers, windows and clocks that nothing references" do
    # The collections are forced below; GC.stress would only slow this down.
    stress = GC.stress
    GC.stress = false
    refs = []
    200.times do |i|
      clock = CircuitBreaker::ManualClock.new
      breaker = described_class.new(window: CircuitBreaker::TimeWindow.new(seconds: 10, clock: clock), clock: clock,
                                    name: "tmp-#{i}", failure_if: ->(v) { v.nil? })
      breaker.on_state_change { |_e| nil }
      breaker.call { i }
      refs.push(WeakRef.new(breaker), WeakRef.new(breaker.window), WeakRef.new(clock))
    end
    compact_everything
    # The GC scans the stack conservatively: a few may survive a while.
    expect(refs.count(&:weakref_alive?)).to be < refs.size / 10
  ensure
    GC.stress = stress
  end
end
