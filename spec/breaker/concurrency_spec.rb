# frozen_string_literal: true

# max_concurrent: within one process (docs/concurrency.md): threads hold
# slots, a call over the cap is refused with a ConcurrencyLimitError and
# recorded nowhere but in rejected and limited. Across processes:
# spec/integration/concurrency_spec.rb.
RSpec.describe CircuitBreaker, "max_concurrent:" do
  include ThreadHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }

  # Starts `n` threads that each hold a slot of `breaker` (inside call)
  # until `release` is popped; returns once all of them are inside.
  def hold_slots(breaker, n, release)
    inside = Queue.new
    threads = Array.new(n) do
      Thread.new do
        breaker.call do
          inside << true
          release.pop
        end
      end
    end
    wait_until(what: "#{n} holders inside") { inside.size >= n }
    threads
  end

  it "refuses a call over the cap at once, without running it or recording it, as a ConcurrencyLimitError" do
    breaker = described_class.new(name: "payments", max_concurrent: 2, clock: clock)
    heard = []
    breaker.on_reject { |e| heard << e }
    release = Queue.new
    holders = hold_slots(breaker, 2, release)
    expect(breaker.metrics).to include(in_flight: 2, concurrency_limit: 2, limited: 0)

    ran = false
    error = (breaker.call { ran = true } rescue $!) # rubocop:disable Style/RescueModifier
    expect(ran).to be(false)
    expect(error).to be_a(CircuitBreaker::ConcurrencyLimitError)
    expect(error).to be_a(CircuitBreaker::OpenError)
    expect([error.reason, error.state, error.limit, error.retry_after]).to eq([:concurrency_limit, :closed, 2, 1.0])
    expect(error.message).to eq('circuit "payments" is at its concurrency limit (2)')
    expect(error.backtrace.size).to eq(1)
    expect(heard).to eq([error])

    expect(breaker.call(fallback: ->(e) { [:fallback, e.class] }) { :ran }).to eq(
      [:fallback, CircuitBreaker::ConcurrencyLimitError]
    )
    2.times { release << true }
    holders.each { |t| t.join(30) || raise("a holder did not end") }
    m = breaker.metrics
    expect(m).to include(total: 2, calls: 2, successes: 2, rejected: 2, limited: 2, in_flight: 0)
    expect(breaker.call { :ok }).to eq(:ok)
  end

  it "gives the slot back however the block ends: a value, an exception, a throw, Thread#kill" do
    breaker = described_class.new(max_concurrent: 1, clock: clock)
    expect(breaker.call { 1 }).to eq(1)
    expect { breaker.call { raise ArgumentError } }.to raise_error(ArgumentError)
    expect(catch(:out) { breaker.call { throw :out, :thrown } }).to eq(:thrown)
    started = Queue.new
    t = Thread.new { breaker.call { started << true; sleep } }
    wait_until(what: "the call started") { started.size == 1 }
    expect(breaker.metrics[:in_flight]).to eq(1)
    t.kill.join(30)
    expect(breaker.metrics[:in_flight]).to eq(0)
    expect(breaker.call { :ok }).to eq(:ok)
  end

  it "never lets more than the cap run, whatever the threads do" do
    breaker = described_class.new(max_concurrent: 3, clock: clock)
    running = 0
    most = 0
    lock = Mutex.new
    barrier = ThreadHelpers::Barrier.new(8)
    refused = Queue.new
    threads = Array.new(8) do
      Thread.new do
        barrier.wait
        200.times do
          breaker.call do
            lock.synchronize { most = [most, running += 1].max }
            Thread.pass
            lock.synchronize { running -= 1 }
          end
        rescue CircuitBreaker::ConcurrencyLimitError
          refused << true
        end
      end
    end
    threads.each { |t| t.join(60) || raise("a thread did not end") }
    expect(most).to be <= 3
    expect(breaker.metrics).to include(in_flight: 0, limited: refused.size, calls: 1600 - refused.size)
  end

  it "refuses a half-open probe at the cap and gives its probe slot back" do
    breaker = described_class.new(max_concurrent: 1, min_calls: 1, consecutive_failures: nil, half_open_calls: 1,
                                  open_duration: 5, clock: clock)
    release = Queue.new
    holder = hold_slots(breaker, 1, release).first
    breaker.trip!
    clock.advance(5)
    expect { breaker.call { :probe } }.to raise_error(CircuitBreaker::ConcurrencyLimitError) { |e|
      expect(e.state).to eq(:half_open)
    }
    expect(breaker.metrics).to include(calls: 0, rejected: 1, limited: 1) # the holder's call has not ended
    release << true
    holder.join(30)
    expect(breaker.call { :probe }).to eq(:probe) # the probe slot is free again
    expect(breaker.state).to eq(:closed)
  end

  it "caps each forked child apart, starting from none of its parent's slots" do
    breaker = described_class.new(max_concurrent: 1, clock: clock)
    out, writer = IO.pipe
    pid = ChildProcess.fork("a child calling inside its parent's call") do
      out.close
      # Forked inside the parent's call: that slot is the parent's.
      writer.write(breaker.call { breaker.metrics[:in_flight] }.to_s)
      writer.close
      exit!(0)
    end
    writer.close
    ChildProcess.finish(pid, within: 60)
    expect(out.read).to eq("1")
  end

  describe "allow? and record_*" do
    it "holds a slot from allow? to its record, and answers false at the cap, as a limit rejection" do
      breaker = described_class.new(max_concurrent: 2, clock: clock)
      heard = []
      breaker.on_reject { |e| heard << e.class }
      expect([breaker.allow?, breaker.allow?]).to eq([true, true])
      expect(breaker.allow?).to be(false)
      expect(breaker.metrics).to include(in_flight: 2, limited: 1, rejected: 1)
      expect(heard).to eq([CircuitBreaker::ConcurrencyLimitError])
      breaker.record_success
      expect(breaker.metrics[:in_flight]).to eq(1)
      expect(breaker.allow?).to be(true)
      2.times { breaker.record_failure }
      expect(breaker.metrics).to include(in_flight: 0, calls: 3, failures_total: 2)
    end

    it "gives back a slot never recorded probe_timeout after it was taken" do
      breaker = described_class.new(max_concurrent: 1, probe_timeout: 2, clock: clock)
      taken = Queue.new
      done = Queue.new
      keeper = Thread.new { taken << breaker.allow?; done.pop } # alive, and never records
      wait_until(what: "the keeper's allow?") { taken.size == 1 }
      expect(taken.pop).to be(true)
      expect(breaker.allow?).to be(false)
      clock.advance(1.9)
      expect(breaker.allow?).to be(false)
      clock.advance(0.1)
      expect(breaker.metrics[:in_flight]).to eq(0)
      expect(breaker.allow?).to be(true)
      breaker.record_success
      expect(breaker.metrics[:in_flight]).to eq(0)
      done << true
      keeper.join(30)
    end

    # A thread's permits live in its storage: once the thread is gone and
    # collected, the GC gives their slots back.
    def allow_in_a_thread_that_ends(breaker)
      Thread.new { breaker.allow? }.join(30).value
    end

    it "gives back the slot of a thread that ended without recording, once the GC collected it" do
      breaker = described_class.new(max_concurrent: 1, probe_timeout: false, clock: clock)
      expect(allow_in_a_thread_that_ends(breaker)).to be(true)
      wait_until(what: "the ended thread's slot given back") do
        GC.start
        breaker.metrics[:in_flight].zero?
      end
      expect(breaker.allow?).to be(true)
    end

    it "bounds a slot by open_duration when probe_timeout is false" do
      breaker = described_class.new(max_concurrent: 1, probe_timeout: false, open_duration: 10, clock: clock)
      expect(breaker.allow?).to be(true)
      clock.advance(9)
      expect(breaker.allow?).to be(false)
      clock.advance(1)
      expect(breaker.allow?).to be(true)
      2.times { breaker.record_success } # the first settles the expired permit, giving back nothing twice
      expect(breaker.metrics[:in_flight]).to eq(0)
    end
  end

  describe ":adaptive" do
    it "reports its current cap, which falls as latency rises, and holds calls to it" do
      window = CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100_000)
      breaker = described_class.new(max_concurrent: :adaptive, clock: clock, window: window, min_calls: 1000)
      expect(breaker.metrics).to include(in_flight: 0, concurrency_limit: 20)
      50.times { breaker.call { clock.advance(0.01) } }
      expect(breaker.metrics[:concurrency_limit]).to eq(20)
      50.times { breaker.call { clock.advance(0.5) } } # 50 times slower
      limit = breaker.metrics[:concurrency_limit]
      expect(limit).to be < 10
      release = Queue.new
      holders = hold_slots(breaker, limit, release)
      expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::ConcurrencyLimitError) { |e|
        expect(e.limit).to eq(limit)
      }
      limit.times { release << true }
      holders.each { |t| t.join(30) }
    end
  end
end
