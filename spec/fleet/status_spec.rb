# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/fleet"
require "logger"
require "stringio"

# The fleet link's status made visible (docs/fleet.md, "Degraded mode"):
# each change logged once with why, instrumented, and shown by the
# Prometheus text and the status page. A real redis-server, paused with
# SIGSTOP; waits are bounded.
RSpec.describe "CircuitBreaker fleet: status", :redis do
  let(:name) { "status-#{SecureRandom.hex(4)}" }
  let(:log) { StringIO.new }

  after do
    CircuitBreaker::Fleet.stop_all
    redis_server.resume
  end

  def fleet_breaker(**options)
    # The longest send timeout (0.25 s): a loaded machine rarely fails a send.
    CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 0.2, **options)
  end

  def status(breaker) = breaker.metrics[:fleet]

  # Whether `statuses` are one per change (never the same twice in a row),
  # the outage's degraded among them and connected last. (A loaded machine
  # may time out a send the example did not mean to fail: more changes.)
  def changes(statuses)
    statuses.each_cons(2).none? { |a, b| a == b } && statuses.include?("degraded") && statuses.last == "connected"
  end

  # The reason names the client's error (which one depends on the client
  # and on where the pause caught the send).
  # Pauses Redis until `breaker` is degraded, then resumes it until it is
  # connected again.
  def outage(breaker)
    redis_server.pause
    wait_until(what: "degraded") { status(breaker) == :degraded }
    yield if block_given?
  ensure
    redis_server.resume
    wait_until(what: "connected again") { status(breaker) == :connected }
  end

  it "logs each change once, degraded with why, to the configured logger" do
    previous = CircuitBreaker.configuration.logger
    CircuitBreaker.configure { |c| c.logger = Logger.new(log) }
    breaker = fleet_breaker
    wait_until(what: "connected") { status(breaker) == :connected }
    outage(breaker) { expect(breaker.metrics[:fleet_reason]).to match(/(Redis|RedisClient)::\w+/) }
    lines = log.string.lines.grep(/fleet/)
    expect(changes(lines.map { |l| l[/fleet (connected|degraded)/, 1] })).to be(true)
    expect(lines.grep(/WARN/)).to all(match(/circuit "#{name}": fleet degraded, on its own breaker \((Redis|RedisClient)::\w+/))
    expect(lines.grep(/INFO/)).to all(match(/circuit "#{name}": fleet connected/))
    expect(breaker.metrics[:fleet_reason]).to be_nil
  ensure
    CircuitBreaker.configure { |c| c.logger = previous }
  end

  it "instruments each change as fleet_change.circuit_breaker, with why", :integration do
    require "active_support"
    require "active_support/notifications"
    received = Queue.new
    subscription = ActiveSupport::Notifications.subscribe("fleet_change.circuit_breaker") do |*, payload|
      received << payload if payload[:name] == name
    end
    breaker = fleet_breaker
    wait_until(what: "connected") { status(breaker) == :connected }
    outage(breaker)
    payloads = Array.new(received.size) { received.pop }
    expect(changes(payloads.map { |p| p[:status].to_s })).to be(true)
    payloads.each do |p|
      expect(p[:reason]).to p[:status] == :degraded ? match(/(Redis|RedisClient)::\w+/) : be_nil
    end
  ensure
    ActiveSupport::Notifications.unsubscribe(subscription) if subscription
  end

  it "shows the status, and why when degraded, in the Prometheus text (promtool-clean) and on the status page" do
    require "open3"
    require "json"
    require "rack/mock"
    require "circuit_breaker/dashboard"
    breaker = fleet_breaker
    wait_until(what: "connected") { status(breaker) == :connected }
    dashboard = CircuitBreaker::Dashboard.new(breakers: { name => breaker })
    samples = lambda do
      CircuitBreaker::Prometheus.render({ name => breaker }).lines.grep(/\Acircuit_breaker_fleet_status/).to_h(&:split)
    end
    expect(samples.()).to eq(
      %(circuit_breaker_fleet_status{breaker="#{name}",status="connecting"}) => "0",
      %(circuit_breaker_fleet_status{breaker="#{name}",status="connected"}) => "1",
      %(circuit_breaker_fleet_status{breaker="#{name}",status="degraded"}) => "0"
    )
    outage(breaker) do
      expect(samples.()[%(circuit_breaker_fleet_status{breaker="#{name}",status="degraded"})]).to eq("1")
      begin
        out, result = ChildProcess.capture2e("promtool", "check", "metrics",
                                             stdin_data: CircuitBreaker::Prometheus.render({ name => breaker }))
        expect([out, result.exitstatus]).to eq(["", 0])
      rescue Errno::ENOENT
        nil # promtool missing: spec/circuit_breaker/prometheus_spec.rb skips with the reason
      end
      html = Rack::MockRequest.new(dashboard).get("/").body
      expect(html).to match(/<span class="fleet" data-fleet="degraded">fleet degraded: (Redis|RedisClient)::\w+/)
      entry = JSON.parse(Rack::MockRequest.new(dashboard).get("/status.json").body)["breakers"].first
      expect(entry["metrics"]).to include("fleet" => "degraded", "fleet_reason" => match(/(Redis|RedisClient)::\w+/))
    end
    expect(Rack::MockRequest.new(dashboard).get("/").body).to include(%(<span class="fleet" data-fleet="connected">fleet connected</span>))
  end

  it "raises a clear ArgumentError at construction when no Redis client library loads" do
    fake = Dir.mktmpdir("cb-no-redis-")
    %w[redis redis_client].each do |lib|
      File.write(File.join(fake, "#{lib}.rb"), "raise LoadError, 'cannot load such file -- #{lib}'\n")
    end
    script = <<~RUBY
      $LOAD_PATH.unshift #{fake.inspect}, #{File.expand_path('../../lib', __dir__).inspect}
      require "circuit_breaker"
      begin
        CircuitBreaker.new(name: "no-client", fleet: #{redis_server.url.inspect})
        puts "built"
      rescue ArgumentError => e
        puts e.message
      end
    RUBY
    out, = ChildProcess.capture2(RbConfig.ruby, "-e", script, err: File::NULL)
    expect(out).to match(/\Afleet: needs the redis-client gem or redis-rb >= 4.8, and neither loads/)
  ensure
    FileUtils.rm_rf(fake)
  end
end
