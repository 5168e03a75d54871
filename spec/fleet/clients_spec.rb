# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"

# docs/fleet.md, "Clients": the client objects `fleet:` takes, and the
# library the syncer speaks through (redis-client when it loads: Debian 13's
# stack, redis-rb 5 on top; else redis-rb 4.8: Debian 12's), on a real
# redis-server. Waits are bounded.
RSpec.describe "CircuitBreaker fleet: clients", :redis do
  let(:name) { "clients-#{SecureRandom.hex(4)}" }

  after { CircuitBreaker::Fleet.stop_all }

  def redis_client_loads?
    require "redis_client"
    true
  rescue LoadError
    false
  end

  def syncs(breaker)
    wait_until(what: "connected") { breaker.metrics[:fleet] == :connected }
    breaker.trip!
    tag = breaker.instance_variable_get(:@fleet_link).tag
    wait_until(what: "the trip! applied in Redis") { redis_server.command("HGET", "#{tag}:state", "s") == "1" }
  end

  it "speaks through redis-client when it loads, else through redis-rb" do
    expected = redis_client_loads? ? CircuitBreaker::Fleet::ClientConnection : CircuitBreaker::Fleet::RbConnection
    expect(CircuitBreaker::Fleet::Connection.driver).to eq(expected)
  end

  it "syncs given a redis-rb client (4.8 or 5), a URL, or a RedisClient" do
    require "redis"
    syncs(CircuitBreaker.new(name: "#{name}-rb", fleet: Redis.new(path: redis_server.socket), fleet_interval: 0.05))
    syncs(CircuitBreaker.new(name: "#{name}-url", fleet: redis_server.url, fleet_interval: 0.05))
    next unless redis_client_loads? # Debian 12 has no redis-client (redis-rb 4.8 stands alone)

    client = RedisClient.new(path: redis_server.socket)
    syncs(CircuitBreaker.new(name: "#{name}-client", fleet: client, fleet_interval: 0.05))
    expect(client.instance_variable_get(:@raw_connection)).to be_nil # its settings only, never its connection
  end
end
