# frozen_string_literal: true

# The documented entry (docs/adapters.md, "Redis"); the adapter's code is in
# lib/circuit_breaker/adapters/redis.rb.
require "circuit_breaker/adapters/redis"
