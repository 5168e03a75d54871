# frozen_string_literal: true

# The status page in a config.ru, beside the app (docs/operating.md):
#
#   BREAKERS_PASSWORD=secret rackup examples/status_page.ru
#   # then open http://127.0.0.1:9292/circuit_breakers/ as "ops", password "secret"
#
# The page sits behind HTTP Basic authentication, and actions (trip, reset,
# force open, disable) are allowed to the "ops" user it let in; the app
# decides who may act, the gem refuses every action without an authorize:
# hook. Not by address: behind a proxy on the same host (nginx, a load
# balancer's agent) every request comes from 127.0.0.1.
require "rack/auth/basic"
require "rack/utils"
require "circuit_breaker/dashboard"

CircuitBreaker.for("payments", min_calls: 10, open_duration: 30)
CircuitBreaker.for("orders", window: CircuitBreaker::SlidingWindow.new(size: 50))

map "/circuit_breakers" do
  use Rack::Auth::Basic, "circuit breakers" do |user, password|
    user == "ops" && Rack::Utils.secure_compare(password, ENV.fetch("BREAKERS_PASSWORD"))
  end
  run CircuitBreaker::Dashboard.new(authorize: ->(request) { request.get_header("REMOTE_USER") == "ops" })
end

map "/" do
  run ->(_env) { [200, { "content-type" => "text/plain" }, ["the app\n"]] }
end
