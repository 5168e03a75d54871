# frozen_string_literal: true

# Deprecated: the gem defines no top-level name unless
# `require "circuit_breaker/articles"` asks for them, so this file only
# loads the gem. Kept so that `gem "circuit_breaker", require:
# "circuit_breaker/namespaced"` in a Gemfile keeps working.
warn 'circuit_breaker/namespaced is deprecated and does nothing more than require "circuit_breaker": ' \
     "the gem has no top-level names unless you require \"circuit_breaker/articles\"",
     category: :deprecated
require "circuit_breaker"
