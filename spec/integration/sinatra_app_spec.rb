# frozen_string_literal: true

require "rack/test"
require "securerandom"
require_relative "../../examples/support/flaky_upstream"

# examples/sinatra_app.rb through rack-test, against a real upstream on
# 127.0.0.1. Each example registers its own breaker (a ManualClock, a
# unique name) and points the app at it.
RSpec.describe "examples/sinatra_app.rb", :integration do
  include Rack::Test::Methods

  before(:all) do
    require_relative "../../examples/sinatra_app"
    # A script that stays healthy for the whole file; the fixed routes fail on demand.
    @upstream = CircuitBreaker::Examples::FlakyUpstream.start(healthy: 600, stop_after: 600)
  end

  after(:all) { @upstream&.stop }

  let(:upstream) { @upstream }
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:name) { "orders-spec-#{SecureRandom.hex(4)}" }
  let(:breaker) do
    CircuitBreaker.for(name, window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 3,
                             open_duration: 10, clock: clock)
  end

  def app
    OrdersApp
  end

  def point_at(path)
    OrdersApp.set :orders_url, path.start_with?("http") ? path : "#{upstream.url}#{path}"
  end

  before do
    OrdersApp.set :environment, :test
    OrdersApp.set :breaker_name, breaker.name
    OrdersApp.orders_cache.clear
    point_at("/api/orders")
  end

  after do
    OrdersApp.set :breaker_name, "orders" if defined?(OrdersApp)
  end

  it "serves the upstream's orders while it is healthy, through the registry breaker" do
    get "/orders"

    expect(last_response.status).to eq(200)
    expect(JSON.parse(last_response.body)["orders"]).not_to be_empty
    expect(breaker.metrics).to include(total: 1, failures: 0)
  end

  it "answers 502 with the cached orders when the upstream fails, counting the failure" do
    get "/orders"
    good = last_response.body
    point_at("/status/500")

    get "/orders"

    expect(last_response.status).to eq(502)
    expect(last_response.body).to eq(good)
    expect(last_response.headers["X-Cache"]).to eq("stale")
    expect(breaker.metrics).to include(total: 2, failures: 1)
  end

  it "answers 503 with Retry-After and the cached orders while open, without calling the upstream" do
    get "/orders"
    good = last_response.body
    point_at("/status/503")
    3.times { get "/orders" }
    expect(breaker.state).to eq(:open)
    before = upstream.requests

    clock.advance(3.5)
    get "/orders"

    expect(last_response.status).to eq(503)
    expect(last_response.headers["Retry-After"]).to eq(breaker.retry_after.ceil.to_s)
    expect(last_response.headers["Retry-After"]).to eq("7")
    expect(last_response.body).to eq(good)
    expect(upstream.requests).to eq(before)
  end

  it "answers 503 with an empty list when open before any good answer" do
    breaker.trip!

    get "/orders"

    expect(last_response.status).to eq(503)
    expect(JSON.parse(last_response.body)).to eq("orders" => [])
    expect(last_response.headers["Retry-After"]).to eq("10")
  end

  it "counts a refused connection as a failure and answers 502" do
    port = TCPServer.new("127.0.0.1", 0).then { |s| s.addr[1].tap { s.close } }
    point_at("http://127.0.0.1:#{port}/orders")

    get "/orders"

    expect(last_response.status).to eq(502)
    expect(breaker.metrics).to include(total: 1, failures: 1)
  end

  it "recovers: after open_duration a probe reaches the upstream and closes the breaker" do
    breaker.trip!
    clock.advance(10)

    get "/orders"

    expect(last_response.status).to eq(200)
    get "/orders" # the default ramp judges two probes
    expect(breaker.state).to eq(:closed)
  end

  it "reports the breaker on /health" do
    breaker.trip!

    get "/health"

    expect(JSON.parse(last_response.body)).to include("breaker" => name, "state" => "open")
  end
end
