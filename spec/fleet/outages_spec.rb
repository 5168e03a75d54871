# frozen_string_literal: true

# Every outage docs/fleet.md ("Outages") promises to survive, injected into
# a real redis-server, each held to the same four promises: the host keeps
# enforcing its own warm breaker, `metrics[:fleet]` goes :degraded with an
# event and comes back :connected with another, nothing Redis raises
# reaches the app, and rejoining counts nothing twice. Waits are bounded;
# no assertion depends on how long anything takes.
RSpec.describe "CircuitBreaker fleet: outages", :redis do
  let(:name) { "outage-#{SecureRandom.hex(4)}" }

  after do
    CircuitBreaker::Fleet.stop_all
    # The group's server as the next example expects it, whatever failed.
    redis_server.resume
    redis_server.launch unless redis_server.ping?
    redis_server.client_unpause
    redis_server.unlimit_memory
  end

  # The longest send timeout (0.25 s, lib/circuit_breaker/fleet/syncer.rb): a
  # loaded machine rarely fails a send the example did not mean to fail.
  def fleet_breaker(url, suffix, **options)
    CircuitBreaker.new(name: "#{name}-#{suffix}", fleet: url, fleet_interval: 0.2, **options)
  end

  def key(server, breaker, part)
    [server, "#{breaker.instance_variable_get(:@fleet_link).tag}:#{part}"]
  end

  # The hosts' reports of `breaker`: [total, failures] per host field.
  def reported(server, breaker)
    srv, k = key(server, breaker, "hosts")
    srv.command("HVALS", k).map { |v| v.split[1, 2].map(&:to_i) }
  rescue RuntimeError, SystemCallError, IOError, RedisServer::Stuck
    nil # the server is what the example took down
  end

  # Runs the promises around `inject` and `recover` (each given the server
  # the hosts use, and returning the one they use afterwards).
  def survives(server, url, inject:, recover:)
    # A breaker the fleet opened for a minute, and one that counts.
    tripped = fleet_breaker(url, "tripped", open_duration: 60)
    counting = fleet_breaker(url, "counting", min_calls: 1_000)
    events = { tripped => [], counting => [] }
    events.each { |b, list| b.on_fleet_change { |s| list << s } }
    wait_until(what: "connected") { events.keys.all? { |b| b.metrics[:fleet] == :connected } }
    tripped.trip!
    wait_until(what: "the trip! applied in Redis") do
      srv, k = key(server, tripped, "state")
      srv.command("HGET", k, "s") == "1"
    end
    fail_calls(counting, 5)
    3.times { counting.call { :ok } }
    wait_until(what: "the counts reported") { reported(server, counting) == [[8, 5]] }

    inject.(server)
    # Its event too: a syncer held up past its bound (a loaded machine)
    # reads :degraded before its send fails and says so.
    wait_until(what: "degraded") { events.all? { |b, list| b.metrics[:fleet] == :degraded && list.include?(:degraded) } }
    # Its own warm breaker: still open, rejecting with the gem's error;
    # the other still runs and records, and raises only the block's own errors.
    expect { tripped.call { :not_run } }.to raise_error(CircuitBreaker::OpenError)
    expect(tripped.state).to eq(:open)
    fail_calls(counting, 2)
    expect(counting.call { :ok }).to eq(:ok)

    server = recover.(server)
    wait_until(what: "connected again") { events.keys.all? { |b| b.metrics[:fleet] == :connected } }
    # Absolute counts, one field per host: the 11 calls once, never a sum of sends.
    wait_until(what: "the counts reported again") { reported(server, counting) == [[11, 7]] }
    expect(tripped.state).to eq(:open)
    # One event per change, from :connecting: connected (or degraded, when
    # a loaded machine timed out the first send), degraded, connected last.
    events.each_value do |list|
      expect([list.last, list.include?(:degraded)]).to eq([:connected, true])
      expect(list.each_cons(2).map(&:uniq)).to all(have_attributes(size: 2))
    end
  end

  it "survives Redis down (kill -9), then restarted empty on the same socket" do
    survives(redis_server, redis_server.url, inject: lambda(&:crash), recover: ->(s) { s.launch })
  end

  it "survives Redis stopped (SIGSTOP), then continued (SIGCONT)" do
    survives(redis_server, redis_server.url, inject: lambda(&:pause), recover: ->(s) { s.tap(&:resume) })
  end

  it "survives Redis slow (CLIENT PAUSE WRITE: scripts answered past the send's timeout), then quick again" do
    survives(redis_server, redis_server.url,
             inject: lambda(&:client_pause), recover: ->(s) { s.tap(&:client_unpause) })
  end

  it "survives Redis out of memory (maxmemory), then with room again" do
    survives(redis_server, redis_server.url, inject: lambda(&:limit_memory), recover: ->(s) { s.tap(&:unlimit_memory) })
  end

  it "follows the fleet's opening again once back, even if the fleet has not changed meanwhile" do
    clock = CircuitBreaker::ManualClock.new
    breaker = fleet_breaker(redis_server.url, "rejoin", open_duration: 60, clock: clock)
    wait_until(what: "connected") { breaker.metrics[:fleet] == :connected }
    breaker.trip!
    wait_until(what: "the trip! applied in Redis") do
      srv, k = key(redis_server, breaker, "state")
      srv.command("HGET", k, "s") == "1"
    end
    redis_server.client_pause
    wait_until(what: "degraded") { breaker.metrics[:fleet] == :degraded }
    # On its own, the host's clock ends its opening: it probes.
    clock.advance(61)
    expect(breaker.state).to eq(:half_open)
    redis_server.client_unpause
    wait_until(what: "connected again") { breaker.metrics[:fleet] == :connected }
    # Redis's clock says the fleet is open for about a minute more: the
    # host enforces it again, though the fleet's version did not move.
    wait_until(what: "the fleet's opening followed") { breaker.state == :open }
    expect { breaker.call { :not_run } }.to raise_error(CircuitBreaker::OpenError)
  end

  it "survives a failover: the primary killed, its replica promoted (REPLICAOF NO ONE) and the address moved to it" do
    primary = RedisServer.start(tcp: true)
    replica = RedisServer.start(replica_of: primary)
    address = Dir.mktmpdir("cb-redis-address-")
    link = File.join(address, "redis.sock") # the name hosts use, like a DNS name or a virtual IP
    File.symlink(primary.socket, link)
    begin
      failover = lambda do |_|
        # Unlike a restart, the promoted replica holds the fleet's keys, once
        # replication (asynchronous) has carried them over.
        keys = wait_until(what: "the fleet's keys on the replica") do
          found = replica.command("KEYS", "circuit_breaker:*{#{name}-*")
          found if found.size == 4
        end
        expect(keys.size).to eq(4)
        File.symlink(replica.socket, "#{link}.new")
        File.rename("#{link}.new", link)
        replica
      end
      crash = lambda do |s|
        # What the hosts wrote so far is on the replica, however long that
        # takes on a loaded machine (WAIT's 5 s was sometimes too short).
        offset = Integer(s.command("INFO", "replication")[/master_repl_offset:(\d+)/, 1])
        wait_until(what: "the replica caught up") do
          Integer(replica.command("INFO", "replication")[/slave_repl_offset:(\d+)/, 1]) >= offset
        end
        # Promoted before the primary dies (the hosts still use the
        # primary's address): a replica left to reconnect could sync from
        # whatever listens on the port next.
        replica.command("REPLICAOF", "NO", "ONE")
        s.crash
      end
      survives(primary, "unix://#{link}", inject: crash, recover: failover)
    ensure
      [primary, replica].each(&:stop)
      FileUtils.rm_rf(address)
    end
  end
end
