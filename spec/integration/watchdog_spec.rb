# frozen_string_literal: true

require "tmpdir"

# The suite-wide watchdog of spec/support/watchdog.rb (docs/development.md,
# "Testing"), on fixtures whose only example hangs: the child rspec ends
# by itself, non-zero, naming the example, with its child process killed;
# or, when the run's own threads are stopped, is killed from outside.
RSpec.describe Watchdog, :integration do
  root = File.expand_path("../..", __dir__)
  fixture = File.join(root, "spec/fixtures/watchdog")

  it "ends a run whose example hangs, naming the example and killing its children" do
    Dir.mktmpdir do |dir|
      pid_file = File.join(dir, "child.pid")
      env = { "CIRCUIT_BREAKER_SPEC_WATCHDOG" => "2", "CHILD_PID_FILE" => pid_file, "GC_STRESS" => nil }
      out, status = ChildProcess.capture2e(env, RbConfig.ruby, "-S", "rspec", File.join(fixture, "hang_spec.rb"),
                                           chdir: fixture, within: 60) # its own .rspec-less dir

      expect(status.exitstatus).to eq(Watchdog::EXIT_STATUS), out
      expect(out).to include('"A fixture group hangs forever in one example"', "hang_spec.rb:9", "past its bound")
      expect(out).to include("-- #<Thread:") # every thread's backtrace
      child = Integer(File.read(pid_file))
      expect { Process.kill(0, child) }.to raise_error(Errno::ESRCH), "the example's child #{child} outlived the run"
    end
  end

  it "has a process beside the run kill it, naming the example, when no Ruby thread of the run can" do
    env = { "CIRCUIT_BREAKER_SPEC_WATCHDOG" => "2", "GC_STRESS" => nil }
    out, status = ChildProcess.capture2e(env, RbConfig.ruby, "-S", "rspec", File.join(fixture, "stopped_spec.rb"),
                                         chdir: fixture, within: 60)

    expect(status.termsig).to eq(Signal.list.fetch("KILL")), out
    expect(out).to include("from outside the run", '"A fixture group stops its own process"', "stopped_spec.rb:10")
  end

  it "bounds a phase by the environment, by metadata, and scales both under GC_STRESS=1" do
    env = ->(vars) { vars.each { |k, v| ENV[k] = v } }
    saved = ENV.to_h.slice("CIRCUIT_BREAKER_SPEC_WATCHDOG", "GC_STRESS")
    env.call("CIRCUIT_BREAKER_SPEC_WATCHDOG" => nil, "GC_STRESS" => nil)
    expect([Watchdog.bound, Watchdog.bound(900)]).to eq([300, 900])
    env.call("CIRCUIT_BREAKER_SPEC_WATCHDOG" => "7")
    expect(Watchdog.bound).to eq(7)
    env.call("GC_STRESS" => "1")
    expect([Watchdog.bound, Watchdog.bound(900)]).to eq([70, 9000])
  ensure
    env.call("CIRCUIT_BREAKER_SPEC_WATCHDOG" => saved["CIRCUIT_BREAKER_SPEC_WATCHDOG"], "GC_STRESS" => saved["GC_STRESS"])
  end
end
