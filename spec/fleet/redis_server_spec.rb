# frozen_string_literal: true

# The harness itself: a real redis-server on a unix socket, and each fault
# the fleet specs inject really happens.
RSpec.describe RedisServer, :redis do
  it "runs on a unix socket with no TCP port and no persistence" do
    expect(redis_server.command("PING")).to eq("PONG")
    expect(redis_server.command("CONFIG", "GET", "port")).to eq(%w[port 0])
    expect(redis_server.command("CONFIG", "GET", "save")).to eq(["save", ""])
  end

  it "pauses with SIGSTOP and resumes with SIGCONT" do
    redis_server.pause
    expect(redis_server.ping?).to be(false)
    redis_server.resume
    expect(redis_server.ping?).to be(true)
  end

  it "restarts empty on the same socket after kill -9" do
    redis_server.command("SET", "k", "v")
    old = redis_server.pid
    redis_server.crash_and_restart
    expect(redis_server.pid).not_to eq(old)
    expect(redis_server.command("GET", "k")).to be_nil
  end

  it "holds scripts while paused for writes, until unpaused" do
    redis_server.client_pause
    expect { redis_server.command("EVAL", "return 1", 0, timeout: 0.5) }.to raise_error(RedisServer::Stuck)
    redis_server.client_unpause
    expect(redis_server.command("EVAL", "return 1", 0)).to eq(1)
  end

  it "replicates to a replica, which REPLICAOF NO ONE promotes" do
    primary = RedisServer.start(tcp: true)
    replica = RedisServer.start(replica_of: primary)
    primary.command("SET", "k3", "v")
    # Asked of the replica itself: WAIT counts any replica of the primary,
    # and on a host running other suites one of theirs can be following
    # this port.
    replica.wait_until("the replica has k3") { replica.command("GET", "k3") == "v" }
    # Promoted before the primary dies: a replica left to reconnect could
    # sync from whatever listens on the port next.
    replica.command("REPLICAOF", "NO", "ONE")
    primary.crash
    expect(replica.command("GET", "k3")).to eq("v")
    expect(replica.command("SET", "k4", "v")).to eq("OK")
  ensure
    [primary, replica].compact.each(&:stop)
  end

  it "refuses writes when out of memory, until the limit goes" do
    redis_server.limit_memory
    expect { redis_server.command("SET", "k2", "v") }.to raise_error(/OOM/)
    redis_server.unlimit_memory
    expect(redis_server.command("SET", "k2", "v")).to eq("OK")
  end

  it "counts commands (INFO commandstats)" do
    before = redis_server.command_counts.fetch("get", 0)
    3.times { redis_server.command("GET", "nothing") }
    expect(redis_server.command_counts.fetch("get")).to eq(before + 3)
  end
end
