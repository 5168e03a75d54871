# frozen_string_literal: true

require "active_record"
require "circuit_breaker/adapters"

class CircuitBreaker
  module Adapters
    # ActiveRecord's PostgreSQL (pg) and MySQL (mysql2) adapters behind
    # breakers, for the databases whose configuration has a
    # `circuit_breaker` key (database.yml, `establish_connection`); every
    # other connection is left alone. Loaded only by
    # `require "circuit_breaker/active_record"` (docs/adapters.md,
    # "ActiveRecord").
    #
    # A query (with the connect or reconnect it needs) is one call. Lost
    # connections, refused connections, timeouts and "too many
    # connections" are failures; a query the database answered with an error
    # (bad SQL, a constraint) is a success. When the breaker rejects,
    # {ActiveRecord::OpenError}, an ActiveRecord::ConnectionNotEstablished,
    # is raised without touching the database, and ActiveRecord never
    # retries it.
    #
    # @example database.yml
    #   production:
    #     adapter: postgresql
    #     host: db.internal
    #     circuit_breaker:
    #       open_duration: 10
    module ActiveRecord
      # Raised instead of a query when the breaker is open: an
      # ActiveRecord::ConnectionNotEstablished (so `rescue
      # ActiveRecord::ConnectionNotEstablished` degrades as when the
      # database is down) and a {CircuitBreaker::OpenError}.
      class OpenError < ::ActiveRecord::ConnectionNotEstablished
        include CircuitBreaker::Rejection
      end

      # MySQL/MariaDB error numbers that mean the server is unreachable,
      # gone, full or too slow (client errors CR_*, server errors ER_*).
      MYSQL_FAILURES = [
        1040, # ER_CON_COUNT_ERROR: too many connections
        1053, # ER_SERVER_SHUTDOWN
        1203, # ER_TOO_MANY_USER_CONNECTIONS
        1205, # ER_LOCK_WAIT_TIMEOUT
        1927, # ER_CONNECTION_KILLED (MariaDB)
        1969, # ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
        2002, 2003, 2005, 2006, 2013, 2026, 2055, # CR_*: cannot connect, gone away, lost the connection
        3024, # ER_QUERY_TIMEOUT (MySQL max_execution_time)
        4031 # ER_CLIENT_INTERACTION_TIMEOUT
      ].freeze

      # PostgreSQL SQLSTATEs of the same kind: class 08 (connection
      # exception), 53300 too many connections, 57014 statement timeout or
      # cancel, 57P01..57P03 shutdown and not accepting connections,
      # 55P03 lock timeout.
      PG_FAILURE = /\A(08|53300|57014|57P0[1-3]|55P03)/

      DEFAULT_FAILURE_ERRORS = [
        ::Timeout::Error,
        ::ActiveRecord::ConnectionNotEstablished, # NoDatabaseError aside: see below
        *%i[ConnectionFailed DatabaseConnectionError StatementTimeout QueryCanceled AdapterTimeout
            LockWaitTimeout].filter_map { |c| ::ActiveRecord.const_get(c) if ::ActiveRecord.const_defined?(c) },
        ->(e) { defined?(::PG::ConnectionBad) && (e.is_a?(::PG::ConnectionBad) || e.is_a?(::PG::UnableToSend)) },
        ->(e) { defined?(::PG::Error) && e.is_a?(::PG::Error) && PG_FAILURE.match?(ActiveRecord.sqlstate(e).to_s) },
        ->(e) { defined?(::Mysql2::Error) && e.is_a?(::Mysql2::Error) && ActiveRecord.mysql_failure?(e) }
      ].freeze

      # One breaker per database: max_breakers, max_breakers= and clear!.
      @breakers = BreakerSet.new("active_record")
      extend OwnBreakers

      class << self
        # The [breaker, failure_errors] of a database configuration, or nil.
        # @api private
        def entry(config)
          setting = config[:circuit_breaker]
          setting = config["circuit_breaker"] if setting.nil?
          case setting
          when nil, false then nil
          when true then [@breakers.fetch(key(config), {}), DEFAULT_FAILURE_ERRORS].freeze
          when CircuitBreaker then [setting, DEFAULT_FAILURE_ERRORS].freeze
          when String, Symbol then [CircuitBreaker.for(setting), DEFAULT_FAILURE_ERRORS].freeze
          when Hash then entry_of(setting.transform_keys(&:to_sym), config)
          else
            raise TypeError, "circuit_breaker: must be true, a Hash of options, a CircuitBreaker or a registry name " \
                             "(got #{setting.class})"
          end
        end

        # "host:port/database" (or the socket's path).
        # @api private
        def key(config)
          get = ->(k) { config[k] || config[k.to_s] }
          where = get.(:socket) || "#{get.(:host) || 'localhost'}:#{get.(:port) || default_port(get.(:adapter))}"
          "#{where}/#{get.(:database)}"
        end

        # @api private
        def sqlstate(error)
          result = error.respond_to?(:result) ? error.result : nil
          state = result&.error_field(::PG::PG_DIAG_SQLSTATE)
          state || (error.respond_to?(:sqlstate) ? error.sqlstate : nil)
        rescue StandardError
          nil
        end

        # @api private
        def mysql_failure?(error)
          return true if defined?(::Mysql2::Error::TimeoutError) && error.is_a?(::Mysql2::Error::TimeoutError)
          return true if defined?(::Mysql2::Error::ConnectionError) && error.is_a?(::Mysql2::Error::ConnectionError)

          MYSQL_FAILURES.include?(error.error_number)
        end

        private

        def default_port(adapter)
          adapter.to_s.start_with?("postgres") ? 5432 : 3306
        end

        def entry_of(options, config)
          breaker = options.delete(:breaker)
          failures = Adapters.check_failures(options.delete(:failure_errors) || DEFAULT_FAILURE_ERRORS,
                                             "circuit_breaker/active_record")
          found = case breaker
                  when nil then @breakers.fetch(key(config), options)
                  when CircuitBreaker then breaker
                  when String, Symbol then CircuitBreaker.for(breaker, **options)
                  else raise TypeError,
                             "circuit_breaker/active_record: breaker: must be a CircuitBreaker, a registry name or nil (got #{breaker.class})"
                  end
          [found, failures].freeze
        end
      end

      # Prepended to the PostgreSQL and Mysql2 adapter classes.
      # @api private
      module Patch
        private

        # Every query goes through `log` (ActiveRecord 6.1 to 7.2).
        def log(*args, **kwargs, &block)
          circuit_breaker_guard { super }
        end

        # A reconnect (6.1) or every connect (7.1 on, where connecting is lazy).
        def connect(*args, **kwargs, &block)
          circuit_breaker_guard { super }
        end

        # ActiveRecord 7.1 on retries connection errors; never a rejection.
        def retryable_connection_error?(exception)
          return false if exception.is_a?(CircuitBreaker::Rejection)

          super
        end

        def circuit_breaker_guard(&block)
          return yield if @circuit_breaker_busy || Thread.current[CONNECTING]

          entry = circuit_breaker_entry
          return yield unless entry

          @circuit_breaker_busy = true
          begin
            Adapters.run(entry[0], OpenError, entry[1], &block)
          ensure
            @circuit_breaker_busy = false
          end
        end

        def circuit_breaker_entry
          generation = ActiveRecord.generation
          unless @circuit_breaker_generation == generation
            @circuit_breaker_entry = ActiveRecord.entry(@config)
            @circuit_breaker_generation = generation
          end
          @circuit_breaker_entry
        end
      end

      # Set (fiber-local) while a connection is being built: the queries
      # that set the new connection up are part of that one call.
      # @api private
      CONNECTING = :__circuit_breaker_active_record_connecting

      # ActiveRecord before 7.1 connects when the adapter is built, in
      # `ActiveRecord::Base.postgresql_connection(config)`; that file or
      # mysql2's defines the adapter class, patched here once it exists.
      # @api private
      module Connecting
        { postgresql_connection: :PostgreSQLAdapter, mysql2_connection: :Mysql2Adapter }.each do |method, adapter|
          define_method(method) do |config|
            if ::ActiveRecord::ConnectionAdapters.const_defined?(adapter, false)
              ActiveRecord.install(::ActiveRecord::ConnectionAdapters.const_get(adapter, false))
            end
            entry = ActiveRecord.entry(config.symbolize_keys)
            return super(config) if entry.nil? || Thread.current[CONNECTING]

            Thread.current[CONNECTING] = true
            begin
              Adapters.run(entry[0], OpenError, entry[1]) { super(config) }
            ensure
              Thread.current[CONNECTING] = nil
            end
          end
        end
      end

      # Prepends the patch to an adapter class (once).
      # @api private
      def self.install(adapter_class)
        adapter_class.prepend(Patch) unless adapter_class < Patch
      end
    end
  end
end

ActiveSupport.on_load(:active_record_postgresqladapter) { CircuitBreaker::Adapters::ActiveRecord.install(self) }
ActiveSupport.on_load(:active_record_mysql2adapter) { CircuitBreaker::Adapters::ActiveRecord.install(self) }
# Adapters loaded before this file. Those loaded later: by the on_load hooks
# above (ActiveRecord 7.1 on runs them) or by Connecting (before 7.1).
# (An autoload not yet run is left to them: running it would load a driver
# the app may not have.)
%w[PostgreSQLAdapter Mysql2Adapter].each do |name|
  if ActiveRecord::ConnectionAdapters.const_defined?(name, false) && !ActiveRecord::ConnectionAdapters.autoload?(name)
    CircuitBreaker::Adapters::ActiveRecord.install(ActiveRecord::ConnectionAdapters.const_get(name, false))
  end
end
if ActiveRecord.gem_version < Gem::Version.new("7.1")
  ActiveRecord::ConnectionHandling.prepend(CircuitBreaker::Adapters::ActiveRecord::Connecting)
end
