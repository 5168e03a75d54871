# frozen_string_literal: true

# Timing for `rake bench`: calibrated `while` loops timed with
# Process.clock_gettime, implementations interleaved over several rounds,
# medians kept.
#
# Single-threaded loops are timed with the thread's CPU clock
# (CLOCK_THREAD_CPUTIME_ID): on a shared machine, time spent descheduled
# while other processes run does not count. BENCH_CLOCK=wall times them
# with the monotonic clock instead. Multi-threaded runs are always timed
# with the wall clock (and the process's CPU time is reported beside it).
module Bench
  # Seconds one timed sample should last (scaled by BENCH_SCALE).
  SAMPLE_SECONDS = 0.1 * Float(ENV.fetch("BENCH_SCALE", "1"))
  ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS", "7"))
  LOOP_CLOCK = ENV["BENCH_CLOCK"] == "wall" ? Process::CLOCK_MONOTONIC : Process::CLOCK_THREAD_CPUTIME_ID

  # The median of one variant's samples; `per_round` keeps them in round
  # order so that variants can be compared round by round.
  Result = Struct.new(:ns, :allocs, :cpu_ns, :per_round, keyword_init: true)

  module_function

  def wall
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  def loop_clock
    Process.clock_gettime(LOOP_CLOCK)
  end

  def process_cpu
    Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  end

  # A fresh `->(n) { n times: body }` compiled from source, so that every
  # implementation gets its own call site (and inline cache). `bindings`
  # become locals the body can use.
  def loop_of(body, **bindings)
    locals = bindings.keys.map { |k| "#{k} = __b[:#{k}]" }.join("; ")
    eval(<<~RUBY, binding, __FILE__, __LINE__ + 1) # rubocop:disable Security/Eval
      __b = bindings
      #{locals}
      ->(n) do
        i = 0
        while i < n
          #{body}
          i += 1
        end
        nil
      end
    RUBY
  end

  # A runner: `->(n) { [calls made, seconds, process CPU seconds] }`.
  # This one makes n calls of `body` in the current thread.
  def plain(body, **bindings)
    l = loop_of(body, **bindings)
    lambda do |n|
      c0 = process_cpu
      t0 = loop_clock
      l.call(n)
      [n, loop_clock - t0, process_cpu - c0]
    end
  end

  # A runner of `threads` threads at once, each making n calls of `body`,
  # released together; timed (wall clock) from their release until the last
  # one finishes.
  def threaded(threads, body, **bindings)
    loops = Array.new(threads) { loop_of(body, **bindings) }
    lambda do |n|
      go = Queue.new
      ready = Queue.new
      workers = loops.map do |l|
        Thread.new do
          ready << true
          go.pop
          l.call(n)
        end
      end
      threads.times { ready.pop }
      c0 = process_cpu
      t0 = wall
      threads.times { go << true }
      workers.each(&:join)
      [n * threads, wall - t0, process_cpu - c0]
    end
  end

  # One timed sample: [ns per call, Ruby objects allocated per call,
  # process CPU ns per call].
  def sample(runner, n)
    GC.start
    allocated = GC.stat(:total_allocated_objects)
    calls, seconds, cpu = runner.call(n)
    allocated = GC.stat(:total_allocated_objects) - allocated
    [seconds * 1e9 / calls, allocated.fdiv(calls), cpu * 1e9 / calls]
  end

  # The n that makes one sample last about `seconds` (also a warm-up).
  def calibrate(runner, seconds: SAMPLE_SECONDS)
    n = 1
    loop do
      _, t = runner.call(n)
      return [(n * seconds / t).ceil, 1].max if t >= 0.02 || n >= 1 << 40

      n *= t < 0.002 ? 10 : 2
    end
  end

  # Times every variant (name => runner) in ROUNDS interleaved rounds (the
  # order rotates each round) and returns name => Result. `counts` (name =>
  # n) skips the calibration of those variants.
  def measure(variants, counts: {})
    counts = variants.to_h { |name, r| [name, counts.fetch(name) { calibrate(r) }] }
    samples = variants.keys.to_h { |k| [k, []] }
    names = variants.keys
    ROUNDS.times do |round|
      names.rotate(round % names.size).each do |name|
        samples[name] << sample(variants[name], counts[name])
      end
    end
    if ENV["BENCH_VERBOSE"]
      samples.each do |name, list|
        warn format("  %-18s n=%-10d %s", name, counts[name], list.map { |ns, _| format("%.1f", ns) }.join(" "))
      end
    end
    samples.transform_values do |list|
      Result.new(ns: median(list.map { |s| s[0] }), allocs: median(list.map { |s| s[1] }),
                 cpu_ns: median(list.map { |s| s[2] }), per_round: list.map { |s| s[0] })
    end
  end

  # The median over rounds of a's time / b's time in the same round: a
  # burst of load on the machine slows both sides of a round alike.
  # Runs the block `depth` Ruby frames below the caller's: a raise then
  # captures a backtrace that many frames longer.
  def at_depth(depth, &block)
    depth.zero? ? yield : at_depth(depth - 1, &block)
  end

  def ratio(a, b)
    median(a.per_round.zip(b.per_round).map { |x, y| x / y })
  end

  def median(values)
    sorted = values.sort
    mid = sorted.size / 2
    sorted.size.odd? ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2.0
  end
end
