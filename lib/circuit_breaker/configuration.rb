# frozen_string_literal: true

class CircuitBreaker
  # Process-wide settings for breakers built afterwards, set with
  # {CircuitBreaker.configure} (docs/configuration.md, "Global
  # configuration"). A published configuration is frozen; `configure` works
  # on a copy and publishes it whole.
  class Configuration
    # Options that belong to one breaker, never a default.
    PER_BREAKER = %i[window name shared].freeze

    # @return [#warn, #info, nil] the logger of breakers built without `logger:`
    attr_reader :logger

    # @return [Hash{Symbol => Object}] options of breakers built without
    #   them (frozen)
    attr_reader :defaults

    def initialize
      @logger = nil
      @defaults = {}.freeze
      @scope = nil
    end

    # @param logger [#warn, #info, nil] e.g. Rails.logger; nil: none
    def logger=(logger)
      unless logger.nil? || (logger.respond_to?(:warn) && logger.respond_to?(:info))
        raise TypeError, "logger must be nil or an object with warn and info (a Logger) (got #{logger.class})"
      end

      @logger = logger
    end

    # @param options [Hash{Symbol => Object}] options of CircuitBreaker.new,
    #   except window:, name: and shared:; checked when configure returns
    def defaults=(options)
      raise TypeError, "defaults must be a Hash of CircuitBreaker.new options (got #{options.class})" unless options.is_a?(Hash)

      own = options.keys & PER_BREAKER
      unless own.empty?
        raise ArgumentError, "defaults: #{own.map { |k| "#{k}:" }.join(', ')} belong to one breaker, never a default"
      end

      @defaults = options.transform_keys(&:to_sym).freeze
    end

    # @return [Symbol, nil] where {CircuitBreaker.for} keeps a breaker
    #   built without `shared:`: `:host` or `:process`; nil (the default):
    #   `:host`, or `:process` where RAILS_ENV, RACK_ENV or APP_ENV is
    #   `test` ({CircuitBreaker.default_scope}, docs/shared.md)
    attr_reader :scope

    # @param value [:host, :process, nil] nil: chosen by the environment
    def scope=(value)
      unless [nil, :host, :process].include?(value)
        raise ArgumentError, "scope must be :host, :process or nil (chosen by the environment) (got #{value.inspect})"
      end

      @scope = value
    end

    # The namespace of `shared:` breakers built without `namespace:`
    # ({CircuitBreaker.default_namespace}).
    # @return [String]
    def namespace
      CircuitBreaker.default_namespace
    end

    # @param value [String, Symbol, nil] nil: derived from the application's
    #   directory and environment
    def namespace=(value)
      @namespace = value
      @namespace_set = true
    end

    # @api private
    def initialize_copy(source)
      super
      @namespace_set = false
    end

    # Applies what needs applying once `configure`'s block returned.
    # @api private
    def publish
      CircuitBreaker.default_namespace = @namespace if @namespace_set
      remove_instance_variable(:@namespace) if defined?(@namespace)
      @namespace_set = false
      freeze
    end
  end

  @configuration = Configuration.new.freeze
  # One configure at a time: each works on a copy of the configuration in
  # force, so two at once would each publish a copy without the other's
  # settings.
  @configure_lock = Mutex.new

  class << self
    # @return [Configuration] the settings in force (frozen)
    attr_reader :configuration

    # Sets the logger, default options and `shared:` namespace of breakers
    # built afterwards; breakers built before keep theirs. The block gets a
    # copy of the configuration in force; when it returns, the defaults are
    # checked (by building a breaker with them) and the copy replaces it.
    # Calls from several threads run one after the other, each seeing what
    # the previous one set.
    #
    # @example config/initializers/circuit_breaker.rb
    #   CircuitBreaker.configure do |config|
    #     config.logger = Rails.logger
    #     config.defaults = { open_duration: 15, min_calls: 10 }
    #     config.namespace = "shop"
    #   end
    # @yieldparam config [Configuration]
    # @return [Configuration] the new configuration (frozen)
    # @raise [ArgumentError, TypeError] a default CircuitBreaker.new refuses
    def configure
      raise ArgumentError, "CircuitBreaker.configure needs a block" unless block_given?
      raise ArgumentError, "CircuitBreaker.configure was called inside its own block" if @configure_lock.owned?

      @configure_lock.synchronize do
        config = @configuration.dup
        yield config
        begin
          # Checks them, alone: a breaker built with this configuration's
          # defaults and nothing else, then dropped.
          CircuitBreaker.new(Options.build({}, config))
        rescue ArgumentError, TypeError => e
          raise e.class, "CircuitBreaker.configure: defaults: #{e.message}"
        end
        @configuration = config.publish
      end
    end
  end
end
