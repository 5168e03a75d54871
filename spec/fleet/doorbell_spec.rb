# frozen_string_literal: true

require "circuit_breaker/fleet"

# shared: + fleet: (docs/fleet.md, "When a host sends"): one process sends
# for the host; a failure recorded in another process of the host rings the
# host's doorbell (a futex in the shared directory), and the sender sends
# at once instead of at its slot's end.
RSpec.describe "CircuitBreaker fleet: the host's doorbell", :redis, :shared_memory do
  let!(:name) { "doorbell-#{SecureRandom.hex(4)}" } # before the fork

  after { CircuitBreaker::Fleet.stop_all }

  it "sends a failure recorded in a process that does not send, long before the sender's 30 s slot ends" do
    # The sender: this process, the first to use the breaker; it sends at
    # once, then waits for its 30 s slot.
    breaker = CircuitBreaker.new(name: name, shared: name, fleet: redis_server.url, fleet_interval: 30,
                                 min_calls: 1_000)
    breaker.call { :ok }
    key = wait_for("the host's report") { redis_server.command("KEYS", "circuit_breaker:*{#{name}:*}:hosts").first }
    failures = -> { redis_server.command("HVALS", key).map { |v| Integer(v.split[2], 10) } }
    wait_for("the first send") { failures.() == [0] }
    expect(breaker.instance_variable_get(:@fleet_link).sender).to eq(Process.pid)
    done_r, done_w = IO.pipe
    other = ChildProcess.fork do
      done_w.close
      breaker.call { raise "down" }
    rescue RuntimeError
      done_r.read # until the example has looked
      exit!(0)
    end
    done_r.close
    begin
      # Another process recorded it; the sender's slot ends in 30 s.
      wait_for("the other process's failure sent by the sender", deadline: 10) { failures.() == [1] }
    ensure
      done_w.close
      ChildProcess.finish(other)
    end
  end
end
