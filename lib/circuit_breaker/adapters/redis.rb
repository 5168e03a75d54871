# frozen_string_literal: true

require "circuit_breaker/adapters"
# redis-rb 5 is built on redis-client; redis-rb 4 is not (and may be the
# only one installed). Whichever is present gets its hook.
begin
  require "redis-client"
rescue LoadError
  nil
end
begin
  require "redis"
rescue LoadError
  nil
end
unless defined?(RedisClient) || defined?(Redis::Client)
  raise LoadError, "circuit_breaker/redis needs the redis gem (4.8 or later) or redis-client"
end

class CircuitBreaker
  module Adapters
    # Redis connections behind breakers, for the clients the app built with
    # the `circuit_breaker` setting; every other client (the `fleet:`
    # syncer's, Sidekiq's own unless told) is left alone. Loaded only by
    # `require "circuit_breaker/redis"` (docs/adapters.md, "Redis").
    #
    # - redis-rb 4.8: `Redis.new(..., circuit_breaker: true)`; one module is
    #   prepended to Redis::Client.
    # - redis-client (and redis-rb 5, built on it): a middleware,
    #   registered with `RedisClient.register` when this file loads, that
    #   acts only on clients whose config has `custom: { circuit_breaker:
    #   ... }` (redis-rb 5's `Redis.new(circuit_breaker: ...)` puts it
    #   there, so one line serves both).
    #
    # One command or one pipeline (with the connect it needs) is one call.
    # Connection errors and timeouts are failures; a command error (a
    # WRONGTYPE, an OOM reply) is the server answering: a success.
    # Blocking commands (BLPOP with a timeout, and so on) and subscriptions
    # wait by design and pass unprotected.
    #
    # @example redis-rb 4.8
    #   redis = Redis.new(url: "redis://cache.internal:6379", circuit_breaker: { open_duration: 10 })
    #   redis.get("k") # through the breaker "redis:cache.internal:6379"
    module Redis
      # The settings of one client, memoised on it.
      # @api private
      Entry = Struct.new(:breaker, :failure_errors)

      # One breaker per server: max_breakers, max_breakers= and clear!.
      @breakers = BreakerSet.new("redis")
      extend OwnBreakers

      class << self
        # The entry of a client's `circuit_breaker` setting, or nil.
        # @api private
        def entry(setting, location)
          case setting
          when nil, false then nil
          when true then Entry.new(@breakers.fetch(location, {}), default_failure_errors).freeze
          when CircuitBreaker then Entry.new(setting, default_failure_errors).freeze
          when String, Symbol then Entry.new(CircuitBreaker.for(setting), default_failure_errors).freeze
          when Hash then entry_of(setting.transform_keys(&:to_sym), location)
          else
            raise TypeError, "circuit_breaker: must be true, a Hash of options, a CircuitBreaker or a registry name " \
                             "(got #{setting.class})"
          end
        end

        # Connection errors and timeouts, of whichever client is loaded.
        # @api private
        def default_failure_errors
          @default_failure_errors ||= [
            ::Timeout::Error,
            *([::Redis::CannotConnectError, ::Redis::ConnectionError, ::Redis::TimeoutError] if defined?(::Redis::BaseConnectionError)),
            *([::RedisClient::ConnectionError, ::RedisClient::TimeoutError] if defined?(::RedisClient::ConnectionError))
          ].freeze
        end

        private

        def entry_of(options, location)
          breaker = options.delete(:breaker)
          failures = Adapters.check_failures(options.delete(:failure_errors) || default_failure_errors, "circuit_breaker/redis")
          found = case breaker
                  when nil then @breakers.fetch(location, options)
                  when CircuitBreaker
                    unless options.empty?
                      raise ArgumentError, "circuit_breaker/redis: breaker options (#{options.keys.join(', ')}) " \
                                           "cannot apply to a CircuitBreaker object"
                    end

                    breaker
                  when String, Symbol then CircuitBreaker.for(breaker, **options)
                  else raise TypeError, "circuit_breaker/redis: breaker: must be a CircuitBreaker, a registry name or nil (got #{breaker.class})"
                  end
          Entry.new(found, failures).freeze
        end
      end

      if defined?(::Redis::BaseConnectionError) && !defined?(::RedisClient)
        # What a protected redis-rb 4 client raises when its breaker rejects:
        # a Redis::CannotConnectError (so `rescue Redis::BaseConnectionError`
        # degrades as when Redis is down) and a
        # {CircuitBreaker::OpenError} (docs/adapters.md, "Rejections").
        # Not a Redis::ConnectionError: redis-rb retries those.
        class OpenError < ::Redis::CannotConnectError
          include CircuitBreaker::Rejection
        end

        # Prepended to Redis::Client (redis-rb 4).
        # @api private
        module Patch
          def call(command)
            return super if @circuit_breaker_busy

            entry = circuit_breaker_entry
            return super unless entry

            circuit_breaker_run(entry) { super }
          end

          def call_pipelined(pipeline)
            return super if @circuit_breaker_busy

            entry = circuit_breaker_entry
            return super unless entry

            circuit_breaker_run(entry) { super }
          end

          # BLPOP, BRPOP and friends wait on purpose.
          def call_with_timeout(command, extra_timeout, &block)
            return super if @circuit_breaker_busy

            @circuit_breaker_busy = true
            begin
              super
            ensure
              @circuit_breaker_busy = false
            end
          end

          private

          def circuit_breaker_run(entry, &block)
            @circuit_breaker_busy = true # the AUTH/SELECT of a connect are part of the call
            Adapters.run(entry.breaker, OpenError, entry.failure_errors, &block)
          ensure
            @circuit_breaker_busy = false
          end

          def circuit_breaker_entry
            generation = Redis.generation
            unless @circuit_breaker_generation == generation
              @circuit_breaker_entry = Redis.entry(@options[:circuit_breaker], location)
              @circuit_breaker_generation = generation
            end
            @circuit_breaker_entry
          end
        end
        ::Redis::Client.prepend(Patch)
      end

      if defined?(::RedisClient)
        # What a protected redis-client raises when its breaker rejects: a
        # RedisClient::CannotConnectError and a {CircuitBreaker::OpenError}.
        class ClientOpenError < ::RedisClient::CannotConnectError
          include CircuitBreaker::Rejection
        end

        # redis-rb 5 re-raises redis-client's errors as its own classes, by
        # a table: a rejection becomes this one, a Redis::CannotConnectError
        # (its readers answer from the `cause`, the ClientOpenError).
        if defined?(::Redis::Client::ERROR_MAPPING)
          class OpenError < ::Redis::CannotConnectError
            include CircuitBreaker::Rejection
          end
          ::Redis::Client::ERROR_MAPPING[ClientOpenError] = OpenError

          # `Redis.new(circuit_breaker: ...)`, as on redis-rb 4, goes to
          # redis-client's `custom:` (which redis-rb 5 passes on).
          # @api private
          module Setting
            def initialize(options = {})
              if options.key?(:circuit_breaker)
                options = options.dup
                setting = options.delete(:circuit_breaker)
                options[:custom] = (options[:custom] || {}).merge(circuit_breaker: setting)
              end
              super(options)
            end
          end
          ::Redis.prepend(Setting)
        else
          OpenError = ClientOpenError
        end

        # Set (fiber-local) while a protected client connects: the
        # handshake's commands (HELLO, AUTH, SELECT) are part of the connect.
        # @api private
        CONNECTING = :__circuit_breaker_redis_connecting
        # Set (fiber-local) to the config whose connection prelude comes
        # next: redis-client sends it through `call_pipelined` once
        # `connect` has returned.
        # @api private
        PRELUDE = :__circuit_breaker_redis_prelude

        # The redis-client middleware: acts on clients whose config has
        # `custom: { circuit_breaker: ... }`. redis-client connects before
        # a command reaches `call`, so the connect (and its prelude) is
        # judged as Adapters.connect says: a failure recorded, rejected
        # while open, a probe while half-open.
        # @api private
        module Middleware
          def connect(config)
            entry = Redis.config_entry(config)
            return super if entry.nil? || Thread.current[CONNECTING]

            Thread.current[CONNECTING] = true
            Thread.current[PRELUDE] = nil
            begin
              connection = Adapters.connect(entry.breaker, ClientOpenError, entry.failure_errors) { super }
              Thread.current[PRELUDE] = config if Redis.prelude?(config)
              connection
            ensure
              Thread.current[CONNECTING] = nil
            end
          end

          def call(command, config)
            entry = Redis.config_entry(config)
            return super if entry.nil? || Thread.current[CONNECTING] || Redis.blocking?(command)

            Adapters.run(entry.breaker, ClientOpenError, entry.failure_errors) { super }
          end

          def call_pipelined(commands, config)
            entry = Redis.config_entry(config)
            return super if entry.nil? || Thread.current[CONNECTING]

            if Thread.current[PRELUDE].equal?(config)
              Thread.current[PRELUDE] = nil
              return Adapters.connect(entry.breaker, ClientOpenError, entry.failure_errors) { super }
            end
            Adapters.run(entry.breaker, ClientOpenError, entry.failure_errors) { super }
          end
        end

        # Commands that wait on purpose (redis-client has no separate entry
        # for them).
        BLOCKING = %w[blpop brpop brpoplpush blmove bzpopmin bzpopmax blmpop bzmpop xread xreadgroup wait].to_h { |c| [c, true] }.freeze

        @config_entries = ObjectSpace::WeakMap.new

        class << self
          # @api private
          def config_entry(config)
            memo = @config_entries[config]
            return memo[1] if memo && memo[0] == generation

            setting = config.custom.is_a?(Hash) ? config.custom[:circuit_breaker] : nil
            entry = setting.nil? ? nil : entry(setting, config.path || "#{config.host}:#{config.port}")
            @config_entries[config] = [generation, entry].freeze
            entry
          end

          # Whether redis-client sends a prelude after connecting (HELLO,
          # AUTH, SELECT, CLIENT SETNAME, ROLE): as its `connect` decides.
          # @api private
          def prelude?(config)
            !config.connection_prelude.empty? || !config.id.nil? || (config.respond_to?(:sentinel?) && config.sentinel?)
          end

          # @api private
          def blocking?(command)
            BLOCKING.key?(command.first.to_s.downcase)
          end
        end

        ::RedisClient.register(Middleware)
      end
    end
  end
end
