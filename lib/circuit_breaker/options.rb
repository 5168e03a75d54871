# frozen_string_literal: true

class CircuitBreaker
  # One breaker's options (docs/configuration.md): a frozen value, built in
  # one place, {Options.build}, from the library's defaults
  # ({Options::DEFAULTS}), `CircuitBreaker.configure`'s logger and defaults,
  # and the keywords the caller wrote, each layer over the one before; the
  # seeds' aliases (`threshold:`, `retry_time:`, `probe_ratio:`,
  # `half_open_window:`) are translated there, and a value an alias gave is
  # reported under the alias. The binding reads it member by member
  # (`Breaker::setup`, ext/circuit_breaker/src/breaker/mod.rs); ranges are
  # the Rust core's to check (`Config::new`), never this file's.
  #
  # Adding an option (docs/development.md, "Adding an option"): a member
  # here with its default in {DEFAULTS}; its check (a range in the core's
  # `Config::new`, a type in the binding's line that reads it); its line in
  # docs/configuration.md's table.
  Options = Struct.new(
    # The keywords of CircuitBreaker.new, normalized: seconds as numbers
    # (never an ActiveSupport::Duration), `shared:` and `namespace:` as
    # frozen UTF-8 Strings, `namespace` the one a `shared:` breaker's file
    # is keyed by (CircuitBreaker.default_namespace when none was given).
    :window, :error_rate_threshold, :slow_rate_threshold, :min_calls, :consecutive_failures, :open_duration,
    :half_open_calls, :ramp, :advance_rate, :reopen_rate, :record_errors, :ignore_errors, :failure_if,
    :half_open_timeout, :probe_timeout, :min_stage_duration, :backoff, :max_open_duration, :jitter, :name, :clock,
    :logger, :shared, :namespace, :fleet, :fleet_interval, :fleet_quorum, :max_concurrent, :max_wait,
    :adaptive_initial, :adaptive_min, :adaptive_max, :adaptive_smoothing,
    # The seeds' `probe_ratio:` r and `half_open_window:` w, as written (nil:
    # not given): the binding makes them `ramp: [r]` and `half_open_calls:
    # max(1, floor(w * r))`, each checked under its own name.
    :probe_ratio, :half_open_window,
    # Found while building: `aliases`, option => the alias the caller wrote
    # for it (`{ error_rate_threshold: :threshold }`), so that an error names
    # what was written; `kill_switch`, CIRCUIT_BREAKER_DISABLED when the
    # breaker was built; `fleet_namespace`, the namespace of a fleet's keys.
    :aliases, :kill_switch, :fleet_namespace,
    keyword_init: true
  )

  class Options
    # The library's defaults, one per keyword (docs/configuration.md's
    # table; `window: nil` is a new `SlidingWindow.new`, made by the
    # binding).
    DEFAULTS = {
      window: nil, error_rate_threshold: 0.5, slow_rate_threshold: 0.8, min_calls: 20, consecutive_failures: 8,
      open_duration: 30, half_open_calls: 2, ramp: [1.0].freeze, advance_rate: 1.0, reopen_rate: nil,
      record_errors: [StandardError].freeze, ignore_errors: [].freeze, failure_if: nil, half_open_timeout: nil,
      probe_timeout: nil, min_stage_duration: 0, backoff: 1.0, max_open_duration: nil, jitter: 0.0, name: nil,
      clock: nil, logger: nil, shared: nil, namespace: nil, fleet: nil, fleet_interval: nil, fleet_quorum: nil,
      probe_ratio: nil, half_open_window: nil, max_concurrent: nil, max_wait: 0,
      adaptive_initial: nil, adaptive_min: nil, adaptive_max: nil, adaptive_smoothing: nil
    }.freeze

    # The seeds' one-for-one aliases: alias => the option it stands for.
    ALIASES = { threshold: :error_rate_threshold, retry_time: :open_duration }.freeze

    # Every keyword CircuitBreaker.new takes.
    KEYWORDS = (DEFAULTS.keys + ALIASES.keys).freeze
    KNOWN = KEYWORDS.to_h { |k| [k, true] }.freeze

    # The seeds' aliases that stand for a pair of options.
    SEEDS = %i[probe_ratio half_open_window].freeze

    # The options in seconds, which also take an ActiveSupport::Duration.
    SECONDS = %i[open_duration half_open_timeout probe_timeout min_stage_duration max_open_duration
                 fleet_interval max_wait].freeze
    private_constant :KNOWN, :SEEDS, :SECONDS

    class << self
      # The options of a breaker built now with `given`: the library's
      # defaults, under `configuration`'s logger and defaults, under
      # `given`. An alias and the option it stands for in one layer are an
      # ArgumentError; across layers, the later layer wins, whichever way
      # each wrote it.
      #
      # @param given [Hash{Symbol => Object}] the caller's keywords
      # @param configuration [Configuration] the process's settings
      #   (CircuitBreaker.configuration)
      # @return [Options] frozen
      # @raise [ArgumentError, TypeError] an unknown keyword, an alias
      #   beside its option, a value refused before the breaker exists
      #   (`logger:`, the `fleet:` settings, `shared:` and `namespace:`);
      #   ranges are checked when the breaker is built
      # @api private
      def build(given, configuration = CircuitBreaker.configuration)
        values = DEFAULTS.merge(logger: configuration.logger)
        aliases = {}
        layer(values, aliases, configuration.defaults)
        layer(values, aliases, given)
        normalize(values)
        new(**values, aliases: aliases.freeze, kill_switch: CircuitBreaker.kill_switch?).freeze
      end

      private

      # Lays one layer of keywords over `values`, translating its aliases.
      def layer(values, aliases, given)
        return if given.empty?

        unless given.each_key.all? { |key| KNOWN.key?(key) }
          unknown = given.keys.reject { |key| KNOWN.key?(key) }
          raise ArgumentError, "unknown keyword#{'s' if unknown.size > 1}: #{unknown.map(&:inspect).join(', ')}"
        end

        given.each do |key, value|
          # An alias given as nil counts as not given.
          values[key] = value unless ALIASES.key?(key) || (value.nil? && SEEDS.include?(key))
        end
        ALIASES.each do |spelling, own|
          value = given[spelling]
          if value.nil?
            aliases.delete(own) if given.key?(own)
            next
          end
          raise ArgumentError, "give #{own}: or its alias #{spelling}:, not both" if given.key?(own)

          values[own] = value
          aliases[own] = spelling
        end
        seeds(values, given)
      end

      # `probe_ratio:` (with `half_open_window:`) in one layer; a later
      # layer's `ramp:` or `half_open_calls:` wins over an earlier one's seeds.
      def seeds(values, given)
        ratio = given[:probe_ratio]
        window = given[:half_open_window]
        if ratio.nil?
          raise ArgumentError, "half_open_window: needs probe_ratio:" unless window.nil?

          values[:probe_ratio] = values[:half_open_window] = nil if given.key?(:ramp)
          values[:half_open_window] = nil if given.key?(:half_open_calls)
        else
          raise ArgumentError, "give ramp: or its alias probe_ratio:, not both" if given.key?(:ramp)
          if !window.nil? && given.key?(:half_open_calls)
            raise ArgumentError, "give half_open_calls: or its alias half_open_window:, not both"
          end

          values[:half_open_window] = window
        end
      end

      # What is checked and converted before the breaker exists.
      def normalize(values)
        logger = values[:logger]
        unless logger.nil? || (logger.respond_to?(:warn) && logger.respond_to?(:info))
          raise TypeError, "logger must be nil or an object with warn and info (a Logger) (got #{logger.class})"
        end

        fleet = values[:fleet]
        raise ArgumentError, "fleet_interval: needs fleet:" if fleet.nil? && !values[:fleet_interval].nil?
        raise ArgumentError, "fleet_quorum: needs fleet:" if fleet.nil? && !values[:fleet_quorum].nil?

        SECONDS.each { |key| values[key] = Durations.seconds(values[key]) } if Durations.loaded?
        unless fleet.nil?
          # Checked before the breaker exists (docs/fleet.md); nothing
          # connects yet. The fleet's code is loaded by the first fleet
          # breaker only.
          # (In a trap handler, which may not `require` it or the Redis
          # client, on a thread of its own: lib/circuit_breaker/trap_context.rb.)
          _, values[:fleet_interval] = TrapContext.outside("loading the fleet") do
            require_relative "fleet"
            Fleet.settings(fleet, values[:fleet_interval])
          end
          # The fleet's keys are the breaker's name: unnamed breakers would be one.
          if values[:name].nil? && values[:shared].nil?
            raise ArgumentError, "fleet: needs name: (or shared:), the name the hosts share"
          end
        end
        keys(values)
      end

      # `shared:` and `namespace:` as the keys of the shared file, and the
      # fleet's namespace.
      def keys(values)
        namespace = values[:namespace]
        namespace = Keys.key(:namespace, namespace, empty: true) unless namespace.nil?
        # Fleet keys are namespaced by the environment unless asked
        # otherwise: the hosts of one fleet may run from different
        # directories, and a test suite must never act on a development
        # fleet (docs/fleet.md, "Keys").
        values[:fleet_namespace] = namespace || Fleet.environment unless values[:fleet].nil?
        shared = values[:shared]
        shared = nil if shared == false # per process, said outright (docs/shared.md, "Host scope")
        unless shared.nil?
          shared = Keys.key(:shared, shared)
          namespace ||= CircuitBreaker.default_namespace
        end
        values[:shared] = shared
        values[:namespace] = namespace
      end
    end
  end

  # Builds the breaker from its {Options}, every option with its default
  # (docs/configuration.md). A subclass may define `initialize` and call
  # `super` with its own options: the caller's keywords win over them.
  #
  # @param options [Options, nil] options {Options.build} made (what
  #   CircuitBreaker.configure checks its defaults with); nil: built from
  #   the keywords
  # @param given [Hash] the keywords: each option of docs/configuration.md's
  #   table, and the seeds' aliases
  # @example
  #   CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100), open_duration: 10)
  # @example A subclass with its own defaults
  #   class PaymentsBreaker < CircuitBreaker
  #     def initialize(**options)
  #       super(name: "payments", error_rate_threshold: 0.3, **options)
  #     end
  #   end
  def initialize(options = nil, **given)
    if options.nil?
      options = Options.build(given)
    elsif !options.is_a?(Options) || !given.empty?
      raise ArgumentError, "wrong number of arguments: CircuitBreaker.new takes keywords, or one " \
                           "CircuitBreaker::Options and no keywords (got #{options.class}#{' and keywords' unless given.empty?})"
    end
    __setup(options) # native: converts each member and builds the breaker once
    @logger = options.logger
    @open_duration = options.open_duration.to_f # validated by __setup
    @max_concurrent = options.max_concurrent # validated by __setup
    @fleet_link = Fleet.attach(self, options) if options.fleet
    extend(KillSwitched) if options.kill_switch
  end
end
