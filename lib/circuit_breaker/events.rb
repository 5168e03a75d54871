# frozen_string_literal: true

class CircuitBreaker
  # A state change: `from` and `to` states, the breaker's `name`, the
  # `reason` (:error_rate, :slow_call_rate, :probe_failed, :probes_passed,
  # :cool_down_elapsed, :half_open_timeout, :probe_timeout, :manual, :consecutive_failures) and the `metrics` taken
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

    # Calls the block with the {OpenError} of every rejected call: a
    # {ConcurrencyLimitError} (`reason` :concurrency_limit) for one refused
    # at the `max_concurrent:` cap (docs/operating.md, "Events").
    #
    # @example
    #   breaker.on_reject { |error| metrics.increment("orders.rejected.#{error.reason}") }
    # @return [self]
    def on_reject(&listener)
      raise ArgumentError, "on_reject needs a block" unless listener

      (@reject_listeners ||= []) << listener
      self.__notify_rejects = true
      self
    end

    # Calls the block with :connected or :degraded each time a fleet
    # breaker's link to Redis changes (docs/fleet.md, "Degraded mode").
    #
    # @example
    #   breaker.on_fleet_change { |status| warn "payments fleet: #{status}" }
    # @return [self]
    def on_fleet_change(&listener)
      raise ArgumentError, "on_fleet_change needs a block" unless listener

      (@fleet_listeners ||= []) << listener
      self
    end

    private

    # A fleet breaker's link changed (its syncer, lib/circuit_breaker/fleet/syncer.rb),
    # and why when it is :degraded (nil: the process that sends for the
    # host knows): logged once, a warning when degraded (docs/fleet.md,
    # "Degraded mode").
    def __fleet_status(status, why)
      __fleet_log(status, why)
      @fleet_listeners&.each { |l| __guard("on_fleet_change") { l.call(status) } }
      __instrument("fleet_change.circuit_breaker") { { name: name, status: status, reason: why } }
      nil
    end

    def __fleet_log(status, why)
      return unless @logger

      __guard("logger") do
        if status == :degraded
          @logger.warn("circuit #{name.inspect}: fleet degraded, on its own breaker " \
                       "(#{why || 'as the process that sends for its host reported'})")
        else
          @logger.info("circuit #{name.inspect}: fleet #{status}")
        end
      end
    end

    # Per thread: the breakers whose transitions it is delivering, with
    # those that came meanwhile (a listener that calls `reset!`).
    DELIVERING = :__circuit_breaker_delivering
    private_constant :DELIVERING

    # `error_rate` and `slow_call_rate` are the window's just before the
    # transition (entering open empties it): what opened the breaker.
    def __transition(from, to, reason, metrics, error_rate, slow_call_rate, error_class)
      event = StateChange.new(from: from, to: to, name: name, reason: reason, metrics: metrics)
      if to == :open
        event.error_rate = error_rate
        event.slow_call_rate = slow_call_rate
        event.error_class = error_class && (error_class.name || error_class.inspect)
      end
      # A listener that changes the state (`reset!`, `trip!`) causes a
      # transition while this one is delivered: it waits until every
      # listener had this one, so all see the transitions in their order.
      delivering = (Thread.current[DELIVERING] ||= {}.compare_by_identity)
      if (waiting = delivering[self])
        waiting << [event, error_rate, slow_call_rate]
        return nil
      end

      waiting = delivering[self] = [[event, error_rate, slow_call_rate]]
      begin
        while (item = waiting.shift)
          __deliver(*item)
        end
      ensure
        delivering.delete(self)
      end
      nil
    end

    def __deliver(event, error_rate, slow_call_rate)
      __log(event, error_rate, slow_call_rate)
      @state_listeners&.each { |l| __guard("on_state_change") { l.call(event) } }
      __instrument("state_change.circuit_breaker") { event.to_h }
    end

    # On the rejection path of an outage: with no listener, nothing is
    # built and the notifier is not asked (rake bench: rejection_as).
    # `subscribed`: whether ActiveSupport::Notifications has subscribers
    # for rejections, as the native library read REJECTED_SUBSCRIBED (nil:
    # unknown, ask the notifier); not called at all when it read false and
    # there is no on_reject listener.
    def __rejected(error, subscribed)
      @reject_listeners&.each { |l| __guard("on_reject") { l.call(error) } }
      subscribed = Events.__subscribed? if subscribed.nil?
      return unless subscribed

      __instrument("rejected.circuit_breaker") { __rejected_payload(error) }
      nil
    rescue StandardError => e # listening? itself, as __instrument reports
      __report("ActiveSupport::Notifications listener of #{(name || '(unnamed)').inspect} raised #{__describe(e)}")
    end

    # `rejected.circuit_breaker`'s payload: why the call was refused
    # (`reason`, the OpenError's: :open, :half_open, :forced_open or
    # :concurrency_limit), and at the cap, the cap (docs/operating.md).
    def __rejected_payload(error)
      payload = { name: name, state: error.state, retry_after: error.retry_after, reason: error.reason }
      payload[:limit] = error.limit if error.is_a?(ConcurrencyLimitError)
      payload
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

    # The payload is built (the block called) only when someone subscribed:
    # a rejection during an outage costs nothing for absent listeners.
    def __instrument(event_name)
      return unless defined?(ActiveSupport::Notifications)

      notifications = ActiveSupport::Notifications
      notifications.instrument(event_name, yield) if notifications.notifier.listening?(event_name)
    rescue StandardError => e # as __guard does, without a block on this path
      __report("ActiveSupport::Notifications listener of #{(name || '(unnamed)').inspect} raised #{__describe(e)}")
    end

    # [[ActiveSupport::Notifications, notifier, subscribed?]], or [nil]:
    # whether that notifier has subscribers for "rejected.circuit_breaker",
    # asked once per change of its subscriptions and read by the native
    # library (ext/circuit_breaker/src/breaker/events.rs) while it is still
    # the notifier in place. Its `listening?` costs about half of a bare
    # raise + rescue, and a rejection (an outage's hot path) may cost no
    # more than one in all (docs/performance.md). The notifier's own
    # `subscribe` and `unsubscribe` (a module prepended to its singleton
    # class, not to ActiveSupport's classes) forget the answer; a new
    # notifier (`ActiveSupport::Notifications.notifier=`) is asked afresh.
    # A notifier that cannot be watched (frozen) is asked every time.
    REJECTED_SUBSCRIBED = [nil]
    private_constant :REJECTED_SUBSCRIBED

    module Watch
      def subscribe(*, **, &)
        super
      ensure
        Events.__changed
      end

      def unsubscribe(*, **, &)
        super
      ensure
        Events.__changed
      end
    end
    private_constant :Watch

    @generation = 0
    @lock = Mutex.new

    class << self
      # Asks the notifier (ActiveSupport::Notifications is loaded) and keeps
      # its answer, unless its subscriptions changed meanwhile.
      # @api private
      def __subscribed?
        return false unless defined?(ActiveSupport::Notifications)

        notifier = ActiveSupport::Notifications.notifier
        generation = @lock.synchronize { @generation }
        # Subscribers silenced now (ActiveSupport 7.1's log levels) may not
        # be later: a subscriber at all counts (`__instrument` asks
        # `listening?` before sending).
        name = "rejected.circuit_breaker"
        answer = notifier.respond_to?(:all_listeners_for) ? notifier.all_listeners_for(name).any? : notifier.listening?(name)
        if watch(notifier)
          kept = [ActiveSupport::Notifications, notifier, answer].freeze
          @lock.synchronize { REJECTED_SUBSCRIBED[0] = kept if @generation == generation }
        end
        answer
      end

      # @api private
      def __changed
        @lock.synchronize do
          @generation += 1
          REJECTED_SUBSCRIBED[0] = nil
        end
      end

      private

      def watch(notifier)
        notifier.singleton_class.include?(Watch) || (notifier.singleton_class.prepend(Watch) && true)
      rescue FrozenError, TypeError
        false
      end
    end

    def __guard(what)
      yield
    rescue StandardError => e
      __report("#{what} listener of #{(name || '(unnamed)').inspect} raised #{__describe(e)}")
    end

    # An exception as text, even one whose `message` raises.
    def __describe(error)
      "#{error.class}: #{error.message}"
    rescue StandardError
      "#{error.class} (and its message raised)"
    end

    # Reports with `warn`. Reporting never fails the caller's call: with a
    # closed $stderr, or a Warning.warn that raises (suites that turn
    # warnings into errors), the report is lost, not the call's outcome.
    def __report(text)
      warn "circuit_breaker: #{text}"
    rescue StandardError
      nil
    end
  end
end
