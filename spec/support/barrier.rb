# frozen_string_literal: true

# Thread helpers for the concurrency specs: a reusable barrier that releases
# every waiting thread at once, and a bounded wait for a condition.
#
# The deadlines below only turn a hang into a failure with a message; no
# assertion depends on how long anything takes.
module ThreadHelpers
  # Raised when threads do not meet in time (a hang, not a slow machine).
  class Stuck < StandardError; end

  # A cyclic barrier: `wait` blocks until `parties` threads are waiting,
  # then releases them all at once; it can be used again for the next phase.
  #
  # @example
  #   barrier = Barrier.new(4)
  #   4.times.map { Thread.new { barrier.wait; hammer } }.each(&:join)
  class Barrier
    attr_reader :parties

    def initialize(parties, deadline: 60)
      @parties = parties
      @deadline = deadline
      @mutex = Mutex.new
      @cond = ConditionVariable.new
      @waiting = 0
      @phase = 0
    end

    # Blocks until every party waits, then returns in all of them.
    # @return [Integer] the phase just completed (0 first)
    def wait
      @mutex.synchronize do
        phase = @phase
        @waiting += 1
        if @waiting == @parties
          @waiting = 0
          @phase += 1
          @cond.broadcast
          return phase
        end
        limit = monotonic + @deadline
        while @phase == phase
          left = limit - monotonic
          raise Stuck, "barrier: #{@waiting}/#{@parties} threads arrived within #{@deadline}s" if left <= 0

          @cond.wait(@mutex, left)
        end
        phase
      end
    end

    private

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end

  # A counter of blocks running at once, with the highest value seen.
  class Concurrency
    attr_reader :max

    def initialize
      @mutex = Mutex.new
      @now = 0
      @max = 0
    end

    # Counts the block as running while it runs.
    def track
      @mutex.synchronize do
        @now += 1
        @max = @now if @now > @max
      end
      yield
    ensure
      @mutex.synchronize { @now -= 1 }
    end

    # @return [Integer] blocks running now
    def current
      @mutex.synchronize { @now }
    end
  end

  # Waits (yielding the GVL) until the block is truthy; raises {Stuck} after
  # `deadline` seconds.
  def wait_until(deadline: 30, what: "condition")
    limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + deadline
    until (value = yield)
      raise Stuck, "#{what} not reached within #{deadline}s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit

      sleep 0.001
    end
    value
  end

  # `n`, or a hundredth of it under GC_STRESS=1 (where every allocation runs
  # the GC), so the concurrency specs still run, with fewer iterations.
  def scaled(n)
    ENV["GC_STRESS"] == "1" ? [n / 100, 1].max : n
  end

  # Starts `count` threads that all begin their block at the same instant
  # (the block gets the thread's index); returns their values in order.
  # An exception in any thread is re-raised here.
  def in_threads(count)
    barrier = Barrier.new(count)
    threads = Array.new(count) do |i|
      Thread.new do
        Thread.current.report_on_exception = false
        barrier.wait
        yield i
      end
    end
    threads.map(&:value)
  end
end

RSpec.configure do |config|
  config.include ThreadHelpers
end
