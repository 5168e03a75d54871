# frozen_string_literal: true

class CircuitBreaker
  # A state change: `from` and `to` states, the breaker's `name`, the
  # `reason` (:error_rate, :slow_call_rate, :probe_failed, :probes_passed,
  # :cool_down_elapsed, :half_open_timeout, :probe_timeout, :manual) and the `metrics` taken
  # just after the transition.
  #
  # An opening (`to == :open`) also carries what opened it, since entering
  # open empties the window: `error_rate` and `slow_call_rate` of the window
  # just before, and `error_class`, the name of the class of the last
  # exception this process recorded as a failure (nil when none was, e.g.
  # failures from `failure_if` or `record_failure`). All three are nil for
  # other transitions. See docs/operating.md.
  StateChange = Struct.new(:from, :to, :name, :reason, :metrics, :error_rate, :slow_call_rate, :error_class,
                           keyword_init: true)

  # Listeners, ActiveSupport::Notifications and the logger. The native
  # library calls `__transition` and `__rejected` after releasing its lock,
  # in the thread that caused the event; nothing raised here reaches `call`.
  module Events
    # Calls the block with a {StateChange} after every transition.
    #
    # @example
    #   breaker.on_state_change { |e| warn "#{e.name}: #{e.from} -> #{e.to} (#{e.reason})" }
    # @return [self]
    def on_state_change(&listener)
      raise ArgumentError, "on_state_change needs a block" unless listener

      (@state_listeners ||= []) << listener
      self
    end

    # Calls the block with the {OpenError} of every rejected call.
    #
    # @example
    #   breaker.on_reject { |error| metrics.increment("orders.rejected") }
    # @return [self]
    def on_reject(&listener)
      raise ArgumentError, "on_reject needs a block" unless listener

      (@reject_listeners ||= []) << listener
      __send__(:__notify_rejects=, true)
      self
    end

    private

    # `error_rate` and `slow_call_rate` are the window's just before the
    # transition (entering open empties it): what opened the breaker.
    def __transition(from, to, reason, metrics, error_rate, slow_call_rate, error_class)
      event = StateChange.new(from: from, to: to, name: name, reason: reason, metrics: metrics)
      if to == :open
        event.error_rate = error_rate
        event.slow_call_rate = slow_call_rate
        event.error_class = error_class && (error_class.name || error_class.inspect)
      end
      __log(event, error_rate, slow_call_rate)
      @state_listeners&.each { |l| __guard("on_state_change") { l.call(event) } }
      __instrument("state_change.circuit_breaker", event.to_h)
      nil
    end

    def __rejected(error)
      @reject_listeners&.each { |l| __guard("on_reject") { l.call(error) } }
      __instrument("rejected.circuit_breaker",
                   name: name, state: error.state, retry_after: error.retry_after)
      nil
    end

    def __log(event, error_rate, slow_call_rate)
      return unless @logger

      __guard("logger") do
        text = format("circuit %s: %s -> %s (%s; error rate %.1f%%, slow-call rate %.1f%%)",
                      (name || "(unnamed)").inspect, event.from, event.to, event.reason,
                      error_rate * 100, slow_call_rate * 100)
        event.to == :open || event.to == :forced_open ? @logger.warn(text) : @logger.info(text)
      end
    end

    def __instrument(event_name, payload)
      return unless defined?(ActiveSupport::Notifications)

      __guard("ActiveSupport::Notifications") { ActiveSupport::Notifications.instrument(event_name, payload) }
    end

    def __guard(what)
      yield
    rescue StandardError => e
      warn "circuit_breaker: #{what} listener of #{(name || '(unnamed)').inspect} raised #{e.class}: #{e.message}"
    end
  end
end
