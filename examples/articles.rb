#!/usr/bin/env ruby
# frozen_string_literal: true

# The articles' snippet (docs/semantics.md), unchanged, against a real
# flaky upstream. "http://orders.internal" is mapped onto the upstream by
# Faraday's default connection (the snippet calls Faraday.get), which also
# raises on 5xx (`response :raise_error`), so that the plain breaker of the
# snippet counts them as failures.
#
#   ruby examples/articles.rb                       # healthy 2 s, then 500s until the breaker has opened
#   ORDERS_UPSTREAM=http://127.0.0.1:9292 ruby examples/articles.rb
#   ARTICLES_SCALE=0.3 ruby examples/articles.rb    # shorter
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "faraday"
require "uri"
# The articles' top-level SlidingWindow and CircuitOpenError, for the snippet below.
require "circuit_breaker/articles"
require_relative "support/flaky_upstream"

scale = Float(ENV.fetch("ARTICLES_SCALE", "1.0"))
upstream = nil
ORDERS_UPSTREAM = ENV.fetch("ORDERS_UPSTREAM") do
  # healthy 2 s, then 500s for as long as the example runs: the snippet's
  # breaker (defaults: min_calls 20, error rate 50%, open 30 s) opens and
  # stays open, however slowly a loaded machine sends the requests.
  upstream = CircuitBreaker::Examples::FlakyUpstream.start(scale: scale, healthy: 2, error_burst: 600, slow: 0,
                                                           recovering: 0, recovered: 0)
  upstream.url
end

# Sends requests for orders.internal to ORDERS_UPSTREAM.
class OrdersInternal < Faraday::Middleware
  def call(env)
    if env.url.host == "orders.internal"
      target = URI(ORDERS_UPSTREAM)
      env.url.scheme = target.scheme
      env.url.host = target.host
      env.url.port = target.port
    end
    @app.call(env)
  end
end

Faraday.default_connection = Faraday.new do |f|
  f.use OrdersInternal
  f.response :raise_error
  f.options.timeout = 2
  f.adapter :net_http
end

$served = Hash.new(0) # rubocop:disable Style/GlobalVars

def serve_cached_orders
  $served[:cached] += 1 # rubocop:disable Style/GlobalVars
  '{"orders":[],"cached":true}'
end

# A loaded machine may reach the upstream after its healthy start: a 500
# (Faraday::ServerError, which the snippet leaves to its caller) is then
# counted. The snippet stays unindented inside, to be verbatim.
begin # rubocop:disable Layout/IndentationWidth
# ---- the articles' snippet, verbatim ----------------------------------------
require "circuit_breaker"

breaker = CircuitBreaker.new(window: SlidingWindow.new(size: 100))
begin
  response = breaker.call { Faraday.get("http://orders.internal/api/orders") }
rescue CircuitOpenError
  serve_cached_orders          # degrade
end
# ---- end of the snippet -----------------------------------------------------
rescue Faraday::Error
  $served[:failed] += 1 # rubocop:disable Style/GlobalVars
end

$served[:upstream] += 1 if response # rubocop:disable Style/GlobalVars
breaker.on_state_change { |e| puts format("  %s -> %s (%s)", e.from, e.to, e.reason) }
puts "the snippet ran against #{ORDERS_UPSTREAM}: #{response&.status.inspect}; now the same call in a loop"

# Until the breaker has opened and a call was served from the cache (at most
# 2,000 calls or a minute, whichever comes first).
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
2_000.times do
  break if breaker.open? && $served[:cached].positive? # rubocop:disable Style/GlobalVars
  break if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

  response = nil
  begin
    # The snippet's call, verbatim.
    begin
      response = breaker.call { Faraday.get("http://orders.internal/api/orders") }
    rescue CircuitOpenError
      serve_cached_orders          # degrade
    end
    $served[:upstream] += 1 if response # rubocop:disable Style/GlobalVars
  rescue Faraday::Error
    $served[:failed] += 1 # rubocop:disable Style/GlobalVars
  end
  sleep 0.02
end

served = $served # rubocop:disable Style/GlobalVars
puts format("answered by the upstream %d, failed %d, served from cache %d (never sent); breaker %s",
            served[:upstream], served[:failed], served[:cached], breaker.state)
puts "upstream requests: #{upstream.requests}" if upstream
upstream&.stop
