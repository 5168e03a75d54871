# frozen_string_literal: true

# max_concurrent: :adaptive (docs/concurrency.md, docs/choices.md "The
# adaptive concurrency cap"): slow calls lower the cap, fast ones raise it
# again, and metrics[:concurrency_limit] reports it. Durations come from a
# ManualClock: a round's calls all wait inside the block while the clock
# moves, so each lasts exactly what the round says.
RSpec.describe CircuitBreaker, "max_concurrent: :adaptive" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:breaker) do
    # Slow means 0.5 s here, under the window's 0.8 s slow line, so the
    # breaker stays closed and only the cap reacts.
    described_class.new(max_concurrent: :adaptive, clock: clock, consecutive_failures: nil)
  end

  # `callers` threads call at once; the admitted ones wait inside the block
  # until the clock moved `seconds`. Returns [admitted, refused].
  def round(callers, seconds)
    inside = Queue.new
    go = Queue.new
    threads = Array.new(callers) do
      Thread.new do
        breaker.call do
          inside << :in
          go.pop
        end
      rescue CircuitBreaker::ConcurrencyLimitError
        inside << :refused
      end
    end
    seen = Array.new(callers) { Timeout.timeout(30) { inside.pop } }
    admitted = seen.count(:in)
    clock.advance(seconds)
    admitted.times { go << true }
    threads.each { |t| t.join(30) || raise("a caller did not end") }
    [admitted, callers - admitted]
  end

  def limit = breaker.metrics[:concurrency_limit]

  it "starts at adaptive_initial, falls under slow calls and rises again with fast ones" do
    expect(breaker.metrics).to include(concurrency_limit: 20, in_flight: 0, limited: 0)
    expect(round(8, 0)).to eq([8, 0])
    expect(limit).to eq(20)

    # Ten times slower and more: at C = 8 callers, C/2 within N = 50 calls.
    rounds = (1..10).take_while { round(8, 0.5) && limit > 4 }.size
    expect(limit).to be <= 4
    expect(rounds).to be < 8
    expect(breaker.metrics[:limited]).to be_positive

    # Fast again: back at 8 (nothing refused) within 100 calls (70 here).
    calls = 0
    calls += round(8, 0).first while limit < 8 && calls < 200
    expect(limit).to be >= 8
    expect(calls).to be <= 100
    expect(round(8, 0)).to eq([8, 0])
    expect(breaker.metrics).to include(in_flight: 0, state: :closed)
  end

  it "is the host's with shared:, and a breaker that maps the file later finds it where it is", :shared_memory do
    name = "adaptive-#{Process.pid}-#{rand(1 << 30)}"
    first = described_class.new(shared: name, max_concurrent: :adaptive, clock: clock, consecutive_failures: nil)
    5.times { first.call { :fast } }
    12.times { first.call { clock.advance(0.5) } }
    lowered = first.metrics[:concurrency_limit]
    expect(lowered).to be < 20
    later = described_class.new(shared: name, max_concurrent: :adaptive, clock: clock, consecutive_failures: nil)
    expect(later.metrics[:concurrency_limit]).to eq(lowered)
    later.call { clock.advance(0.5) }
    expect(first.metrics[:concurrency_limit]).to be < lowered
  end

  it "follows allow? and record_* as it follows call, timeouts cutting it hardest" do
    5.times { breaker.allow? && breaker.record_success(duration_ms: 0) }
    8.times { breaker.allow? && breaker.record_success(duration_ms: 20) }
    after_slow = limit
    expect(after_slow).to be < 20
    8.times { breaker.allow? && breaker.record_failure(duration_ms: 0) }
    expect(limit).to eq(after_slow) # a fast failure says nothing of a queue
    breaker.allow? && breaker.record_failure(duration_ms: 30_000)
    expect(limit).to be < after_slow
    expect(breaker.metrics[:in_flight]).to eq(0)
    breaker.reset!
    expect(limit).to eq(20) # reset! starts it afresh, at adaptive_initial
  end

  it "keeps its settings' bounds" do
    bounded = described_class.new(
      max_concurrent: :adaptive, adaptive_initial: 6, adaptive_min: 3, adaptive_max: 8, clock: clock
    )
    expect(bounded.metrics[:concurrency_limit]).to eq(6)
    5.times { bounded.call { :fast } }
    30.times { bounded.call { clock.advance(0.5) } }
    expect(bounded.metrics[:concurrency_limit]).to eq(3)
  end
end
