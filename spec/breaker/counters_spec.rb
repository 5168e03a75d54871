# frozen_string_literal: true

# docs/operating.md (docs/operating.md): cumulative counters in #metrics, the rates
# that opened the breaker, and what the opening event carries.
RSpec.describe CircuitBreaker, "counters" do
  let(:names) { %i[calls successes failures_total slow_total rejected opened] }
  let(:clock) { CircuitBreaker::ManualClock.new }
  # A new window each time: a window serves one breaker.
  def options
    { min_calls: 4, open_duration: 30, window: CircuitBreaker::SlidingWindow.new(size: 10) }
  end

  subject(:breaker) { build_breaker(clock: clock, **options) }

  def counters(b = breaker)
    b.metrics.slice(*names)
  end

  def zero
    names.to_h { |k| [k, 0] }
  end

  it "start at 0, as Integers, with the process's own counters" do
    expect(counters).to eq(zero)
    expect(breaker.metrics[:counters]).to eq(:process)
    expect(breaker.metrics.values_at(:tripped_error_rate, :tripped_slow_call_rate)).to eq([nil, nil])
  end

  it "count a success, a slow success and a failure (slow or not)" do
    succeed_calls(breaker, 1)
    succeed_calls(breaker, 1, ms: 800)
    fail_calls(breaker, 1)
    fail_calls(breaker, 1, ms: 900)
    expect(counters).to eq(zero.merge(calls: 4, successes: 2, failures_total: 2, slow_total: 2, opened: 1))
  end

  it "count a failure_if failure and a failure_if that raised" do
    b = build_breaker(clock: clock, **options, failure_if: ->(v) { v == :bad || raise(ArgumentError, "judge") })
    b.call { :bad }
    expect { b.call { :other } }.to raise_error(ArgumentError, "judge")
    expect(counters(b)).to include(calls: 2, successes: 0, failures_total: 2)
  end

  it "count an ignored error, an unrecorded exception and a killed thread as calls without an outcome" do
    b = build_breaker(clock: clock, **options, ignore_errors: [KeyError])
    expect { b.call { raise KeyError } }.to raise_error(KeyError)
    expect { b.call { raise Interrupt } }.to raise_error(Interrupt)
    entered = Queue.new
    t = Thread.new { b.call { entered << 1; sleep } }
    entered.pop
    t.kill.join
    expect(counters(b)).to eq(zero.merge(calls: 3))
    expect(b.metrics[:total]).to eq(0)
  end

  it "count jumps out of the block (break, throw) as successes" do
    [1].each { breaker.call { break } }
    catch(:done) { breaker.call { throw :done } }
    expect(counters).to include(calls: 2, successes: 2)
  end

  it "count rejections while open, half-open without a slot, and forced open; and each opening" do
    b = build_breaker(clock: clock, **options, half_open_calls: 1)
    trip!(b)
    2.times { expect(attempt(b)).to eq(:rejected) }
    cool_down(b)
    gate = Queue.new
    started = Queue.new
    probe = Thread.new { b.call { started << 1; gate.pop } }
    started.pop
    expect(attempt(b)).to eq(:rejected) # the only probe slot is taken
    gate << :done
    probe.join
    expect(b.state).to eq(:closed)
    b.force_open!
    expect(attempt(b)).to eq(:rejected)
    expect(b.allow?).to be(false)
    b.reset!.trip!
    expect(counters(b)).to eq(zero.merge(calls: 5, successes: 1, failures_total: 4, rejected: 5, opened: 2))
  end

  it "keep counting while disabled (it records), and survive reset!" do
    breaker.disable!
    fail_calls(breaker, 5)
    succeed_calls(breaker, 1)
    expect(breaker.state).to eq(:disabled)
    breaker.reset!
    expect(counters).to eq(zero.merge(calls: 6, successes: 1, failures_total: 5))
  end

  it "count allow?/record_* like call, and records without a permit only while they are recorded" do
    expect(breaker.allow?).to be(true)
    breaker.record_failure(duration_ms: 1000)
    breaker.record_success
    breaker.trip!
    breaker.record_failure
    expect(counters).to eq(zero.merge(calls: 2, successes: 1, failures_total: 1, slow_total: 1, opened: 1))
  end

  it "count a call admitted before the breaker opened when it ends" do
    gate = Queue.new
    started = Queue.new
    late = Thread.new { breaker.call { started << 1; gate.pop; :late } }
    started.pop
    trip!(breaker)
    gate << :go
    expect(late.value).to eq(:late)
    expect(counters).to include(calls: 5, successes: 1, failures_total: 4, opened: 1)
    expect(breaker.metrics[:total]).to eq(0) # it decided nothing
  end

  describe "with shared:", :shared_memory do
    # Its file goes once no process maps it (docs/shared.md).
    let(:key) { "spec-counters-#{Process.pid}-#{rand(1 << 32)}" }

    it "are host-wide, marked so, and count every process's calls once" do
      b = CircuitBreaker.new(**options, min_calls: 10, shared: key)
      succeed_calls(b, 2)
      child = ChildProcess.fork do
        # The child's own object over the same file.
        other = CircuitBreaker.new(**options, min_calls: 10, shared: key)
        3.times { other.call { raise BreakerHelpers::Boom } rescue nil } # rubocop:disable Style/RescueModifier
        exit!(other.metrics[:counters] == :host ? 0 : 1)
      end
      expect(ChildProcess.finish(child).exitstatus).to eq(0)
      expect(b.metrics).to include(counters: :host, calls: 5, successes: 2, failures_total: 3, opened: 0)
    end
  end

  describe "tripped rates" do
    it "show the rates that opened it while open and half-open, nil otherwise" do
      succeed_calls(breaker, 1, ms: 800)
      fail_calls(breaker, 1)
      succeed_calls(breaker, 1)
      expect(breaker.metrics[:tripped_error_rate]).to be_nil
      fail_calls(breaker, 1)
      m = breaker.metrics
      expect(m.values_at(:state, :error_rate, :tripped_error_rate, :tripped_slow_call_rate)).to eq([:open, 0.0, 0.5, 0.25])
      cool_down(breaker)
      expect(breaker.metrics.values_at(:state, :tripped_error_rate)).to eq([:half_open, 0.5])
      succeed_calls(breaker, 2)
      expect(breaker.metrics.values_at(:state, :tripped_error_rate, :tripped_slow_call_rate)).to eq([:closed, nil, nil])
    end

    it "are nil when forced open or disabled" do
      trip!(breaker)
      breaker.force_open!
      expect(breaker.metrics[:tripped_error_rate]).to be_nil
      breaker.disable!
      expect(breaker.metrics[:tripped_error_rate]).to be_nil
    end
  end

  describe "the opening event" do
    let(:events) { transitions_of(breaker) }

    before { events }

    it "carries the rates that opened it and the class of the last recorded exception" do
      succeed_calls(breaker, 2)
      fail_calls(breaker, 1, ms: 900)
      fail_calls(breaker, 1)
      opening = events.last
      expect(opening.to_h).to include(to: :open, reason: :error_rate, error_rate: 0.5, slow_call_rate: 0.25,
                                      error_class: "BreakerHelpers::Boom")
      expect(opening.metrics).to include(tripped_error_rate: 0.5, opened: 1, failures_total: 2, calls: 4)
    end

    it "names the last exception recorded, not one that was ignored or not recorded" do
      b = build_breaker(clock: clock, **options, ignore_errors: [KeyError], failure_if: ->(v) { v == :bad })
      seen = transitions_of(b)
      fail_calls(b, 1)
      expect { b.call { raise KeyError } }.to raise_error(KeyError)
      3.times { b.call { :bad } }
      expect(seen.last.to_h).to include(to: :open, error_rate: 1.0, error_class: "BreakerHelpers::Boom")
    end

    it "has no exception class when none was ever recorded, and an anonymous class is inspected" do
      b = build_breaker(clock: clock, **options, failure_if: ->(v) { v == :bad })
      seen = transitions_of(b)
      4.times { b.call { :bad } }
      expect(seen.last.error_class).to be_nil
      anonymous = Class.new(StandardError)
      b.reset!
      4.times { b.call { raise anonymous } rescue nil } # rubocop:disable Style/RescueModifier
      expect(seen.last.error_class).to eq(anonymous.inspect)
    end

    it "leaves the three fields nil on other transitions" do
      trip!(breaker)
      cool_down(breaker)
      breaker.state
      breaker.reset!
      expect(events.map { |e| [e.to, e.error_rate, e.slow_call_rate, e.error_class] })
        .to eq([[:open, 1.0, 0.0, "BreakerHelpers::Boom"], [:half_open, nil, nil, nil], [:closed, nil, nil, nil]])
    end
  end
end
