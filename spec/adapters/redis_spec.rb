# frozen_string_literal: true

require "circuit_breaker/redis"

# The Redis adapter against a real redis-server on a unix socket: stopped
# with SIGSTOP (timeouts), killed (refused), restarted. The same examples
# run on the client this stack has: redis-rb 4.8's hook (Debian 12) or the
# redis-client middleware that redis-rb 5 uses (Debian 13).
RSpec.describe CircuitBreaker::Adapters::Redis, :redis do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 3, open_duration: 10, clock: clock } }
  let(:name) { "redis:#{redis_server.socket}" }

  # Other files may leave breakers registered: each example starts with none.
  before { CircuitBreaker.forget_all! }

  after do
    described_class.clear!
    CircuitBreaker.forget_all!
    redis_server.resume
    redis_server.launch unless redis_server.ping?
  end

  def breaker
    CircuitBreaker.registry.fetch(name)
  end

  def gets
    redis_server.command_counts.fetch("get", 0)
  end

  # Runs `n` commands that fail, rescuing what the client raises.
  def fail_calls(client, n)
    Array.new(n) do
      command(client, "GET", "k")
    rescue StandardError => e
      e
    end
  end

  shared_examples "a protected Redis client" do
    it "leaves clients without the setting alone" do
      plain = client(setting: nil, timeout: 0.25)
      redis_server.pause

      expect(fail_calls(plain, 4)).to all(be_a(connection_error))
      expect(CircuitBreaker.registry).to be_empty
    end

    it "opens on timeouts (server stopped), then rejects without touching the server" do
      c = client(timeout: 0.25) # healthy commands take microseconds; a busy CI machine, some milliseconds
      expect(command(c, "SET", "k", "v")).to eq("OK")
      redis_server.pause

      errors = fail_calls(c, 3)
      redis_server.resume
      before = gets
      rejected = fail_calls(c, 1).first

      expect(errors).to all(be_a(connection_error))
      expect(breaker.state).to eq(:open)
      expect(gets).to eq(before)
      expect(rejected).to be_a(rejection_class).and be_a(connection_error).and be_a(CircuitBreaker::Rejection)
      expect(CircuitBreaker::OpenError === rejected).to be(true)
      expect(rejected.breaker_name).to eq(name)
      expect(rejected.retry_after).to eq(10.0)
    end

    it "opens on refused connections (server killed), probes after open_duration and closes when it is back" do
      c = client
      redis_server.crash

      fail_calls(c, 3)
      expect(breaker.state).to eq(:open)
      redis_server.launch
      clock.advance(10)

      expect(Array.new(2) { command(c, "SET", "k", "v") }).to eq(%w[OK OK])
      expect(breaker.state).to eq(:closed)
    end

    it "records command errors as successes and raises them unchanged" do
      c = client
      command(c, "SET", "k", "v")

      3.times { expect { command(c, "LPUSH", "k", "x") }.to raise_error(command_error, /WRONGTYPE/) }

      expect(breaker.metrics.slice(:total, :failures)).to eq(total: 4, failures: 0)
    end

    it "counts a pipeline as one call" do
      c = client

      pipeline(c)

      expect(breaker.metrics[:total]).to eq(1)
    end

    it "uses a named breaker given in the setting" do
      c = client(setting: { breaker: "cache", **options })
      command(c, "SET", "k", "v")

      expect(CircuitBreaker.registry.keys).to eq(["cache"])
    end

    it "leaves the fleet: syncer's connections alone, even when the app's client is protected" do
      c = client
      command(c, "SET", "k", "v")
      fleet = CircuitBreaker.new(name: "fleet-#{Process.pid}", fleet: c, fleet_interval: 0.05)
      redis_server.wait_until("the fleet connected") { fleet.metrics[:fleet] == :connected }
      fleet.call { :ok } # something for the syncer to send
      sends = redis_server.command_counts.fetch("evalsha", 0)
      redis_server.wait_until("the syncer sent") { redis_server.command_counts.fetch("evalsha", 0) > sends }

      expect(CircuitBreaker.registry.keys).to eq([name])
      expect(breaker.metrics[:total]).to eq(1) # the app's SET; none of the syncer's commands
    ensure
      CircuitBreaker::Fleet.stop_all
    end

    it "refuses a bad setting, naming it" do
      expect { command(client(setting: 42), "GET", "k") }.to raise_error(TypeError, /circuit_breaker: must be/)
    end

    it "passes max_concurrent: and max_wait: to the breaker it builds; over the cap, its rejection says :concurrency_limit" do
      c = client(setting: { max_concurrent: 1, max_wait: 0.05, **options })
      expect(command(c, "SET", "k", "v")).to eq("OK")
      expect(breaker.metrics).to include(concurrency_limit: 1, in_flight: 0)
      before = gets

      # The only slot held around the command: it waits max_wait for one, then is refused.
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      rejected = breaker.call { fail_calls(c, 1).first }
      waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started

      expect(rejected).to be_a(rejection_class).and be_a(CircuitBreaker::Rejection)
      expect(rejected).to have_attributes(reason: :concurrency_limit, limit: 1, breaker_name: name)
      expect(CircuitBreaker::ConcurrencyLimitError === rejected).to be(true)
      expect(waited).to be >= 0.05
      expect(gets).to eq(before)
      expect(breaker.metrics).to include(limited: 1, in_flight: 0, failures: 0)
    end
  end

  if defined?(::RedisClient)
    context "with the redis-client middleware (redis-rb 5's client)" do
      let(:connection_error) { ::RedisClient::ConnectionError }
      let(:command_error) { ::RedisClient::CommandError }
      let(:rejection_class) { described_class::ClientOpenError }

      def client(setting: options, timeout: 2)
        custom = setting.nil? ? {} : { circuit_breaker: setting }
        ::RedisClient.config(path: redis_server.socket, timeout: timeout, reconnect_attempts: 0, custom: custom).new_client
      end

      def command(client, *args) = client.call(*args)
      def pipeline(client) = client.pipelined { |p| 2.times { |i| p.call("SET", "p#{i}", i) } }

      include_examples "a protected Redis client"
    end
  end

  if Gem::Version.new(::Redis::VERSION) >= Gem::Version.new("5")
    context "with redis-rb 5 (Redis.new(circuit_breaker: ...), redis-client underneath)" do
      let(:connection_error) { ::Redis::BaseConnectionError }
      let(:command_error) { ::Redis::CommandError }
      let(:rejection_class) { described_class::OpenError }

      def client(setting: options, timeout: 2)
        extra = setting.nil? ? {} : { circuit_breaker: setting }
        ::Redis.new(path: redis_server.socket, timeout: timeout, reconnect_attempts: 0, **extra)
      end

      def command(client, *args) = client.call(*args)
      def pipeline(client) = client.pipelined { |p| 2.times { |i| p.set("p#{i}", i) } }

      include_examples "a protected Redis client"
    end
  else
    context "with redis-rb 4 (Redis.new(circuit_breaker: ...))" do
      let(:connection_error) { ::Redis::BaseConnectionError }
      let(:command_error) { ::Redis::CommandError }
      let(:rejection_class) { described_class::OpenError }

      def client(setting: options, timeout: 2)
        extra = setting.nil? ? {} : { circuit_breaker: setting }
        ::Redis.new(path: redis_server.socket, timeout: timeout, reconnect_attempts: 0, **extra)
      end

      def command(client, *args) = client.call(*args)
      def pipeline(client) = client.pipelined { |p| 2.times { |i| p.set("p#{i}", i) } }

      include_examples "a protected Redis client"

      it "lets blocking commands wait unprotected" do
        c = client
        command(c, "RPUSH", "queue", "job")

        # Answered at once (an element waits), so a loaded machine cannot
        # make it time out; a wait of 1 s is what is asked for.
        expect(c.blpop("queue", timeout: 1)).to eq(%w[queue job])
        expect(breaker.metrics[:total]).to eq(1) # the RPUSH only
      end
    end
  end

  it "has the redis-client middleware wherever redis-client is installed" do
    # Not skipped silently: a stack without redis-client says so here.
    skip "redis-client is not installed on this stack (Debian 12: redis-rb 4.8); the Debian 13 leg runs it" unless defined?(::RedisClient)

    expect(described_class::ClientOpenError.ancestors).to include(::RedisClient::CannotConnectError, CircuitBreaker::Rejection)
  end
end
