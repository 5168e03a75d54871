# frozen_string_literal: true

# Real `fork`: a child gets a copy of every breaker, which it can use at
# once: call, trip, reset, record into its window. Children never deadlock,
# even when the parent forks while other threads are inside `call` or
# hammering the breaker (the native lock is only held by a thread that also
# holds the GVL, so no thread can own it at fork time).
RSpec.describe CircuitBreaker, "across fork", :integration do
  # Runs the block in a child process; its truthy/falsy result becomes exit
  # status 0/1 (2: it raised). Returns the status, or :stuck when the child
  # did not exit within `deadline` seconds (it is then killed with SIGKILL).
  def in_child(deadline: 15)
    pid = ChildProcess.fork do
      ok = begin
        yield
      rescue Exception => e # rubocop:disable Lint/RescueException
        warn "child #{Process.pid}: #{e.class}: #{e.message}"
        exit!(2)
      end
      exit!(ok ? 0 : 1)
    end
    status = ChildProcess.wait(pid, within: deadline)
    return status.exitstatus || status.termsig && -status.termsig if status

    ChildProcess.stop(pid, signal: :KILL)
    :stuck
  end

  def statuses(count, &child)
    Array.new(count) { in_child(&child) }.tally
  end

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:forks) { scaled(200) }

  # Everything a child may do with its copy of `breaker`: call, trip by
  # failing, probe, close, trip!/reset!, record into and reset its window.
  def exercise(breaker, clock)
    window = breaker.window
    ok = breaker.call { :in_child } == :in_child
    10_000.times do
      break if breaker.open?

      breaker.call { raise "child failure" }
    rescue RuntimeError
      nil
    end
    ok &&= breaker.state == :open
    clock.advance(breaker.retry_after)
    ok &&= breaker.state == :half_open
    2.times { ok &&= breaker.call { :probe } == :probe }
    ok &&= breaker.state == :closed
    ok &&= breaker.trip!.open? && breaker.reset!.closed?
    window.record(duration_ms: 900, success: false)
    ok &&= window.total == 1 && window.slow_calls == 1
    ok &&= window.reset.total.zero?
    ok && breaker.metrics[:total].zero?
  end

  it "gives each of 200 children a working copy of a breaker that threads used" do
    events = []
    sliding = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 50), clock: clock, min_calls: 10)
    timed = described_class.new(window: CircuitBreaker::TimeWindow.new(seconds: 60, buckets: 6), clock: clock,
                                min_calls: 10)
    sliding.on_state_change { |e| events << e.to }
    in_threads(4) do |t|
      200.times do |n|
        [sliding, timed].each { |b| b.call { (n + t) % 4 == 0 ? raise("parent failure") : n } }
      rescue RuntimeError
        nil
      end
    end
    before = [sliding.metrics, timed.metrics]
    expect(before.map { |m| m[:state] }).to eq(%i[closed closed])

    got = statuses(forks) do
      # The child starts with the parent's counts and listeners.
      inherited = sliding.metrics == before[0] && timed.metrics == before[1]
      inherited && exercise(sliding, clock) && exercise(timed, clock) && events.include?(:open)
    end

    expect(got).to eq(0 => forks)
    # Nothing a child did reached the parent.
    expect([sliding.metrics, timed.metrics]).to eq(before)
    expect(clock.now).to eq(0.0)
    expect(events).to be_empty
  end

  it "gives children a working breaker when the parent forks while another thread is inside call" do
    breaker = described_class.new(clock: clock, min_calls: 10)
    inside = Queue.new
    release = Queue.new
    caller = Thread.new { breaker.call { inside << true && release.pop } }
    inside.pop

    got = statuses(scaled(20)) { exercise(breaker, clock) }

    release << :done
    expect(caller.value).to eq(:done)
    expect(got).to eq(0 => scaled(20))
    expect(breaker.metrics).to include(state: :closed, total: 1)
  end

  it "never deadlocks a child when the parent forks 200 times while threads hammer the breaker" do
    window = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10)
    breaker = described_class.new(window: window, clock: clock, min_calls: 5, open_duration: 1,
                                  half_open_calls: 2, half_open_timeout: 1)
    breaker.on_state_change { |_e| nil }
    stop = false
    hammers = Array.new(4) do |t|
      Thread.new do
        n = 0
        until stop
          n += 1
          begin
            case (n + t) % 10
            when 0 then breaker.trip!
            when 1 then breaker.reset!
            when 2 then clock.advance(0.5)
            when 3 then breaker.allow? && breaker.record_failure
            when 4 then breaker.metrics && window.total
            when 5 then breaker.call { raise "down" }
            else breaker.call { n }
            end
          rescue RuntimeError, CircuitBreaker::OpenError
            nil
          end
          Thread.pass
        end
      end
    end

    got = statuses(forks) do
      breaker.reset!
      breaker.call { :child } == :child && breaker.metrics[:state] == :closed &&
        window.record(duration_ms: 1, success: true).total >= 1
    end
    stop = true
    hammers.each(&:join)

    expect(got).to eq(0 => forks)
  end

  it "lets a child fork from inside a call, and the child's copy of that call completes" do
    breaker = described_class.new(clock: clock, min_calls: 10)
    status = nil
    value = breaker.call do
      status = in_child do
        # The child is inside the same call; it ends when this block returns.
        breaker.call { :nested } == :nested
      end
      :parent
    end
    expect(status).to eq(0)
    expect(value).to eq(:parent)
    expect(breaker.metrics[:total]).to eq(1)

    expect(in_child { breaker.call { :child } == :child && breaker.metrics[:total] == 2 }).to eq(0)
  end

  it "keeps the open timer across fork: a child sees the same remaining open time" do
    breaker = described_class.new(clock: clock, open_duration: 30)
    breaker.trip!
    clock.advance(10)
    # A ManualClock moves by exact steps: the float is exact too.
    expect(in_child { breaker.retry_after == 20.0 && breaker.open? }).to eq(0) # rubocop:disable Lint/FloatComparison
    expect(in_child { clock.advance(20) && breaker.half_open? && breaker.call { :probe } == :probe }).to eq(0)
    expect(breaker.state).to eq(:open)
  end

  it "lets a child settle a permit its forking thread took with allow?" do
    breaker = described_class.new(clock: clock, half_open_calls: 1, open_duration: 1)
    breaker.trip!
    clock.advance(1)
    expect(breaker.allow?).to be(true)
    expect(in_child { breaker.record_success.nil? && breaker.closed? }).to eq(0)
    breaker.record_failure
    expect(breaker.state).to eq(:open)
  end

  it "keeps the forking thread's probe in the child, where the probe limit holds" do
    breaker = described_class.new(clock: clock, half_open_calls: 1, open_duration: 1)
    breaker.trip!
    clock.advance(1)
    expect(breaker.allow?).to be(true) # the one probe, this thread's
    status = in_child do
      !breaker.allow? && breaker.record_success.nil? && breaker.closed? # the inherited permit settles
    end
    expect(status).to eq(0)
    expect(breaker.allow?).to be(false)
  end

  it "keeps the probe of a call that forks from inside its block, in the child" do
    breaker = described_class.new(clock: clock, half_open_calls: 1, open_duration: 1)
    breaker.trip!
    clock.advance(1)
    breaker.call do
      status = in_child { !breaker.allow? }
      expect(status).to eq(0)
    end
    expect(breaker.state).to eq(:closed)
  end

  # A probe slot held by another thread at fork time is copied into the
  # child, where that thread does not exist: the child frees it.
  it "gives a child the probe slots that threads of the parent held (they do not exist in the child)" do
    breaker = described_class.new(clock: clock, half_open_calls: 1, open_duration: 1)
    breaker.trip!
    clock.advance(1)
    inside = Queue.new
    release = Queue.new
    probe = Thread.new { breaker.call { inside << true && release.pop } }
    inside.pop

    status = in_child do
      breaker.call { :child_probe } == :child_probe && breaker.closed?
    rescue CircuitBreaker::OpenError
      false
    end

    release << :done
    probe.join
    expect(status).to eq(0)
  end
end
