# frozen_string_literal: true

# Issue 12, item 1: no permit pins a breaker in half-open under the
# defaults (probe_timeout, docs/semantics.md), a stale permit never settles a later
# probe in its place, and allow? as a predicate takes no memory per call.
# docs/semantics-permits.md states the rules.
RSpec.describe CircuitBreaker, "permits under hostile callers" do
  include BreakerHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:events) { [] }

  # Half-open with one probe slot, open_duration 10 s (so probe_timeout 10 s).
  def half_open_breaker(**options)
    breaker = build_breaker(clock: clock, min_calls: 1, open_duration: 10, half_open_calls: 1, **options)
    breaker.on_state_change { |e| events << [e.from, e.to, e.reason] }
    trip!(breaker)
    cool_down(breaker)
    expect(breaker.state).to eq(:half_open)
    breaker
  end

  # The probe slot is taken; probe_timeout after its admission the probe
  # fails, the breaker reopens, and a later half-open admits probes again.
  def expect_freed_by_probe_timeout(breaker)
    expect(breaker.allow?).to be(false)
    clock.advance(9.999)
    expect(breaker.state).to eq(:half_open)
    clock.advance(0.001)
    expect(breaker.state).to eq(:open)
    expect(events.last).to eq(%i[half_open open probe_timeout])
    cool_down(breaker)
    expect(breaker.call { :probe }).to eq(:probe)
    expect(breaker.state).to eq(:closed)
  end

  it "frees a probe whose permit another thread tried to settle (futures, callbacks)" do
    breaker = half_open_breaker
    expect(breaker.allow?).to be(true)
    Thread.new { breaker.record_success }.join # no permit on that thread: ignored in half-open
    expect_freed_by_probe_timeout(breaker)
  end

  it "frees a probe held by an abandoned Enumerator inside call" do
    breaker = half_open_breaker
    enum = Enumerator.new { |y| breaker.call { y << :suspended } }
    expect(enum.next).to eq(:suspended)
    enum = nil # rubocop:disable Lint/UselessAssignment -- dropped, never resumed
    expect_freed_by_probe_timeout(breaker)
  end

  it "frees a probe held by an abandoned Fiber inside call" do
    breaker = half_open_breaker
    fiber = Fiber.new { breaker.call { Fiber.yield :suspended } }
    expect(fiber.resume).to eq(:suspended)
    expect_freed_by_probe_timeout(breaker)
  end

  it "frees a probe of a thread that died holding its permit" do
    breaker = half_open_breaker
    expect(Thread.new { breaker.allow? }.value).to be(true)
    expect_freed_by_probe_timeout(breaker)
  end

  it "keeps the permit for the thread when an interrupt arrives as allow? hands it over" do
    breaker = half_open_breaker
    interrupt = TracePoint.new(:c_return) do |tp|
      Thread.current.raise(Interrupt) if tp.method_id == :__acquire
    end
    expect { interrupt.enable { breaker.allow? } }.to raise_error(Interrupt)
    expect(breaker.allow?).to be(false) # the one probe slot is held, by this thread
    breaker.record_success # which settles it
    expect(breaker.state).to eq(:closed)
  end

  it "keeps waiting with probe_timeout: false (resilience4j)" do
    breaker = half_open_breaker(probe_timeout: false)
    expect(Thread.new { breaker.allow? }.value).to be(true)
    clock.advance(1_000_000)
    expect(breaker.state).to eq(:half_open)
    expect(breaker.allow?).to be(false)
  end

  it "counts a probe from its own admission with probe_timeout: seconds, and its late outcome decides nothing" do
    breaker = half_open_breaker(probe_timeout: 2, half_open_calls: 2, advance_rate: 0.5, reopen_rate: 0.5)
    late = Thread.new { breaker.allow? }
    expect(late.value).to be(true) # admitted at 0, never settled here
    clock.advance(1)
    expect(breaker.allow?).to be(true) # admitted at 1
    clock.advance(1)
    expect(breaker.state).to eq(:half_open) # the first failed: 1 of 2 can still pass
    breaker.record_success # the second passes: 1 of 2 = advance_rate
    expect(breaker.state).to eq(:closed)
  end

  it "keeps permits of one generation together: allow? as a predicate takes no memory per call" do
    breaker = CircuitBreaker.new
    rss = -> { File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i * 1024 }
    2.times { breaker.allow? } # the thread's permit list exists
    GC.start
    before = rss.call
    1_000_000.times { breaker.allow? }
    GC.start
    expect(rss.call - before).to be < 1_000_000
    # Those permits still settle, oldest first, one by one.
    breaker.record_failure
    expect(breaker.window.total).to eq(1)
  end
end
