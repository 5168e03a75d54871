# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"

# Probes across hosts (docs/fleet.md, "Probes across hosts") for hosts
# whose calls come several fleet_intervals apart, on a real redis-server:
# a slot a rejected call asked for is kept until the host's next call
# (core: Breaker::fleet_report's hold), so a quiet host probes, and a fleet
# of quiet hosts closes. The calls are paced by sleeps (the pace is what is
# tested); every wait and every loop is bounded.
RSpec.describe "CircuitBreaker fleet: quiet hosts in half-open", :redis do
  INTERVAL = 0.1
  PACE = 5 * INTERVAL # one call every 5 × fleet_interval

  let!(:name) { "probes-#{SecureRandom.hex(4)}" } # before any fork

  after { CircuitBreaker::Fleet.stop_all }

  def fleet_breaker
    CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: INTERVAL, open_duration: 0.5,
                       consecutive_failures: nil)
  end

  def fleet_state(breaker)
    redis_server.command("HGETALL", "#{breaker.instance_variable_get(:@fleet_link).tag}:state").each_slice(2).to_h
  end

  # Calls once every PACE, at most `limit` times, until one is admitted:
  # how many calls it took (nil: none was).
  def calls_until_admitted(breaker, limit)
    (1..limit).find do
      sleep PACE
      breaker.call { :ok }
      true
    rescue CircuitBreaker::OpenError
      false
    end
  end

  it "gives a host calling once every 5 fleet_intervals a probe within 2 of its calls after the fleet turns half-open" do
    quiet = fleet_breaker
    wait_for("connected") { quiet.metrics[:fleet] == :connected }
    quiet.trip!
    wait_for("the fleet half-open") { fleet_state(quiet)["s"] == "2" }
    expect(calls_until_admitted(quiet, 6)).to be_between(1, 2)
  end

  it "closes a fleet whose hosts all call once every 5 fleet_intervals" do
    # The fleet's state in Redis decides: a host whose send timed out (a
    # loaded machine) runs on its own breaker and may close alone, which
    # closes nothing of the fleet's. The hosts call until the parent saw
    # the fleet close and lets them go (their `stop` pipe at end of file).
    gate = ProcessGate.new
    stop, go_on = IO.pipe
    results = Array.new(3) do
      reader, writer = IO.pipe
      pid = ChildProcess.fork("quiet host") do
        reader.close
        go_on.close
        gate.forget_parent_end
        breaker = fleet_breaker
        wait_for("connected") { breaker.metrics[:fleet] == :connected }
        gate.wait
        calls = 0
        until stop.wait_readable(PACE) || calls == 120
          calls += 1
          breaker.call { :ok } rescue CircuitBreaker::OpenError # rubocop:disable Style/RescueModifier
        end
        # Following the fleet's closing (a push, or the next send's reply).
        wait_for("the host closed", deadline: 10) { breaker.state == :closed } rescue nil # rubocop:disable Style/RescueModifier
        writer.write("#{breaker.state} #{calls}")
      ensure
        writer.close
        exit!(0)
      end
      writer.close
      [pid, reader]
    end
    stop.close
    operator = fleet_breaker
    wait_for("connected") { operator.metrics[:fleet] == :connected }
    operator.trip!
    wait_for("the fleet open") { fleet_state(operator)["s"] == "1" }
    gate.open!
    begin
      wait_for("the fleet closed by the quiet hosts' probes", deadline: 40) { fleet_state(operator)["s"] == "0" }
    ensure
      go_on.close
    end
    outcomes = results.map do |pid, reader|
      raise "a host did not report within 60 s" unless reader.wait_readable(60)

      reader.read.split.tap { ChildProcess.finish(pid, within: 10) }
    ensure
      reader.close
    end
    expect(outcomes.map(&:first)).to all(eq("closed"))
  end
end
