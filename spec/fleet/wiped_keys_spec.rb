# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"

# Keys wiped under connected hosts (FLUSHALL), on a real redis-server: the
# next change rebuilds the fleet state with a new epoch and pushes it, and
# every connected host follows it within the bound of docs/fleet.md
# (one fleet_interval and a round trip; here 20 intervals, against the
# seconds an idle host took when it waited for its next heartbeat's reply).
RSpec.describe "CircuitBreaker fleet: keys wiped under connected hosts", :redis do
  let(:name) { "wiped-#{SecureRandom.hex(4)}" }
  let(:options) { { fleet_interval: 0.05, open_duration: 30 } }

  after { CircuitBreaker::Fleet.stop_all }

  it "takes a trip! to another host within the bound after FLUSHALL, each time" do
    operator = CircuitBreaker.new(name: name, fleet: redis_server.url, **options)
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    FleetHost.run(name, redis_server.url, **options) do |other|
      3.times do |round|
        # Both idle: past the heartbeat that follows their last change
        # (within 0.7 s), the next is 1.75 s or more away. Then the keys go.
        sleep 1
        redis_server.command("FLUSHALL")
        expect(other.("state")).to eq(%i[closed connected])
        operator.trip!
        wait_for("round #{round}: the other host open", deadline: 20 * options[:fleet_interval]) do
          other.("state").first == :open
        end
        operator.reset!
        wait_for("round #{round}: the other host closed") { other.("state").first == :closed }
      end
    end
  end
end
