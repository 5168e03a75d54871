# frozen_string_literal: true

require "rbconfig"
require "tempfile"
require_relative "child_process"

# A fleet host in a process of its own (for the `:redis` groups), driven by
# lines on its stdin: each line is answered with the host's state and
# fleet status after it acted ("reset": reset!, "trip": trip!, anything
# else: nothing). `env` is added to its environment (`FakeTime.env("+1h")`:
# an hour ahead). Bounded: ChildProcess reaps it (TERM, then KILL).
#
# @example
#   FleetHost.run(name, url, open_duration: 0.3) do |host|
#     host.("state")   # => [:closed, :connected]
#   end
module FleetHost
  LIB = File.expand_path("../../lib", __dir__)

  # Yields a lambda that sends a line and returns the answer as Symbols,
  # once the host is :connected; returns the block's value.
  def self.run(name, url, env: {}, **options)
    script = <<~RUBY
      $LOAD_PATH.unshift #{LIB.inspect}
      require "circuit_breaker"
      b = CircuitBreaker.new(name: #{name.inspect}, fleet: #{url.inspect}, **#{options.inspect})
      limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      sleep 0.02 until b.metrics[:fleet] == :connected || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
      $stdout.puts "ready \#{b.metrics[:fleet]} \#{Time.now.utc.hour}"; $stdout.flush
      while (line = $stdin.gets)
        b.reset! if line.start_with?("reset")
        b.trip! if line.start_with?("trip")
        $stdout.puts "\#{b.state} \#{b.metrics[:fleet]}"; $stdout.flush
      end
    RUBY
    err = Tempfile.new("fleet-host-err")
    ChildProcess.popen2(env, RbConfig.ruby, "-e", script, err: err.path) do |stdin, io, waiter|
      ready = ChildProcess.gets(io).to_s.split
      unless ready[0..1] == %w[ready connected]
        waiter.join(5)
        raise "fleet host not connected: #{ready.inspect}, #{waiter.value.inspect if waiter.join(0)}, " \
              "its stderr: #{File.read(err.path)[-2000..] || File.read(err.path)}"
      end

      ask = lambda do |line|
        stdin.puts(line)
        stdin.flush
        ChildProcess.gets(io).split.map(&:to_sym)
      end
      ask.define_singleton_method(:hour) { Integer(ready[2]) }
      yield ask
    ensure
      stdin.close unless stdin.closed?
    end
  ensure
    err&.close!
  end
end
