# frozen_string_literal: true

# Many threads on one breaker, released together by a barrier: no count is
# lost, a trip condition opens the breaker once, and half-open never runs
# more than `half_open_calls` probes. `rake stress` runs this file with
# STRESS_CALLS=100000 and prints the figures. The exact-count and the
# random examples run their callers as fibers of one thread too, under the
# suite's own scheduler and the async gem's (docs/fibers.md), where a
# caller hands the turn on at the points a thread would pass.

# The mixed workload of the exact-count examples: what each kind of call
# does, and what the breaker must record for it.
module ThreadStress
  class Ignored < StandardError; end
  class Halt < Exception; end # rubocop:disable Lint/InheritException
  class Recorded < Exception; end # rubocop:disable Lint/InheritException
  class CheckFailed < StandardError; end

  # kind => [successes, failures] recorded (in the phase without slow calls)
  MIXED = {
    success: [1, 0], failure: [0, 1], failure_if: [0, 1], failure_if_raises: [0, 1],
    break: [1, 0], throw: [1, 0], next: [1, 0], return: [1, 0],
    ignored: [0, 0], ignored_by_proc: [0, 0], not_standard: [0, 0], recorded_by_proc: [0, 1],
    timeout_inside: [0, 1], allow_success: [1, 0], allow_failure: [0, 1], reentrant: [2, 0]
  }.freeze
  # Each advances the shared ManualClock past the slow threshold inside its
  # block; in their phase no other kind runs, so every one of them is slow.
  SLOW = { slow_success: [1, 0], slow_failure: [0, 1], slow_break: [1, 0], slow_throw: [1, 0] }.freeze
  MIXED_PER_ROUND = 900
  SLOW_PER_ROUND = 100
  SLOW_MS = 800

  module_function

  def options
    {
      ignore_errors: [Ignored, ->(e) { e.message == "ignore me" }],
      record_errors: [StandardError, ->(e) { e.is_a?(Recorded) }],
      failure_if: lambda { |value|
        raise CheckFailed, "check failed" if value == :check_raises

        value == :bad
      }
    }
  end

  def mixed_kind(thread, n)
    MIXED.keys[(thread * 7 + n) % MIXED.size]
  end

  def slow_kind(thread, n)
    SLOW.keys[(thread + n) % SLOW.size]
  end

  # [successes, failures, slow] the breaker must record for one thread.
  def expected(thread, rounds)
    s = f = slow = 0
    rounds.times do
      MIXED_PER_ROUND.times do |n|
        a, b = MIXED.fetch(mixed_kind(thread, n))
        s += a
        f += b
      end
      SLOW_PER_ROUND.times do |n|
        a, b = SLOW.fetch(slow_kind(thread, n))
        s += a
        f += b
        slow += 1
      end
    end
    [s, f, slow]
  end

  # Runs one call of `kind`; returns true when it behaved as it should (the
  # right value returned, the right exception raised, the jump done). Some
  # blocks pass the turn to another caller (thread or fiber), so calls
  # interleave often.
  def run(breaker, clock, kind, n)
    case kind
    when :success then breaker.call { FiberSchedulers.pass_turn || n } == n
    when :failure then raises?(RuntimeError) { breaker.call { FiberSchedulers.pass_turn || raise("boom") } }
    when :failure_if then breaker.call { :bad } == :bad
    when :failure_if_raises then raises?(CheckFailed) { breaker.call { :check_raises } }
    when :break then breaker.call { break :broke } == :broke
    when :throw then catch(:jump) { breaker.call { throw :jump, :thrown } } == :thrown
    when :next then breaker.call { next :nexted } == :nexted
    when :return then returning(breaker) == :returned
    when :ignored then raises?(Ignored) { breaker.call { raise Ignored } }
    when :ignored_by_proc then raises?(StandardError) { breaker.call { raise StandardError, "ignore me" } }
    when :not_standard then raises?(Halt) { breaker.call { raise Halt } }
    when :recorded_by_proc then raises?(Recorded) { breaker.call { raise Recorded } }
    when :timeout_inside then raises?(Timeout::Error) { breaker.call { raise Timeout::Error } }
    when :allow_success then breaker.allow? && breaker.record_success(duration_ms: 1).nil?
    when :allow_failure then breaker.allow? && breaker.record_failure(duration_ms: 1).nil?
    when :reentrant then breaker.call { breaker.call { FiberSchedulers.pass_turn || n } } == n
    when :slow_success then breaker.call { clock.advance(1.0) && n } == n
    when :slow_failure then raises?(RuntimeError) { breaker.call { clock.advance(1.0) && raise("slow boom") } }
    when :slow_break
      breaker.call do
        clock.advance(1.0)
        break :broke
      end == :broke
    when :slow_throw
      catch(:jump) do
        breaker.call do
          clock.advance(1.0)
          throw :jump, :thrown
        end
      end == :thrown
    else raise ArgumentError, "unknown kind #{kind}"
    end
  end

  def raises?(klass)
    yield
    false
  rescue klass
    true
  end

  def returning(breaker)
    breaker.call { return :returned }
    :fell_through
  end

  # Runs `rounds` rounds on `threads` callers; each round is a phase of
  # mixed calls, then (after a barrier) a phase of slow ones. `callers`
  # starts them (`in_callers` of spec/support/fiber_scheduler.rb, curried
  # with a kind); by default they are threads. Returns the number of calls
  # that misbehaved (0 expected) and the seconds taken.
  def hammer(breaker, clock, threads:, rounds:, callers: nil)
    barrier = ThreadHelpers::Barrier.new(threads)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    work = lambda do |t|
      bad = 0
      rounds.times do
        barrier.wait
        MIXED_PER_ROUND.times { |n| bad += 1 unless run(breaker, clock, mixed_kind(t, n), n) }
        barrier.wait
        SLOW_PER_ROUND.times { |n| bad += 1 unless run(breaker, clock, slow_kind(t, n), n) }
      end
      bad
    end
    wrong = callers ? callers.call(threads, &work).sum : Array.new(threads) { |t| Thread.new { work.call(t) } }.sum(&:value)
    [wrong, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
  end
end

RSpec.describe CircuitBreaker, "under many threads", :integration do
  let(:threads) { 16 }
  let(:calls_per_thread) { scaled(Integer(ENV.fetch("STRESS_CALLS", 20_000))) }
  let(:clock) { CircuitBreaker::ManualClock.new }
  # `rake stress` (STRESS_CALLS=100000) also runs the other examples longer.
  let(:factor) { [calls_per_thread / 20_000, 1].max }

  def rounds_for(calls)
    [calls / (ThreadStress::MIXED_PER_ROUND + ThreadStress::SLOW_PER_ROUND), 1].max
  end

  def expected_totals(rounds)
    threads.times.map { |t| ThreadStress.expected(t, rounds) }.transpose.map(&:sum)
  end

  def note(text)
    RSpec.configuration.reporter.message("stress #{text}") if ENV["STRESS_CALLS"]
  end

  def report(label, rounds, seconds, metrics)
    return unless ENV["STRESS_CALLS"]

    calls = threads * rounds * (ThreadStress::MIXED_PER_ROUND + ThreadStress::SLOW_PER_ROUND)
    RSpec.configuration.reporter.message(
      format("stress %-28s %2d threads x %7d calls = %8d calls in %6.2fs (%9.0f calls/s); " \
             "recorded %d, failures %d, slow %d, rejected %d",
             label, threads, calls / threads, calls, seconds, calls / seconds,
             metrics[:total], metrics[:failures], metrics[:slow_calls], metrics[:rejected])
    )
  end

  describe "mixed calls on a breaker that cannot trip" do
    it "records every success, failure and slow call exactly (TimeWindow, thresholds out of reach)" do
      exact_counts(:threads, calls_per_thread)
    end

    FiberSchedulers::KINDS.each do |kind|
      it "records every success, failure and slow call exactly, with fibers under the #{kind} scheduler" do
        exact_counts(kind, [calls_per_thread / 4, 1_000].max)
      end
    end

    def exact_counts(kind, calls)
      window = CircuitBreaker::TimeWindow.new(seconds: 1e9, buckets: 1, slow_threshold_ms: ThreadStress::SLOW_MS)
      breaker = described_class.new(window: window, clock: clock, error_rate_threshold: 1.0,
                                    slow_rate_threshold: 1.0, min_calls: 1_000_000_000, consecutive_failures: nil,
                                    **ThreadStress.options)
      events = []
      breaker.on_state_change { |e| events << e }
      rounds = rounds_for(calls)
      callers = kind == :threads ? nil : ->(count, &work) { in_callers(kind, count, &work) }

      wrong, seconds = ThreadStress.hammer(breaker, clock, threads: threads, rounds: rounds, callers: callers)

      successes, failures, slow = expected_totals(rounds)
      m = breaker.metrics
      report("TimeWindow, cannot trip (#{kind})", rounds, seconds, m)
      expect(wrong).to eq(0)
      expect(m).to include(state: :closed, total: successes + failures, failures: failures,
                           slow_calls: slow, rejected: 0)
      expect([window.total, window.failures, window.slow_calls]).to eq([successes + failures, failures, slow])
      expect(events).to be_empty
    end

    it "records every call exactly while disabled (SlidingWindow, default thresholds)" do
      window = CircuitBreaker::SlidingWindow.new(size: 1_000_000, slow_threshold_ms: ThreadStress::SLOW_MS)
      breaker = described_class.new(window: window, clock: clock, **ThreadStress.options).disable!
      # The sliding window keeps 1,000,000 calls: stay below that.
      rounds = rounds_for([calls_per_thread, 50_000].min)

      wrong, seconds = ThreadStress.hammer(breaker, clock, threads: threads, rounds: rounds)

      successes, failures, slow = expected_totals(rounds)
      m = breaker.metrics
      report("SlidingWindow, disabled", rounds, seconds, m)
      expect(wrong).to eq(0)
      expect(m).to include(state: :disabled, total: successes + failures, failures: failures,
                           slow_calls: slow, rejected: 0)
    end
  end

  describe "tripping" do
    it "opens exactly once when many threads fail at once, and only calls already admitted still run" do
      # The window's rule alone (the default streak of 8 off): 20 failures.
      breaker = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 100), clock: clock,
                                    min_calls: 20, error_rate_threshold: 0.5, open_duration: 60,
                                    consecutive_failures: nil)
      events = Queue.new
      breaker.on_state_change { |e| events << e }
      rounds = scaled(100) * factor
      calls = 50
      rejected_before = 0
      most_run = 0

      rounds.times do |round|
        breaker.reset! unless round.zero?
        events.clear # the reset!'s :open -> :closed
        ran = in_threads(threads) do
          ran_here = rejected_here = 0
          calls.times do
            breaker.call do
              ran_here += 1
              Thread.pass # so other threads' calls are in flight when it opens
              raise "down"
            end
          rescue RuntimeError
            nil
          rescue CircuitBreaker::OpenError
            rejected_here += 1
          end
          [ran_here, rejected_here]
        end
        blocks_run, rejections = ran.transpose.map(&:sum)
        got = Array.new(events.size) { events.pop }

        expect(got.map { |e| [e.from, e.to, e.reason] }).to eq([%i[closed open error_rate]]), "round #{round}"
        # 20 failures opened it; each other thread can have had one call in
        # flight (admitted before the opening, its outcome then dropped).
        expect(blocks_run).to be_between(20, 20 + threads - 1)
        expect(blocks_run + rejections).to eq(threads * calls)
        m = breaker.metrics
        expect(m[:rejected] - rejected_before).to eq(rejections)
        expect(m).to include(state: :open, total: 0)
        rejected_before = m[:rejected]
        most_run = [most_run, blocks_run].max
      end
      note("tripping: #{rounds} rounds x #{threads} threads failing together: one :closed -> :open each; " \
           "at most #{most_run} blocks ran per round (bound #{20 + threads - 1}); #{rejected_before} rejected")
    end

    it "opens exactly once when many threads' calls turn slow at once" do
      breaker = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 50, slow_threshold_ms: 100),
                                    clock: clock, min_calls: 10, slow_rate_threshold: 0.5, open_duration: 1e9)
      events = Queue.new
      breaker.on_state_change { |e| events << e }

      in_threads(threads) do
        200.times do
          breaker.call { clock.advance(0.2) && Thread.pass }
        rescue CircuitBreaker::OpenError
          nil
        end
      end

      got = Array.new(events.size) { events.pop }
      expect(got.map { |e| [e.from, e.to, e.reason] }).to eq([%i[closed open slow_call_rate]])
      expect(breaker.metrics[:rejected]).to be > 0
    end
  end

  describe "half-open" do
    # Threads call in a tight loop; admitted probes wait on `gate` so they
    # overlap. Returns the threads and a stopper.
    def hammer_probes(breaker, gate, on_admit)
      stop = false
      rejected = Queue.new
      workers = Array.new(threads) do
        Thread.new do
          n = 0
          until stop
            begin
              breaker.call do
                on_admit.call
                raise "probe failed" if gate.pop == :fail
              end
            rescue CircuitBreaker::OpenError
              n += 1
            rescue RuntimeError
              nil
            end
            Thread.pass
          end
          rejected << n
        end
      end
      stopper = lambda do
        stop = true
        gate.close
        workers.each(&:join)
        Array.new(threads) { rejected.pop }.sum
      end
      [workers, stopper]
    end

    it "never runs more than half_open_calls probes at once, and admits exactly that many per stage" do
      breaker = described_class.new(clock: clock, half_open_calls: 4, ramp: [0.25, 0.5, 1.0], open_duration: 10)
      events = Queue.new
      breaker.on_state_change { |e| events << e }
      breaker.trip!
      clock.advance(10)
      expect(breaker.state).to eq(:half_open)
      running = ThreadHelpers::Concurrency.new
      admitted = Hash.new(0)
      lock = Mutex.new
      gate = Queue.new
      on_admit = lambda do
        stage = breaker.metrics[:stage]
        lock.synchronize { admitted[stage] += 1 }
      end
      probe_gate = Object.new
      probe_gate.define_singleton_method(:pop) { running.track { gate.pop } }
      probe_gate.define_singleton_method(:close) { gate.close }
      _, stop = hammer_probes(breaker, probe_gate, on_admit)

      3.times do |stage|
        wait_until(what: "4 probes of stage #{stage} running") { running.current == 4 }
        before = breaker.metrics[:rejected]
        # The other threads keep asking while the 4 probes hang.
        wait_until(what: "rejections in stage #{stage}") { breaker.metrics[:rejected] >= before + scaled(2_000) }
        expect(running.current).to eq(4)
        expect(breaker.metrics[:stage]).to eq(stage)
        if stage < 2
          4.times { gate << :ok }
          wait_until(what: "stage #{stage + 1}") { breaker.metrics[:stage] == stage + 1 }
        end
      end
      rejections = stop.call # closes the gate: the last stage's probes succeed

      note("half-open ramp: #{rejections} rejections while 4 probes hung; max probes at once #{running.max}; " \
           "admitted per stage #{admitted}")
      expect(running.max).to eq(4)
      expect(admitted).to eq(0 => 4, 1 => 4, 2 => 4)
      m = breaker.metrics
      expect(m[:state]).to eq(:closed)
      expect(m[:rejected]).to eq(rejections)
      got = Array.new(events.size) { events.pop }
      expect(got.map { |e| [e.from, e.to, e.reason] })
        .to eq([%i[closed open manual], %i[open half_open cool_down_elapsed], %i[half_open closed probes_passed]])
    end

    it "reopens exactly once per half-open period when many probes fail together" do
      breaker = described_class.new(clock: clock, half_open_calls: 8, open_duration: 10)
      events = Queue.new
      lock = Mutex.new
      reopened = 0
      breaker.on_state_change do |e|
        events << e
        lock.synchronize { reopened += 1 } if e.from == :half_open
      end
      breaker.trip!
      running = ThreadHelpers::Concurrency.new
      period = 0
      admitted = Hash.new(0)
      gate = Queue.new
      probe_gate = Object.new
      probe_gate.define_singleton_method(:pop) { running.track { gate.pop } }
      probe_gate.define_singleton_method(:close) { gate.close }
      _, stop = hammer_probes(breaker, probe_gate, -> { lock.synchronize { admitted[period] += 1 } })
      periods = scaled(20) * factor

      periods.times do |p|
        period = p
        clock.advance(10)
        wait_until(what: "8 probes in period #{p}") { running.current == 8 }
        8.times { gate << :fail }
        # The probes leave the gate before they are recorded: wait for the
        # reopening itself, not only for the gate to empty.
        wait_until(what: "period #{p} to reopen") { running.current.zero? && lock.synchronize { reopened } == p + 1 }
        expect(breaker.state).to eq(:open)
      end
      rejections = stop.call
      note("half-open reopen: #{periods} periods of 8 failing probes: one :half_open -> :open each; " \
           "max probes at once #{running.max}; #{rejections} rejections")

      expect(running.max).to eq(8)
      expect(admitted).to eq(periods.times.to_h { |p| [p, 8] })
      got = Array.new(events.size) { events.pop }.map { |e| [e.from, e.to, e.reason] }
      expect(got.first).to eq(%i[closed open manual])
      expect(got.drop(1)).to eq([%i[open half_open cool_down_elapsed], %i[half_open open probe_failed]] * periods)
    end
  end

  it "keeps its transitions consistent while threads call, trip, reset, force open and disable at random" do
    random_operations(:threads)
  end

  FiberSchedulers::KINDS.each do |kind|
    it "keeps its transitions consistent while fibers under the #{kind} scheduler do the same" do
      random_operations(kind)
    end
  end

  def random_operations(kind)
    breaker = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 20), clock: clock, min_calls: 5,
                                  open_duration: 1, half_open_calls: 3, ramp: [0.5, 1.0], half_open_timeout: 2)
    events = Queue.new
    breaker.on_state_change { |e| events << e }
    stop = false
    ticker = Thread.new do
      until stop
        clock.advance(0.25)
        Thread.pass
      end
    end

    rejections = in_callers(kind, 8) do |t|
      random = Random.new(t)
      rejected = 0
      scaled(5_000 * factor).times do
        pass_turn unless kind == :threads # threads are preempted; fibers interleave here
        case random.rand(100)
        when 0 then breaker.trip!
        when 1 then breaker.reset!
        when 2 then breaker.force_open!
        when 3 then breaker.disable!
        when 4..20
          if breaker.allow?
            random.rand(2).zero? ? breaker.record_success : breaker.record_failure
          else
            rejected += 1
          end
        when 21..25 then breaker.metrics
        else
          begin
            breaker.call { random.rand(3).zero? ? raise("down") : :ok }
          rescue RuntimeError
            nil
          rescue CircuitBreaker::OpenError
            rejected += 1
          end
        end
      end
      rejected
    end
    stop = true
    ticker.join

    final = breaker.metrics
    note("chaos (#{kind}): 8 callers x #{scaled(5_000 * factor)} random operations; #{events.size} transitions; " \
         "#{final[:rejected]} rejected")
    expect(final[:rejected]).to eq(rejections.sum)
    # Listeners may run out of order across threads, but every state left
    # was entered: per state, entries - exits = (final ? 1 : 0) - (initial ? 1 : 0).
    got = Array.new(events.size) { events.pop }
    expect(got).not_to be_empty
    expect(got).to all(satisfy { |e| e.from != e.to })
    %i[closed open half_open forced_open disabled].each do |s|
      balance = got.count { |e| e.to == s } - got.count { |e| e.from == s }
      expect(balance).to eq((final[:state] == s ? 1 : 0) - (s == :closed ? 1 : 0)), "state #{s}"
    end
  end
end
