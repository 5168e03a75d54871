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

  # docs/rails.md's initializer without its cap: its configure defaults and
  # the options of its "orders" breaker (the drill calls through Net::HTTP
  # with 1 s timeouts where rails.md's Faraday connection waits 2 s).
  def recommended
    { min_calls: 20, open_duration: 15,
      window: CircuitBreaker::SlidingWindow.new(size: 100, slow_threshold_ms: 800),
      ramp: [0.1, 0.3, 0.6, 1.0], half_open_calls: 5, advance_rate: 0.9, reopen_rate: 0.5 }
  end

  # docs/rails.md's initializer as it is: its settings with a host-wide cap
  # of half the host's Puma threads, 4 of 8 here (DRILL_CAP), so at least 4
  # are left to the pages that do not call this dependency.
  def recommended_cap
    recommended.merge(max_concurrent: cap)
  end

  # The host-wide cap of recommended-cap, and the tickets of
  # semian-bulkhead (DRILL_CAP, 4 by default).
  def cap
    Integer(ENV.fetch("DRILL_CAP", "4"))
  end

  # @return [Guard] the setup named `name` (DRILL_SETUP)
  def guard(name)
    activate_peer
    case name
    when "process" then ours("CircuitBreaker.for(name, shared: false)", shared: false)
    when "host" then ours("CircuitBreaker.for(name)")
    when "fleet" then ours("CircuitBreaker.for(name, fleet: unix socket)", fleet: ENV.fetch("DRILL_REDIS_URL"))
    when "host-cap" then ours("CircuitBreaker.for(name, max_concurrent: #{cap})", max_concurrent: cap)
    when "recommended" then ours("CircuitBreaker.for(name, **docs/rails.md)") { recommended }
    when "recommended-cap"
      ours("CircuitBreaker.for(name, **docs/rails.md, max_concurrent: #{cap})") { recommended_cap }
    when "stoplight" then stoplight
    when "semian" then semian
    when "semian-bulkhead" then semian(bulkhead: true)
    when "circuitbox" then circuitbox
    else raise ArgumentError, "unknown drill setup #{name.inspect}"
    end
  end

  # A peer from its installed gem (DRILL_GEM=name=version, set by
  # bench/drill/peers.rb); one from DRILL_SOURCES is on RUBYLIB instead.
  def activate_peer
    name, version = ENV.fetch("DRILL_GEM", "").split("=", 2)
    gem(name, "= #{version}") if name && version
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
  # closes, 3 errors open, 10 s). Circuit breaker only (its README turns
  # bulkheads off under threads), or with `bulkhead:` its bulkhead too,
  # the way the README allows it (processes of one thread each, Puma's 8
  # workers × 1 thread here): DRILL_CAP tickets (4) for the host, a call
  # finding none rejected at once (timeout 0), as ours is at its cap.
  def semian(bulkhead: false)
    require "semian"
    options = { success_threshold: 1, error_threshold: 3, error_timeout: 10, exceptions: FAILURES }
    description = "Semian #{Semian::VERSION} README settings"
    if bulkhead
      options.update(bulkhead: true, tickets: cap, timeout: 0)
      description += ", bulkhead: #{cap} tickets host-wide, timeout 0, " \
                     "#{ENV.fetch('DRILL_WORKERS')} workers × #{ENV.fetch('DRILL_THREADS')} thread"
    else
      options[:bulkhead] = false
    end
    resource = Semian.register(semian_name, **options)
    Guard.new(description: description, runner: ->(block) { resource.acquire(&block) },
              rejections: [Semian::OpenCircuitError, *(Semian::TimeoutError if bulkhead)])
  end

  # One name per run: a bulkhead's SysV semaphore set outlives the
  # processes (bench/drill/run.rb removes it after the run).
  def semian_name
    ENV.fetch("DRILL_NAME", "drill-upstream").tr("-", "_").to_sym
  end

  # Removes the bulkhead's semaphore set (run by bench/drill/run.rb once
  # Puma has stopped).
  def destroy_semian_bulkhead
    activate_peer
    require "semian"
    Semian::Resource.new(semian_name, tickets: 1).destroy
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
