# frozen_string_literal: true

require "socket"
require "securerandom"
require "uri"
require "circuit_breaker/fleet/connection"

class CircuitBreaker
  # One breaker across hosts on Redis, with Redis never on the call path
  # (docs/fleet.md). A process has one {Syncer} per Redis server and
  # interval; it sends every fleet breaker's report in one pipelined round
  # trip per interval from its own thread and connection, and hands each
  # reply to the Rust core, which decides everything.
  module Fleet
    SCRIPT = File.read(File.expand_path("fleet.lua", __dir__)).freeze
    DEFAULT_INTERVAL = 0.1

    @syncers = {}
    @lock = Mutex.new
    @round_trips = 0
    @slots = 0

    class << self
      # Checks `fleet:` and `fleet_interval:` before a breaker exists.
      # @api private
      # @return [Array(Hash, Float)] connection settings and interval
      def settings(fleet, interval)
        interval = DEFAULT_INTERVAL if interval.nil?
        range = "a finite number of seconds in 0.01..60"
        unless interval.is_a?(Numeric) && interval.real?
          raise TypeError, "fleet_interval must be #{range} (got #{interval.inspect})"
        end
        unless interval.finite? && interval >= 0.01 && interval <= 60
          raise ArgumentError, "fleet_interval must be #{range} (got #{interval.inspect})"
        end

        settings = connection_settings(fleet)
        Connection.driver # a missing client library is an error here, not a breaker that never connects
        [settings, interval.to_f]
      end

      # Makes `breaker` (a new breaker, from its `initialize`) a fleet
      # breaker through its {Link}, which the breaker keeps (the syncer
      # holds links weakly). Nothing is sent, and no thread started, until
      # the breaker's first use ({start}). With `shared:` the host id is the
      # shared name's: every process of the host writes the same field
      # (docs/fleet.md).
      # @api private
      def attach(breaker, settings, interval, shared: nil, namespace: nil)
        host_key = shared && "#{Socket.gethostname}:#{Process.uid}:shared:#{shared}"
        syncer = @lock.synchronize { @syncers[[settings, interval]] ||= Syncer.new(settings, interval) }
        breaker.instance_variable_set(:@fleet_link, syncer.link(breaker, host_key, namespace))
      end

      # A fleet breaker's first use in this process (a call, `metrics`, a
      # manual action; the native code asks once): its syncer runs, and
      # sends for it within this slot. A process that builds fleet breakers
      # and never uses them (a preforking server's master) joins no fleet
      # and starts no thread (docs/fleet.md, "Processes").
      # @api private
      def start(link)
        @syncers.each_value { |syncer| return syncer.start if syncer.holds?(link) }
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
        env.nil? || env.empty? ? nil : CircuitBreaker.__send__(:__shared_key, :namespace, env)
      end

      # The Redis server a `fleet:` value names (its connection settings),
      # so that two clients of one server are one fleet (the registry
      # compares `fleet:` by it).
      # @api private
      def server(fleet)
        connection_settings(fleet)
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

      # Says `text` once to each logger of `breakers`, or with `warn` when
      # none has one: a problem of the whole link, not of one breaker.
      # @api private
      def report(text, breakers)
        loggers = breakers.filter_map { |b| b.instance_variable_get(:@logger) }.uniq(&:object_id)
        loggers.empty? ? warn("circuit_breaker: #{text}") : loggers.each { |l| l.warn("circuit_breaker: #{text}") }
      rescue StandardError
        nil
      end

      # Stops every syncer (tests; at exit).
      # @api private
      def stop_all
        @lock.synchronize { @syncers.each_value(&:stop).clear }
      end

      private

      OPTIONS = %i[host port path db username password].freeze

      def connection_settings(fleet)
        case fleet
        when String then url_settings(fleet)
        else
          client = fleet.respond_to?(:_client) ? fleet._client : fleet
          client = client.config if !client.respond_to?(:host) && client.respond_to?(:config)
          unless client.respond_to?(:host) && client.respond_to?(:port)
            raise TypeError, "fleet must be a redis:// or unix:// URL, or a Redis client (got #{fleet.class})"
          end

          settings = OPTIONS.to_h { |k| [k, client.respond_to?(k) ? client.public_send(k) : nil] }.compact
          settings.delete(:host) && settings.delete(:port) if settings[:path]
          # redis-rb 5 reports username "default" (Redis's user for a
          # connection that never authenticates) when none was given; no
          # AUTH is sent without a password, so the name means nothing then.
          settings.delete(:username) unless settings[:password]
          settings[:ssl] = true if client.respond_to?(:scheme) && client.scheme == "rediss"
          settings[:ssl] = true if client.respond_to?(:ssl) && client.ssl == true
          # redis-client (redis-rb 5's client) keeps it in its config only.
          settings[:ssl] = true if client.respond_to?(:config) && client.config.respond_to?(:ssl) && client.config.ssl == true
          settings.freeze
        end
      end

      def url_settings(url)
        uri = URI.parse(url)
        case uri.scheme
        when "unix"
          raise ArgumentError, "fleet: #{url.inspect} names no socket path" if uri.path.to_s.empty?

          { path: uri.path }.freeze
        when "redis", "rediss"
          raise ArgumentError, "fleet: #{url.inspect} names no host" if uri.host.to_s.empty?

          db = uri.path.to_s.delete_prefix("/")
          settings = { host: uri.host, port: uri.port || 6379 }
          settings[:db] = Integer(db, 10) unless db.empty?
          settings[:username] = URI.decode_www_form_component(uri.user) if uri.user && !uri.user.empty?
          settings[:password] = URI.decode_www_form_component(uri.password) if uri.password
          settings[:ssl] = true if uri.scheme == "rediss"
          settings.freeze
        else
          raise ArgumentError, "fleet must be a redis://, rediss:// or unix:// URL, or a Redis client (got #{url.inspect})"
        end
      rescue URI::InvalidURIError, ArgumentError => e
        raise if e.message.start_with?("fleet")

        raise ArgumentError, "fleet must be a redis://, rediss:// or unix:// URL, or a Redis client (got #{url.inspect})"
      end
    end

    # The thread that talks to Redis for every fleet breaker of a process
    # with the same server and interval. At most one send in flight, and
    # one per interval slot: at the slot's end, or at once when a failure
    # arrives first (docs/fleet.md, "When a host sends"). Waits with the GVL
    # released (its {Waker}; the socket waits); never holds a breaker's lock
    # while waiting (the native calls copy counts in and out, and return).
    # @api private
    class Syncer
      PREFIX = "circuit_breaker"

      def initialize(settings, interval)
        @settings = settings
        @interval = interval
        # Short and bounded: an outage costs the syncer at most this per send.
        @timeout = (2 * interval).clamp(0.05, 0.25)
        @host_ttl_ms = [1000, (5000 * interval).ceil].max
        # A sender silent for this long (dead, stopped) is replaced.
        @stale_ms = [500, (3000 * interval).ceil + (1000 * @timeout).ceil].max
        @links = ObjectSpace::WeakMap.new
        @lock = Mutex.new
        @waker = Waker.new
        start_fresh
      end

      # @return [Waker] what this syncer's breakers wake it with on a failure
      attr_reader :waker

      # A new breaker's link (held weakly here: a breaker nobody uses any
      # more is dropped with its link).
      # @return [Link]
      def link(breaker, host_key, namespace)
        prefix = namespace ? "#{PREFIX}:#{namespace}" : PREFIX
        link = Link.new(breaker, @waker, host_key, prefix, @host_ttl_ms, @stale_ms)
        @lock.synchronize { @links[link] = true }
        link
      end

      def holds?(link)
        @links.key?(link)
      end

      # Runs the threads, and sends within this slot (not at its end).
      def start
        # A new thread sends at once by itself; a wake then would pull a
        # second send and leave the rest of its first slot quiet.
        wake unless ensure_thread
      end

      # Sends soon, within the budget: at once unless this slot's send
      # already went, then at the next slot's start.
      def wake
        @waker.signal
      end

      # In a forked child: the parent's threads do not exist here; the
      # child's own start on the first use of a breaker it inherited.
      def after_fork
        @lock = Mutex.new
        @waker.after_fork
        start_fresh
        links.each(&:after_fork)
      end

      def stop
        @stopping = true
        @waker.close
        @events.close
        @thread&.join(2)
        @thread&.kill
        @subscriber&.kill
        @notifier&.join(2)
        @notifier&.kill
        close
        self
      end

      private

      def start_fresh
        @thread = nil
        @subscriber = nil
        @connection = nil
        @notifier = nil
        # What the syncer's steps changed, for the listeners: delivered by
        # their own thread, so that a slow listener holds up no send.
        @events = Queue.new
        @sha = nil
        @stopping = false
        # Subscribed, and the last round trip worked: the fleet's changes
        # reach this process by push, and idle breakers send heartbeats only.
        @pushes = false
        @round_trip_ok = false
        @pid = Process.pid
        @process_id = "#{Socket.gethostname}:#{Process.pid}:#{SecureRandom.hex(4)}"
      end

      # @return [Boolean] whether it started the threads
      def ensure_thread
        return false if @thread&.alive?

        @lock.synchronize do
          return false if @thread&.alive?

          @thread = Thread.new { run }
          @thread.name = "circuit_breaker fleet"
          @thread.report_on_exception = $VERBOSE
          @subscriber = Thread.new { listen }
          @subscriber.name = "circuit_breaker fleet subscriber"
          @subscriber.report_on_exception = $VERBOSE
          @notifier = Thread.new { notify }
          @notifier.name = "circuit_breaker fleet events"
          @notifier.report_on_exception = $VERBOSE
          true
        end
      end

      # The listeners (state changes, fleet status) are user code: whatever
      # they raise, of any class (`exit`, `raise Exception`), is reported
      # and never stops the deliveries of the other breakers' events.
      def notify
        while (link, events = @events.pop)
          begin
            link.deliver(events)
          rescue Exception => e # rubocop:disable Lint/RescueException
            warn "circuit_breaker: fleet: a listener of #{link.tag.inspect} raised #{e.class}" if $VERBOSE
          end
        end
      end

      # Fleet changes pushed by the host that made them (the script
      # publishes each applied change): followed at once, between sends.
      # Its own connection; a lost one (CLIENT KILL TYPE pubsub, a restart)
      # is opened again after a short pause.
      def listen
        until @stopping
          begin
            connection = Connection.open(@settings, @timeout)
            # The timeout only notices a connection that went silent (a
            # failover); a quiet one subscribes again at once.
            connection.subscribe("#{PREFIX}:*:changed", 5.0, -> { @pushes = true }) do |channel, message|
              pushed(channel, message)
            end
          rescue StandardError, ::Timeout::Error => e
            # Lost: idle breakers send at every slot until it is back.
            @pushes = false
            sleep(no_channel_permission(e) ? 10 : [@interval, 0.5].min) unless @stopping
          ensure
            begin
              connection&.close
            rescue StandardError
              nil
            end
          end
        end
      end

      # A user without channel permission (a Redis 7 ACL user's default):
      # every change reaches this process at its next send, and this is
      # said once, to the breakers' loggers (docs/fleet.md, "Redis ACL").
      def no_channel_permission(error)
        return false unless error.message.start_with?("NOPERM")

        unless @told_no_channels
          @told_no_channels = true
          Fleet.report("fleet: #{error.message} (PSUBSCRIBE #{PREFIX}:*:changed): changes reach this process " \
                       "at its next send, not pushed; grant the user &#{PREFIX}:*:changed " \
                       "(docs/fleet.md, \"Redis ACL\")", links.map(&:breaker))
        end
        true
      end

      def pushed(channel, message)
        links.each { |link| receive(link, message, nil) if link.channel == channel }
      end

      # One send per slot of @interval: at the slot's end, or pulled to
      # the first failure that arrives before it; the rest of a pulled
      # slot is quiet, and a failure during it pulls the next slot's send
      # to that slot's start (docs/fleet.md, "When a host sends").
      def run
        @waker.arm(false)
        sync_once # the breakers added so far, at once
        slot_end = clock + @interval
        until @stopping
          pulled = @waker.wait(slot_end - clock)
          break if @stopping

          @waker.arm(pulled) # before the reports are read: later failures are news
          sync_once
          @waker.wait(slot_end - clock) if pulled
          slot_end = [slot_end + @interval, clock].max
          @waker.unquiet
        end
      end

      def clock
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      def links
        list = []
        @links.each_key { |link| list << link }
        list
      end

      # One round trip for every breaker this process sends for (with
      # shared:, one process per host sends for a breaker; the others read
      # the state it brings into the shared record); every reply (or nil)
      # to its link.
      def sync_once
        Fleet.count_slot
        sends = []
        links.each_with_index do |link, i|
          # Ruby hands the GVL over only when its holder blocks or after
          # 100 ms: the app's threads get it back every 100 links, so a
          # slot's work for 1,000 breakers stalls none of them in one piece
          # (docs/fleet.md, "Cost at scale").
          Thread.pass if (i % 100).zero?
          case (send = link.prepare(@process_id, pushes))
          when Array then sends << [link, send]
          when Events then @events << [link, send]
          end
        end
        return if sends.empty?

        replies = round_trip(sends.map(&:last))
        @round_trip_ok = replies.is_a?(Array)
        sends.each_with_index do |(link, _), i|
          reply = replies.is_a?(Array) ? replies[i] : replies
          receive(link, reply, failure(reply))
        end
      rescue StandardError => e
        # A bug of the syncer, which must not stop syncing.
        warn "circuit_breaker: fleet syncer: #{e.class}: #{e.message}" if $VERBOSE
      end

      def pushes
        @pushes && @round_trip_ok
      end

      # Hands one reply (or pushed change, or the error that stands for a
      # reply, with `why`) to its link; what changed goes to the events
      # thread.
      def receive(link, reply, why)
        events = link.receive(why ? nil : reply, why)
        @events << [link, events] if events
      end

      # Why a reply is no reply (nil: it is one): an error of the whole
      # send, this breaker's own error reply (WRONGTYPE, NOPERM), or a key
      # the script found malformed and deleted.
      def failure(reply)
        case reply
        when Exception then "#{reply.class}: #{reply.message}"
        when "-1" then "a key held a malformed value; the script deleted it, the next send rebuilds it"
        end
      end

      # Every command's reply (an error reply as its exception), or the
      # exception that failed the whole send: down, paused, slow, out of
      # memory, failed over. Degraded until the next send works; nothing
      # raised here reaches the app.
      def round_trip(sends)
        connection = @connection ||= Connection.open(@settings, @timeout)
        @sha ||= connection.call("SCRIPT", "LOAD", SCRIPT)
        Fleet.count_round_trip
        evalsha = ->((keys, argv)) { ["EVALSHA", @sha, keys.size, *keys, *argv] }
        replies = connection.pipeline(sends.map(&evalsha))
        # SCRIPT FLUSH (or a restart): loaded again, and only the commands
        # it refused are sent again (the others were applied).
        flushed = replies.each_index.select { |i| replies[i].is_a?(Exception) && replies[i].message.start_with?("NOSCRIPT") }
        unless flushed.empty?
          @sha = connection.call("SCRIPT", "LOAD", SCRIPT)
          again = connection.pipeline(flushed.map { |i| evalsha.(sends[i]) })
          flushed.each_with_index { |i, k| replies[i] = again[k] }
        end
        replies
      rescue StandardError, ::Timeout::Error => e
        close
        e
      end

      def close
        connection = @connection
        @connection = nil
        @sha = nil
        connection&.close
      rescue StandardError
        nil
      end
    end

    # The native code's call on a fleet breaker's first use.
    module Start
      private

      def __fleet_start
        Fleet.start(@fleet_link)
      end
    end
    CircuitBreaker.include(Start)

    # After fork, the child's syncers start afresh (Ruby 3.1+ `Process._fork`);
    # `Process.daemon` forks without `_fork`, and the daemon's syncers start
    # afresh the same way.
    # @api private
    module ForkHook
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
    Process.singleton_class.prepend(ForkHook)
  end
end
