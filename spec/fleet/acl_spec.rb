# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"
require "logger"
require "stringio"

# docs/fleet.md, "Redis ACL" and "Keys": a fleet run as exactly the ACL
# user the page lists, and every key of one breaker in one Redis Cluster
# hash slot. Real redis-servers; waits are bounded.
RSpec.describe "CircuitBreaker fleet: Redis ACL and key layout", :redis do
  let!(:name) { "acl-#{SecureRandom.hex(4)}" } # before any fork: every host uses it

  after do
    CircuitBreaker::Fleet.stop_all
    redis_server.command("ACL", "DELUSER", "fleet")
  end

  # The `ACL SETUSER` of docs/fleet.md, as its words.
  def documented_user
    doc = File.read(File.expand_path("../../docs/fleet.md", __dir__))
    block = doc[/^```\n(ACL SETUSER fleet .*?)^```/m, 1]
    raise "docs/fleet.md lists no ACL SETUSER fleet" unless block

    block.gsub("\\\n", " ").split
  end

  def client
    require "redis"
    Redis.new(path: redis_server.socket, username: "fleet", password: "secret")
  end

  it "runs a fleet, pushes included, as exactly the ACL user docs/fleet.md lists" do
    words = documented_user
    expect(words.first(3)).to eq(%w[ACL SETUSER fleet])
    redis_server.command(*words)
    redis_server.command("ACL", "LOG", "RESET")
    reader, writer = IO.pipe
    follower = ChildProcess.fork do
      reader.close
      # A long interval: only a push brings the opening within the wait.
      b = CircuitBreaker.new(name: name, fleet: client, fleet_interval: 60, open_duration: 60)
      limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      sleep 0.01 until b.metrics[:fleet] == :connected || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
      writer.puts("ready #{b.metrics[:fleet]}")
      sleep 0.01 until b.state == :open || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
      writer.puts("#{b.state} #{b.metrics[:fleet]}")
    ensure
      exit!(0)
    end
    writer.close
    log = StringIO.new
    operator = CircuitBreaker.new(name: name, fleet: client, fleet_interval: 0.05, open_duration: 60,
                                  logger: Logger.new(log))
    expect(reader.wait_readable(30) && reader.gets).to eq("ready connected\n")
    wait_until(what: "connected") { operator.metrics[:fleet] == :connected }
    operator.trip!
    expect(reader.wait_readable(30) && reader.gets).to eq("open connected\n")
    wait_until(what: "the operator connected") { operator.metrics[:fleet] == :connected }
    expect(redis_server.command("ACL", "LOG")).to eq([])
    expect(log.string).not_to include("NOPERM")
  ensure
    ChildProcess.finish(follower) if follower
  end

  it "keeps every key and the channel of one breaker in one Redis Cluster hash slot" do
    names = [name, "#{name}{braced}", "#{name}:colon"]
    breakers = names.map { |n| CircuitBreaker.new(name: n, fleet: redis_server.url, fleet_interval: 0.05) }
    breakers << CircuitBreaker.new(name: name, namespace: "ns{x}", fleet: redis_server.url, fleet_interval: 0.05)
    wait_until(what: "every breaker connected") { breakers.all? { |b| b.metrics[:fleet] == :connected } }
    keys = redis_server.command("KEYS", "circuit_breaker:*#{name}*")
    expect(keys.size).to eq(2 * breakers.size)
    cluster = RedisServer.start(extra: %w[--cluster-enabled yes --cluster-config-file nodes.conf])
    begin
      slot = ->(key) { cluster.command("CLUSTER", "KEYSLOT", key) }
      by_breaker = keys.group_by { |k| k.delete_suffix(":hosts").delete_suffix(":state") }
      expect(by_breaker.size).to eq(breakers.size)
      by_breaker.each do |base, pair|
        expect(pair.map(&slot).uniq).to eq([slot.("#{base}:changed")])
        # The tag is the breaker's name and configuration hash, in braces.
        expect(base).to match(/\{[^{}]*#{Regexp.escape(name)}.*:\h{16}\}\z/)
      end
    ensure
      cluster.stop
    end
  end
end
