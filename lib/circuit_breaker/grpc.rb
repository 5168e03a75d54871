# frozen_string_literal: true

# The documented entry (docs/adapters.md, "gRPC"); the adapter's code is in
# lib/circuit_breaker/adapters/grpc.rb.
require "circuit_breaker/adapters/grpc"
