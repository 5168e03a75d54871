# frozen_string_literal: true

class CircuitBreaker
  module Fleet
    # Where the fleet meets the process around it: a breaker's first use
    # starts its syncer, and a fork starts the child's syncers afresh
    # (docs/fleet.md, "Processes").
    # @api private
    module ProcessHooks
      # The native code's call on a fleet breaker's first use.
      module Start
        private

        def __fleet_start
          Fleet.start(@fleet_link)
        end
      end

      # After fork, the child's syncers start afresh (Ruby 3.1+ `Process._fork`);
      # `Process.daemon` forks without `_fork`, and the daemon's syncers start
      # afresh the same way.
      module Fork
        def _fork
          pid = super
          Fleet.after_fork if pid.zero?
          pid
        end

        def daemon(...)
          result = super
          Fleet.after_fork
          result
        end
      end
    end
    CircuitBreaker.include(ProcessHooks::Start)
    Process.singleton_class.prepend(ProcessHooks::Fork)
  end
end
