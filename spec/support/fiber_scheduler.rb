# frozen_string_literal: true

require "timeout"

# Fibers as callers (docs/fibers.md): a small Fiber::Scheduler of the suite's
# own, and a way to run a block under it or under the async gem.
#
# MinimalScheduler implements what Ruby asks of a scheduler for the specs'
# needs: `fiber` (Fiber.schedule), `kernel_sleep`, `block`/`unblock`
# (Queue, Mutex, Thread#join), `io_wait`, `timeout_after` (Timeout) and
# `close` (its loop runs the fibers to their end). OffloadingScheduler adds
# Ruby 3.4's `blocking_operation_wait`: a native wait the gem marks
# offload-safe runs on a thread of its own while the reactor's other fibers
# run.
module FiberSchedulers
  # The fibers did not finish within the bound (a hang, not a slow machine).
  class Stuck < StandardError; end

  # What the concurrency specs run their callers as: threads, and fibers
  # under each scheduler of KINDS.
  CALLERS = %i[threads minimal async].freeze

  # Every scheduler the concurrency specs run under: the suite's own and
  # the async gem's (an example under async is skipped, saying why, where
  # the gem cannot be loaded: bin/test installs Debian's ruby-async, whose
  # 2.x needs io-event, a C extension Debian may build for another Ruby).
  KINDS = %i[minimal async].freeze

  def self.async?
    async_error.nil?
  end

  # nil when the async gem loads, else why it does not.
  def self.async_error
    return @async_error if defined?(@async_error)

    @async_error = begin
      require "async"
      nil
    rescue LoadError => e
      # async 2 needs io-event, a C extension (spec/support/debian_packages.rb).
      DebianPackages.load_error_reason(e, "ruby-async", "ruby-io-event")
    end
  end

  # A scheduler that runs each fiber until it waits, and a loop that
  # resumes them when what they wait for comes.
  class MinimalScheduler
    def initialize
      @ready = {}            # fiber => the value to resume it with
      @timers = []           # [deadline, fiber, value] (sleep, block and io_wait timeouts)
      @blocked = {}          # fiber => true, waiting for `unblock`
      @readable = {}         # io => fiber
      @writable = {}         # io => fiber
      @raises = []           # [deadline, fiber, exception class, message] (timeout_after)
      @woken = Thread::Queue.new # fibers `unblock`ed, possibly from other threads
      @wake_r, @wake_w = IO.pipe
    end

    def fiber(&block)
      fiber = Fiber.new(blocking: false, &block)
      fiber.resume
      fiber
    end

    def kernel_sleep(duration = nil)
      duration ? wait_until(now + duration, true) : block(:sleep)
      true
    end

    def block(_blocker, timeout = nil)
      fiber = Fiber.current
      return wait_until(now + timeout, false) if timeout

      @blocked[fiber] = true
      Fiber.yield
    ensure
      @blocked.delete(fiber)
    end

    # May be called from another thread (a Queue pushed there, a thread that
    # ends): the loop picks the fiber up through the pipe.
    def unblock(_blocker, fiber)
      @woken << fiber
      @wake_w.write_nonblock(".", exception: false)
    end

    def io_wait(io, events, timeout = nil)
      fiber = Fiber.current
      @readable[io] = fiber if events.anybits?(IO::READABLE)
      @writable[io] = fiber if events.anybits?(IO::WRITABLE)
      timeout ? wait_until(now + timeout, false) : Fiber.yield
    ensure
      @readable.delete(io)
      @writable.delete(io)
    end

    def timeout_after(duration, klass, message)
      timer = [now + duration, Fiber.current, klass, message]
      @raises << timer
      yield duration
    ensure
      @raises.delete(timer)
    end

    # Runs the loop until no fiber waits for anything.
    def close
      run
      @wake_r.close
      @wake_w.close
    end

    def run
      until idle?
        if @ready.empty?
          wait_for_events
        else
          ready = @ready
          @ready = {}
          ready.each { |fiber, value| fiber.resume(value) if fiber.alive? }
        end
      end
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def idle?
      @ready.empty? && @timers.empty? && @blocked.empty? && @readable.empty? && @writable.empty? && @woken.empty?
    end

    # Suspends the current fiber until `deadline` (the loop resumes it with
    # `value`) or until something else resumes it first.
    def wait_until(deadline, value)
      timer = [deadline, Fiber.current, value]
      @timers << timer
      Fiber.yield
    ensure
      @timers.delete(timer)
    end

    def wait_for_events
      deadlines = (@timers + @raises).map(&:first)
      timeout = deadlines.empty? ? nil : [deadlines.min - now, 0].max
      readable, writable, = IO.select([@wake_r, *@readable.keys], @writable.keys, [], timeout)
      @wake_r.read_nonblock(4096, exception: false) if readable&.delete(@wake_r)
      readable&.each { |io| ready(@readable[io], IO::READABLE) }
      writable&.each { |io| ready(@writable[io], IO::WRITABLE) }
      until @woken.empty?
        fiber = @woken.pop
        ready(fiber, true) if @blocked.key?(fiber) || @timers.any? { |timer| timer[1] == fiber }
      end
      t = now
      @timers.select { |deadline, _| deadline <= t }.each do |timer|
        @timers.delete(timer)
        ready(timer[1], timer[2])
      end
      @raises.select { |deadline, _| deadline <= t }.each do |timer|
        @raises.delete(timer)
        _, fiber, klass, message = timer
        fiber.raise(klass, message) if fiber.alive?
      end
    end

    # A fiber is resumed once per wait, by whatever came first.
    def ready(fiber, value)
      @ready[fiber] = value if fiber && !@ready.key?(fiber)
    end
  end

  # Ruby 3.4's hook for native code that may block: the work runs on a
  # thread of its own, and the fiber waits for it like for any thread. A
  # fiber that leaves early (Timeout, Fiber#raise) first stops the work
  # (Thread#kill reaches the work's unblock function) and waits for its
  # end: Ruby 3.4 keeps what the offloaded call reports back in the fiber's
  # frames, which must outlive it (docs/fibers.md).
  class OffloadingScheduler < MinimalScheduler
    # The threads the work ran on.
    attr_reader :threads

    def initialize
      super
      @threads = []
    end

    def offloaded
      @threads.size
    end

    def blocking_operation_wait(work)
      thread = Thread.new(&work)
      @threads << thread
      thread.join
    ensure
      if thread&.alive?
        thread.kill
        thread.join
      end
    end
  end

  # Runs the block in a fiber of a new thread under the scheduler `kind`
  # (:minimal, :offloading or :async) and returns its value, within
  # `within` seconds: Fiber.schedule inside it starts fibers of that
  # scheduler.
  def under_scheduler(kind, within: 20, &block)
    skip "the async gem cannot be loaded here: #{FiberSchedulers.async_error}" if kind == :async && !FiberSchedulers.async?
    thread = Thread.new do
      Thread.current.report_on_exception = false
      kind == :async ? under_async(&block) : under_own(kind, &block)
    end
    raise Stuck, "fibers under #{kind} still running after #{within}s" unless thread.join(within)

    thread.value
  ensure
    thread&.kill
  end

  # Runs `count` callers of `kind` — :threads, or fibers of one thread
  # under the scheduler `kind` — each starting its block (given its index)
  # at once; returns their values in order, or raises the first error.
  def in_callers(kind, count, within: 120, &block)
    return in_threads(count, &block) if kind == :threads

    under_scheduler(kind, within: within) do
      barrier = ThreadHelpers::Barrier.new(count)
      done = Thread::Queue.new
      results = Array.new(count)
      count.times do |i|
        Fiber.schedule do
          barrier.wait
          results[i] = [:ok, block.call(i)]
        rescue Exception => e # rubocop:disable Lint/RescueException
          results[i] = [:error, e]
        ensure
          done << i
        end
      end
      count.times { done.pop }
      error = results.find { |tag, _| tag == :error }
      raise error[1] if error

      results.map(&:last)
    end
  end

  # Lets another caller run: another thread (Thread.pass), or under a
  # scheduler another fiber of this thread (sleep(0) hands the scheduler
  # the turn; Thread.pass would not switch fibers). Returns nil, as
  # Thread.pass does.
  def self.pass_turn
    Fiber.scheduler && !Fiber.current.blocking? ? sleep(0) : Thread.pass
    nil
  end

  def pass_turn
    FiberSchedulers.pass_turn
  end

  private

  def under_own(kind)
    scheduler = (kind == :offloading ? OffloadingScheduler : MinimalScheduler).new
    Fiber.set_scheduler(scheduler)
    outcome = nil
    Fiber.schedule do
      outcome = [:ok, yield(scheduler)]
    rescue Exception => e # rubocop:disable Lint/RescueException
      outcome = [:error, e]
    end
    Fiber.set_scheduler(nil) # runs the loop to its end
    raise outcome[1] if outcome&.first == :error
    raise Stuck, "the scheduled block never finished" unless outcome

    outcome[1]
  end

  def under_async(&block)
    Async { block.call(Fiber.scheduler) }.wait
  end
end

RSpec.configure do |config|
  config.include FiberSchedulers
  # Examples tagged :offloading need Ruby's blocking_operation_wait hook
  # (the :offloading scheduler): skipped, saying why, on older Rubies.
  config.before(:each, :offloading) do
    next if Gem::Version.new(RUBY_VERSION) >= Gem::Version.new("3.4")

    skip "Ruby #{RUBY_VERSION} calls no Fiber::Scheduler#blocking_operation_wait (Ruby 3.4 and later do)"
  end
end
