# frozen_string_literal: true

require "circuit_breaker/fleet"

# The fleet's process rules with forked processes (docs/fleet.md,
# "Processes"): a preforking server's master that only boots joins no
# fleet and starts no thread; a forked child reports its own calls only;
# one report per process and fleet breaker; listeners run off the syncer's
# thread; a stuck shared: lock holds up no other breaker's sends; a breaker
# whose syncer no longer runs is not :connected.
RSpec.describe "CircuitBreaker fleet: processes", :redis do
  let!(:name) { "prefork-#{SecureRandom.hex(4)}" } # before any fork

  after { CircuitBreaker::Fleet.stop_all }

  # The key of `breaker`'s hosts' reports (its name is this example's own).
  def hosts_key(breaker)
    wait_for("#{breaker.name}'s keys") { redis_server.command("KEYS", "circuit_breaker:*{#{breaker.name}:*}:hosts").first }
  end

  # The hosts' reports: failures per host field.
  def failures(key)
    redis_server.command("HGETALL", key).each_slice(2).to_h { |field, v| [field, Integer(v.split[2], 10)] }
  end

  def fail_once(breaker)
    breaker.call { raise "down" }
  rescue RuntimeError, CircuitBreaker::OpenError
    nil
  end

  it "has a preforking master that only boots join no fleet and start no thread; its workers do" do
    out_r, out_w = IO.pipe
    master = ChildProcess.fork("master") do
      out_r.close
      # The app's boot (an initializer): fleet breakers built, not used.
      breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05, min_calls: 1_000)
      workers = Array.new(2) do
        ChildProcess.fork("worker") do
          3.times { fail_once(breaker) }
          wait_for("reported") { failures(hosts_key(breaker)).value?(3) }
          sleep 0.3 # a few more sends: nothing else must appear
          exit!(0)
        end
      end
      workers.each { |pid| ChildProcess.finish(pid) }
      out_w.puts Thread.list.map(&:name).compact.grep(/circuit_breaker/).size
      exit!(0)
    end
    out_w.close
    threads = Integer(ChildProcess.gets(out_r))
    ChildProcess.finish(master)
    expect(threads).to eq(0)
    key = redis_server.command("KEYS", "circuit_breaker:*{#{name}:*}:hosts").first
    expect(failures(key).values).to eq([3, 3]) # the two workers', none of the master's
  end

  it "has a forked child report its own calls, never its parent's again" do
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05, min_calls: 1_000)
    5.times { fail_once(breaker) }
    wait_for("the parent's report") { failures(hosts_key(breaker)).values == [5] }
    done_r, done_w = IO.pipe
    pid = ChildProcess.fork do
      done_w.close
      2.times { fail_once(breaker) }
      done_r.read # until the example has looked
      exit!(0)
    end
    done_r.close
    begin
      wait_for("the child's report") { failures(hosts_key(breaker)).values.sort == [2, 5] }
    ensure
      done_w.close
      ChildProcess.finish(pid)
    end
  end

  it "refuses a second fleet breaker of the same name and options in one process" do
    first = CircuitBreaker.new(name: name, fleet: redis_server.url)
    expect { CircuitBreaker.new(name: name, fleet: redis_server.url) }
      .to raise_error(ArgumentError, /already has a fleet breaker named "#{name}".*CircuitBreaker.for/)
    # Other options are another fleet state, with keys of their own.
    expect(CircuitBreaker.new(name: name, fleet: redis_server.url, min_calls: 7)).not_to be(first)
  end

  it "runs listeners off the syncer's thread: one that never returns holds up no other breaker" do
    blocked = CircuitBreaker.new(name: "#{name}-blocked", fleet: redis_server.url, fleet_interval: 0.05)
    entered = Queue.new
    release = Queue.new
    blocked.on_fleet_change { |_| entered << true; release.pop }
    follower = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05)
    follower.call { 1 }
    blocked.call { 1 }
    entered.pop # its listener runs, and waits
    # Another host (its own syncer: another interval) trips the fleet.
    operator = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.07)
    operator.trip!
    wait_for("the fleet's opening followed") { follower.state == :open }
  ensure
    release&.close
  end

  it "keeps sending for every other fleet breaker while one's shared: lock is stuck", :shared_memory, :test_hooks do
    stuck = CircuitBreaker.new(name: "#{name}-stuck", shared: "#{name}-stuck", fleet: redis_server.url,
                               fleet_interval: 0.05)
    other = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05, min_calls: 1_000)
    stuck.call { 1 }
    holder = ChildProcess.fork do
      stuck.__send__(:__hold_shared_lock, 20_000)
      exit!(0)
    end
    begin
      offset = CircuitBreaker.__send__(:__shared_mutex_offset)
      owner = -> { File.binread(stuck.shared_path, 4, offset).unpack1("L") & 0x3fffffff } # glibc's owner tid
      wait_for("the lock held by the child") { owner.() == holder }
      3.times { fail_once(other) }
      wait_for("the other breaker's failures sent") { failures(hosts_key(other)).values == [3] }
      expect(owner.()).to eq(holder)
    ensure
      ChildProcess.stop(holder, signal: :KILL)
    end
  end

  it "is not :connected once no syncer runs for it" do
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05)
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    CircuitBreaker::Fleet.stop_all
    wait_for("degraded") { breaker.metrics[:fleet] == :degraded }
  end
end
