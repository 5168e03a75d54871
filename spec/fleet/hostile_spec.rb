# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"
require "logger"
require "stringio"

# Hostile Redis (docs/fleet.md, "Hostile Redis"): restricted ACL users,
# keys of the wrong type, out-of-range integers, a clock stepped back, hosts
# of other intervals, each injected into a real redis-server. One breaker's
# trouble stays that breaker's, is repaired or reported once, and never
# makes a command apply again and again. Waits are bounded; no assertion
# depends on how long anything takes.
RSpec.describe "CircuitBreaker fleet: hostile Redis", :redis do
  let!(:name) { "hostile-#{SecureRandom.hex(4)}" } # before any fork: every host uses it
  let(:log) { StringIO.new }
  let(:logger) { Logger.new(log) }

  after do
    CircuitBreaker::Fleet.stop_all
    redis_server.command("ACL", "DELUSER", "fleet")
  end

  def fleet_breaker(suffix, fleet: redis_server.url, **options)
    CircuitBreaker.new(name: "#{name}-#{suffix}", fleet: fleet, fleet_interval: 0.05, logger: logger, **options)
  end

  def key(breaker, part)
    "#{breaker.instance_variable_get(:@fleet_link).tag}:#{part}"
  end

  def state_of(breaker)
    redis_server.command("HGETALL", key(breaker, "state")).each_slice(2).to_h
  end

  # Why `breaker` degraded, each time it does from now on: a loaded machine
  # may time a send out, so only the reasons tell a fault's own effects.
  def degradations(breaker)
    list = Queue.new
    breaker.on_fleet_change { |s| list << breaker.metrics[:fleet_reason].to_s if s == :degraded }
    list
  end

  def drain(queue) = Array.new(queue.size) { queue.pop }

  def connected?(breaker) = breaker.metrics[:fleet] == :connected

  # Enough sends for a repeated fault to show (about 20 intervals).
  def some_sends
    start = CircuitBreaker::Fleet.slots
    wait_until(what: "20 more slots") { CircuitBreaker::Fleet.slots >= start + 20 }
  end

  # Connections the ACL user opened (this spec's own commands open one each).
  def logins = redis_server.command_counts.values_at("auth", "hello").compact.sum

  # A Redis 7 ACL user, `fleet`/`pw`, with `rules`.
  def acl_user(*rules)
    redis_server.command("ACL", "SETUSER", "fleet", "reset", "on", ">pw", *rules)
    require "redis"
    Redis.new(path: redis_server.socket, username: "fleet", password: "pw")
  end

  describe "a user without channel (pub/sub) permission" do
    it "applies an action once, keeps syncing without pushes, and says so once" do
      client = acl_user("~*", "+@all", "resetchannels")
      breaker = fleet_breaker("nochannel", fleet: client, open_duration: 60)
      other = fleet_breaker("nochannel", open_duration: 60)
      wait_until(what: "connected") { connected?(breaker) && connected?(other) }
      events = degradations(breaker)
      before = logins
      breaker.trip!
      wait_until(what: "the trip! applied in Redis") { state_of(breaker)["s"] == "1" }
      version = state_of(breaker)["v"]
      wait_until(what: "the other host open (pulled at its send)") { other.state == :open }
      some_sends
      expect(state_of(breaker)["v"]).to eq(version)
      reasons = drain(events)
      expect(reasons.grep(/NOPERM/)).to be_empty
      wait_until(what: "connected") { connected?(breaker) }
      # The send's connection and the subscriber's, and one more per send a
      # loaded machine timed out (the subscriber retries every 10 s).
      expect(logins - before).to be <= 2 + reasons.size
      expect(log.string.lines.grep(/NOPERM.*not pushed/).size).to eq(1)
    end
  end

  it "keeps a WRONGTYPE key to its own breaker, rebuilds the key, and connects again" do
    victim = fleet_breaker("victim")
    bystander = fleet_breaker("bystander")
    wait_until(what: "connected") { connected?(victim) && connected?(bystander) }
    wait_until(what: "the victim's keys") { state_of(victim).any? }
    bystander_events = degradations(bystander)
    redis_server.command("DEL", key(victim, "state"))
    redis_server.command("SET", key(victim, "state"), "a string, not a hash")
    redis_server.command("DEL", key(victim, "hosts"))
    redis_server.command("LPUSH", key(victim, "hosts"), "a list")
    wait_until(what: "both keys hashes again") do
      %w[state hosts].all? { |part| redis_server.command("TYPE", key(victim, part)) == "hash" }
    end
    wait_until(what: "the victim connected") { connected?(victim) }
    some_sends
    expect(drain(bystander_events).grep(/WRONGTYPE|malformed/)).to be_empty
    wait_until(what: "the bystander connected") { connected?(bystander) }
  end

  it "keeps a NOPERM to its own breaker, reports it once, and connects when the permission comes" do
    ok_name = "#{name}-allowed"
    client = acl_user("~circuit_breaker:{#{ok_name}:*", "+@all", "&*")
    allowed = CircuitBreaker.new(name: ok_name, fleet: client, fleet_interval: 0.05, logger: logger)
    refused = fleet_breaker("refused", fleet: client)
    allowed_events = degradations(allowed)
    wait_until(what: "the allowed breaker connected") { connected?(allowed) }
    wait_until(what: "the refused breaker degraded") { refused.metrics[:fleet] == :degraded }
    some_sends
    expect(drain(allowed_events).grep(/NOPERM/)).to be_empty
    wait_until(what: "the allowed breaker connected") { connected?(allowed) }
    expect(log.string.lines.grep(/#{Regexp.escape(refused.name)}.*NOPERM/).size).to eq(1)
    redis_server.command("ACL", "SETUSER", "fleet", "~*")
    wait_until(what: "the refused breaker connected once permitted") { connected?(refused) }
  end

  it "repairs out-of-range integers in its keys" do
    breaker = fleet_breaker("range")
    wait_until(what: "connected") { connected?(breaker) }
    wait_until(what: "keys") { state_of(breaker).any? && redis_server.command("HLEN", key(breaker, "hosts")) == 1 }
    [%w[v 99999999999999999999999], %w[s 7], %w[g -3], %w[r 400]].each do |field, value|
      redis_server.command("HSET", key(breaker, "state"), field, value)
      wait_until(what: "#{field} = #{value} repaired") do
        state = state_of(breaker)
        state.any? && state[field] != value && connected?(breaker)
      end
    end
    redis_server.command("HSET", key(breaker, "hosts"), "a dead host", "1 -5 99999999999999999999999 0 0 0 0 0 0 0 0")
    wait_until(what: "the host field repaired") do
      !redis_server.command("HKEYS", key(breaker, "hosts")).include?("a dead host") && connected?(breaker)
    end
  end

  it "keeps hosts connected and on schedule when Redis's clock steps back an hour (a promoted replica's clock)" do
    clock = CircuitBreaker::ManualClock.new
    breaker = fleet_breaker("clock", open_duration: 1, half_open_calls: 1, half_open_timeout: 60, clock: clock)
    wait_until(what: "connected") { connected?(breaker) }
    breaker.trip!
    wait_until(what: "the fleet open") { state_of(breaker)["s"] == "1" }
    # The keys as a replica whose clock is an hour behind holds them:
    # every time Redis stored is an hour in its future.
    hour = 3_600_000
    state = state_of(breaker)
    redis_server.command("HSET", key(breaker, "state"), *%w[u t rt].flat_map { |f| [f, Integer(state[f]) + hour] })
    redis_server.command("HGETALL", key(breaker, "hosts")).each_slice(2) do |field, value|
      words = value.split
      redis_server.command("HSET", key(breaker, "hosts"), field, [Integer(words[0]) + hour, *words[1..]].join(" "))
    end
    events = degradations(breaker)
    some_sends
    expect(drain(events).grep(/malformed/)).to be_empty
    wait_until(what: "connected") { connected?(breaker) }
    # The opening still lasts its open_duration (1 s), not an hour more:
    # the fleet moves on to half-open.
    wait_until(what: "the fleet half-open") { state_of(breaker)["s"] == "2" }
  end

  it "keeps the reports of hosts with a longer fleet_interval" do
    slow_reader, slow_writer = IO.pipe
    slow = ChildProcess.fork do
      slow_reader.close
      b = CircuitBreaker.new(name: "#{name}-mixed", fleet: redis_server.url, fleet_interval: 1, min_calls: 1_000)
      3.times do
        b.call { raise "down" }
      rescue RuntimeError
        nil
      end
      slow_writer.puts("ready")
      sleep 60
    ensure
      exit!(0)
    end
    slow_writer.close
    begin
      expect(slow_reader.wait_readable(30)).to be_truthy
      quick = fleet_breaker("mixed", min_calls: 1_000)
      quick.state # its first use starts its syncer (docs/fleet.md, "Processes")
      hosts = -> { redis_server.command("HVALS", key(quick, "hosts")).map { |v| v.split[2].to_i }.sort }
      wait_until(what: "both hosts reported") { hosts.() == [0, 3] }
      # Several of the slow host's intervals: its field is never deleted.
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
      seen = []
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
        seen << hosts.()
        sleep 0.05
      end
      expect(seen.uniq).to eq([[0, 3]])
    ensure
      ChildProcess.stop(slow, signal: :KILL)
    end
  end
end
