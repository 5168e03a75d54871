# frozen_string_literal: true

require_relative "circuit_breaker/version"
require_relative "circuit_breaker/errors"
# The native library: lib/circuit_breaker/ in a checkout, the gem's
# extension directory once installed.
require "circuit_breaker/circuit_breaker"

# The articles' names, so their code runs unchanged.
SlidingWindow = CircuitBreaker::SlidingWindow unless defined?(SlidingWindow)
CircuitOpenError = CircuitBreaker::OpenError unless defined?(CircuitOpenError)
