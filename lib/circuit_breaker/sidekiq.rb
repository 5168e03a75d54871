# frozen_string_literal: true

# The documented entry (docs/adapters.md, "Sidekiq"); the adapter's code is in
# lib/circuit_breaker/adapters/sidekiq.rb.
require "circuit_breaker/adapters/sidekiq"
