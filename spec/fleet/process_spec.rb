# frozen_string_literal: true

require "circuit_breaker/fleet"

# The fleet's process rules (docs/fleet.md) that need no forked host: a fleet breaker's
# name, its keys' environment, its status before the first reply, the
# registry's fleet: option, and listeners that raise anything.
RSpec.describe "CircuitBreaker fleet: in one process", :redis do
  let(:name) { "fleet-#{SecureRandom.hex(4)}" }

  after { CircuitBreaker::Fleet.stop_all }

  def with_env(vars)
    saved = vars.keys.to_h { |k| [k, ENV.fetch(k, nil)] }
    vars.each { |k, v| ENV[k] = v }
    yield
  ensure
    saved.each { |k, v| ENV[k] = v }
  end

  it "refuses a fleet breaker without a name: unnamed breakers would share one fleet" do
    expect { CircuitBreaker.new(fleet: redis_server.url) }
      .to raise_error(ArgumentError, "fleet: needs name: (or shared:), the name the hosts share")
  end

  it "keeps its keys under the environment, so a test suite never acts on a development fleet" do
    test, dev = %w[test development].map do |env|
      breaker = with_env("RAILS_ENV" => nil, "RACK_ENV" => env, "APP_ENV" => nil) do
        CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05)
      end
      wait_for("connected") { breaker.metrics[:fleet] == :connected }
      breaker
    end
    expect(redis_server.command("KEYS", "circuit_breaker:test:{#{name}:*}:hosts").size).to eq(1)
    expect(redis_server.command("KEYS", "circuit_breaker:development:{#{name}:*}:hosts").size).to eq(1)
    test.trip!
    wait_for("the test fleet open") { redis_server.command("KEYS", "circuit_breaker:test:{#{name}:*}:state").any? }
    sleep 0.3 # several intervals: nothing reaches the development fleet
    expect(dev.state).to eq(:closed)
  end

  it "says :connecting until the first reply, then :connected, with one event" do
    redis_server.pause
    begin
      breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05)
      statuses = []
      breaker.on_fleet_change { |s| statuses << s }
      expect(breaker.metrics[:fleet]).to eq(:connecting)
    ensure
      redis_server.resume
    end
    wait_for("connected") { breaker.metrics[:fleet] == :connected }
    expect(statuses.last).to eq(:connected)
  end

  it "finds the same breaker in the registry when fleet: is a new client of the same Redis" do
    require "redis"
    first = CircuitBreaker.for(name, fleet: Redis.new(path: redis_server.socket))
    expect(CircuitBreaker.for(name, fleet: Redis.new(path: redis_server.socket))).to be(first)
    expect { CircuitBreaker.for(name, fleet: "unix:///elsewhere.sock") }.to raise_error(ArgumentError, /fleet/)
  ensure
    CircuitBreaker.forget_all!
  end

  it "keeps syncing when a listener raises something that is not a StandardError" do
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.05)
    raised = 0
    breaker.on_fleet_change { |_| raised += 1; raise Exception, "a listener's bug" } # rubocop:disable Lint/RaiseException
    breaker.call { 1 } # its first use starts the syncer
    wait_for("the listener ran") { raised.positive? }
    start = CircuitBreaker::Fleet.slots
    wait_for("more slots") { CircuitBreaker::Fleet.slots >= start + 3 }
    other = CircuitBreaker.new(name: "#{name}-2", fleet: redis_server.url, fleet_interval: 0.05)
    wait_for("a breaker added later connected") { other.metrics[:fleet] == :connected }
  end
end
