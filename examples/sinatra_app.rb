# frozen_string_literal: true

# A Sinatra 3 app whose GET /orders calls an upstream through a registry
# breaker (CircuitBreaker.for("orders")) and the Faraday middleware. While
# the breaker is open it answers at once, without calling the upstream:
# HTTP 503 with a Retry-After header and the last good orders it saw.
#
#   ruby examples/sinatra_app.rb            # starts a flaky upstream too; then
#   curl -i http://127.0.0.1:4567/orders    # (repeat: watch it degrade and recover)
#   PORT=9393 ruby examples/sinatra_app.rb  # another port
#
#   ORDERS_URL=http://orders.internal/api/orders ruby examples/sinatra_app.rb
#
# spec/integration/sinatra_app_spec.rb drives it with rack-test.
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "json"
require "sinatra/base"
require "circuit_breaker"
require "circuit_breaker/faraday"

# The orders endpoint.
class OrdersApp < Sinatra::Base
  # The breaker's options: registered once, at boot (a Rails app would do
  # this in config/initializers/circuit_breaker.rb).
  BREAKER_OPTIONS = {
    window: CircuitBreaker::SlidingWindow.new(size: 50, slow_threshold_ms: 500),
    min_calls: 10,
    open_duration: 15,
    ramp: [0.1, 0.3, 0.6, 1.0], half_open_calls: 10, advance_rate: 0.9, reopen_rate: 0.5
  }.freeze

  # The last good answer of the upstream, served while it is unavailable.
  class Cache
    def initialize
      @lock = Mutex.new
      @body = nil
    end

    def store(body)
      @lock.synchronize { @body = body }
    end

    def fetch
      @lock.synchronize { @body }
    end

    def clear
      store(nil)
    end
  end

  set :orders_url, ENV.fetch("ORDERS_URL", "http://127.0.0.1:9292/api/orders")
  set :breaker_name, "orders"
  set :orders_cache, Cache.new
  set :request_timeout, 2

  configure do
    CircuitBreaker.for("orders", **BREAKER_OPTIONS)
  end

  CONNECTIONS = {} # [url, breaker name, timeout] => Faraday::Connection
  CONNECTIONS_LOCK = Mutex.new

  # The Faraday connection to the upstream, through the registry breaker
  # named by the `breaker_name` setting.
  def self.connection
    key = [settings.orders_url, settings.breaker_name, settings.request_timeout]
    CONNECTIONS_LOCK.synchronize do
      CONNECTIONS[key] ||= Faraday.new do |f|
        f.use CircuitBreaker::Faraday, breaker: settings.breaker_name # 5xx: returned, recorded as failures
        f.options.timeout = settings.request_timeout
        f.options.open_timeout = settings.request_timeout
        f.adapter :net_http
      end
    end
  end

  get "/orders" do
    content_type :json
    upstream = self.class.connection.get(settings.orders_url)
    if upstream.success?
      settings.orders_cache.store(upstream.body)
      upstream.body
    else
      cached(502)
    end
  rescue CircuitBreaker::OpenError => e
    # Rejected without calling the upstream: tell clients when to come back.
    headers "Retry-After" => e.retry_after.ceil.to_s if e.retry_after
    cached(503)
  rescue Faraday::Error # connection refused, timeout: recorded as failures
    cached(502)
  end

  get "/health" do
    content_type :json
    m = CircuitBreaker.for(settings.breaker_name).metrics
    JSON.generate(breaker: settings.breaker_name, state: m[:state], error_rate: m[:error_rate],
                  slow_call_rate: m[:slow_call_rate], rejected: m[:rejected])
  end

  private

  # The last good orders (or an empty list), marked as served from cache.
  def cached(status_code)
    status status_code
    headers "X-Cache" => "stale"
    settings.orders_cache.fetch || '{"orders":[]}'
  end
end

if $PROGRAM_NAME == __FILE__
  require_relative "support/flaky_upstream"
  unless ENV["ORDERS_URL"]
    upstream = CircuitBreaker::Examples::FlakyUpstream.start(stop_after: 600)
    OrdersApp.set :orders_url, "#{upstream.url}/api/orders"
    warn "flaky upstream at #{upstream.url} (healthy, then a burst of 500s, slow, recovering, healthy: ~35 s)"
  end
  OrdersApp.set :bind, "127.0.0.1"
  OrdersApp.set :port, Integer(ENV.fetch("PORT", "4567"))
  OrdersApp.run!
end
