# frozen_string_literal: true

# libfaketime for a child process, preloaded directly rather than through
# the `faketime` wrapper: the wrapper creates a POSIX semaphore and a
# shared memory object named after its own pid (/dev/shm/sem.faketime_sem_PID)
# and removes them only when it exits normally. ChildProcess kills a child
# past its bound, so the two stay behind, and a later wrapper that is given
# the same pid fails before it runs anything ("sem_open: File exists": a
# CI run lost a fleet example to it; 2 of 150 wrapper runs failed on a
# machine with 254 left behind). The library on its own creates neither.
#
# @example
#   ChildProcess.capture2(FakeTime.env("-1h"), RbConfig.ruby, "-e", script)
module FakeTime
  # Debian's path (the `libfaketime` package, which `faketime` depends on),
  # per architecture.
  LIBRARY = Dir.glob("/usr/lib/*/faketime/libfaketime.so.1").first

  # Whether libfaketime is installed (bin/setup installs it).
  def self.installed?
    !LIBRARY.nil?
  end

  # The environment that runs a child at `faked`, in libfaketime's FAKETIME
  # format (`"-1h"`, `"+1d"`, `"+0 x10"`: ten times faster); both clocks
  # move unless `monotonic: false` (FAKETIME_DONT_FAKE_MONOTONIC).
  def self.env(faked, monotonic: true)
    raise "libfaketime is not installed (bin/setup installs it)" unless installed?

    env = { "LD_PRELOAD" => LIBRARY, "FAKETIME" => faked }
    monotonic ? env : env.merge("FAKETIME_DONT_FAKE_MONOTONIC" => "1")
  end
end
