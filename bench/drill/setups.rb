# frozen_string_literal: true

# The breakers the drill compares (bench/drill/run.rb), each built as its
# documentation says, around the same Net::HTTP call. Loaded by the Puma
# app (bench/drill/config.ru) before it forks its workers (preload_app!).
#
# Each setup is a Guard: `run { }` calls through the breaker, and
# `rejected?(error)` says whether an error is the breaker refusing the call
# (the app answers 503) rather than the upstream failing (502, or 504 after
# a read timeout).
module Drill
  # Raised for a 5xx answer, inside the breaker, so every breaker records it
  # as a failure.
  class UpstreamFailed < StandardError; end

  # What each breaker counts as a failure: the 5xx above and what Net::HTTP
  # raises when the upstream does not answer.
  FAILURES = [UpstreamFailed, Net::ReadTimeout, Net::OpenTimeout, SystemCallError, IOError].freeze

  Guard = Struct.new(:description, :runner, :rejections, :unwrap, keyword_init: true) do
    def run(&block)
      # A proc: Semian yields the resource to the block, a lambda would refuse it.
      runner.call(proc { block.call })
    rescue StandardError => e
      raise unwrap ? unwrap.call(e) : e
    end

    def rejected?(error)
      rejections.any? { |klass| error.is_a?(klass) }
    end
  end

  module_function

  # docs/rails.md's initializer: its configure defaults and the options of
  # its "orders" breaker (the drill calls through Net::HTTP with 1 s
  # timeouts where rails.md's Faraday connection waits 2 s).
  def recommended
    { min_calls: 20, open_duration: 15,
      window: CircuitBreaker::SlidingWindow.new(size: 100, slow_threshold_ms: 800),
      ramp: [0.1, 0.3, 0.6, 1.0], half_open_calls: 5, advance_rate: 0.9, reopen_rate: 0.5 }
  end

  # @return [Guard] the setup named `name` (DRILL_SETUP)
  def guard(name)
    case name
    when "process" then ours("CircuitBreaker.for(name, shared: false)", shared: false)
    when "host" then ours("CircuitBreaker.for(name)")
    when "fleet" then ours("CircuitBreaker.for(name, fleet: unix socket)", fleet: ENV.fetch("DRILL_REDIS_URL"))
    when "recommended" then ours("CircuitBreaker.for(name, **docs/rails.md)") { recommended }
    when "stoplight" then stoplight
    when "semian" then semian
    when "circuitbox" then circuitbox
    else raise ArgumentError, "unknown drill setup #{name.inspect}"
    end
  end

  def ours(description, **options)
    require "circuit_breaker"
    options = yield if block_given?
    breaker = CircuitBreaker.for(ENV.fetch("DRILL_NAME", "drill-upstream"), **options)
    Guard.new(description: "#{description}: scope #{breaker.metrics[:scope]}",
              runner: ->(block) { breaker.call(&block) }, rejections: [CircuitBreaker::OpenError])
  end

  # Stoplight's defaults (3 failures in a row, 60 s cool-off, in-memory
  # store per process).
  def stoplight
    require "stoplight"
    Stoplight.default_notifiers = []
    light = Stoplight("drill-upstream").build
    Guard.new(description: "Stoplight #{Stoplight::VERSION} defaults", runner: ->(block) { light.run(&block) },
              rejections: [Stoplight::Error::RedLight])
  end

  # Semian has no defaults: its README's Net::HTTP settings (1 success
  # closes, 3 errors open, 10 s), circuit breaker only (the README turns
  # bulkheads off under threads).
  def semian
    require "semian"
    Semian.register(:drill_upstream, bulkhead: false, success_threshold: 1, error_threshold: 3, error_timeout: 10,
                                     exceptions: FAILURES)
    resource = Semian[:drill_upstream]
    Guard.new(description: "Semian #{Semian::VERSION} README settings", runner: ->(block) { resource.acquire(&block) },
              rejections: [Semian::OpenCircuitError])
  end

  # Circuitbox's defaults (50 % of at least 5 calls over 60 s, 90 s open).
  def circuitbox
    require "circuitbox"
    circuit = Circuitbox.circuit(:drill_upstream, exceptions: FAILURES)
    Guard.new(description: "Circuitbox #{Circuitbox::VERSION} defaults",
              runner: ->(block) { circuit.run(exception: true, &block) },
              rejections: [Circuitbox::OpenCircuitError],
              unwrap: ->(e) { e.is_a?(Circuitbox::ServiceFailureError) ? e.original : e })
  end
end
