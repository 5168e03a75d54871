# frozen_string_literal: true

require "circuit_breaker"

# The source articles' top-level names, for their code to run unchanged
# (docs/configuration.md, "The articles' names"):
#
#   require "circuit_breaker/articles"
#   breaker = CircuitBreaker.new(window: SlidingWindow.new(size: 100))
#   begin
#     breaker.call { orders_api.get("/api/orders") }
#   rescue CircuitOpenError
#     serve_cached_orders
#   end
#
# `SlidingWindow` is CircuitBreaker::SlidingWindow and `CircuitOpenError`
# is CircuitBreaker::OpenError. A name Object already has, or has an
# autoload for (a Rails model under Zeitwerk), stays the app's: it is
# skipped with a warning, never reopened or replaced. Nothing is patched:
# these are two plain constants of Object.
{ SlidingWindow: CircuitBreaker::SlidingWindow, CircuitOpenError: CircuitBreaker::OpenError }.each do |name, target|
  if Object.autoload?(name)
    warn "circuit_breaker/articles: #{name} is left to the app's autoload (#{Object.autoload?(name)}); " \
         "write #{target.name} for the gem's"
  elsif !Object.const_defined?(name, false)
    Object.const_set(name, target)
  elsif !Object.const_get(name, false).equal?(target)
    warn "circuit_breaker/articles: #{name} is already defined by the app and stays the app's; " \
         "write #{target.name} for the gem's"
  end
end
