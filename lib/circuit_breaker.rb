# frozen_string_literal: true

require "timeout" # Timeout::Error always counts as a failure
require_relative "circuit_breaker/version"
require_relative "circuit_breaker/errors"
# The native library. A platform gem carries one per Ruby ABI, in
# lib/circuit_breaker/3.1/, 3.3/, ... (docs/install.md); a checkout
# (`rake compile`) and the source gem have the one they built in
# lib/circuit_breaker/. Chosen by file, not by rescuing LoadError, so that a
# library that exists but cannot load (an older glibc) says why.
require "rbconfig"
abi = RUBY_VERSION[/\A\d+\.\d+/]
abi_libraries = Dir.glob(File.join(__dir__, "circuit_breaker", "*", "circuit_breaker.#{RbConfig::CONFIG['DLEXT']}"))
# The way forward when a platform gem cannot serve this Ruby: the source gem,
# and what it needs (its install names whatever is missing, and never sends
# the user back here).
source_gem = "install the source gem, which compiles at install: `gem install circuit_breaker --platform ruby` " \
             "(Bundler: `gem \"circuit_breaker\", force_ruby_platform: true`); it needs cargo (Rust), libclang " \
             "and a C compiler, and names any that is missing with its install command (docs/install.md)"
if abi_libraries.any? { |f| File.basename(File.dirname(f)) == abi }
  begin
    require_relative "circuit_breaker/#{abi}/circuit_breaker"
  rescue LoadError => e
    # The library is there but does not load: a C library older than the
    # one it was linked for (glibc 2.34), or another libc.
    raise LoadError, "circuit_breaker: #{e.message}\nThe precompiled library needs glibc 2.34 or newer: #{source_gem}"
  end
elsif abi_libraries.empty?
  require "circuit_breaker/circuit_breaker"
else
  # A platform gem for other Rubies (RubyGems cannot exclude the ones
  # between those it carries).
  carried = abi_libraries.map { |f| File.basename(File.dirname(f)) }.sort.join(", ")
  raise LoadError, "circuit_breaker: this platform gem has its native library for Ruby #{carried}, " \
                   "not #{RUBY_VERSION}: #{source_gem}"
end
require_relative "circuit_breaker/durations"
require_relative "circuit_breaker/keys"
require_relative "circuit_breaker/configuration"
require_relative "circuit_breaker/kill_switched"
require_relative "circuit_breaker/trap_context"
require_relative "circuit_breaker/options"
require_relative "circuit_breaker/namespace"
require_relative "circuit_breaker/windows"
require_relative "circuit_breaker/manual_clock"
require_relative "circuit_breaker/permits"
require_relative "circuit_breaker/events"
require_relative "circuit_breaker/registry"
require_relative "circuit_breaker/scope"

class CircuitBreaker
  include Permits
  include Events

  # An `allow?` permit's slot of the cap (native; lib/circuit_breaker/permits.rb).
  private_constant :ConcurrencySlot

  # @return [Float] seconds the first opening lasts (`open_duration:`),
  #   before any backoff; what waiting out a forced-open breaker is
  #   measured by (the Sidekiq adapter, docs/adapters.md)
  attr_reader :open_duration

  # @return [Integer, :adaptive, nil] the `max_concurrent:` cap as given
  #   (docs/concurrency.md): nil without one; what the status page says
  #   "adaptive" by. The cap now is `metrics[:concurrency_limit]`.
  attr_reader :max_concurrent

  # @return [Boolean] whether the breaker is closed (admits every call)
  def closed?
    state == :closed
  end

  # @return [Boolean] whether the breaker rejects every call (open or forced open)
  def open?
    s = state
    s == :open || s == :forced_open
  end

  # @return [Boolean] whether the breaker is admitting probes
  def half_open?
    state == :half_open
  end

  # A snapshot: applies no timer and changes nothing (no transition, no
  # event); never raises, even on an instance whose initialize did not run.
  def inspect
    m = __peek
    head = "#<#{self.class.name || 'CircuitBreaker'}"
    return "#{head} (not initialized)>" unless m

    head = "#{head} #{(name || '(unnamed)').inspect} state=#{m[:state]}"
    return "#{head} (shared lock busy)>" unless m.key?(:total)

    format("%s total=%d error_rate=%.3f slow_call_rate=%.3f>", head, m[:total], m[:error_rate], m[:slow_call_rate])
  end
end

# Rails integration, only under Rails.
require_relative "circuit_breaker/railtie" if defined?(Rails::Railtie)
