# frozen_string_literal: true

require "circuit_breaker/fleet"

# `fleet:` and `fleet_interval:` checked before any breaker or thread
# exists (docs/fleet.md). No Redis needed: nothing here connects.
RSpec.describe "CircuitBreaker.new(fleet:, fleet_interval:)" do
  after { CircuitBreaker::Fleet.stop_all }

  it "names fleet_interval and its range when it is out of range or not a number" do
    [0, 0.001, 61, -1, Float::NAN, Float::INFINITY].each do |bad|
      expect { CircuitBreaker.new(fleet: "unix:///tmp/none.sock", fleet_interval: bad) }
        .to raise_error(ArgumentError, /fleet_interval must be a finite number of seconds in 0.01..60/)
    end
    ["0.1", Complex(1, 1), :fast].each do |bad|
      expect { CircuitBreaker.new(fleet: "unix:///tmp/none.sock", fleet_interval: bad) }
        .to raise_error(TypeError, /fleet_interval must be a finite number of seconds in 0.01..60/)
    end
  end

  it "names fleet when the URL is not redis://, rediss:// or unix://" do
    ["http://example.com", "redis://", "unix://", "not a url at all %%", ""].each do |bad|
      expect { CircuitBreaker.new(fleet: bad) }.to raise_error(ArgumentError, /fleet/)
    end
  end

  it "is a TypeError naming fleet for something that is neither a URL nor a client" do
    expect { CircuitBreaker.new(fleet: 42) }.to raise_error(TypeError, %r{fleet must be a redis:// or unix:// URL, or a Redis client})
  end

  it "refuses fleet_interval and fleet_quorum without fleet" do
    expect { CircuitBreaker.new(fleet_interval: 1) }.to raise_error(ArgumentError, "fleet_interval: needs fleet:")
    expect { CircuitBreaker.new(fleet_quorum: 0.5) }.to raise_error(ArgumentError, "fleet_quorum: needs fleet:")
  end

  it "names fleet_quorum and its range when it is out of range" do
    [0, 1.5, -0.1, Float::NAN].each do |bad|
      expect { CircuitBreaker.new(name: "q", fleet: "unix:///tmp/none.sock", fleet_quorum: bad) }
        .to raise_error(ArgumentError, /fleet_quorum must be a Float in \(0.0, 1.0\]/)
    end
    expect { CircuitBreaker.new(name: "q", fleet: "unix:///tmp/none.sock", fleet_quorum: "half") }
      .to raise_error(TypeError, /fleet_quorum/)
  end

  it "takes a redis-rb client's settings, never its connection" do
    require "redis"
    client = Redis.new(path: "/tmp/none.sock", db: 3)
    settings, interval = CircuitBreaker::Fleet.settings(client, nil)
    expect(settings).to eq(path: "/tmp/none.sock", db: 3)
    expect(interval).to eq(0.1)
    expect(client.connected?).to be_falsey # redis-rb 5: nil before a first command
  end

  it "keeps TLS from a redis-rb client (4.8: its scheme; 5: its redis-client config) and from a RedisClient" do
    require "redis"
    settings, = CircuitBreaker::Fleet.settings(Redis.new(url: "rediss://cache.internal:6380"), nil)
    expect(settings).to include(host: "cache.internal", port: 6380, ssl: true)
    begin
      require "redis_client"
    rescue LoadError
      next # Debian 12: no redis-client
    end
    settings, = CircuitBreaker::Fleet.settings(RedisClient.new(host: "cache.internal", port: 6380, ssl: true), nil)
    expect(settings).to include(host: "cache.internal", port: 6380, ssl: true)
  end

  it "reads host, port, db and password from a redis:// URL" do
    settings, = CircuitBreaker::Fleet.settings("redis://:s%40cret@cache.internal:6380/2", 0.5)
    expect(settings).to eq(host: "cache.internal", port: 6380, db: 2, password: "s@cret")
  end

  it "has no fleet entry in metrics without fleet:" do
    expect(CircuitBreaker.new.metrics).not_to have_key(:fleet)
  end
end
