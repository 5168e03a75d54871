# frozen_string_literal: true

require "json"
require "rack/mock"
require "rack/test"
require "circuit_breaker/dashboard"

# docs/operating.md: the status page and its controls, through rack-test (the
# browser check is spec/integration/dashboard_browser_spec.rb).
RSpec.describe CircuitBreaker::Dashboard do
  include Rack::Test::Methods

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:payments) { build_breaker(clock: clock, name: "payments", min_calls: 2, open_duration: 30) }
  let(:odd) { build_breaker(clock: clock, name: "a/b <c>", min_calls: 2) }
  let(:asked) { [] }
  let(:allow) { true }
  let(:hook) { ->(request, action, name) { asked << [request.class, action, name]; allow } }
  let(:dashboard) { described_class.new(authorize: hook, breakers: { "payments" => payments, "a/b <c>" => odd }) }
  let(:app) { dashboard }

  # The token of the page's forms (and, in rack-test's cookie jar, its cookie).
  def token
    get "/"
    last_response.body[/name="csrf_token" value="(\h+)"/, 1] or raise "no token in the page"
  end

  def post_action(path, token)
    post path, { csrf_token: token }
  end

  describe "GET /" do
    it "shows every breaker: state, rates, counters, retry-after, the opening rates and a chart" do
      payments.call { :ok }
      fail_calls(payments, 1)
      clock.advance(10)
      get "/"
      expect(last_response.status).to eq(200)
      expect(last_response.content_type).to eq("text/html; charset=utf-8")
      row = last_response.body[%r{<tr id="breaker-payments".*?</tr>}m]
      expect(row).to include('data-state="open"', "20.0 s", "50.0% errors, 0.0% slow", "<svg", "aria-label=\"recent states of payments\"")
      expect(row.scan(%r{<td>(\d+)</td>}).flatten).to eq(%w[2 1 1 0 0 1]) # calls, successes, failures, slow, rejected, opened
      expect(row.scan(/<form method="post" action="([^"]+)"/).flatten)
        .to eq(%w[trip reset force_open disable].map { |a| "/breakers/#{a}?name=payments" })
    end

    it "shows no cap for a breaker without max_concurrent:" do
      get "/"
      row = last_response.body[%r{<tr id="breaker-payments".*?</tr>}m]
      expect(row).to include('<td><span class="cap">no cap</span></td>')
    end

    it "shows the calls in flight against the cap and the calls refused at it (docs/concurrency.md)" do
      capped = build_breaker(clock: clock, name: "capped", max_concurrent: 2)
      page = Rack::MockRequest.new(described_class.new(breakers: { "capped" => capped }))
      body = nil
      # Two calls in flight (one inside the other), a third refused.
      capped.call do
        capped.call do
          expect { capped.call { :not_run } }.to raise_error(CircuitBreaker::ConcurrencyLimitError)
          body = page.get("/").body
        end
      end
      cell = body[%r{<td><span class="cap".*?</td>}m]
      expect(cell).to eq('<td><span class="cap" data-in-flight="2" data-limit="2" data-adaptive="false">2 / 2 in flight' \
                         '</span><br><span class="limited">1 limited</span></td>')
      expect(page.get("/").body).to include('data-in-flight="0" data-limit="2" data-adaptive="false">0 / 2 in flight<')
    end

    it "says adaptive for max_concurrent: :adaptive, beside the cap it has now" do
      adaptive = build_breaker(clock: clock, name: "adaptive", max_concurrent: :adaptive, adaptive_initial: 6)
      body = adaptive.call { Rack::MockRequest.new(described_class.new(breakers: { "adaptive" => adaptive })).get("/").body }
      expect(body).to include('<span class="cap" data-in-flight="1" data-limit="6" data-adaptive="true">1 / 6 in flight, adaptive</span>')
    end

    it "escapes names in HTML and URLs, and links the forms under the mount point" do
      get "/", {}, "SCRIPT_NAME" => "/ops/breakers"
      body = last_response.body
      expect(body).to include("<td>a/b &lt;c&gt;</td>", 'action="/ops/breakers/breakers/trip?name=a%2Fb+%3Cc%3E"')
      expect(body).not_to include("<c>")
    end

    it "gives breakers named . and .. buttons that act on them (the name is in the query, not a dot segment)" do
      dots = { "." => build_breaker(name: "."), ".." => build_breaker(name: "..") }
      session = Rack::Test::Session.new(Rack::MockSession.new(described_class.new(authorize: ->(_) { true }, breakers: dots)))
      session.get "/"
      body = session.last_response.body
      t = body[/name="csrf_token" value="(\h+)"/, 1]
      actions = body.scan(/<form method="post" action="([^"]+)"/).flatten.grep(/trip/)
      expect(actions).to eq(["/breakers/trip?name=.", "/breakers/trip?name=.."])
      # As a browser resolves them against the page: no dot segment moves them.
      expect(actions.map { |a| URI.join("http://example.org/", a).path }).to eq(%w[/breakers/trip] * 2)
      actions.each do |a|
        session.post a, { csrf_token: t }
        expect(session.last_response.status).to eq(303)
      end
      expect(dots.values.map(&:state)).to eq(%i[open open])
    end

    it "serves the page, the JSON and the Prometheus text with names in any encoding, even invalid bytes" do
      names = ["caf\xE9".dup.force_encoding("ISO-8859-1"), "\xFF\xFEx".b, "bad\xC3".dup.force_encoding("UTF-8"),
               "日本".encode("EUC-JP"), :sym]
      breakers = names.to_h { |n| [n, build_breaker] }
      session = Rack::Test::Session.new(Rack::MockSession.new(described_class.new(authorize: ->(_) { true }, breakers: breakers)))
      session.get "/"
      page = session.last_response
      session.get "/status.json"
      json = JSON.parse(session.last_response.body)
      session.get "/metrics"
      metrics = session.last_response.body

      expect(page.status).to eq(200)
      expect(page.body).to include("<td>café</td>", "<td>\uFFFD\uFFFDx</td>", "<td>bad\uFFFD</td>", "<td>日本</td>", "<td>sym</td>")
      expect(json["breakers"].map { |b| b["name"] }).to eq(["café", "\uFFFD\uFFFDx", "bad\uFFFD", "日本", "sym"])
      expect(metrics).to include('circuit_breaker_state{breaker="café",state="closed"} 1',
                                 "circuit_breaker_state{breaker=\"\uFFFD\uFFFDx\",state=\"closed\"} 1")
      expect(metrics).to be_valid_encoding
      # Each button reaches its own breaker, invalid bytes included.
      t = page.body[/name="csrf_token" value="(\h+)"/, 1]
      page.body.scan(/<form method="post" action="([^"]+)"/).flatten.grep(/trip/).each do |a|
        session.post CGI.unescapeHTML(a), { csrf_token: t }
        expect(session.last_response.status).to eq(303)
      end
      expect(breakers.values.map(&:state)).to all(eq(:open))
    end

    it "sets the CSRF cookie (HttpOnly, SameSite=Strict, on the mount path) and keeps a valid one" do
      get "/", {}, "SCRIPT_NAME" => "/ops"
      cookie = last_response.headers["set-cookie"]
      expect(cookie).to match(%r{\Acircuit_breaker_csrf=\h{128}; path=/ops; HttpOnly; SameSite=Strict\z}i)
      first = token
      get "/"
      expect(last_response.body).to include(%(value="#{first}"))
      expect(last_response.headers["set-cookie"]).to include(first)
    end

    it "sends headers that keep the page out of frames and caches" do
      get "/"
      expect(last_response.headers).to include("x-frame-options" => "DENY", "cache-control" => "no-store")
      expect(last_response.headers["content-security-policy"]).to include("frame-ancestors 'none'", "form-action 'self'")
    end

    it "charts the states seen, in order" do
      get "/"
      trip!(payments)
      get "/"
      payments.reset!
      get "/"
      chart = last_response.body[%r{<tr id="breaker-payments".*?</svg>}m]
      expect(chart.scan(/<title>(\w+) /).flatten).to eq(%w[closed open closed])
    end

    it "says so when there are no breakers" do
      app = described_class.new(breakers: {})
      expect(Rack::MockRequest.new(app).get("/").body).to include("no breakers registered")
    end

    it "shows CircuitBreaker.registry by default" do
      CircuitBreaker.for("registered-#{Process.pid}", clock: clock)
      expect(Rack::MockRequest.new(described_class.new).get("/").body).to include("registered-#{Process.pid}")
    ensure
      CircuitBreaker.forget_all!
    end
  end

  describe "GET /status.json and /metrics" do
    it "gives every breaker's metrics and recent states as JSON" do
      trip!(payments)
      get "/status.json"
      expect(last_response.content_type).to eq("application/json")
      doc = JSON.parse(last_response.body)
      entry = doc["breakers"].find { |b| b["name"] == "payments" }
      expect(entry["metrics"]).to include("state" => "open", "opened" => 1, "failures_total" => 2,
                                          "tripped_error_rate" => 1.0, "retry_after" => 30.0, "counters" => "process")
      expect(entry["history"]).to eq([{ "state" => "open", "seconds_ago" => entry["history"][0]["seconds_ago"] }])
    end

    it "serves the Prometheus text" do
      get "/metrics"
      expect(last_response.content_type).to eq(CircuitBreaker::Prometheus::CONTENT_TYPE)
      expect(last_response.body).to include('circuit_breaker_state{breaker="payments",state="closed"} 1')
    end

    it "applies the dashboard's labels: to /metrics, checked when it is built" do
      labelled = Rack::MockRequest.new(described_class.new(breakers: { "payments" => payments }, labels: { worker: 3 }))

      expect(labelled.get("/metrics").body).to include('circuit_breaker_retry_after_seconds{breaker="payments",worker="3"} 0.0')
      expect { described_class.new(labels: [1]) }.to raise_error(TypeError, /labels must be a Hash/)
    end

    it "says who answered, and whose state each breaker's is: this worker's only, or the host's" do
      shared = CircuitBreaker.new(name: "host-wide", shared: "spec-dashboard-scope-#{Process.pid}") if CircuitBreaker.shared_supported?
      both = Rack::MockRequest.new(described_class.new(breakers: { "payments" => payments, "host-wide" => shared }.compact))

      doc = JSON.parse(both.get("/status.json").body)
      entry = doc["breakers"].find { |b| b["name"] == "payments" }
      expect(doc).to include("host" => Socket.gethostname, "pid" => Process.pid)
      expect(entry).to include("scope" => "process", "seen_by" => "this worker only (pid #{Process.pid})")
      expect(entry["metrics"]).to include("scope" => "process")
      page = both.get("/").body
      expect(page).to include("served by pid #{Process.pid} on #{Socket.gethostname}")
      expect(page[%r{<tr id="breaker-payments".*?</tr>}m]).to include("this worker only (pid #{Process.pid})")
      next unless shared

      expect(doc["breakers"].find { |b| b["name"] == "host-wide" })
        .to include("scope" => "host", "seen_by" => "every process of #{Socket.gethostname}")
      expect(page[%r{<tr id="breaker-host-wide".*?</tr>}m]).to include(">host-wide<")
    end

    it "answers 405 to other methods and 404 elsewhere" do
      post "/status.json"
      expect([last_response.status, last_response.headers["allow"]]).to eq([405, "GET, HEAD"])
      delete "/"
      expect(last_response.status).to eq(405)
      get "/nope"
      expect(last_response.status).to eq(404)
    end
  end

  describe "actions" do
    it "are accepted on POST with the hook's consent and the page's token; the hook sees the action and breaker" do
      t = token
      post_action "/breakers/payments/trip", t
      expect(last_response.status).to eq(303)
      expect(last_response.headers["location"]).to eq("/")
      expect(payments.state).to eq(:open)
      expect(asked).to eq([[Rack::Request, :trip, "payments"]])
    end

    it "perform trip, force open, disable and reset, each once" do
      t = token
      events = transitions_of(payments)
      %w[trip force_open disable reset].each do |action|
        post_action "/breakers/payments/#{action}", t
        expect(last_response.status).to eq(303)
      end
      expect(moves(events).map { |_, to, reason| [to, reason] })
        .to eq([%i[open manual], %i[forced_open manual], %i[disabled manual], %i[closed manual]])
    end

    it "answer JSON when asked, with the token in a header" do
      t = token
      post "/breakers/a%2Fb%20%3Cc%3E/force_open", {}, "HTTP_X_CSRF_TOKEN" => t, "HTTP_ACCEPT" => "application/json"
      expect(last_response.status).to eq(200)
      expect(JSON.parse(last_response.body)).to include("name" => "a/b <c>", "action" => "force_open")
      expect(odd.state).to eq(:forced_open)
    end

    it "are refused without an authorize: hook, whatever the request" do
      app = described_class.new(breakers: { "payments" => payments })
      session = Rack::Test::Session.new(Rack::MockSession.new(app))
      session.get "/"
      t = session.last_response.body[/name="csrf_token" value="(\h+)"/, 1]
      session.post "/breakers/payments/trip", { csrf_token: t }
      expect(session.last_response.status).to eq(403)
      expect(session.last_response.body).to include("give CircuitBreaker::Dashboard.new an authorize: hook")
      expect(payments.state).to eq(:closed)
    end

    context "when the hook says no" do
      let(:allow) { nil }

      it "are refused" do
        post_action "/breakers/payments/trip", token
        expect([last_response.status, last_response.body]).to eq([403, "refused by the authorize: hook\n"])
        expect(payments.state).to eq(:closed)
      end
    end

    it "take a hook of one argument, the request" do
      seen = []
      app = described_class.new(authorize: ->(req) { seen << req.path_info }, breakers: { "payments" => payments })
      session = Rack::Test::Session.new(Rack::MockSession.new(app))
      session.get "/"
      session.post "/breakers/payments/trip", { csrf_token: session.last_response.body[/value="(\h{128})"/, 1] }
      expect([session.last_response.status, seen]).to eq([303, ["/breakers/payments/trip"]])
    end

    it "take a hook of three arguments, and one whose optional arguments take either form" do
      seen = []
      full = described_class.new(authorize: ->(req, action, name) { seen << [req.path_info, action, name] },
                                 breakers: { "payments" => payments })
      session = Rack::Test::Session.new(Rack::MockSession.new(full))
      session.get "/"
      session.post "/breakers/payments/trip", { csrf_token: session.last_response.body[/value="(\h{128})"/, 1] }
      expect([session.last_response.status, seen]).to eq([303, [["/breakers/payments/trip", :trip, "payments"]]])
      expect { described_class.new(authorize: ->(req, action = nil) { [req, action] }) }.not_to raise_error
      expect { described_class.new(authorize: ->(*args) { args }) }.not_to raise_error
    end

    it "refuse, when the dashboard is built, a hook of neither 1 nor 3 arguments, naming the forms" do
      # Called with three arguments, a two-argument lambda raised, and every
      # action was refused (403) without a word.
      [->(req, action) { [req, action] }, ->(req, action, name, more) { [req, action, name, more] }, -> { true },
       proc { |req, action| [req, action] }].each do |hook|
        expect { described_class.new(authorize: hook) }
          .to raise_error(ArgumentError, /authorize: must take 1 argument .* or 3 .*arity #{hook.arity}/)
      end
      caller_object = Object.new
      def caller_object.call(req, action) = [req, action]
      expect { described_class.new(authorize: caller_object) }.to raise_error(ArgumentError, /arity 2/)
    end

    it "are refused on GET (and every method but POST), before the hook is asked" do
      t = token
      %i[get put delete patch].each do |verb|
        send(verb, "/breakers/payments/trip", { csrf_token: t })
        expect([last_response.status, last_response.headers["allow"]]).to eq([405, "POST"])
      end
      expect(asked).to be_empty
      expect(payments.state).to eq(:closed)
    end

    it "are refused without the token, with a wrong one, or without the cookie" do
      t = token
      post "/breakers/payments/trip"
      expect(last_response.status).to eq(403)
      post_action "/breakers/payments/trip", t.reverse
      expect(last_response.status).to eq(403)
      clear_cookies
      post_action "/breakers/payments/trip", t
      expect(last_response.status).to eq(403)
      expect(last_response.body).to eq("refused: invalid or missing CSRF token\n")
      expect([asked, payments.state]).to eq([[], :closed])
    end

    it "are refused with an equal cookie and field the dashboard never issued (a cookie planted by a sibling site)" do
      planted = "ab" * 64
      set_cookie "circuit_breaker_csrf=#{planted}"
      post_action "/breakers/payments/trip", planted
      expect([last_response.status, last_response.body]).to eq([403, "refused: invalid or missing CSRF token\n"])
      # Nor does another dashboard's token pass (each signs with its secret).
      other = Rack::Test::Session.new(Rack::MockSession.new(described_class.new(breakers: {}, secret: "x" * 32)))
      other.get "/"
      foreign = other.last_response.headers["set-cookie"][/circuit_breaker_csrf=(\h+)/, 1]
      set_cookie "circuit_breaker_csrf=#{foreign}"
      post_action "/breakers/payments/trip", foreign
      expect(last_response.status).to eq(403)
      expect([asked, payments.state]).to eq([[], :closed])
    end

    it "accept the token of another process given the same secret: (a server's workers)" do
      secret = "s" * 32
      issuer = Rack::Test::Session.new(Rack::MockSession.new(described_class.new(breakers: {}, secret: secret)))
      issuer.get "/"
      t = issuer.last_response.headers["set-cookie"][/circuit_breaker_csrf=(\h+)/, 1]
      worker = Rack::Test::Session.new(Rack::MockSession.new(described_class.new(authorize: hook, breakers: { "payments" => payments },
                                                                                 secret: secret)))
      worker.set_cookie "circuit_breaker_csrf=#{t}"
      worker.post "/breakers/payments/trip", { csrf_token: t }
      expect([worker.last_response.status, worker.last_response.body, payments.state]).to eq([303, "", :open])
    end

    it "answer 400, not 500, to a form body nested past Rack's limit or malformed, and act on nothing" do
      t = token
      deep = "#{'a[' * 200}b#{']' * 200}=1"
      # Rack 3.1 reads a body nested past its limit without an error (the
      # rest of the name becomes a key): only Rack 2 and 3.0 refuse it.
      unreadable = ["csrf_token[]=1&csrf_token[x]=2", "%"]
      unreadable << deep if Gem::Version.new(Rack.release) < Gem::Version.new("3.1")
      unreadable.each do |body|
        post "/breakers/payments/trip", body, "CONTENT_TYPE" => "application/x-www-form-urlencoded", "HTTP_X_CSRF_TOKEN" => t
        expect([last_response.status, last_response.body]).to eq([400, "unreadable form body\n"])
      end
      expect([asked, payments.state]).to eq([[], :closed])
    end

    it "are refused from another site, even with the token" do
      t = token
      post "/breakers/payments/trip", { csrf_token: t }, "HTTP_ORIGIN" => "https://evil.example"
      expect(last_response.status).to eq(403)
      post "/breakers/payments/trip", { csrf_token: t }, "HTTP_SEC_FETCH_SITE" => "cross-site"
      expect(last_response.status).to eq(403)
      post "/breakers/payments/trip", { csrf_token: t }, "HTTP_ORIGIN" => "http://example.org"
      expect(last_response.status).to eq(303) # rack-test's own origin
    end

    it "answer 404 to an unknown breaker or action" do
      t = token
      post_action "/breakers/nope/trip", t
      expect(last_response.status).to eq(404)
      post_action "/breakers/payments/explode", t
      expect(last_response.status).to eq(404)
    end
  end

  it "refuses bad options, naming them" do
    expect { described_class.new(authorize: :yes) }.to raise_error(TypeError, /authorize:/)
    expect { described_class.new(breakers: [1]) }.to raise_error(TypeError, /breakers:/)
    expect { described_class.new(history_seconds: 0) }.to raise_error(ArgumentError, /history_seconds:/)
    expect { described_class.new(secret: 5) }.to raise_error(TypeError, /secret:/)
    expect { described_class.new(secret: "short") }.to raise_error(ArgumentError, /secret: must be at least 16 bytes/)
    expect { described_class.new(refresh: 0.5) }.to raise_error(ArgumentError, /refresh:/)
  end
end
