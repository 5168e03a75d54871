# frozen_string_literal: true

class CircuitBreaker
  module Fleet
    # The syncer's own connection to Redis (docs/fleet.md, "Clients"),
    # through redis-client (redis-rb 5's, and Sidekiq 7's, client) when it
    # loads, else redis-rb 4.8. Each command of a pipeline gets its own
    # reply, an error reply as its exception (returned, not raised): one
    # breaker's WRONGTYPE or NOPERM is that breaker's, never every breaker's
    # of the send. Connection errors and timeouts raise.
    # @api private
    class Connection
      class << self
        # The client library, loaded on first use: at a fleet breaker's
        # construction, so a missing one is an error there, not a breaker
        # that never connects.
        # @return [Class] the Connection class that speaks through it
        # @raise [ArgumentError] neither redis-client nor redis-rb loads
        def driver
          @driver ||= load_driver
        end

        private

        def load_driver
          require "redis_client"
          ClientConnection
        rescue LoadError => e
          begin
            require "redis"
            RbConnection
          rescue LoadError
            raise ArgumentError, "fleet: needs the redis-client gem or redis-rb >= 4.8, and neither loads " \
                                 "(#{e.message}; docs/fleet.md, \"Clients\")"
          end
        end
      end

      # @param settings [Hash] host, port, path, db, username, password, ssl
      # @param timeout [Float] connect, read and write timeout in seconds
      def self.open(settings, timeout)
        driver.new(settings, timeout)
      end
    end

    # Through redis-client.
    # @api private
    class ClientConnection
      def initialize(settings, timeout)
        @client = RedisClient.new(**settings, connect_timeout: timeout, read_timeout: timeout,
                                              write_timeout: timeout, reconnect_attempts: 0)
      end

      # @return [Array] each command's reply, an error reply as its exception
      def pipeline(commands)
        @client.pipelined(exception: false) { |p| commands.each { |c| p.call_v(c) } }
      end

      def call(*command)
        @client.call_v(command)
      end

      # Calls `subscribed` once subscribed, then yields each message
      # published on a channel matching `pattern`; returns when none came
      # for `timeout` seconds.
      def subscribe(pattern, timeout, subscribed)
        pubsub = @client.pubsub
        pubsub.call("PSUBSCRIBE", pattern)
        while (event = pubsub.next_event(timeout))
          raise event if event.is_a?(Exception) # an error reply (NOPERM) comes as a value

          kind, _pattern, channel, message = event
          subscribed.call if kind == "psubscribe"
          yield channel, message if kind == "pmessage"
        end
      ensure
        pubsub&.close
      end

      def close
        @client.close
      end
    end

    # Through redis-rb 4.8, whose `pipelined` raises the first error reply
    # and drops the others: the commands go through its client's own
    # `process` and `read`, which return error replies.
    # @api private
    class RbConnection
      def initialize(settings, timeout)
        @redis = ::Redis.new(**settings, connect_timeout: timeout, read_timeout: timeout,
                                         write_timeout: timeout, reconnect_attempts: 0)
      end

      def pipeline(commands)
        client = @redis._client
        client.process(commands) { commands.map { client.read } }
      end

      def call(*command)
        @redis._client.call(command)
      end

      def subscribe(pattern, timeout, subscribed, &block)
        @redis.psubscribe_with_timeout(timeout, pattern) do |on|
          on.psubscribe { subscribed.call }
          on.pmessage { |_pattern, channel, message| block.call(channel, message) }
        end
      rescue ::Redis::TimeoutError
        nil # quiet for `timeout`
      end

      def close
        @redis.close
      end
    end
  end
end
