# frozen_string_literal: true

require "circuit_breaker/fleet"

# Many idle fleet breakers in one process (docs/fleet.md, "Cost at
# scale"): an idle breaker whose report has not changed sends a heartbeat
# only, while the fleet's changes reach it by push; anything new is sent at
# the next slot. `rake bench` (bench/fleet.rb, "Cost at scale") measures the
# CPU this saves.
RSpec.describe "CircuitBreaker fleet: at scale", :redis do
  BREAKERS = 200

  let(:name) { "scale-#{SecureRandom.hex(4)}" }

  after { CircuitBreaker::Fleet.stop_all }

  # The key of `breaker`'s hosts' reports (its name is this example's own).
  def hosts_key(breaker)
    wait_for("#{breaker.name}'s keys") { redis_server.command("KEYS", "circuit_breaker:*{#{breaker.name}:*}:hosts").first }
  end

  it "sends idle breakers' heartbeats only, keeps their reports live, and sends a change at once" do
    breakers = Array.new(BREAKERS) { |i| CircuitBreaker.new(name: "#{name}-#{i}", fleet: redis_server.url) }
    wait_for("connected") { breakers.all? { |b| b.metrics[:fleet] == :connected } }
    wait_for("subscribed") { redis_server.command("PUBSUB", "NUMPAT") >= 1 }
    before = redis_server.command_counts.fetch("evalsha", 0)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    sleep 1.5
    secs = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
    scripts = (redis_server.command_counts.fetch("evalsha", 0) - before) / secs
    # One per breaker per 0.1 s interval would be 2,000 a second; a
    # heartbeat per 0.35–0.7 s is at most about 570.
    expect(scripts).to be < BREAKERS * 4
    # Every report still counts (host_ttl: 1 s).
    expect(breakers.sample(20).map { |b| redis_server.command("HLEN", hosts_key(b)) }).to all(eq(1))
    changed = breakers.sample
    changed.call { 1 }
    wait_for("the call reported") { redis_server.command("HVALS", hosts_key(changed)).first.split[1] == "1" }
  end

  it "sends every interval while pushes do not reach the process" do
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05)
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    # This breaker's syncer: not the first one there, which in a whole run
    # can be an earlier file's (spec/fleet/seam_spec.rb keeps its own).
    link = breaker.instance_variable_get(:@fleet_link)
    syncer = CircuitBreaker::Fleet.instance_variable_get(:@syncers).values.find { |s| s.holds?(link) }
    # As after a lost subscription, and lost for good: left running, the
    # subscriber subscribes again once its connection has been quiet for
    # 5 s, pushes work again, and this idle breaker sends a heartbeat only
    # every 3.5 s (docs/fleet.md): 10 sends then took more than 30 s.
    syncer.instance_variable_get(:@subscriber).kill.join(5) or raise "the subscriber thread did not stop"
    syncer.instance_variable_set(:@pushes, false)
    before = redis_server.command_counts.fetch("evalsha", 0)
    wait_for("a send per interval") { redis_server.command_counts.fetch("evalsha", 0) >= before + 10 }
  end
end
