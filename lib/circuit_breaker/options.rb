# frozen_string_literal: true

class CircuitBreaker
  # The breaker's options: every keyword with its default (docs/configuration.md), in
  # one method. To add an option: add its keyword here, pass it to
  # `__setup`, and convert it in `Breaker::setup`
  # (ext/circuit_breaker/src/breaker/mod.rs), where a range check belongs in the
  # core's `Config::new`, never here.
  #
  # @param window [SlidingWindow, TimeWindow, nil] the live window the
  #   breaker records into; nil: `CircuitBreaker::SlidingWindow.new(size: 100)`
  # @param error_rate_threshold [Numeric] opens from this error rate on, (0, 1]
  # @param slow_rate_threshold [Numeric] opens from this slow-call rate on, (0, 1]
  # @param min_calls [Integer] no verdict below this many calls in the window
  # @param open_duration [Numeric, ActiveSupport::Duration] seconds open before half-open
  #   (every option in seconds also takes a Duration: `30.seconds`)
  # @param half_open_calls [Integer] probes judged per ramp stage
  # @param ramp [Array<Numeric>] share admitted at each half-open stage
  # @param advance_rate [Numeric] probe success share to advance a stage
  # @param reopen_rate [Numeric, nil] below this probe success share: open again (nil: advance_rate)
  # @param record_errors [Array<Module, #call>] exceptions recorded as failures
  # @param ignore_errors [Array<Module, #call>] exceptions passed through unrecorded (checked first)
  # @param failure_if [#call, nil] given the block's value, true when it is a failure
  # @param shared [String, Symbol, false, nil] a name: the breaker lives in a file every process on the host
  #   shares; false or nil: in this process
  # @param consecutive_failures [Integer, nil] failed calls in a row that open the breaker whatever
  #   the window holds (nil: no such rule; docs/choices.md says why the default is 8)
  # @param half_open_timeout [Numeric, nil] seconds a round of a half-open stage may take (nil: no limit)
  # @param probe_timeout [Numeric, false, nil] seconds a probe may stay unsettled before it counts as
  #   failed (nil: open_duration; false: never)
  # @param min_stage_duration [Numeric] seconds a half-open stage lasts at least before it may advance
  # @param backoff [Numeric] open_duration multiplier per reopen from half-open
  # @param max_open_duration [Numeric, nil] cap on the backed-off open duration
  # @param jitter [Numeric] open durations shortened by a random share below this
  # @param name [String, Symbol, nil] used in errors, events and the registry
  # @param clock [ManualClock, nil] for tests; nil: the monotonic clock
  # @param logger [#warn, #info, nil] transitions are logged (openings with warn)
  # @param fleet [Redis, String, nil] a Redis client or URL: the breaker is one across hosts (docs/fleet.md)
  # @param fleet_interval [Numeric, nil] seconds between a host's sends (nil: 0.1)
  # @param fleet_quorum [Numeric, nil] with fleet:, the share of the live hosts' reported calls that
  #   hosts opened on their own windows must carry to open the fleet, (0, 1] (nil: 0.5)
  # @param namespace [String, Symbol, nil] with shared:, keeps this application's
  #   breakers apart from other applications' on the host; nil:
  #   {CircuitBreaker.default_namespace} (docs/shared.md)
  # @example
  #   CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100), open_duration: 10)
  # @example A subclass with its own defaults
  #   class PaymentsBreaker < CircuitBreaker
  #     def initialize(**options)
  #       super(name: "payments", error_rate_threshold: 0.3, **options)
  #     end
  #   end
  def initialize(window: nil, error_rate_threshold: 0.5, slow_rate_threshold: 0.8, min_calls: 20,
                 open_duration: 30, half_open_calls: 2, ramp: [1.0], advance_rate: 1.0, reopen_rate: nil,
                 record_errors: [StandardError], ignore_errors: [], failure_if: nil, half_open_timeout: nil,
                 probe_timeout: nil, min_stage_duration: 0, backoff: 1.0, max_open_duration: nil, jitter: 0.0,
                 name: nil, clock: nil, logger: nil, shared: nil, namespace: nil, fleet: nil, fleet_interval: nil,
                 fleet_quorum: nil, consecutive_failures: 8)
    unless logger.nil? || (logger.respond_to?(:warn) && logger.respond_to?(:info))
      raise TypeError, "logger must be nil or an object with warn and info (a Logger) (got #{logger.class})"
    end
    raise ArgumentError, "fleet_interval: needs fleet:" if fleet.nil? && !fleet_interval.nil?
    raise ArgumentError, "fleet_quorum: needs fleet:" if fleet.nil? && !fleet_quorum.nil?

    # Seconds may be given as ActiveSupport::Duration (30.seconds).
    open_duration, half_open_timeout, probe_timeout, min_stage_duration, max_open_duration, fleet_interval =
      [open_duration, half_open_timeout, probe_timeout, min_stage_duration, max_open_duration, fleet_interval]
      .map { |v| Durations.seconds(v) }

    # Checked before the breaker exists (docs/fleet.md); nothing connects yet.
    # The fleet's code is loaded by the first fleet breaker only.
    require_relative "fleet" unless fleet.nil?
    fleet_settings = Fleet.settings(fleet, fleet_interval) unless fleet.nil?
    # The fleet's keys are the breaker's name: unnamed breakers would be one.
    raise ArgumentError, "fleet: needs name: (or shared:), the name the hosts share" if fleet && name.nil? && shared.nil?

    namespace = CircuitBreaker.__send__(:__shared_key, :namespace, namespace, empty: true) unless namespace.nil?
    # Fleet keys are namespaced by the environment unless asked otherwise:
    # the hosts of one fleet may run from different directories, and a test
    # suite must never act on a development fleet (docs/fleet.md, "Keys").
    fleet_namespace = namespace || Fleet.environment if fleet_settings
    shared = nil if shared == false # per process, said outright (docs/shared.md, "Host scope")
    unless shared.nil?
      shared = CircuitBreaker.__send__(:__shared_key, :shared, shared)
      namespace ||= CircuitBreaker.default_namespace
    end
    # native: converts each value and builds the breaker once
    __setup({
              window: window || SlidingWindow.new, error_rate_threshold: error_rate_threshold,
              slow_rate_threshold: slow_rate_threshold, min_calls: min_calls, open_duration: open_duration,
              half_open_calls: half_open_calls, ramp: ramp, advance_rate: advance_rate, reopen_rate: reopen_rate,
              record_errors: record_errors, ignore_errors: ignore_errors, failure_if: failure_if,
              half_open_timeout: half_open_timeout, probe_timeout: probe_timeout,
              min_stage_duration: min_stage_duration, backoff: backoff, max_open_duration: max_open_duration,
              jitter: jitter, fleet_quorum: fleet_quorum, name: name, clock: clock, shared: shared,
              namespace: namespace, consecutive_failures: consecutive_failures, fleet: !fleet.nil?
            })
    @logger = logger
    @open_duration = open_duration.to_f # validated by __setup
    return unless fleet_settings

    Fleet.attach(self, *fleet_settings, shared: shared && "#{namespace}:#{shared}", namespace: fleet_namespace)
  end

  # The seeds' spellings (docs/configuration.md), so the articles' classes port by
  # renaming only: `threshold:` is `error_rate_threshold:`, `retry_time:`
  # is `open_duration:`, `probe_ratio:` r (with `half_open_window:` w) is
  # `ramp: [r]` (with `half_open_calls: max(1, floor(w * r))`). An alias
  # given as nil counts as not given; an alias together with its own name is
  # an ArgumentError. Prepended, so it sees what the caller wrote (a
  # subclass's `super` too) before {CircuitBreaker#initialize} fills in the
  # defaults; a bad value is reported under the name the caller wrote.
  #
  # @api private
  module Aliases
    def initialize(threshold: nil, retry_time: nil, probe_ratio: nil, half_open_window: nil, **options)
      written = {}
      { error_rate_threshold: [:threshold, threshold], open_duration: [:retry_time, retry_time] }
        .each do |own, (spelling, value)|
          next if value.nil?
          raise ArgumentError, "give #{own}: or its alias #{spelling}:, not both" if options.key?(own)

          options[own] = value
          written[own] = spelling
        end
      if probe_ratio.nil?
        raise ArgumentError, "half_open_window: needs probe_ratio:" unless half_open_window.nil?
      else
        raise ArgumentError, "give ramp: or its alias probe_ratio:, not both" if options.key?(:ramp)
        if !half_open_window.nil? && options.key?(:half_open_calls)
          raise ArgumentError, "give half_open_calls: or its alias half_open_window:, not both"
        end

        # native: the core checks both under these names
        share, quota = CircuitBreaker.__send__(:__seed_probes, probe_ratio, half_open_window)
        options[:ramp] = [share]
        options[:half_open_calls] = quota if quota
      end
      begin
        super(**options)
      rescue ArgumentError, TypeError => e
        # The core names the option an alias stood for: name the alias.
        own, spelling = written.find { |o, _| e.message.start_with?("#{o} must be ") }
        raise unless own

        raise e.class, e.message.sub(own.to_s, spelling.to_s)
      end
    end
  end
  prepend Aliases
end
