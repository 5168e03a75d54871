# frozen_string_literal: true

# The gem without the source articles' top-level names: only `CircuitBreaker`
# and the names under it. Whatever else loads the gem, before or after this
# file, `SlidingWindow` and `CircuitOpenError` then stay undefined unless
# the app defines them.
#
#   gem "circuit_breaker", require: "circuit_breaker/namespaced"   # Gemfile
require "circuit_breaker"

class CircuitBreaker
  TopLevelNames.enabled = false
end
