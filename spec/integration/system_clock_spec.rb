# frozen_string_literal: true

require "rbconfig"

# A breaker without clock: reads the system's monotonic clock the way Ruby
# does, so a clock_gettime interposed with LD_PRELOAD (libfaketime, in a
# test suite or a container) moves the breaker's time and Ruby's alike,
# although the breaker calls the vDSO directly when nothing is interposed
# (docs/performance.md).
RSpec.describe CircuitBreaker, "on the system clock" do
  it "follows a clock_gettime interposed with LD_PRELOAD, as Ruby's clock does" do
    skip "libfaketime is not installed (bin/setup installs it)" unless FakeTime.installed?

    script = <<~RUBY
      $LOAD_PATH.unshift #{File.expand_path('../../lib', __dir__).inspect}
      require "circuit_breaker"
      # The default slow threshold reads the coarse clock; 1 ms the precise one.
      precise = CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 1)
      breakers = [CircuitBreaker.new(open_duration: 2), CircuitBreaker.new(open_duration: 2, window: precise)]
      breakers.each(&:trip!)
      start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < start + 2.5
      puts breakers.map(&:state).join(" ")
    RUBY
    # Time runs ten times faster for the child: Ruby sees 2.5 s pass in 0.25 s.
    out, = ChildProcess.capture2(FakeTime.env("+0 x10"), RbConfig.ruby, "-e", script, err: File::NULL)
    expect(out.split).to eq(%w[half_open half_open])
  end
end
