# frozen_string_literal: true

require "circuit_breaker"
require "circuit_breaker/rejection"

class CircuitBreaker
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
  end
end

require "circuit_breaker/adapters/own_breakers"
require "circuit_breaker/adapters/breaker_set"
