# frozen_string_literal: true

require "timeout"

# Waits that can block (a stopped holder's `shared:` lock) run without the
# GVL, through one wrapper (ext/circuit_breaker/src/cruby.rs, without_gvl):
# an interrupt cuts them (Thread#raise, Timeout), and on Ruby 3.4 a fiber
# scheduler with `blocking_operation_wait` runs them on another thread
# while the reactor's other fibers run (docs/fibers.md). Every wait has a
# deadline; the holder is killed.
RSpec.describe CircuitBreaker, "waits under fibers and interrupts", :integration, :shared_memory do
  let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 5 } }

  def shared_name(label)
    @sequence = (@sequence || 0) + 1
    "spec-fiber-wait-#{label}-#{Process.pid}-#{@sequence}"
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Where glibc's robust mutex keeps its owner's thread id.
  def lock_owner(path)
    File.binread(path, 4, CircuitBreaker.send(:__shared_mutex_offset)).unpack1("L") & 0x3fff_ffff
  end

  # A breaker whose shared lock a stopped child holds; its steps wait up to
  # `lock_wait` seconds for it. Yields the breaker; the child is killed.
  def with_stopped_holder(lock_wait: 5)
    key = shared_name("held")
    breaker = described_class.new(**options, shared: key)
    breaker.send(:__lock_wait=, lock_wait)
    holder = ChildProcess.fork do
      described_class.new(**options, shared: key).send(:__hold_shared_lock, 60_000)
      exit!(0)
    end
    limit = now + 10
    sleep 0.005 until lock_owner(breaker.shared_path) == holder || now > limit
    raise "the child #{holder} did not take the lock within 10 s" unless lock_owner(breaker.shared_path) == holder

    Process.kill(:STOP, holder)
    yield breaker
  ensure
    ChildProcess.stop(holder, signal: :KILL) if holder
  end

  # After an interrupted wait: the breaker and the process are whole.
  def expect_healthy(breaker)
    GC.start
    breaker.send(:__lock_wait=, 0.001)
    expect { breaker.metrics }.to raise_error(CircuitBreaker::LockTimeoutError) # still held by the stopped child
  end

  describe "on a thread" do
    it "cuts a wait for a stopped holder's lock with Thread#raise" do
      with_stopped_holder do |breaker|
        waiting = Thread::Queue.new
        waiter = Thread.new do
          waiting << :waiting
          breaker.metrics
          :locked
        rescue Interrupt
          :interrupted
        end
        waiting.pop
        sleep 0.05 # into the wait (it lasts up to 5 s)
        started = now
        waiter.raise(Interrupt)
        expect(waiter.join(3)&.value).to eq(:interrupted)
        expect(now - started).to be < 1
        expect_healthy(breaker)
      end
    end

    it "cuts a wait for a stopped holder's lock with Timeout" do
      with_stopped_holder do |breaker|
        started = now
        outcome = begin
          Timeout.timeout(0.2) { breaker.metrics }
        rescue Timeout::Error
          :timed_out
        end
        expect(outcome).to eq(:timed_out)
        expect(now - started).to be < 2
        expect_healthy(breaker)
      end
    end
  end

  describe "under a fiber scheduler with blocking_operation_wait (Ruby 3.4)", :offloading do
    it "runs the other fibers while one waits for a stopped holder's shared lock" do
      with_stopped_holder(lock_wait: 0.5) do |breaker|
        ticks, outcome, offloaded = under_scheduler(:offloading) do |scheduler|
          ticks = 0
          ticker = Fiber.schedule do
            loop do
              ticks += 1
              sleep 0.001
            end
          end
          outcome = begin
            breaker.metrics
          rescue CircuitBreaker::LockTimeoutError
            :gave_up
          end
          ticker.raise(StopIteration)
          [ticks, outcome, scheduler.offloaded]
        end
        expect(outcome).to eq(:gave_up) # after the 0.5 s wait
        expect(offloaded).to be >= 1
        expect(ticks).to be > 20 # the ticker ran while the wait lasted
      end
    end

    it "cuts an offloaded wait with Timeout, and the wait's thread stops" do
      with_stopped_holder do |breaker|
        started = now
        threads = nil
        outcome = under_scheduler(:offloading) do |scheduler|
          threads = scheduler.threads
          Timeout.timeout(0.2) { breaker.metrics }
        rescue Timeout::Error
          :timed_out
        end
        expect(outcome).to eq(:timed_out)
        expect(now - started).to be < 2
        expect(threads.size).to be >= 1
        # The wait was told to stop: its thread ends at once, not at the
        # wait's 5 s bound.
        expect(threads.map { |t| t.join(1) }).to all(be_a(Thread))
        expect_healthy(breaker)
      end
    end
  end
end
