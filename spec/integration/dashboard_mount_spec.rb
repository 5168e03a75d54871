# frozen_string_literal: true

require "rack/mock"
require "circuit_breaker/dashboard"

# The status page mounted the three ways apps mount Rack apps: Rails's
# `mount` (ActionDispatch routes), next to a Sinatra app in a config.ru
# (Rack::URLMap, what `map` builds; examples/status_page.ru is served in
# dashboard_browser_spec.rb). Forms and the cookie follow the mount point.
RSpec.describe CircuitBreaker::Dashboard, "mounted", :integration do
  let(:breaker) { CircuitBreaker.new(name: "payments") }
  let(:dashboard) { described_class.new(authorize: ->(_req) { true }, breakers: { "payments" => breaker }) }

  # Loads the page under `at`, then presses trip through the same app.
  def trip_through(app, at)
    browser = Rack::MockRequest.new(app)
    page = browser.get("#{at}/")
    expect(page.status).to eq(200)
    expect(page.headers["set-cookie"]).to include("path=#{at};")
    form = page.body[%r{action="([^"]+/trip\?[^"]*)"}, 1]
    expect(form).to eq("#{at}/breakers/trip?name=payments")
    token = page.body[/name="csrf_token" value="(\h+)"/, 1]
    cookie = page.headers["set-cookie"][/\Acircuit_breaker_csrf=\h+/]
    response = browser.post(form, "HTTP_COOKIE" => cookie, params: { csrf_token: token })
    expect([response.status, response.headers["location"]]).to eq([303, "#{at}/"])
    expect(breaker.state).to eq(:open)
  end

  it "works under Rails's mount" do
    # ActionDispatch loads nokogiri (spec/support/debian_packages.rb).
    DebianPackages.skip_unless_usable(self, "ruby-nokogiri")
    require "action_dispatch"
    app = dashboard
    routes = ActionDispatch::Routing::RouteSet.new
    routes.draw { mount app, at: "/ops/circuit_breakers" }
    trip_through(routes, "/ops/circuit_breakers")
  end

  it "works beside a Sinatra app in a config.ru map" do
    require "sinatra/base"
    orders = Class.new(Sinatra::Base) { get("/orders") { "orders" } }
    app = Rack::URLMap.new("/circuit_breakers" => dashboard, "/" => orders)
    expect(Rack::MockRequest.new(app).get("/orders").body).to eq("orders")
    trip_through(app, "/circuit_breakers")
  end
end
