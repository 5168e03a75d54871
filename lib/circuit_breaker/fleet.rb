# frozen_string_literal: true

require "socket"

class CircuitBreaker
  # One breaker across hosts on Redis, with Redis never on the call path
  # (docs/fleet.md). A process has one {Syncer} per Redis server and
  # interval; it sends every fleet breaker's report in one pipelined round
  # trip per interval from its own thread and connection, and hands each
  # reply to the Rust core, which decides everything.
  module Fleet
    SCRIPT = File.read(File.expand_path("fleet.lua", __dir__)).freeze
    DEFAULT_INTERVAL = 0.1
    # The wire format's names, in order (the binding sets them from the Rust
    # core's): what the specs check lib/circuit_breaker/fleet.lua's against.
    private_constant :REPORT_FIELDS, :REPLY_FIELDS

    @syncers = {}
    @lock = Mutex.new
    @round_trips = 0
    @slots = 0

    class << self
      # Checks `fleet:` and `fleet_interval:` before a breaker exists
      # ({Settings.check}).
      # @api private
      # @return [Array(Hash, Float)] connection settings and interval
      def settings(fleet, interval)
        Settings.check(fleet, interval)
      end

      # Makes `breaker` (a new breaker, from its `initialize`, built with
      # `options`) a fleet breaker: returns its {Link}, which the breaker
      # keeps (the syncer holds links weakly). Nothing is sent, and no
      # thread started, until the breaker's first use ({start}). With
      # `shared:` the host id is the shared name's: every process of the
      # host writes the same field (docs/fleet.md).
      # @api private
      # @param options [Options] the breaker's, checked ({Options.build})
      # @return [Link]
      def attach(breaker, options)
        settings = Settings.server(options.fleet)
        shared = options.shared && "#{options.namespace}:#{options.shared}"
        host_key = shared && "#{Socket.gethostname}:#{Process.uid}:shared:#{shared}"
        interval = options.fleet_interval
        # A trap handler may build one (its locks taken on a thread of
        # their own: TrapContext).
        TrapContext.outside("building a fleet breaker") do
          syncer = @lock.synchronize { @syncers[[settings, interval]] ||= Syncer.new(settings, interval) }
          syncer.link(breaker, host_key, options.fleet_namespace, options.logger)
        end
      end

      # A fleet breaker's first use in this process (a call, `metrics`, a
      # manual action; the native code asks once): its syncer runs, and
      # sends for it within this slot. A process that builds fleet breakers
      # and never uses them (a preforking server's master) joins no fleet
      # and starts no thread (docs/fleet.md, "Processes").
      # @api private
      def start(link)
        @syncers.each_value do |syncer|
          return TrapContext.outside("starting the fleet syncer") { syncer.start } if syncer.holds?(link)
        end
      end

      # In a forked child: every syncer starts afresh (new thread, new
      # connection, new host id) on its breakers' next use.
      # @api private
      def after_fork
        @lock = Mutex.new
        @syncers.each_value(&:after_fork)
      end

      # The default namespace of fleet keys: RAILS_ENV, RACK_ENV or APP_ENV,
      # else none (docs/fleet.md, "Keys").
      # @api private
      # @return [String, nil]
      def environment
        env = ENV["RAILS_ENV"] || ENV["RACK_ENV"] || ENV["APP_ENV"]
        env.nil? || env.empty? ? nil : Keys.key(:namespace, env)
      end

      # The Redis server a `fleet:` value names (its connection settings),
      # so that two clients of one server are one fleet (the registry
      # compares `fleet:` by it).
      # @api private
      def server(fleet)
        Settings.server(fleet)
      end

      # @api private
      # @return [Integer] round trips this process's syncers made (rake bench)
      attr_reader :round_trips

      # @api private
      def count_round_trip
        @round_trips += 1
      end

      # @api private
      # @return [Integer] slots this process's syncers went through (each
      #   sends what changed, at most one round trip; specs wait for them)
      attr_reader :slots

      # @api private
      def count_slot
        @slots += 1
      end

      # Says `text` once to each of `loggers` (nil: none), or with `warn`
      # when none is left: a problem of the whole link, not of one breaker.
      # @api private
      def report(text, loggers)
        loggers = loggers.compact.uniq(&:object_id)
        loggers.empty? ? warn("circuit_breaker: #{text}") : loggers.each { |l| l.warn("circuit_breaker: #{text}") }
      rescue StandardError
        nil
      end

      # Stops every syncer (tests; at exit).
      # @api private
      def stop_all
        @lock.synchronize { @syncers.each_value(&:stop).clear }
      end
    end
  end
end

require "circuit_breaker/fleet/connection"
require "circuit_breaker/fleet/settings"
require "circuit_breaker/fleet/syncer"
require "circuit_breaker/fleet/process_hooks"
