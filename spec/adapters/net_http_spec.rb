# frozen_string_literal: true

require "socket"
require "circuit_breaker/net_http"
require_relative "../../examples/support/flaky_upstream"

# The Net::HTTP adapter against a real HTTP server on 127.0.0.1 (the flaky
# upstream's fixed routes), a port nothing listens on, and a server that
# accepts and never answers.
RSpec.describe CircuitBreaker::Adapters::NetHTTP, :integration do
  before(:all) do
    @upstream = CircuitBreaker::Examples::FlakyUpstream.start(healthy: 600, stop_after: 600)
  end

  after(:all) { @upstream&.stop }

  let(:upstream) { @upstream }
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:options) do
    { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 4, open_duration: 10, clock: clock }
  end

  # Other files may leave breakers registered: each example starts with none.
  before { CircuitBreaker.forget_all! }

  after do
    described_class.clear!
    described_class.max_breakers = CircuitBreaker::Adapters::DEFAULT_MAX_BREAKERS
    CircuitBreaker.forget_all!
  end

  def get(path, port: upstream.port, timeout: 2)
    Net::HTTP.start("127.0.0.1", port, open_timeout: timeout, read_timeout: timeout, max_retries: 0) do |http|
      http.get(path)
    end
  end

  def fetch(path, port: upstream.port)
    Net::HTTP.get_response(URI("http://127.0.0.1:#{port}#{path}"))
  end

  def closed_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def breaker(port = upstream.port)
    CircuitBreaker.registry.fetch("net_http:127.0.0.1:#{port}")
  end

  it "passes max_concurrent: and max_wait: to the breakers it builds; over the cap, its rejection says :concurrency_limit" do
    described_class.protect("127.0.0.1", max_concurrent: 1, max_wait: 0.05, **options)
    expect(fetch("/status/200").code).to eq("200")
    expect(breaker.metrics).to include(concurrency_limit: 1, in_flight: 0)
    before = upstream.requests

    # The breaker's only slot held around the request: it waits max_wait for one, then is refused.
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    error = breaker.call { fetch("/status/200") rescue $! } # rubocop:disable Style/RescueModifier
    waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

    expect(error).to be_a(Errno::ECONNREFUSED).and be_a(CircuitBreaker::Rejection)
    expect(error).to have_attributes(reason: :concurrency_limit, limit: 1, retry_after: 1.0)
    expect(CircuitBreaker::ConcurrencyLimitError === error).to be(true)
    expect(waited).to be >= 0.05
    expect(upstream.requests).to eq(before)
    expect(breaker.metrics).to include(limited: 1, in_flight: 0)
  end

  it "leaves hosts it was not told about alone" do
    described_class.protect("orders.internal", **options)

    expect(fetch("/status/500").code).to eq("500")
    expect(CircuitBreaker.registry).to be_empty
  end

  it "returns a 5xx response as Net::HTTP does and records it as a failure; 2xx and 4xx are successes" do
    described_class.protect("127.0.0.1", **options)

    codes = %w[/status/200 /status/404 /status/503].map { |path| fetch(path).code }

    expect(codes).to eq(%w[200 404 503])
    expect(breaker.metrics.slice(:total, :failures)).to eq(total: 3, failures: 1)
  end

  it "opens on 5xx responses, then rejects without a request, as a refused connection and an OpenError" do
    described_class.protect("127.0.0.1:#{upstream.port}", **options)
    4.times { fetch("/status/500") }
    before = upstream.requests

    error = (fetch("/status/200") rescue $!) # rubocop:disable Style/RescueModifier

    expect(breaker.state).to eq(:open)
    expect(upstream.requests).to eq(before)
    expect(error).to be_a(Errno::ECONNREFUSED).and be_a(CircuitBreaker::Rejection)
    expect(CircuitBreaker::OpenError === error).to be(true)
    expect { raise error }.to raise_error(CircuitBreaker::OpenError)
    expect(error.breaker_name).to eq("net_http:127.0.0.1:#{upstream.port}")
    expect(error.retry_after).to eq(10.0)
    expect(error.message).to include("is open")
  end

  it "probes after open_duration and closes when the host answers again" do
    described_class.protect("127.0.0.1", **options)
    4.times { fetch("/status/502") }
    clock.advance(10)

    2.times { expect(fetch("/status/200").code).to eq("200") }

    expect(breaker.state).to eq(:closed)
  end

  it "counts refused connections as failures, per host:port" do
    port = closed_port
    described_class.protect(:all, **options)

    4.times { expect { fetch("/", port: port) }.to raise_error(Errno::ECONNREFUSED) }

    expect(breaker(port).state).to eq(:open)
    expect(CircuitBreaker.registry.keys).to eq(["net_http:127.0.0.1:#{port}"])
    expect { fetch("/", port: port) }.to raise_error(described_class::OpenError)
  end

  it "counts a read timeout as a failure" do
    silent = TCPServer.new("127.0.0.1", 0) # accepts (the kernel's backlog) and never answers
    described_class.protect(/\A127\.0\.0\.1:/, **options)

    expect { get("/", port: silent.addr[1], timeout: 0.05) }.to raise_error(Net::ReadTimeout)
    expect(breaker(silent.addr[1]).metrics.slice(:total, :failures)).to eq(total: 1, failures: 1)
  ensure
    silent&.close
  end

  it "counts each request of a session once" do
    described_class.protect("127.0.0.1", **options)

    get("/status/200")
    fetch("/status/200")

    expect(breaker.metrics[:total]).to eq(2) # each request once, the connects within them
  end

  it "records other exceptions as successes and raises them unchanged" do
    described_class.protect("127.0.0.1", **options)
    mine = Class.new(StandardError)

    expect do
      Net::HTTP.start("127.0.0.1", upstream.port) { |http| http.request_get("/status/200") { raise mine } }
    end.to raise_error(mine)
    expect(breaker.metrics.slice(:total, :failures)).to eq(total: 1, failures: 0)
  end

  it "uses one named breaker for the hosts of a protect call, with its own failure statuses" do
    described_class.protect("127.0.0.1", "orders.internal", breaker: "partners", failure_statuses: [502], **options)

    fetch("/status/500")
    fetch("/status/502")

    expect(CircuitBreaker.registry.keys).to eq(["partners"])
    expect(CircuitBreaker.registry["partners"].metrics.slice(:total, :failures)).to eq(total: 2, failures: 1)
  end

  it "shares one overflow breaker past max_breakers" do
    described_class.max_breakers = 1
    described_class.protect(:all, **options)
    ports = [upstream.port, closed_port, closed_port]

    statuses = []
    expect do
      ports.each { |port| statuses << (fetch("/status/200", port: port).code rescue $!.class) } # rubocop:disable Style/RescueModifier
    end.to output(/net_http has 1 breakers \(max_breakers\)/).to_stderr

    expect(statuses).to eq(["200", Errno::ECONNREFUSED, Errno::ECONNREFUSED])

    expect(CircuitBreaker.registry.keys).to eq(["net_http:127.0.0.1:#{upstream.port}", "net_http:overflow"])
    expect(CircuitBreaker.registry["net_http:overflow"].metrics[:total]).to eq(2)
  end

  describe "which hosts a protect names (issue: IPv6 literals and mixed-case names protected nothing, silently)" do
    # An HTTP server on the IPv6 loopback answering 500 to every request,
    # on a thread of this process (closed after the example).
    def ipv6_server
      server = begin
        TCPServer.new("::1", 0)
      rescue SystemCallError, SocketError => e
        skip "this machine has no IPv6 loopback (::1: #{e.class}: #{e.message})"
      end
      thread = Thread.new do
        loop do
          client = server.accept
          while (line = client.gets) && line != "\r\n"; end
          client.write("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
          client.close
        end
      rescue IOError, SystemCallError
        nil
      end
      yield server.addr[1]
    ensure
      server&.close
      thread&.join(2)
      thread&.kill
    end

    it "protects http://[::1]:PORT/ given \"::1\", \"[::1]\" or \"[::1]:PORT\"" do
      ipv6_server do |port|
        ["::1", "[::1]", "[::1]:#{port}"].each do |host|
          described_class.clear!
          CircuitBreaker.forget_all!
          described_class.protect(host, **options)
          expect(Net::HTTP.get_response(URI("http://[::1]:#{port}/")).code).to eq("500")
          expect(CircuitBreaker.registry.keys).to eq(["net_http:[::1]:#{port}"]), host
          expect(CircuitBreaker.registry["net_http:[::1]:#{port}"].metrics[:failures]).to eq(1)
        end
      end
    end

    it "matches host names case-insensitively" do
      described_class.protect("localhost:#{upstream.port}", **options)
      expect(Net::HTTP.get_response(URI("http://LocalHost:#{upstream.port}/status/500")).code).to eq("500")
      expect(CircuitBreaker.registry.keys).to eq(["net_http:localhost:#{upstream.port}"])
      described_class.clear!
      described_class.protect("LOCALHOST", **options)
      expect(Net::HTTP.get_response(URI("http://localhost:#{upstream.port}/status/200")).code).to eq("200")
      expect(CircuitBreaker.registry["net_http:localhost:#{upstream.port}"].metrics[:total]).to eq(2)
    end

    it "takes a URL without a path as its host and port" do
      described_class.protect("http://127.0.0.1:#{upstream.port}", **options)
      fetch("/status/500")
      expect(breaker.metrics[:failures]).to eq(1)
    end

    it "refuses, with an ArgumentError, only what can never match: no host, a bad port, a path" do
      ["", ":80", "[]", "host:abc", "host:", "host:0", "host:65536", "[::1]:x", "host/api", "http://host/api"].each do |host|
        expect { described_class.protect(host) }.to raise_error(ArgumentError, /NetHTTP\.protect: .*(empty|port|path)/), host
      end
      expect { described_class.protect("::1", "[::1]:443", "Example.COM", "https://example.com") }.not_to raise_error
    end
  end

  it "refuses bad arguments, naming them" do
    expect { described_class.protect }.to raise_error(ArgumentError, /at least one host/)
    expect { described_class.protect(42) }.to raise_error(TypeError, /a host must be a String/)
    expect { described_class.protect(:all, failure_statuses: "5xx") }.to raise_error(TypeError, /failure_statuses/)
    expect { described_class.protect(:all, failure_errors: [42]) }.to raise_error(TypeError, /failure_errors/)
    expect { described_class.max_breakers = 0 }.to raise_error(ArgumentError, /max_breakers .* 1\.\.1_000_000/)
  end
end
