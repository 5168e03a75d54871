# frozen_string_literal: true

require "socket"
require "circuit_breaker/faraday"
require_relative "../../examples/support/flaky_upstream"

# CircuitBreaker::Faraday against a real server on 127.0.0.1: the flaky
# upstream's fixed routes (/status/CODE, /delay/MS) and its script.
RSpec.describe CircuitBreaker::Faraday, :integration do
  # One server for the file: a script whose error burst lasts all along
  # (its fixed routes ignore the script).
  before(:all) do
    @upstream = CircuitBreaker::Examples::FlakyUpstream.start(healthy: 0, error_burst: 600, stop_after: 600)
  end

  after(:all) { @upstream&.stop }

  let(:upstream) { @upstream }
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:breaker) do
    CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100),
                       min_calls: 4, clock: clock)
  end

  def connection(url = upstream.url, timeout: 2, inner: nil, **options)
    Faraday.new(url) do |f|
      f.use described_class, breaker: breaker, **options
      f.use inner if inner
      f.options.timeout = timeout
      f.options.open_timeout = timeout
      f.adapter :net_http
    end
  end

  # A port nothing listens on: bound, then closed.
  def closed_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def counts(b = breaker)
    b.metrics.slice(:total, :failures, :slow_calls)
  end

  it "returns a 5xx response as Faraday does, and records it as a failure" do
    response = connection.get("/status/503")

    expect(response).to be_a(Faraday::Response)
    expect(response.status).to eq(503)
    expect(response.body).to include("503")
    expect(counts).to eq(total: 1, failures: 1, slow_calls: 0)
  end

  it "records 2xx and 4xx responses as successes" do
    statuses = ["/status/200", "/status/404", "/status/429"].map { |path| connection.get(path).status }

    expect(statuses).to eq([200, 404, 429])
    expect(counts).to eq(total: 3, failures: 0, slow_calls: 0)
  end

  it "raises a request timeout as Faraday::TimeoutError and records a failure" do
    expect { connection(timeout: 0.2).get("/delay/2000") }.to raise_error(Faraday::TimeoutError)
    expect(counts).to include(total: 1, failures: 1)
  end

  it "raises a refused connection as Faraday::ConnectionFailed and records a failure" do
    conn = connection("http://127.0.0.1:#{closed_port}")

    expect { conn.get("/") }.to raise_error(Faraday::ConnectionFailed)
    expect(counts).to include(total: 1, failures: 1)
  end

  it "opens on failed responses, then raises CircuitBreaker::OpenError without a request" do
    conn = connection
    4.times { conn.get("/status/500") }
    expect(breaker.state).to eq(:open)
    before = upstream.requests

    expect { conn.get("/status/200") }.to raise_error(CircuitBreaker::OpenError) { |e| expect(e.retry_after).to be > 0 }
    expect(upstream.requests).to eq(before)
    expect(breaker.metrics[:rejected]).to eq(1)
  end

  it "spares the scripted upstream once open: the error burst sees only min_calls requests" do
    conn = connection
    before = upstream.counts[:error_burst]
    outcomes = Array.new(12) do
      conn.get("/api/orders").status
    rescue CircuitBreaker::OpenError
      :rejected
    end

    expect(outcomes.first(4)).to eq([500] * 4)
    expect(outcomes.drop(4)).to all(eq(:rejected))
    expect(upstream.counts[:error_burst] - before).to eq(4)
    expect(breaker.metrics[:rejected]).to eq(8)
  end

  context "with a fallback" do
    it "returns the fallback's [status, headers, body] as a Faraday::Response, without a request" do
      seen = nil
      conn = connection(fallback: lambda { |error, env|
        seen = [error.class, env.url.path]
        [503, { "Retry-After" => error.retry_after.ceil.to_s }, "cached"]
      })
      breaker.trip!
      before = upstream.requests

      response = conn.get("/status/200")

      expect(upstream.requests).to eq(before)
      expect([response.status, response.headers["Retry-After"], response.body]).to eq([503, "30", "cached"])
      expect(response).to be_a(Faraday::Response)
      expect(seen).to eq([CircuitBreaker::OpenError, "/status/200"])
    end

    it "returns a Faraday::Response the fallback built" do
      canned = Faraday::Response.new(status: 200, body: "from cache", response_headers: {})
      breaker.trip!

      expect(connection(fallback: ->(_e, _env) { canned }).get("/status/200")).to equal(canned)
    end

    it "is not used while the breaker admits calls" do
      conn = connection(fallback: ->(_e, _env) { raise "not expected" })

      expect(conn.get("/status/500").status).to eq(500)
    end

    it "raises TypeError when the fallback returns something else" do
      breaker.trip!

      expect { connection(fallback: ->(_e, _env) { "text" }).get("/") }.to raise_error(TypeError, /fallback/)
    end
  end

  # docs/faraday.md: a call refused at the breaker's max_concurrent: cap is a
  # rejection like any other.
  context "at the breaker's concurrency cap" do
    let(:breaker) { CircuitBreaker.new(name: "orders", max_concurrent: 1, clock: clock) }

    # A request of another thread that holds the only slot: an inner
    # middleware keeps it inside the breaker until `release` is given.
    def hold_the_slot(release)
      inside = Queue.new
      gate = Class.new(Faraday::Middleware) do
        define_method(:call) do |env|
          inside << true
          release.pop
          @app.call(env)
        end
      end
      holder = connection(inner: gate)
      thread = Thread.new { holder.get("/status/200").status }
      wait_until(what: "the holding request inside the breaker") { inside.size == 1 }
      thread
    end

    it "raises CircuitBreaker::ConcurrencyLimitError without a request, and the held request ends as usual" do
      release = Queue.new
      holder = hold_the_slot(release)
      before = upstream.requests

      expect { connection.get("/status/200") }.to raise_error(CircuitBreaker::ConcurrencyLimitError) { |e|
        expect([e.reason, e.limit, e.retry_after]).to eq([:concurrency_limit, 1, 1.0])
      }
      expect(upstream.requests).to eq(before)
      release << true
      expect(holder.join(30)&.value).to eq(200)
      expect(breaker.metrics).to include(total: 1, failures: 0, rejected: 1, limited: 1, in_flight: 0)
      expect(connection.get("/status/200").status).to eq(200)
    ensure
      release << true # a failure above leaves the holder waiting
      holder&.join(30)
    end

    it "answers with the fallback: 503 and a Retry-After of 1" do
      release = Queue.new
      holder = hold_the_slot(release)
      before = upstream.requests

      response = connection(fallback: 503).get("/status/200")

      expect([response.status, response.headers["Retry-After"], response.body]).to eq([503, "1", ""])
      expect(upstream.requests).to eq(before)
    ensure
      release << true
      holder&.join(30)
    end

    it "is not retried by the retry middleware before it" do
      release = Queue.new
      holder = hold_the_slot(release)
      b = breaker
      conn = Faraday.new(upstream.url) do |f|
        f.request :retry, max: 2, interval: 0
        f.use described_class, breaker: b
        f.adapter :net_http
      end

      expect { conn.get("/status/200") }.to raise_error(CircuitBreaker::ConcurrencyLimitError)
      expect(breaker.metrics[:limited]).to eq(1) # one attempt, no retry
    ensure
      release << true
      holder&.join(30)
    end
  end

  it "counts failure statuses whatever the breaker's record_errors: and ignore_errors: say" do
    narrow = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 10,
                                record_errors: [Faraday::ConnectionFailed], ignore_errors: [Faraday::ServerError],
                                clock: clock)
    conn = ->(url) { Faraday.new(url) { |f| f.use described_class, breaker: narrow; f.options.timeout = 0.2 } }
    expect(conn.call(upstream.url).get("/status/500").status).to eq(500)
    expect(conn.call(upstream.url).get("/status/404").status).to eq(404)
    expect { conn.call("http://127.0.0.1:#{closed_port}").get("/") }.to raise_error(Faraday::ConnectionFailed)
    # A timeout is an exception: recorded as the breaker's lists say (ignored here).
    expect { conn.call(upstream.url).get("/delay/2000") }.to raise_error(Faraday::TimeoutError)

    expect(narrow.metrics).to include(total: 3, failures: 2)
  end

  it "decides failures with failure_statuses:" do
    conn = connection(failure_statuses: [429, 503])
    %w[429 500 404].each { |code| conn.get("/status/#{code}") }

    expect(counts).to include(total: 3, failures: 1)
  end

  it "decides failures with failure_if:, given the response" do
    conn = connection(failure_if: ->(response) { response.status == 404 })
    %w[404 500].each { |code| conn.get("/status/#{code}") }

    expect(counts).to include(total: 2, failures: 1)
  end

  it "measures a request with the breaker's clock, so a slow response counts as slow" do
    # An inner middleware stands for 250 ms on the wire.
    wire_clock = clock
    slow_wire = Class.new(Faraday::Middleware) do
      define_method(:call) do |env|
        wire_clock.advance(0.25)
        @app.call(env)
      end
    end
    connection(inner: slow_wire).get("/status/200")

    expect(counts).to eq(total: 1, failures: 0, slow_calls: 1)
  end

  it "releases a half-open probe slot when something other than a StandardError ends the request" do
    halt = Class.new(Exception) # rubocop:disable Lint/InheritException
    b = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 1,
                           half_open_calls: 1, open_duration: 1, clock: clock)
    raising = Class.new(Faraday::Middleware) { define_method(:call) { |_env| raise halt } }
    conn = Faraday.new(upstream.url) do |f|
      f.use described_class, breaker: b
      f.use raising
      f.adapter :net_http
    end
    b.trip!
    clock.advance(1)

    expect { conn.get("/status/200") }.to raise_error(halt)
    expect(b.state).to eq(:half_open)
    expect(b.allow?).to be(true) # the only probe slot is free again
    b.record_success
  end

  it "resolves a registry name through CircuitBreaker.for on each request" do
    pending "CircuitBreaker.for is not loaded by the gem yet" unless CircuitBreaker.respond_to?(:for)
    name = "faraday-spec-#{rand(1 << 30)}"
    registered = CircuitBreaker.for(name, window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 2)
    conn = Faraday.new(upstream.url) do |f|
      f.use described_class, breaker: name
      f.adapter :net_http
    end
    conn.get("/status/500")

    expect(registered.metrics).to include(total: 1, failures: 1)
    expect(conn.builder.app.breaker).to equal(registered)
  end

  it "refuses a bad breaker, and failure_statuses: with failure_if:" do
    expect { described_class.new(nil, breaker: 1) }.to raise_error(TypeError, /breaker/)
    expect { described_class.new(nil, breaker: breaker, failure_statuses: [500], failure_if: ->(_) { true }) }
      .to raise_error(ArgumentError, /not both/)
    expect { described_class.new(nil, breaker: breaker, failure_statuses: "5xx") }
      .to raise_error(TypeError, /failure_statuses/)
  end

  it "is registered as :circuit_breaker for both f.request and f.use" do
    %i[request use].each do |how|
      conn = Faraday.new(upstream.url) do |f|
        f.public_send(how, :circuit_breaker, breaker: breaker)
        f.adapter :net_http
      end
      conn.get("/status/500")
    end

    expect(counts).to include(failures: 2)
  end

  describe "fallback: an Integer status" do
    it "returns that status with a Retry-After header and no body, without a request" do
      conn = connection(fallback: 503)
      breaker.trip!
      before = upstream.requests

      response = conn.get("/status/200")

      expect([response.status, response.headers["Retry-After"], response.body]).to eq([503, "30", ""])
      expect(upstream.requests).to eq(before)
    end

    it "sends the ceiling of retry_after as Retry-After (19.4 s left: 20, never a retry before the breaker admits)" do
      conn = connection(fallback: 503)
      breaker.trip!
      clock.advance(10.6)

      response = conn.get("/status/200")

      expect([response.status, response.headers["Retry-After"]]).to eq([503, "20"])
    end

    it "sends a half-open rejection's Retry-After as at least 1 second, never 0" do
      conn = connection(fallback: 503)
      breaker.trip!
      clock.advance(30)
      2.times { expect(breaker.allow?).to be(true) } # both probe slots taken

      response = conn.get("/status/200")

      expect([response.status, response.headers["Retry-After"]]).to eq([503, "1"])
      2.times { breaker.record_success }
    end

    it "refuses a status outside 100..599" do
      expect { described_class.new(nil, breaker: breaker, fallback: 700) }.to raise_error(ArgumentError, /100\.\.599/)
    end
  end

  describe "breaker: per request" do
    it "uses the breaker a callable chooses from the env: one per host" do
      per_host = Hash.new do |h, host|
        h[host] = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 2, clock: clock)
      end
      conn = ->(host) { Faraday.new("http://#{host}:#{URI(upstream.url).port}") { |f| f.request :circuit_breaker, breaker: ->(env) { per_host[env.url.host] } } }
      2.times { conn.call("127.0.0.1").get("/status/500") }

      expect(per_host["127.0.0.1"].state).to eq(:open)
      expect { conn.call("127.0.0.1").get("/status/200") }.to raise_error(CircuitBreaker::OpenError)
      expect(conn.call("localhost").get("/status/200").status).to eq(200) # another host, another breaker
      expect(per_host["localhost"].metrics).to include(state: :closed, total: 1)
    end

    it "looks up a name the callable returns in the registry" do
      name = "faraday-per-request-#{rand(1 << 30)}"
      registered = CircuitBreaker.for(name, min_calls: 5)
      conn = Faraday.new(upstream.url) { |f| f.request :circuit_breaker, breaker: ->(_env) { name } }
      conn.get("/status/500")

      expect(registered.metrics).to include(total: 1, failures: 1)
    ensure
      CircuitBreaker.send(:const_get, :Registry)::ENTRIES.delete(name)
    end
  end

  it "refuses a registry name nobody registered, before any request" do
    conn = Faraday.new(upstream.url) { |f| f.request :circuit_breaker, breaker: "ordrs-#{rand(1 << 30)}" }
    before = upstream.requests

    expect { conn.get("/status/200") }.to raise_error(ArgumentError, /no breaker is registered as "ordrs-\d+"/)
    expect(upstream.requests).to eq(before)
  end

  # The orders docs/faraday.md recommends, each proven here.
  describe "with response :raise_error" do
    def raising_connection(breaker_inside: true)
      Faraday.new(upstream.url) do |f|
        f.request :circuit_breaker, breaker: breaker unless breaker_inside
        f.response :raise_error
        f.request :circuit_breaker, breaker: breaker if breaker_inside
        f.adapter :net_http
      end
    end

    it "recommended, raise_error before the breaker: 404s raise and are successes; 5xx raise and open it" do
      conn = raising_connection
      5.times { expect { conn.get("/status/404") }.to raise_error(Faraday::ResourceNotFound) }
      expect(breaker.metrics).to include(state: :closed, total: 5, failures: 0)

      5.times { expect { conn.get("/status/503") }.to raise_error(Faraday::ServerError) } # 5 of 10: 50 %
      expect(breaker.state).to eq(:open)
      before = upstream.requests
      expect { conn.get("/status/200") }.to raise_error(CircuitBreaker::OpenError)
      expect(upstream.requests).to eq(before)
    end

    it "the other order judges raise_error's exceptions by their status too" do
      conn = raising_connection(breaker_inside: false)
      5.times { expect { conn.get("/status/404") }.to raise_error(Faraday::ResourceNotFound) }
      expect(breaker.metrics).to include(state: :closed, total: 5, failures: 0)

      expect { conn.get("/status/500") }.to raise_error(Faraday::ServerError)
      expect(breaker.metrics).to include(total: 6, failures: 1)
    end
  end

  describe "with Faraday's retry middleware" do
    it "recommended, retry before the breaker: each attempt counts, and an open breaker ends the retries" do
      conn = Faraday.new(upstream.url) do |f|
        f.request :retry, max: 2, interval: 0, retry_statuses: [503]
        f.request :circuit_breaker, breaker: breaker
        f.adapter :net_http
      end
      before = upstream.requests

      expect(conn.get("/status/503").status).to eq(503) # 3 attempts, 3 failures
      expect(breaker.metrics).to include(state: :closed, total: 3, failures: 3)
      # The 4th attempt opens the breaker; the retry after it is rejected, not sent.
      expect { conn.get("/status/503") }.to raise_error(CircuitBreaker::OpenError)
      expect(upstream.requests - before).to eq(4)
      expect(breaker.metrics[:rejected]).to eq(1)
    end
  end

  it "is not loaded, and neither is Faraday, by require \"circuit_breaker\"" do
    lib = File.expand_path("../../lib", __dir__)
    out, status = ChildProcess.capture2e(RbConfig.ruby, "-I", lib, "-e",
                                         'require "circuit_breaker"; p [defined?(Faraday), defined?(CircuitBreaker::Faraday)]')

    expect(status).to be_success, out
    expect(out.strip).to eq("[nil, nil]")
  end
end
