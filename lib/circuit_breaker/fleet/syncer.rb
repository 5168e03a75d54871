# frozen_string_literal: true

require "socket"
require "securerandom"

class CircuitBreaker
  module Fleet
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

      # A new breaker's link (held weakly here, with the breaker's logger:
      # a breaker nobody uses any more is dropped with its link).
      # @return [Link]
      def link(breaker, host_key, namespace, logger)
        prefix = namespace ? "#{PREFIX}:#{namespace}" : PREFIX
        link = Link.new(breaker, @waker, host_key, prefix, @host_ttl_ms, @stale_ms)
        @lock.synchronize { @links[link] = logger || false }
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
                       "(docs/fleet.md, \"Redis ACL\")", loggers)
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
          pulled = @waker.wait([slot_end - clock, 0.0].max)
          break if @stopping

          @waker.arm(pulled) # before the reports are read: later failures are news
          sync_once
          @waker.wait([slot_end - clock, 0.0].max) if pulled
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

      # The loggers of this syncer's breakers (false: a breaker without one).
      def loggers
        list = []
        @links.each_value { |logger| list << logger if logger }
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
  end
end
