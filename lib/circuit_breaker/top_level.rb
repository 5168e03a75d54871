# frozen_string_literal: true

class CircuitBreaker
  # The source articles' top-level names, `SlidingWindow` and
  # `CircuitOpenError`, for their code to run unchanged, answered only where
  # nothing else defines them (docs/configuration.md, "Top-level names").
  #
  # They are not defined when the gem loads: Ruby asks `const_missing` only
  # for a name it did not find, so an app's own `SlidingWindow` (a class
  # defined after the gem was loaded, or a Rails model, which Zeitwerk
  # registers with Module#autoload) is found first, never reopened, never a
  # superclass mismatch. A name asked for that nothing else defines becomes
  # a constant of Object then. Another `const_missing` (the classic Rails
  # autoloader) is asked before these names are answered.
  # `require "circuit_breaker/namespaced"` turns them off.
  #
  # @api private
  module TopLevelNames
    # top-level name => constant of CircuitBreaker
    NAMES = { SlidingWindow: :SlidingWindow, CircuitOpenError: :OpenError }.freeze

    @enabled = true

    class << self
      # @return [Boolean] whether the names are answered
      attr_accessor :enabled
    end

    # @param name [Symbol]
    def const_missing(name)
      target = NAMES[name]
      return super unless target && TopLevelNames.enabled

      begin
        super
      rescue NameError => e
        raise unless e.name == name

        # Nothing else defines it: it becomes a constant now, so the next
        # lookup is a plain constant read (a `rescue CircuitOpenError` on
        # the rejection path must not raise and rescue a NameError each time).
        Object.const_set(name, CircuitBreaker.const_get(target)) unless Object.const_defined?(name, false)
        Object.const_get(name)
      end
    end
  end
  private_constant :TopLevelNames

  Module.prepend(TopLevelNames)
end
