# frozen_string_literal: true

require "securerandom"
require "rbconfig"
require "circuit_breaker/fleet"

# A fleet breaker built in a signal's trap handler, where Ruby refuses
# locks and `require` ("can't be called from trap context"), in a fresh
# process on a real redis-server: the fleet's code, the Redis client and
# the syncer's locks are taken on a thread of their own
# (lib/circuit_breaker/trap_context.rb), and it syncs whether its first
# use comes in the trap handler or after it (docs/fleet.md, "Processes").
RSpec.describe "CircuitBreaker fleet: a breaker built in a trap handler", :redis do
  def run(in_trap)
    script = <<~RUBY
      $LOAD_PATH.unshift #{File.expand_path('../../lib', __dir__).inspect}
      require "circuit_breaker"
      built = Queue.new
      trap("USR1") do
        b = CircuitBreaker.new(name: "trap-\#{$$}", fleet: #{redis_server.url.inspect}, fleet_interval: 0.05)
        b.call { :ok } if #{in_trap}
        built << b
      rescue Exception => e # rubocop:disable Lint/RescueException
        built << e
      end
      Process.kill("USR1", $$)
      b = built.pop
      raise b if b.is_a?(Exception)
      limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      sleep 0.02 until b.metrics[:fleet] != :connecting || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
      puts "\#{b.call { :called }} \#{b.metrics[:fleet]}"
    RUBY
    ChildProcess.capture2e(RbConfig.ruby, "-e", script, within: 60)
  end

  it "builds it, and starts its syncer at its first use after the trap handler" do
    out, status = run(false)
    expect([out, status.success?]).to eq(["called connected\n", true])
  end

  it "builds and starts it when its first use is in the trap handler" do
    out, status = run(true)
    expect([out, status.success?]).to eq(["called connected\n", true])
  end
end
