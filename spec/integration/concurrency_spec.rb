# frozen_string_literal: true

require "tmpdir"

# max_concurrent: host-wide (docs/concurrency.md): forked workers with
# threads share one cap through the shared file; a worker killed with
# SIGKILL gives its slots back within a second. Every child is bounded
# (spec/support/child_process.rb); the kill's bound is the one asserted.
RSpec.describe CircuitBreaker, "max_concurrent: across processes", :shared_memory do
  include ThreadHelpers

  def shared_name
    "spec-cap-#{Process.pid}-#{rand(1 << 32)}"
  end

  # A counter of calls running inside their block, host-wide: raised and
  # lowered under an flock inside the block, so it is never above the
  # true number of calls in flight; it also keeps the most it reached.
  class InsideCounter
    def initialize(path)
      @path = path
      File.write(path, "0 0")
    end

    def change(by)
      File.open(@path, "r+") do |f|
        f.flock(File::LOCK_EX)
        now, most = f.read.split.map(&:to_i)
        now += by
        f.rewind
        f.truncate(0)
        f.write("#{now} #{[most, now].max}")
      end
    end

    # [now, most]
    def read = File.read(@path).split.map(&:to_i)
  end

  it "holds a cap of 3 across 3 forked workers of 2 threads each" do
    Dir.mktmpdir do |dir|
      name = shared_name
      counter = InsideCounter.new(File.join(dir, "inside"))
      gate = ProcessGate.new
      CircuitBreaker.new(shared: name, max_concurrent: 3) # made before the fork, as a Puma master does
      pids = Array.new(3) do |i|
        ChildProcess.fork("cap worker #{i}") do
          gate.forget_parent_end
          breaker = CircuitBreaker.new(shared: name, max_concurrent: 3)
          gate.wait
          refused = 0
          ran = 0
          lock = Mutex.new
          threads = Array.new(2) do
            Thread.new do
              40.times do
                breaker.call do
                  counter.change(1)
                  sleep 0.002
                  counter.change(-1)
                end
                lock.synchronize { ran += 1 }
              rescue CircuitBreaker::ConcurrencyLimitError
                lock.synchronize { refused += 1 }
              end
            end
          end
          threads.each(&:join)
          File.write(File.join(dir, "worker-#{i}"), "#{ran} #{refused}")
          exit!(0)
        end
      end
      gate.open!
      pids.each { |pid| expect(ChildProcess.finish(pid, within: 120)).to be_success }

      _, most = counter.read
      expect(most).to be_between(1, 3)
      reports = Array.new(3) { |i| File.read(File.join(dir, "worker-#{i}")).split.map(&:to_i) }
      ran = reports.sum(&:first)
      refused = reports.sum(&:last)
      expect(ran + refused).to eq(240)
      breaker = CircuitBreaker.new(shared: name, max_concurrent: 3)
      expect(breaker.metrics).to include(in_flight: 0, concurrency_limit: 3, limited: refused, calls: ran,
                                         rejected: refused, scope: :host)
    end
  end

  it "gives a SIGKILLed worker's slots back within a second" do
    name = shared_name
    breaker = CircuitBreaker.new(shared: name, max_concurrent: 2)
    reader, writer = IO.pipe
    pid = ChildProcess.fork("a worker holding two slots") do
      reader.close
      held = CircuitBreaker.new(shared: name, max_concurrent: 2)
      inside = Queue.new
      2.times { Thread.new { held.call { inside << true; sleep } } }
      2.times { inside.pop }
      writer.write("in")
      writer.close
      sleep
    end
    writer.close
    expect(ChildProcess.gets(reader, within: 60)).to eq("in")
    expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::ConcurrencyLimitError)
    expect(breaker.metrics[:in_flight]).to eq(2)

    Process.kill(:KILL, pid)
    killed = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    # Not reaped yet (a zombie) for the first tries: gone all the same.
    result = nil
    until result == :ran || Process.clock_gettime(Process::CLOCK_MONOTONIC) - killed > 1.0
      result = (breaker.call { :ran } rescue nil) # rubocop:disable Style/RescueModifier
      sleep 0.01
    end
    expect(result).to eq(:ran)
    ChildProcess.finish(pid, within: 30)
    expect(breaker.metrics[:in_flight]).to eq(0)
  end

  it "moves one adaptive cap for the host: a worker's slow calls lower it for every process" do
    name = shared_name
    parent = CircuitBreaker.new(shared: name, max_concurrent: :adaptive, consecutive_failures: nil)
    expect(parent.metrics[:concurrency_limit]).to eq(20)
    pid = ChildProcess.fork("an adaptive worker") do
      clock = CircuitBreaker::ManualClock.new
      breaker = CircuitBreaker.new(shared: name, max_concurrent: :adaptive, consecutive_failures: nil, clock: clock)
      5.times { breaker.call { :fast } }
      20.times { breaker.call { clock.advance(0.5) } }
      exit!(breaker.metrics[:concurrency_limit] < 20 ? 0 : 1)
    end
    expect(ChildProcess.finish(pid, within: 60)).to be_success
    lowered = parent.metrics[:concurrency_limit]
    expect(lowered).to be < 20
    expect(CircuitBreaker.new(shared: name, max_concurrent: :adaptive, consecutive_failures: nil)
      .metrics[:concurrency_limit]).to eq(lowered)
  end
end
