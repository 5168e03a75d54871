# frozen_string_literal: true

require "circuit_breaker"

class CircuitBreaker
  # Included in the error each adapter raises when its breaker rejects a
  # call. That error is a subclass of the library's own connection error
  # (so an app's existing `rescue Redis::BaseConnectionError` keeps
  # degrading) and carries what {CircuitBreaker::OpenError} carries.
  # Ruby gives a class one superclass, so `rescue CircuitBreaker::OpenError`
  # (and `rescue CircuitBreaker::Error`) recognise these errors through
  # `===`, which the first adapter required extends (docs/adapters.md,
  # "Rejections"). `is_a?(CircuitBreaker::OpenError)` stays false: ask
  # `is_a?(CircuitBreaker::Rejection)`.
  module Rejection
    # The readers: `breaker_name` (String, nil), `state` (:open,
    # :half_open or :forced_open) and `retry_after` (Float seconds until
    # the breaker may admit this caller again; nil when forced open).

    # @param open_error [CircuitBreaker::OpenError, String, nil] the
    #   breaker's rejection; a String is the message (a library that
    #   re-raises errors as its own classes, like redis-rb 5, passes one:
    #   the readers then answer from the `cause`)
    def initialize(open_error = nil)
      if open_error.is_a?(OpenError)
        @breaker_name = open_error.breaker_name
        @state = open_error.state
        @retry_after = open_error.retry_after
        super(open_error.message)
      else
        super(open_error || "circuit is open")
      end
    end

    def breaker_name
      defined?(@state) ? @breaker_name : from_cause(:breaker_name)
    end

    def state
      defined?(@state) ? @state : (from_cause(:state) || :open)
    end

    def retry_after
      defined?(@state) ? @retry_after : from_cause(:retry_after)
    end

    private

    def from_cause(reader)
      cause.respond_to?(reader) ? cause.public_send(reader) : nil
    end
  end

  # Prepended to `CircuitBreaker::Error`'s singleton class (so that
  # `OpenError`, which inherits it, sees it too) by `require`ing an adapter:
  # the gem alone keeps Ruby's own `Module#===` on its rejection path.
  #
  # @api private
  module RejectionMatching
    def ===(other)
      super || ((equal?(OpenError) || equal?(Error)) && Rejection === other)
    end
  end
  Error.singleton_class.prepend(RejectionMatching) unless Error.singleton_class < RejectionMatching
  private_constant :RejectionMatching

  # What the adapters share: running a call through a breaker with their own
  # idea of failure, and the capped set of breakers they create on their own
  # (docs/adapters.md).
  module Adapters
    # Breakers an adapter creates by itself (one per host:port, per server,
    # per database) are capped per adapter; past the cap every new key shares
    # one overflow breaker, so a stream of distinct hosts cannot fill the
    # registry (or the host's shared files).
    DEFAULT_MAX_BREAKERS = 100

    # Carries an exception the adapter does not count as a failure (a bad
    # SQL statement, a 404's error) out of `breaker.call` as a return
    # value, so that it is recorded as a success and raised on unchanged.
    # @api private
    Passed = Struct.new(:error)

    module_function

    # Runs the block through `breaker`. An exception matching `failures`
    # (classes, or Procs given the exception) is recorded as a failure; any
    # other StandardError is recorded as a success (the dependency answered)
    # and raised on as it was. A rejection is raised as `rejection_class`,
    # its cause the breaker's {OpenError}.
    #
    # @api private
    def run(breaker, rejection_class, failures)
      ran = false
      result = breaker.call do
        ran = true
        begin
          yield
        rescue Failure
          raise # the adapter decided (a failure status, say)
        rescue StandardError => e
          raise if failure?(e, failures)

          Passed.new(e)
        end
      end
      result.is_a?(Passed) ? raise(result.error) : result
    rescue OpenError => e
      # A rejection from inside the call (another breaker) is not ours.
      raise if ran

      raise rejection_class.new(e)
    end

    # Runs a connect that happens outside a call (a session opened before
    # its requests, a client reconnecting before its command): while the
    # breaker is closed it is not a call of its own (each request would
    # count twice), but a failed connect is recorded as a failure; while
    # open it is rejected; while half-open it is a probe (its outcome is
    # news).
    #
    # @api private
    def connect(breaker, rejection_class, failures, &block)
      return run(breaker, rejection_class, failures, &block) unless breaker.closed?

      begin
        yield
      rescue StandardError => e
        breaker.record_failure if failure?(e, failures)
        raise
      end
    end

    # Whether `error` (or an exception it was raised from: an adapter may
    # see a library's error wrapped by another) matches `failures`.
    # @api private
    def failure?(error, failures)
      seen = 0
      while error && seen < 8 # a cause chain is short; a cycle must not loop
        return true if failures.any? { |f| f.is_a?(Module) ? f === error : f.call(error) }

        error = error.cause
        seen += 1
      end
      false
    end

    # The options of one more breaker built from `options`: a window is a
    # template (a window belongs to one breaker), so each breaker gets a new
    # one with the same settings.
    # @api private
    def options_for_one(options)
      window = options[:window]
      fresh = case window
              when SlidingWindow then SlidingWindow.new(size: window.size, slow_threshold_ms: window.slow_threshold_ms)
              when TimeWindow
                TimeWindow.new(seconds: window.seconds, buckets: window.buckets, slow_threshold_ms: window.slow_threshold_ms)
              else return options
              end
      options.merge(window: fresh)
    end

    # @api private
    def check_failures(failures, adapter)
      list = Array(failures)
      bad = list.reject { |f| f.is_a?(Module) || f.respond_to?(:call) }
      unless bad.empty?
        raise TypeError, "#{adapter}: failure_errors: must be exception classes or Procs given the exception " \
                         "(got #{bad.map(&:inspect).join(', ')})"
      end
      list.freeze
    end

    # The class methods of an adapter that creates breakers by itself, over
    # its {BreakerSet} in `@breakers`: each such adapter extends it.
    module OwnBreakers
      # @return [Integer] how many keyed breakers the adapter may create
      #   (default 100); later keys share "<adapter>:overflow"
      def max_breakers
        @breakers.max
      end

      # @param max [Integer] 1..1_000_000
      def max_breakers=(max)
        @breakers.max = max
      end

      # Forgets the breakers the adapter created (for test suites; the
      # registry keeps them until `CircuitBreaker.forget_all!`). Clients
      # find theirs again at their next call.
      # @return [nil]
      def clear!
        @breakers.clear
        nil
      end

      # Moves on at each {clear!}.
      # @api private
      def generation
        @breakers.generation
      end
    end

    # The breakers one adapter creates, keyed ("host:port", a socket path,
    # a database), at most `max` of them; past it, one overflow breaker.
    # Names are "<adapter>:<key>" and "<adapter>:overflow"; they are
    # registry breakers ({CircuitBreaker.for}), so `CircuitBreaker.configure`
    # defaults apply. A `window:` option is a template: each breaker gets a
    # window of its own with the same settings.
    #
    # @api private
    class BreakerSet
      # @return [Integer] moves on at each {clear}: clients that memoised a
      #   breaker of the set look it up again
      attr_reader :max, :generation

      def initialize(prefix)
        @prefix = prefix
        @max = DEFAULT_MAX_BREAKERS
        @lock = Mutex.new
        @generation = 0
        clear
      end

      # @param max [Integer] 1..1_000_000
      def max=(max)
        unless max.is_a?(Integer) && max.between?(1, 1_000_000)
          raise ArgumentError, "#{@prefix}: max_breakers must be an Integer in 1..1_000_000 (got #{max.inspect})"
        end

        @max = max
      end

      # Forgets the breakers this set created (the registry keeps them
      # until `CircuitBreaker.forget_all!`).
      def clear
        @lock.synchronize do
          @breakers = {}
          @overflow = nil
          @generation += 1
        end
      end

      # @return [CircuitBreaker] the breaker of `key`, created with `options`
      #   on first use
      def fetch(key, options)
        @breakers[key] || @lock.synchronize do
          @breakers[key] || if @breakers.size < @max
                              @breakers[key] = CircuitBreaker.for("#{@prefix}:#{key}", **Adapters.options_for_one(options))
                            else
                              overflow(key, options)
                            end
        end
      end

      # @return [Integer] how many keyed breakers exist (the overflow aside)
      def size
        @breakers.size
      end

      private

      def overflow(key, options)
        @overflow ||= begin
          warn "circuit_breaker: #{@prefix} has #{@max} breakers (max_breakers); #{key} and every later one " \
               "share the breaker #{@prefix}:overflow (docs/adapters.md)"
          CircuitBreaker.for("#{@prefix}:overflow", **Adapters.options_for_one(options))
        end
      end
    end
  end
end
