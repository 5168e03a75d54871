# frozen_string_literal: true

# The status page in a config.ru, beside the app (docs/operating.md):
#
#   rackup examples/status_page.ru    # then open http://127.0.0.1:9292/circuit_breakers/
#
# Actions (trip, reset, force open, disable) are allowed from this machine
# only; the app decides who may act, the gem refuses every action without
# an authorize: hook.
require "circuit_breaker/dashboard"

CircuitBreaker.for("payments", min_calls: 10, open_duration: 30)
CircuitBreaker.for("orders", window: CircuitBreaker::SlidingWindow.new(size: 50))

map "/circuit_breakers" do
  run CircuitBreaker::Dashboard.new(authorize: ->(request) { %w[127.0.0.1 ::1].include?(request.ip) })
end

map "/" do
  run ->(_env) { [200, { "content-type" => "text/plain" }, ["the app\n"]] }
end
