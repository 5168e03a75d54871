# frozen_string_literal: true

require "webrick"

# Not loaded by the gem: a stand-in for a dependency that goes bad and
# recovers, for bin/demo, the examples and the integration specs.
class CircuitBreaker
  module Examples
    # A small real HTTP server on 127.0.0.1 (a free port) whose behaviour
    # follows a script over time:
    #
    #   healthy → error_burst (HTTP 500) → slow (200 after `slow_ms`) →
    #   recovering (500 for a share of requests falling to 0) → recovered
    #
    # Phase durations are seconds, multiplied by `scale:` (so a spec can run
    # the whole script in a second or two and the demo in ~40 s); a phase of 0
    # is skipped. After the script the upstream stays healthy, and it stops by
    # itself `stop_after` seconds after it started (it never outlives the
    # process that forgot it). Errors are spread evenly and deterministically:
    # at a share of 0.25, exactly every fourth request fails.
    #
    # Every path follows the script except two fixed routes, for tests:
    # `/status/CODE` answers CODE, `/delay/MS` answers 200 after MS
    # milliseconds (at most 10 s).
    #
    # @example
    #   upstream = CircuitBreaker::Examples::FlakyUpstream.start(scale: 0.1)
    #   Faraday.get("#{upstream.url}/orders").status # => 200 (healthy)
    #   upstream.phase                               # => :healthy
    #   upstream.counts                              # => {healthy: 1, error_burst: 0, ...}
    #   upstream.stop
    class FlakyUpstream
      # Phase names in order, with their default durations in seconds.
      PHASES = { healthy: 5.0, error_burst: 6.0, slow: 7.0, recovering: 11.0, recovered: 6.0 }.freeze
      # Longest delay `/delay/MS` accepts.
      MAX_DELAY_MS = 10_000

      # @return [Array<Array(Symbol, Float)>] the phases as [name, seconds], scaled
      attr_reader :phases
      # @return [Integer] the port it listens on (127.0.0.1)
      attr_reader :port
      # @return [Integer] milliseconds a response of the slow phase takes
      attr_reader :slow_ms

      # Creates and starts an upstream; see {#initialize}.
      # @return [FlakyUpstream]
      def self.start(**options)
        new(**options).start
      end

      # @param scale [Numeric] multiplies every phase duration
      # @param slow_ms [Numeric] how long a response of the slow phase takes
      # @param burst_error_share [Float] share of 500s during the error burst
      # @param recovering_from [Float] error share at the start of the
      #   recovering phase; it falls linearly to 0 at its end
      # @param stop_after [Numeric, nil] seconds after start when the server
      #   stops by itself (default: the script's length plus 10 s)
      # @param durations [Hash{Symbol=>Numeric}] phase durations in seconds
      #   (before scaling): healthy:, error_burst:, slow:, recovering:, recovered:
      def initialize(scale: 1.0, slow_ms: 350, burst_error_share: 1.0, recovering_from: 0.6, stop_after: nil,
                     **durations)
        unknown = durations.keys - PHASES.keys
        raise ArgumentError, "unknown phase(s): #{unknown.join(', ')} (known: #{PHASES.keys.join(', ')})" if unknown.any?
        raise ArgumentError, "scale must be > 0, got #{scale.inspect}" unless scale.is_a?(Numeric) && scale.positive?

        @phases = PHASES.map do |name, seconds|
          s = durations.fetch(name, seconds)
          raise ArgumentError, "#{name} must be a Numeric >= 0, got #{s.inspect}" unless s.is_a?(Numeric) && s >= 0

          [name, s * scale.to_f]
        end.freeze
        @slow_ms = slow_ms
        @burst_error_share = burst_error_share.to_f
        @recovering_from = recovering_from.to_f
        @stop_after = stop_after || (duration + 10.0)
        @lock = Mutex.new
        @stopped = ConditionVariable.new
        @counts = Hash.new(0)
        @owed = Hash.new(0.0) # error credit per phase: a request fails when it reaches 1
        @requests = 0
      end

      # Starts listening and the phase clock. Idempotent.
      # @return [self]
      def start
        @lock.synchronize do
          return self if @server

          @server = WEBrick::HTTPServer.new(
            BindAddress: "127.0.0.1", Port: 0, DoNotReverseLookup: true,
            Logger: WEBrick::Log.new(File::NULL, WEBrick::BasicLog::FATAL), AccessLog: [],
            MaxClients: 64, RequestTimeout: 2
          )
          @server.mount_proc("/") { |req, res| handle(req, res) }
          @port = @server.config[:Port]
          @started_at = now
          @thread = Thread.new { @server.start }
          @thread.name = "flaky-upstream"
          @timer = Thread.new { auto_stop }
          @timer.name = "flaky-upstream-timer"
        end
        self
      end

      # Plays the script again from its start (for a client that warmed up
      # first). The counters are kept; the auto-stop deadline is not moved.
      # @return [self]
      def restart_script
        @lock.synchronize do
          @started_at = now
          @owed.clear
        end
        self
      end

      # @return [String] e.g. "http://127.0.0.1:40123"
      def url
        "http://127.0.0.1:#{port}"
      end

      # Stops the server (waits for requests in flight). Idempotent.
      # @return [self]
      def stop
        server = @lock.synchronize do
          s = @server
          @stopping = true
          @stopped.broadcast
          s
        end
        return self unless server

        server.shutdown
        @thread&.join(5)
        @timer&.join(1) unless Thread.current == @timer
        self
      end

      # @return [Float] seconds of the whole script
      def duration
        @phases.sum { |_, s| s }
      end

      # @return [Float] seconds since {#start} (0.0 before it)
      def elapsed
        @started_at ? now - @started_at : 0.0
      end

      # @return [Boolean] whether the script has played to its end
      def finished?
        elapsed >= duration
      end

      # The phase at `at` seconds after start (default: now).
      # @return [Symbol] a key of {PHASES}; :recovered after the script
      def phase(at = elapsed)
        phase_and_progress(at).first
      end

      # Requests that reached the upstream during each phase (the fixed
      # routes are not counted here).
      # @return [Hash{Symbol=>Integer}] every phase, in order
      def counts
        @lock.synchronize { PHASES.keys.to_h { |name| [name, @counts[name]] } }
      end

      # @return [Integer] every request that reached the upstream, fixed routes included
      def requests
        @lock.synchronize { @requests }
      end

      # The error share the script applies at `at` seconds (default: now).
      # @return [Float]
      def error_share(at = elapsed)
        name, progress = phase_and_progress(at)
        case name
        when :error_burst then @burst_error_share
        when :recovering then @recovering_from * (1.0 - progress)
        else 0.0
        end
      end

      private

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC)
      end

      # [phase name, share of the phase gone by (0.0...1.0)]
      def phase_and_progress(at)
        start = 0.0
        @phases.each do |name, seconds|
          next if seconds.zero?
          return [name, (at - start) / seconds] if at < start + seconds

          start += seconds
        end
        [:recovered, 1.0]
      end

      def handle(req, res)
        res["Content-Type"] = "application/json"
        case req.path
        when %r{\A/status/(\d{3})\z}
          count(nil)
          res.status = Integer(Regexp.last_match(1))
          res.body = %({"status":#{res.status}})
        when %r{\A/delay/(\d+)\z}
          count(nil)
          sleep([Integer(Regexp.last_match(1)), MAX_DELAY_MS].min / 1000.0)
          res.body = %({"delayed_ms":#{Regexp.last_match(1)}})
        else
          scripted(res)
        end
      end

      def scripted(res)
        at = elapsed
        name = phase(at)
        share = error_share(at)
        error = @lock.synchronize do
          count_locked(name)
          @owed[name] += share
          (@owed[name] >= 1.0).tap { |e| @owed[name] -= 1.0 if e }
        end
        sleep(@slow_ms / 1000.0) if name == :slow
        if error
          res.status = 500
          res.body = %({"error":"upstream failure","phase":"#{name}"})
        else
          res.status = 200
          res.body = %({"orders":[{"id":1,"total":"12.50"},{"id":2,"total":"7.25"}],"phase":"#{name}"})
        end
      end

      def count(name)
        @lock.synchronize { count_locked(name) }
      end

      def count_locked(name)
        @requests += 1
        @counts[name] += 1 if name
      end

      def auto_stop
        deadline = @started_at + @stop_after
        @lock.synchronize do
          until @stopping
            left = deadline - now
            break if left <= 0

            @stopped.wait(@lock, left)
          end
        end
        stop unless @stopping
      end
    end
  end
end
