# frozen_string_literal: true

# A bounded wait for specs that watch another thread, process or server
# (the `:redis` groups): a hang becomes a failure naming what did not
# happen, and no assertion depends on how long anything takes.
module Waiting
  DEADLINE = 30

  # The block's first truthy value, polled every 20 ms for `deadline` s.
  def wait_for(what, deadline: DEADLINE)
    limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + deadline
    until (value = yield)
      raise "#{what}: not within #{deadline}s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit

      sleep 0.02
    end
    value
  end
end

RSpec.configure { |c| c.include Waiting, :redis } if defined?(RSpec)
