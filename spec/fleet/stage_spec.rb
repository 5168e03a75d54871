# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"
# The fleet's half-open stage judged by the host's rule (docs/semantics.md,
# "half_open"; core: ramp::Next): a round between reopen_rate and
# advance_rate starts the stage over once, and a second one in a row
# reopens the fleet, on a real redis-server. Waits are bounded.
RSpec.describe "CircuitBreaker fleet: a stage between the rates", :redis do
  let(:name) { "stage-#{SecureRandom.hex(4)}" }

  after { CircuitBreaker::Fleet.stop_all }

  def fleet_state(breaker)
    redis_server.command("HGETALL", "#{breaker.instance_variable_get(:@fleet_link).tag}:state").each_slice(2).to_h
  end

  # One probe with outcome `ok`, once the fleet grants this host a slot.
  def probe(breaker, ok)
    wait_until(what: "a probe slot") do
      breaker.call { ok ? :ok : raise(BreakerHelpers::Boom) }
      true
    rescue CircuitBreaker::OpenError
      false
    rescue BreakerHelpers::Boom
      true
    end
  end

  it "starts a fleet stage over once, and reopens the fleet at a second round in a row between the rates" do
    # 4 probes a round, advance at 100 %, reopen below 50 %: 3 of 4 is between.
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05, half_open_calls: 4,
                                 advance_rate: 1.0, reopen_rate: 0.5, ramp: [1.0], open_duration: 0.2)
    wait_until(what: "connected") { breaker.metrics[:fleet] == :connected }
    breaker.trip!
    wait_until(what: "the fleet half-open") { fleet_state(breaker)["s"] == "2" }
    first = fleet_state(breaker)["g"]
    [true, true, true, false].each { |ok| probe(breaker, ok) }
    wait_until(what: "a new round") { fleet_state(breaker)["g"] != first }
    expect(fleet_state(breaker)["s"]).to eq("2") # started over, still half-open
    [true, true, true, false].each { |ok| probe(breaker, ok) }
    wait_until(what: "the fleet reopened") { fleet_state(breaker)["s"] == "1" }
    expect(fleet_state(breaker)).to include("r" => "3") # probe_failed
    wait_until(what: "the host open") { breaker.state == :open }
  end

  it "reopens the fleet in a round after one between the rates as soon as it can no longer pass" do
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05, half_open_calls: 4,
                                 advance_rate: 1.0, reopen_rate: 0.5, ramp: [1.0], open_duration: 0.2)
    wait_until(what: "connected") { breaker.metrics[:fleet] == :connected }
    breaker.trip!
    wait_until(what: "the fleet half-open") { fleet_state(breaker)["s"] == "2" }
    first = fleet_state(breaker)["g"]
    [true, true, true, false].each { |ok| probe(breaker, ok) }
    wait_until(what: "a new round") { fleet_state(breaker)["g"] != first }
    probe(breaker, false) # at best 3 of 4: below advance_rate, so it can only reopen
    wait_until(what: "the fleet reopened") { fleet_state(breaker)["s"] == "1" }
    expect(fleet_state(breaker)).to include("r" => "3") # probe_failed
  end
end
