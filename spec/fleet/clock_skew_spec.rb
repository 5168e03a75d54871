# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"

# Hosts whose clocks disagree by an hour (docs/fleet.md, "Time"), on a
# real redis-server: fleet deadlines are Redis's and only remaining times
# cross hosts, and a host's own waits are relative (core: wake::park), so
# a host an hour ahead (libfaketime) keeps sending, and what it does
# reaches the others. Every wait is bounded.
#
# libfaketime moves the monotonic clock too, which real skew never does:
# the Linux build's syncer sleeps with a relative futex timeout and keeps
# its pace even then. The portable build (docs/install.md) sleeps on the
# thread's parker, whose deadline is absolute on the interposed clock, so
# there only the wall clock is moved (FAKETIME_DONT_FAKE_MONOTONIC), as on
# a real host whose clock is an hour off.
RSpec.describe "CircuitBreaker fleet: a host an hour ahead", :redis do
  let(:name) { "skew-#{SecureRandom.hex(4)}" }
  let(:options) { { fleet_interval: 0.05, open_duration: 0.3 } }

  after { CircuitBreaker::Fleet.stop_all }

  def ahead_env
    FakeTime.env("+1h", monotonic: CircuitBreaker.shared_supported?)
  end

  def fleet_state(breaker)
    redis_server.command("HGETALL", "#{breaker.instance_variable_get(:@fleet_link).tag}:state").each_slice(2).to_h
  end

  it "takes a reset! made on the host that is ahead to every host, the fleet half-open after a trip" do
    skip "libfaketime is not installed (bin/setup installs it)" unless FakeTime.installed?

    operator = CircuitBreaker.new(name: name, fleet: redis_server.url, **options)
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    FleetHost.run(name, redis_server.url, **options) do |plain|
      FleetHost.run(name, redis_server.url, env: ahead_env, **options) do |ahead|
        expect(ahead.hour).not_to eq(Time.now.utc.hour)
        operator.trip!
        wait_for("the fleet half-open") { fleet_state(operator)["s"] == "2" }
        wait_for("every host half-open") { [plain, ahead].all? { |h| h.("state").first == :half_open } }
        expect(ahead.("state")).to eq(%i[half_open connected])
        ahead.("reset")
        wait_for("the fleet closed") { fleet_state(operator)["s"] == "0" }
        wait_for("the operator closed") { operator.state == :closed }
        wait_for("the other host closed") { plain.("state").first == :closed }
        expect(ahead.("state")).to eq(%i[closed connected])
      end
    end
  end
end
