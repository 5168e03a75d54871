# frozen_string_literal: true

# The documented entry (docs/adapters.md, "Net::HTTP"); the adapter's code is in
# lib/circuit_breaker/adapters/net_http.rb.
require "circuit_breaker/adapters/net_http"
