# frozen_string_literal: true

require_relative "child_process"

# The suite-wide watchdog (docs/development.md, "Testing"): a thread that
# knows which example runs and since when (on the monotonic clock), and
# when one runs past its bound, prints its name and location and every
# thread's backtrace, kills the children ChildProcess knows, and ends the
# run with exit status 124 (as timeout(1) does), so a CI leg fails naming
# the example instead of hanging.
#
# The bound is 300 s, or CIRCUIT_BREAKER_SPEC_WATCHDOG seconds, or an
# example's (or group's) `watchdog: SECONDS` metadata; GC_STRESS=1
# multiplies it by 10, as every allocation then runs a full GC.
# before(:context) and after(:context) hooks are watched too, each
# from its own start.
#
# A thread cannot see a hang that stops every Ruby thread (native code
# that blocks holding the GVL, a stopped process): a small process beside
# the run (BACKSTOP) is told each phase as it starts, and when one is still
# running past its bound plus a margin (a fifth of it, at least 10 s), it
# prints the phase's name and KILLs the run.
module Watchdog
  DEFAULT = 300
  GC_STRESS_SCALE = 10
  EXIT_STATUS = 124

  # The process beside the run: reads "SECONDS NAME" (a phase started) or
  # "-" (none) lines, and ends with the run (end of file, or its pid gone).
  BACKSTOP = <<~'RUBY'
    run = Integer(ARGV.fetch(0))
    now = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    phase = deadline = nil
    loop do
      if IO.select([$stdin], nil, nil, deadline ? (deadline - now.()).clamp(0, 1) : 1)
        line = $stdin.gets or exit # the run ended
        seconds, name = line.chomp.split(" ", 2)
        phase, deadline = seconds == "-" ? [nil, nil] : [name, now.() + Float(seconds)]
      end
      begin
        Process.kill(0, run)
      rescue Errno::ESRCH
        exit
      end
      next unless deadline && now.() > deadline

      $stderr.write("\nSpec watchdog, from outside the run: #{phase} is still running, and the run's own " \
                    "watchdog thread did not end it (no Ruby thread runs: native code holding the GVL, or a " \
                    "stopped process?); killing pid #{run} (docs/development.md, \"Testing\").\n")
      Process.kill(:KILL, run)
      exit
    end
  RUBY

  @stack = []
  @lock = Mutex.new
  @thread = nil
  @backstop = nil

  class << self
    # @return [Float] seconds a watched phase may run: `seconds` (metadata)
    #   or the environment's, scaled under GC_STRESS=1
    def bound(seconds = nil)
      seconds ||= Float(ENV.fetch("CIRCUIT_BREAKER_SPEC_WATCHDOG", DEFAULT))
      ENV["GC_STRESS"] == "1" ? seconds * GC_STRESS_SCALE : seconds
    end

    # Starts the watching thread and the backstop (once per process).
    def start
      return if @thread&.alive?

      start_backstop
      @thread = Thread.new do
        Thread.current.name = "spec watchdog"
        Thread.current.report_on_exception = true
        loop do
          sleep tick
          check
        end
      end
    end

    # Runs the block as the watched phase `what` (at `where`); the phase
    # it interrupts resumes afterwards with a fresh start.
    def watch(what, where, seconds = nil)
      push(what, where, bound(seconds))
      yield
    ensure
      pop
    end

    def push(what, where, limit)
      @lock.synchronize do
        @stack.push([what, where, limit, now])
        tell_backstop
      end
    end

    def pop
      @lock.synchronize do
        @stack.pop
        @stack[-1] = @stack[-1].dup.tap { |phase| phase[3] = now } unless @stack.empty?
        tell_backstop
      end
    end

    private

    def start_backstop
      reader, writer = IO.pipe
      ChildProcess.spawn(RbConfig.ruby, "-e", BACKSTOP, Process.pid.to_s, in: reader, out: File::NULL)
      reader.close
      writer.sync = true
      @backstop = [writer, Process.pid]
    end

    # The phase now on top, to the backstop (from this process only: a
    # forked child unwinding through an example's hooks must not speak).
    def tell_backstop
      writer, owner = @backstop
      return unless writer && owner == Process.pid

      what, where, limit, = @stack.last
      # One line: inspect escapes a newline in the name.
      writer.write(what ? "#{limit + [limit / 5.0, 10].max} #{what.inspect} (#{where})\n" : "-\n")
    rescue IOError, SystemCallError
      @backstop = nil
    end

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def tick
      limit = @lock.synchronize { @stack.last&.at(2) } || bound
      (limit / 10.0).clamp(0.05, 1.0)
    end

    def check
      what, where, limit, started = @lock.synchronize { @stack.last }
      return unless started && now - started > limit

      fire(what, where, now - started)
    end

    # The report is written once the children are killed, so a closed
    # stderr cannot keep them alive.
    def fire(what, where, ran)
      report = ["", "=" * 72,
                "Spec watchdog: #{what.inspect} (#{where}) has run #{ran.round(1)}s, past its bound " \
                "(docs/development.md, \"Testing\"): every thread's backtrace, then the run ends."]
      Thread.list.each do |t|
        next if t == Thread.current

        report << "" << "-- #{t.inspect}"
        report.concat((t.backtrace || ["(no backtrace)"]).map { |line| "   #{line}" })
      end
      children = ChildProcess.live
      ChildProcess.kill_all
      report << "" << "Killed the children it knew: #{children.inspect}" unless children.empty?
      report << "Spec watchdog: #{what.inspect} (#{where}) hung; exiting #{EXIT_STATUS}." << ("=" * 72)
      $stderr.write(report.join("\n"), "\n")
      $stderr.flush
    ensure
      exit!(EXIT_STATUS)
    end
  end
end

if defined?(RSpec)
  RSpec.configure do |config|
    config.before(:suite) { Watchdog.start }
    config.around do |example|
      Watchdog.watch(example.full_description, example.location, example.metadata[:watchdog]) { example.run }
    end
    config.before(:context) do
      group = self.class
      Watchdog.push("the :context hooks of #{group.description}", group.metadata[:location],
                    Watchdog.bound(group.metadata[:watchdog]))
    end
    config.after(:context) { Watchdog.pop }
  end
end
