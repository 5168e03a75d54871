# frozen_string_literal: true

require "uri"

class CircuitBreaker
  module Fleet
    # What `fleet:` and `fleet_interval:` name, checked before a breaker
    # exists: the Redis server (its connection settings: two clients of one
    # server are one fleet) and the interval (docs/fleet.md).
    # @api private
    module Settings
      OPTIONS = %i[host port path db username password].freeze
      private_constant :OPTIONS

      class << self
        # Checks `fleet:` and `fleet_interval:`.
        # @return [Array(Hash, Float)] connection settings and interval
        def check(fleet, interval)
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

        # The Redis server a `fleet:` value names (its connection settings),
        # so that two clients of one server are one fleet (the registry
        # compares `fleet:` by it).
        def server(fleet)
          connection_settings(fleet)
        end

        private

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
    end
  end
end
