# frozen_string_literal: true

# The documented entry (docs/adapters.md, "ActiveRecord"); the adapter's code is in
# lib/circuit_breaker/adapters/active_record.rb.
require "circuit_breaker/adapters/active_record"
