# frozen_string_literal: true

class CircuitBreaker
  # Code that takes a lock (a Mutex, `require`) cannot run in a signal's
  # trap handler: Ruby raises ThreadError "can't be called from trap
  # context". What building a fleet breaker and starting its syncer need
  # runs there on a short-lived thread instead, which may take them
  # (docs/fleet.md, "Processes").
  # @api private
  module TrapContext
    # How long the trap handler waits for that thread: a lock the
    # interrupted code holds (the trap ran inside a `require` of the same
    # file) would make it wait forever.
    WAIT = 10

    class << self
      # @return [Boolean] whether the running code is a trap handler
      def in?
        probe = Mutex.new
        probe.lock
        probe.unlock
        false
      rescue ThreadError
        true
      end

      # The block's value, run on this thread, or on another one when
      # this one runs a trap handler.
      def outside(what, &block)
        return yield unless in?

        thread = Thread.new(&block)
        thread.report_on_exception = false
        return thread.value if thread.join(WAIT)

        thread.kill
        raise ThreadError, "circuit_breaker: #{what} in a trap handler waited #{WAIT} s for a lock the " \
                           "interrupted code holds; do it outside the trap handler"
      end
    end
  end
end
