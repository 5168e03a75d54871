# frozen_string_literal: true

require "rbconfig"
require "circuit_breaker/fleet"

# The seam between a fleet breaker and its syncer (docs/fleet.md, "Off the
# call path"): one native link per breaker with one prepare/receive pair,
# and the wire format written twice (the Rust core's REPORT_FIELDS and
# REPLY_FIELDS, lib/circuit_breaker/fleet.lua's REPORT and REPLY), checked
# here against each other on a real redis-server.
RSpec.describe "The fleet's wire format", :redis do
  let(:name) { "wire-#{SecureRandom.hex(4)}" }
  let(:lua) { File.read(File.expand_path("../../lib/circuit_breaker/fleet.lua", __dir__)) }

  # The breakers' syncers would otherwise outlive this file and keep
  # talking to a Redis stopped after it (the other fleet specs do the same).
  after { CircuitBreaker::Fleet.stop_all }

  # The names of a `local NAME = {'a', 'b', ...}` table of the script.
  def lua_names(table)
    body = lua[/^local #{table} = \{(.*?)\}/m, 1] or raise "no #{table} in fleet.lua"
    body.scan(/'([a-z_]+)'/).flatten
  end

  def link(breaker) = breaker.instance_variable_get(:@fleet_link)

  # The Rust core's names of the words (private to the fleet's code).
  let(:report_fields) { CircuitBreaker::Fleet.const_get(:REPORT_FIELDS) }
  let(:reply_fields) { CircuitBreaker::Fleet.const_get(:REPLY_FIELDS) }

  # Hands `reply` to the breaker's link, and delivers what changed (as the
  # syncer's events thread does).
  def receive(breaker, reply)
    events = link(breaker).receive(reply, nil)
    link(breaker).deliver(events) if events
  end

  it "names the same words, in the same order, in Rust and in Lua" do
    expect(lua_names("REPORT")).to eq(report_fields)
    expect(lua_names("REPLY")).to eq(reply_fields)
  end

  it "runs what Rust prepares through the script, and Rust reads the script's reply" do
    # A long interval: the syncer's own sends (its own host field) stay out
    # of the way, and only this example's send is looked at.
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 60, min_calls: 1_000,
                                 half_open_calls: 3, window: CircuitBreaker::SlidingWindow.new(size: 100))
    4.times { breaker.call { 1 } }
    3.times { breaker.call { raise "down" } rescue RuntimeError } # rubocop:disable Style/RescueModifier
    keys, argv = link(breaker).prepare("wire-host", false)
    expect(link(breaker).tag).to match(/\Acircuit_breaker:(\w+:)?\{#{name}:\h{16}\}\z/)
    expect(keys).to eq(%w[hosts state].map { |k| "#{link(breaker).tag}:#{k}" })
    expect(argv[0]).to eq("wire-host")
    expect(argv[2]).to eq("#{link(breaker).tag}:changed")
    report = report_fields.zip(argv[1].split(" ").map { |w| Integer(w, 10) }).to_h
    expect(report.values_at("total", "failures", "slow", "quota", "kind")).to eq([7, 3, 0, 3, 0])

    reply = redis_server.command("EVAL", CircuitBreaker::Fleet::SCRIPT, 2, *keys, *argv)
    # What the script kept of the report: its field, `seen total failures slow ...`.
    field = redis_server.command("HGET", keys[0], "wire-host").split(" ")
    expect(field[1, 3]).to eq(%w[7 3 0])
    words = reply_fields.zip(reply.split(" ").map { |w| Integer(w, 10) }).to_h
    expect(words.values_at("kind", "state", "applied")).to eq([1, 0, 0])
    expect(words["total"]).to be >= 7 # with the syncer's own report, if it came first
    receive(breaker, reply)
    # The calls above started the syncer, whose own first reply may have
    # made the change already: then its events thread tells it, maybe later.
    expect(wait_for("connected") { breaker.metrics[:fleet] == :connected }).to be(true)
  end

  it "refuses a report a word short in the script, and a reply a word short in Rust" do
    breaker = CircuitBreaker.new(name: name, fleet: redis_server.url, fleet_interval: 60)
    keys, argv = link(breaker).prepare("wire-host", false)
    short = argv[1].split(" ")[0...-1].join(" ")
    expect { redis_server.command("EVAL", CircuitBreaker::Fleet::SCRIPT, 2, *keys, argv[0], short, argv[2]) }
      .to raise_error(/a report has #{report_fields.size} integers/)
    reply = redis_server.command("EVAL", CircuitBreaker::Fleet::SCRIPT, 2, *keys, *argv)
    receive(breaker, reply.split(" ")[0...-1].join(" "))
    expect(breaker.metrics[:fleet]).to eq(:degraded)
    receive(breaker, reply)
    # `metrics` started the syncer: when its own reply changed the status
    # first, its events thread tells it, maybe later.
    expect(wait_for("connected") { breaker.metrics[:fleet] == :connected }).to be(true)
  end

  it "loads the fleet's code only when a breaker uses fleet:" do
    script = <<~RUBY
      require "circuit_breaker"
      CircuitBreaker.new(name: "local").call { 1 }
      loaded = -> { [$LOADED_FEATURES.grep(%r{circuit_breaker/fleet}).size, Process.singleton_class.ancestors.count { |m| m.name.to_s.start_with?("CircuitBreaker") }] }
      puts loaded.().inspect
      CircuitBreaker.new(name: "remote", fleet: ARGV[0], fleet_interval: 60)
      puts loaded.().inspect
    RUBY
    lib = File.expand_path("../../lib", __dir__)
    out, status = ChildProcess.capture2e(RbConfig.ruby, "-I", lib, "-e", script, redis_server.url)
    expect(status).to be_success, out
    expect(out.lines.map(&:chomp)).to eq(["[0, 0]", "[5, 1]"]) # fleet.rb and the four files of fleet/
  end
end
