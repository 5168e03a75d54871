# frozen_string_literal: true

require "sidekiq"
require "circuit_breaker/adapters"

class CircuitBreaker
  module Adapters
    # A Sidekiq server middleware: a job that names a breaker
    # (`sidekiq_options circuit_breaker: "payments"`) is not run while that
    # breaker is open; it is pushed back to run when the breaker may admit
    # calls again, without spending one of its retries. A job whose call
    # through that breaker is refused at its `max_concurrent:` cap (a
    # {CircuitBreaker::ConcurrencyLimitError} out of the job) is pushed
    # back the same way, by the error's `retry_after`. Loaded by
    # `require "circuit_breaker/sidekiq"`, which patches nothing: the app
    # adds the middleware to its server chain (docs/adapters.md, "Sidekiq").
    #
    # @example config/initializers/sidekiq.rb
    #   require "circuit_breaker/sidekiq"
    #   Sidekiq.configure_server do |config|
    #     config.server_middleware { |chain| chain.add CircuitBreaker::Adapters::Sidekiq::Middleware }
    #   end
    #
    #   class ChargeJob
    #     include Sidekiq::Worker
    #     sidekiq_options circuit_breaker: "payments"
    #   end
    module Sidekiq
      # The job's key naming its breaker (from `sidekiq_options`).
      BREAKER_KEY = "circuit_breaker"
      # The job's key counting its deferrals.
      DEFERRALS_KEY = "circuit_breaker_deferrals"

      # The middleware. Sidekiq builds it with the arguments given to
      # `chain.add` (a Hash: Sidekiq 6 passes them positionally).
      class Middleware
        # @param options [Hash] `max_deferrals:` (Integer 0..1_000, default
        #   10): after that many deferrals the job runs whatever the
        #   breaker says; `jitter:` (0.0..1.0, default 0.2): a deferral
        #   waits retry_after × (1 + rand × jitter), so deferred jobs do not
        #   all come back in the same instant
        def initialize(options = {})
          options = options.transform_keys(&:to_sym)
          unknown = options.keys - %i[max_deferrals jitter]
          unless unknown.empty?
            raise ArgumentError,
                  "CircuitBreaker::Adapters::Sidekiq::Middleware: unknown option(s) #{unknown.join(', ')} (known: max_deferrals, jitter)"
          end

          @max_deferrals = options.fetch(:max_deferrals, 10)
          unless @max_deferrals.is_a?(Integer) && @max_deferrals.between?(0, 1_000)
            raise ArgumentError, "max_deferrals must be an Integer in 0..1_000 (got #{@max_deferrals.inspect})"
          end

          @jitter = options.fetch(:jitter, 0.2)
          return if @jitter.is_a?(Numeric) && @jitter.finite? && @jitter.between?(0, 1)

          raise ArgumentError, "jitter must be a finite Numeric in 0.0..1.0 (got #{@jitter.inspect})"
        end

        # @param job [Hash] the job's payload
        def call(_worker, job, _queue)
          name = job[BREAKER_KEY]
          return yield if name.nil?

          breaker = Registry.registered(name)
          deferrals = job[DEFERRALS_KEY].to_i
          return yield if deferrals >= @max_deferrals

          # `state` applies due timers and takes no probe permit: a
          # half-open breaker lets the job run, and the job's own calls
          # take the probes.
          state = breaker.state
          if %i[open forced_open].include?(state)
            # Forced open: no end in sight, so open_duration.
            defer(job, breaker, deferrals, breaker.retry_after || breaker.open_duration, "is #{state}")
            return nil
          end

          begin
            yield
          rescue ConcurrencyLimitError => e # an adapter's rejection at the cap too (lib/circuit_breaker/rejection.rb)
            raise unless e.breaker_name == breaker.name # another breaker's cap: the job failed as Sidekiq sees it

            defer(job, breaker, deferrals, limit_wait(e), "is at its concurrency limit (#{e.limit})")
            nil
          end
        end

        private

        # A refusal at the cap says when to come back (`retry_after`,
        # 1.0 s), never less than ConcurrencyLimitError::RETRY_AFTER: the
        # breaker's own `retry_after` is 0.0 while closed, and a job pushed
        # back with no wait would meet the same full cap at once, again and
        # again.
        def limit_wait(error)
          wait = error.retry_after
          wait.is_a?(Numeric) && wait.finite? && wait > ConcurrencyLimitError::RETRY_AFTER ? wait : ConcurrencyLimitError::RETRY_AFTER
        end

        def defer(job, breaker, deferrals, wait, why)
          wait *= 1 + (rand * @jitter)
          ::Sidekiq::Client.push(job.merge(DEFERRALS_KEY => deferrals + 1, "at" => Time.now.to_f + wait))
          ::Sidekiq.logger.info("circuit_breaker: #{job['class']} #{job['jid']} deferred #{format('%.1f', wait)}s " \
                                "(breaker #{breaker.name.inspect} #{why}; deferral #{deferrals + 1} of #{@max_deferrals})")
        end
      end
    end
  end
end
