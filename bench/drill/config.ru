# frozen_string_literal: true

# The drill's app (bench/drill/run.rb): each request calls the upstream over
# Net::HTTP (1 s timeouts) through the breaker of DRILL_SETUP, built once
# at boot, before Puma forks its workers (bench/drill/puma.rb).
#
# 200: the upstream answered; 503: the breaker refused the call; 502: the
# upstream answered 5xx or refused; 504: the call waited for the read
# timeout. GET /page is the app's unrelated page: it calls nothing, and
# waits only when every thread of the workers is taken. GET /ready
# answers without calling the upstream either.

require "net/http"
require_relative "setups"

upstream = URI(ENV.fetch("DRILL_UPSTREAM"))
guard = Drill.guard(ENV.fetch("DRILL_SETUP"))
warn "drill app: #{guard.description}"

# No retry: Net::HTTP's default retries an idempotent GET once after a read
# timeout (each hung call would wait 2 s and reach the upstream twice);
# Faraday's Net::HTTP adapter turns that off too.
call_upstream = lambda do
  Net::HTTP.start(upstream.host, upstream.port, open_timeout: 1, read_timeout: 1, max_retries: 0) do |http|
    response = http.get("/")
    raise Drill::UpstreamFailed, "upstream answered #{response.code}" if response.code.to_i >= 500

    response.body
  end
end

run(lambda do |env|
  case env["PATH_INFO"]
  when "/page" then next [200, {}, ["page"]]
  when "/ready" then next [200, {}, ["ready"]]
  end

  body = guard.run(&call_upstream)
  [200, {}, [body]]
rescue Net::ReadTimeout
  [504, {}, ["timeout"]]
rescue StandardError => e
  [guard.rejected?(e) ? 503 : 502, {}, [e.class.name]]
end)
