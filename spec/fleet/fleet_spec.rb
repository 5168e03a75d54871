# frozen_string_literal: true

require "circuit_breaker/fleet"

require "rbconfig"
require "tempfile"

# `fleet:` against a real redis-server (docs/fleet.md): forked processes
# play hosts. Every wait is bounded (a hang becomes a failure naming what
# did not happen); no assertion depends on how long anything takes.
RSpec.describe "CircuitBreaker fleet:", :redis do
  DEADLINE = 30

  let!(:name) { "fleet-#{SecureRandom.hex(4)}" } # before any fork: every host uses it

  after { CircuitBreaker::Fleet.stop_all }

  def fleet_breaker(**options)
    CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05, **options)
  end

  # Forks a host running `block` with its own fleet breaker; the block's
  # value comes back through a pipe. `go` (a pipe) releases all hosts at once.
  class Host
    attr_reader :pid

    def initialize(gate)
      @reader, writer = IO.pipe
      writer.sync = true # exit! below skips flushing
      @pid = ChildProcess.fork("host") do
        @reader.close
        gate.forget_parent_end
        gate.wait
        result = yield
        writer.write(Marshal.dump([:ok, result]))
      rescue Exception => e # rubocop:disable Lint/RescueException
        writer.write(Marshal.dump([:error, "#{e.class}: #{e.message}\n#{e.backtrace&.first(5)&.join("\n")}"]))
      ensure
        writer.close
        exit!(0)
      end
      writer.close
    end

    def result(deadline = DEADLINE)
      raise "host #{@pid} did not report within #{deadline}s" unless @reader.wait_readable(deadline)

      status, value = Marshal.load(@reader.read) # rubocop:disable Security/MarshalLoad
      ChildProcess.finish(@pid, within: deadline)
      raise "host #{@pid} failed: #{value}" unless status == :ok

      value
    ensure
      @reader.close unless @reader.closed?
    end
  end

  it "opens every host when the hosts' failures together cross the threshold, though no host alone would" do
    gate = ProcessGate.new
    hosts = Array.new(4) do
      Host.new(gate) do
        breaker = fleet_breaker(min_calls: 20)
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        8.times { breaker.call { raise "down" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
        own = breaker.metrics[:total]
        state = wait_for("fleet open") { breaker.state == :open && breaker.state }
        [own, state]
      end
    end
    gate.open!
    results = hosts.map(&:result)
    expect(results.map(&:first)).to all(be < 20)
    expect(results.map(&:last)).to all(eq(:open))
  end

  describe "hosts that open on their own warm windows (docs/fleet.md, \"When hosts open alone\")" do
    # A window full of successes (SlidingWindow of 100), as a busy host has.
    # These hosts open on their windows' error rate: the streak rule (on by
    # default, docs/choices.md) is off in every one of them alike.
    def fleet_breaker(**options)
      super(consecutive_failures: nil, **options)
    end

    def warm(breaker)
      100.times { breaker.call { :ok } }
    end

    def fail_until_open(breaker)
      until breaker.state == :open
        breaker.call { raise "down" } rescue RuntimeError # rubocop:disable Style/RescueModifier
      end
    end

    # Until Redis holds `hosts` warm reports: a host's successes go with its
    # next send, not at once.
    def wait_reported(hosts)
      wait_for("#{hosts} warm reports") do
        key = redis_server.command("KEYS", "circuit_breaker:{#{name}:*}:hosts").first
        key && redis_server.command("HVALS", key).count { |v| v.split[1] == "100" } == hosts
      end
    end

    # One gate per step, and a pipe on which hosts acknowledge each step.
    def acks(reader, *whats)
      whats.map do
        raise "no acknowledgement within #{DEADLINE}s" unless reader.wait_readable(DEADLINE)

        reader.gets&.chomp
      end
    end

    it "opens the fleet when a host that opened alone carries half the reported calls" do
      start = ProcessGate.new
      tripped = ProcessGate.new
      done = ProcessGate.new
      acks_r, acks_w = IO.pipe
      acks_w.sync = true
      opener = Host.new(start) do
        acks_r.close
        breaker = fleet_breaker
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        warm(breaker)
        acks_w.puts("warm")
        [tripped, done].each(&:forget_parent_end)
        tripped.wait
        fail_until_open(breaker)
        acks_w.puts("open")
        done.wait # a host that exits no longer counts
        breaker.metrics[:tripped_error_rate]
      end
      other = Host.new(start) do
        acks_r.close
        breaker = fleet_breaker
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        warm(breaker)
        10.times { breaker.call { raise "down" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
        acks_w.puts("warm")
        [tripped, done].each(&:forget_parent_end)
        state = wait_for("the fleet's opening") { breaker.state == :open && breaker.state }
        acks_w.puts("open")
        done.wait
        [state, breaker.metrics[:tripped_error_rate]]
      end
      acks_w.close
      start.open!
      expect(acks(acks_r, 1, 2)).to eq(%w[warm warm])
      wait_reported(2)
      tripped.open!
      expect(acks(acks_r, 1, 2)).to eq(%w[open open])
      done.open!
      expect(opener.result).to eq(0.5)
      # Its own window (10 of 100 failed) would never have opened it.
      expect(other.result).to eq([:open, 0.1])
    end

    it "opens nothing for one host cut off alone among three, and opens every host once a second one opens" do
      start = ProcessGate.new
      first = ProcessGate.new
      second = ProcessGate.new
      done = ProcessGate.new
      acks_r, acks_w = IO.pipe
      acks_w.sync = true
      gates = [first, second, done]
      hosts = Array.new(3) do |i|
        Host.new(start) do
          acks_r.close
          gates.each(&:forget_parent_end)
          breaker = fleet_breaker(fleet_quorum: 0.3)
          wait_for("connected") { breaker.metrics[:fleet] == :connected }
          warm(breaker)
          acks_w.puts("warm")
          first.wait
          fail_until_open(breaker) if i.zero?
          acks_w.puts("first")
          second.wait
          after_first = breaker.state
          fail_until_open(breaker) if i == 1
          state = wait_for("the fleet's opening") { breaker.state == :open && breaker.state }
          acks_w.puts("open")
          done.wait # a host that exits no longer counts
          [after_first, state]
        end
      end
      acks_w.close
      start.open!
      acks(acks_r, 1, 2, 3)
      wait_reported(3)
      first.open!
      acks(acks_r, 1, 2, 3)
      sleep 0.5 # ten intervals: the first host's opening must change nothing elsewhere
      second.open!
      acks(acks_r, 1, 2, 3)
      done.open!
      results = hosts.map(&:result)
      expect(results.map(&:first)).to eq(%i[open closed closed])
      expect(results.map(&:last)).to all(eq(:open))
    end
  end

  it "does not open on failures below the threshold across hosts" do
    # Two hosts in one process: two syncers (each interval has its own),
    # each its own host id.
    breakers = [0.05, 0.07].map do |interval|
      # The windows' rule: the default streak (consecutive_failures) off.
      CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: interval, min_calls: 20,
                         consecutive_failures: nil)
    end
    wait_for("connected") { breakers.all? { |b| b.metrics[:fleet] == :connected } }
    breakers.each { |b| 9.times { b.call { raise "down" } rescue RuntimeError } } # rubocop:disable Style/RescueModifier
    breakers.each { |b| 20.times { b.call { :ok } } }
    sleep 0.3 # several intervals: nothing must happen
    expect(breakers.map(&:state)).to all(eq(:closed))
  end

  it "brings trip!, force_open!, disable! and reset! on one host to every host" do
    gate = ProcessGate.new
    acks_r, acks_w = IO.pipe
    acks_w.sync = true
    hosts = Array.new(3) do
      Host.new(gate) do
        acks_r.close
        breaker = fleet_breaker
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        acks_w.puts("connected")
        %i[open forced_open disabled closed].map do |want|
          wait_for("#{want} from another host") { breaker.state == want }
          acks_w.puts(want)
          want
        end
      end
    end
    acks_w.close
    gate.open!
    operator = fleet_breaker
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    # Each action once every host saw the previous one (acknowledged).
    ack = lambda do |what|
      3.times do
        raise "no acknowledgement of #{what} within #{DEADLINE}s" unless acks_r.wait_readable(DEADLINE)

        expect(acks_r.gets&.chomp).to eq(what)
      end
    end
    ack.("connected")
    { trip!: "open", force_open!: "forced_open", disable!: "disabled", reset!: "closed" }.each do |action, state|
      operator.public_send(action)
      ack.(state)
    end
    expect(hosts.map(&:result)).to all(eq(%i[open forced_open disabled closed]))
  end

  it "lets no more than half_open_calls probes through per stage across all hosts" do
    gate = ProcessGate.new
    # Probes that never report (allow? with no record_*, probe_timeout: false): the stage's slots
    # stay taken, so every probe any host admitted is counted.
    hosts = Array.new(4) do
      Host.new(gate) do
        breaker = fleet_breaker(half_open_calls: 3, open_duration: 0.3, probe_timeout: false)
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        wait_for("tripped") { breaker.state != :closed } # open for 0.3 s: it may already be half-open
        wait_for("half-open") { breaker.state == :half_open }
        admitted = 0
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 1.5
        while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
          admitted += 1 if breaker.allow?
          sleep 0.005
        end
        admitted
      end
    end
    gate.open!
    operator = fleet_breaker(half_open_calls: 3, open_duration: 0.3, probe_timeout: false)
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    sleep 0.2
    operator.trip!
    total = hosts.sum(&:result)
    expect(total).to be_between(1, 3)
  end

  describe "an operator's action from any state" do
    # Two hosts that acknowledge each state they reach on a pipe, and an
    # operator breaker in this process.
    def hosts_acknowledging(options, &steps)
      gate = ProcessGate.new
      acks_r, acks_w = IO.pipe
      acks_w.sync = true
      hosts = Array.new(2) do
        Host.new(gate) do
          acks_r.close
          breaker = fleet_breaker(**options)
          wait_for("connected") { breaker.metrics[:fleet] == :connected }
          acks_w.puts("connected")
          steps.call(breaker, ->(what) { acks_w.puts(what) })
        end
      end
      acks_w.close
      gate.open!
      [hosts, acks_r]
    end

    def expect_acks(reader, what, count = 2)
      count.times do
        raise "no acknowledgement of #{what} within #{DEADLINE}s" unless reader.wait_readable(DEADLINE)

        expect(reader.gets&.chomp).to eq(what)
      end
    end

    it "brings reset! during the fleet's half-open to every host" do
      options = { open_duration: 0.3, half_open_calls: 2 }
      hosts, acks = hosts_acknowledging(options) do |breaker, ack|
        wait_for("half-open") { breaker.state == :half_open }
        ack.("half_open")
        wait_for("closed by the operator") { breaker.state == :closed && breaker.state }
      end
      operator = fleet_breaker(**options)
      wait_for("connected") { operator.metrics[:fleet] == :connected }
      expect_acks(acks, "connected")
      operator.trip!
      expect_acks(acks, "half_open")
      operator.reset!
      expect(hosts.map(&:result)).to eq(%i[closed closed])
    end

    it "brings reset! after disable! and failing calls to every host, which stay closed" do
      options = { min_calls: 10 }
      hosts, acks = hosts_acknowledging(options) do |breaker, ack|
        wait_for("disabled") { breaker.state == :disabled }
        20.times { breaker.call { raise "down" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
        ack.("failed")
        wait_for("closed by the operator") { breaker.state == :closed }
        sleep 0.5 # ten intervals: the failures recorded while disabled must not open the fleet
        breaker.state
      end
      operator = fleet_breaker(**options)
      wait_for("connected") { operator.metrics[:fleet] == :connected }
      expect_acks(acks, "connected")
      operator.disable!
      expect_acks(acks, "failed")
      sleep 0.2 # their failures reach Redis
      operator.reset!
      expect(hosts.map(&:result)).to eq(%i[closed closed])
      expect(operator.state).to eq(:closed)
    end
  end

  it "gives a stage's probe slots to whichever hosts ask: two hosts passing one probe each close the fleet" do
    gate = ProcessGate.new
    hosts = Array.new(2) do
      Host.new(gate) do
        breaker = fleet_breaker(half_open_calls: 2, open_duration: 0.3)
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        wait_for("tripped") { breaker.state != :closed }
        # Calls until one is admitted as a probe and passes, then no more.
        wait_for("a probe of this host's") do
          breaker.call { :ok }
        rescue CircuitBreaker::OpenError
          false
        end
        wait_for("the fleet closed") { breaker.state == :closed && breaker.state }
      end
    end
    gate.open!
    operator = fleet_breaker(half_open_calls: 2, open_duration: 0.3)
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    sleep 0.2 # the hosts connected too
    operator.trip!
    expect(hosts.map(&:result)).to eq(%i[closed closed])
  end

  it "pushes a change to hosts between their sends, and again after the subscriber was killed" do
    # The follower's own sends are 10 s apart: it can only learn in time by push.
    follower = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 10)
    operator = fleet_breaker
    subscribers = -> { redis_server.command("CLIENT", "LIST", "TYPE", "pubsub").lines.size }
    wait_for("connected") { follower.metrics[:fleet] == :connected && operator.metrics[:fleet] == :connected }
    wait_for("both subscribed") { subscribers.() >= 2 }
    operator.trip!
    wait_for("pushed trip", deadline: 5) { follower.state == :open }
    redis_server.kill_subscribers
    wait_for("subscribed again") { subscribers.() >= 2 }
    operator.reset!
    wait_for("pushed reset", deadline: 5) { follower.state == :closed }
  end

  it "with shared:, has one process per host send, and another take over when it dies", :shared_memory do
    options = { shared: name, half_open_timeout: 30 } # the same configuration in every process
    out_r, out_w = IO.pipe
    out_w.sync = true
    pids = Array.new(2) do
      ChildProcess.fork do
        out_r.close
        breaker = fleet_breaker(**options)
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        out_w.puts "ready #{Process.pid} #{breaker.instance_variable_get(:@fleet_link).sender}"
        wait_for("open") { breaker.state == :open }
        out_w.puts "open #{Process.pid}"
        wait_for("sending") { breaker.instance_variable_get(:@fleet_link).sender == Process.pid }
        out_w.puts "syncer #{Process.pid}"
        sleep 60 # killed by the example
      rescue Exception => e # rubocop:disable Lint/RescueException
        out_w.puts "error #{e.class}: #{e.message}"
      ensure
        exit!(0)
      end
    end
    out_w.close
    line = lambda do
      raise "no word from the workers within #{DEADLINE}s" unless out_r.wait_readable(DEADLINE)

      out_r.gets.split
    end
    begin
      ready = [line.(), line.()]
      syncers = ready.map { |_, _, syncer| Integer(syncer) }.uniq
      expect(syncers.size).to eq(1)
      expect(pids).to include(syncers.first)
      leader = syncers.first
      operator = fleet_breaker(**options.merge(shared: nil))
      wait_for("connected") { operator.metrics[:fleet] == :connected }
      operator.trip!
      events = [line.(), line.(), line.()] # both open, and the leader already sends
      expect(events.map(&:first).sort).to eq(%w[open open syncer])
      expect(events.find { |e| e.first == "syncer" }.last).to eq(leader.to_s)
      ChildProcess.stop(leader, signal: :KILL)
      survivor = (pids - [leader]).first
      expect(line.()).to eq(["syncer", survivor.to_s])
    ensure
      pids.each { |pid| ChildProcess.stop(pid, signal: :KILL) }
    end
  end

  it "sends nothing to Redis from the calling thread, however many calls" do
    breaker = fleet_breaker(min_calls: 1_000_000)
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    CircuitBreaker::Fleet.stop_all # the syncer is the only sender; stopped, nothing may move
    before = redis_server.command_counts
    100_000.times { breaker.call { 1 } }
    1_000.times { breaker.call { raise "x" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
    breaker.trip!
    breaker.metrics
    after = redis_server.command_counts
    expect(after.except("info")).to eq(before.except("info"))
  end

  describe "sending at once when a failure arrives" do
    def failures_reported(breaker)
      key = "#{breaker.instance_variable_get(:@fleet_link).tag}:hosts"
      redis_server.command("HVALS", key).map { |v| Integer(v.split[2]) }
    end

    it "brings a host's failure to Redis, and the fleet's verdict to every host, long before its 30 s interval" do
      # `slow` sends every 30 s; `quick` every second, so it sees the sum and
      # proposes the opening. Neither host alone reaches min_calls.
      slow = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 30, min_calls: 2)
      quick = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 1, min_calls: 2)
      wait_for("connected") { [slow, quick].all? { |b| b.metrics[:fleet] == :connected } }
      quick.call { raise "down" } rescue RuntimeError # rubocop:disable Style/RescueModifier
      wait_for("quick's failure reported") { failures_reported(quick).sort == [0, 1] }
      slow.call { raise "down" } rescue RuntimeError # rubocop:disable Style/RescueModifier
      wait_for("slow's failure reported", deadline: 10) { failures_reported(slow) == [1, 1] }
      wait_for("the fleet open on both hosts", deadline: 10) { slow.state == :open && quick.state == :open }
      expect([slow, quick].map { |b| b.metrics[:total] }).to all(eq(0)) # each opened by the fleet, not alone
    end

    it "keeps one round trip per interval under a stream of failures" do
      breaker = fleet_breaker(min_calls: 1_000_000, window: CircuitBreaker::SlidingWindow.new(size: 10))
      wait_for("connected") { breaker.metrics[:fleet] == :connected }
      before = redis_server.command_counts.fetch("evalsha", 0)
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      calls = 0
      # At least 10 intervals of failures, every call a failure (bounded).
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 < 0.5 && calls < 5_000_000
        breaker.call { raise "down" } rescue RuntimeError # rubocop:disable Style/RescueModifier
        calls += 1
      end
      elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
      sent = redis_server.command_counts.fetch("evalsha", 0) - before
      expect(sent).to be <= (elapsed / 0.05).ceil + 2
      expect(calls).to be > sent
    end
  end

  it "keeps syncing in a forked child the breakers it inherited" do
    breaker = fleet_breaker(min_calls: 1_000)
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    done_r, done_w = IO.pipe
    pid = ChildProcess.fork do
      done_w.close
      3.times { breaker.call { raise "down" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
      done_r.wait_readable(DEADLINE)
      exit!(0)
    end
    done_r.close
    begin
      key = "#{breaker.instance_variable_get(:@fleet_link).tag}:hosts"
      failures = -> { redis_server.command("HVALS", key).map { |v| Integer(v.split[2]) }.sort }
      wait_for("the child's own host field") { failures.() == [0, 3] }
    ensure
      done_w.close
      ChildProcess.finish(pid)
    end
  end

  it "keeps syncing after Process.daemon, its own calls under a new host id" do
    breaker = fleet_breaker(min_calls: 1_000)
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    key = "#{breaker.instance_variable_get(:@fleet_link).tag}:hosts"
    done_r, done_w = IO.pipe
    pid = ChildProcess.fork do
      done_w.close
      Process.daemon(true, true) # the daemon keeps the pipe: it ends when the parent closes it
      3.times { breaker.call { raise "down" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
      done_r.wait_readable(DEADLINE)
      exit!(0)
    end
    done_r.close
    ChildProcess.finish(pid) # the daemon's parent exits at once
    begin
      failures = -> { redis_server.command("HVALS", key).map { |v| Integer(v.split[2]) }.sort }
      wait_for("the daemon's own host field") { failures.() == [0, 3] }
    ensure
      done_w.close
    end
  end

  it "keeps one round trip per interval whatever the number of calls" do
    breaker = fleet_breaker
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    before = redis_server.command_counts.fetch("evalsha", 0)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    200_000.times { breaker.call { 1 } }
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    sent = redis_server.command_counts.fetch("evalsha", 0) - before
    expect(sent).to be <= (elapsed / 0.05).ceil + 2
  end

  describe "outages" do
    def connected?(breaker) = breaker.metrics[:fleet] == :connected

    # Down, stopped, slow, out of memory, failed over: spec/fleet/outages_spec.rb.
    it "stays connected across SCRIPT FLUSH and killed subscribers" do
      breaker = fleet_breaker
      events = Queue.new
      breaker.on_fleet_change { |s| events << s }
      wait_for("connected") { connected?(breaker) }
      redis_server.script_flush
      wait_for("connected after SCRIPT FLUSH") do
        connected?(breaker) && redis_server.command("SCRIPT", "EXISTS", Digest::SHA1.hexdigest(CircuitBreaker::Fleet::SCRIPT)) == [1]
      end
      redis_server.kill_subscribers
      subscribers = -> { redis_server.command("CLIENT", "LIST", "TYPE", "pubsub").lines.size }
      wait_for("subscribed again") { subscribers.() >= 1 }
      expect(breaker.call { 3 }).to eq(3)
      # Never degraded. (The first :connected may come before the listener
      # is added: the syncer can connect as soon as the breaker exists.)
      expect(events.size.times.map { events.pop }).to all(eq(:connected))
      expect(connected?(breaker)).to be(true)
    end

    it "degrades on garbage in its keys, then rebuilds them" do
      breaker = fleet_breaker
      events = Queue.new
      breaker.on_fleet_change { |s| events << s }
      wait_for("connected") { connected?(breaker) }
      wait_for("keys") { redis_server.command("KEYS", "circuit_breaker:{#{name}:*").size == 2 }
      redis_server.scribble("circuit_breaker:{#{name}:*")
      wait_for("degraded") { events.size >= 2 }
      wait_for("connected again") { events.size >= 3 && connected?(breaker) }
      expect(events.size.times.map { events.pop }.first(3)).to eq(%i[connected degraded connected])
      state = redis_server.command("HGETALL", "#{breaker.instance_variable_get(:@fleet_link).tag}:state")
      expect(state.each_slice(2).to_h.values).to all(match(/\A\d+\z/))
    end

    it "is :connecting, then :degraded, and raises nothing, when Redis is unreachable at construction" do
      breaker = CircuitBreaker.new(name: name, fleet: "unix:///nonexistent/redis.sock", fleet_interval: 0.05)
      expect(breaker.call { 5 }).to eq(5)
      wait_for("degraded") { breaker.metrics[:fleet] == :degraded }
    end
  end

  it "follows the fleet from a host whose wall clock is an hour off" do
    skip "libfaketime is not installed (bin/setup installs it)" unless FakeTime.installed?

    operator = fleet_breaker(open_duration: 30)
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    script = <<~RUBY
      $LOAD_PATH.unshift #{File.expand_path('../../lib', __dir__).inspect}
      require "circuit_breaker"
      b = CircuitBreaker.new(name: #{name.inspect}, fleet: #{redis_server.url.inspect}, fleet_interval: 0.05, open_duration: 30)
      limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + #{DEADLINE}
      # Connected before the trip (a fixed sleep was too short on a loaded machine).
      sleep 0.02 until b.metrics[:fleet] == :connected || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
      $stdout.puts "ready \#{Time.now.utc.hour}"; $stdout.flush
      sleep 0.02 until b.state == :open || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
      $stdout.puts "\#{b.state} \#{b.retry_after}"
    RUBY
    err = Tempfile.new("faketime-host-err")
    ChildProcess.popen2(FakeTime.env("-1h"), RbConfig.ruby, "-e", script, err: err.path) do |stdin, io, waiter|
      stdin.close
      ready = ChildProcess.gets(io)
      waiter.join(5) unless ready
      expect(ready).to start_with("ready"), lambda {
        "the host said #{ready.inspect} (#{waiter.value.inspect if waiter.join(0)}); its stderr: #{File.read(err.path)}"
      }
      expect(Integer(ready.split.last)).not_to eq(Time.now.utc.hour)
      operator.trip!
      state, retry_after = ChildProcess.gets(io).split
      expect(state).to eq("open")
      expect(Float(retry_after)).to be_between(20, 30)
    end
  ensure
    err&.close!
  end
end
