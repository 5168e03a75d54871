# frozen_string_literal: true

require "logger"
require "stringio"

# CircuitBreaker.configure and the CIRCUIT_BREAKER_DISABLED kill switch
# (docs/configuration.md, "Global configuration").
RSpec.describe CircuitBreaker, ".configure" do
  after { described_class.configure { |c| c.defaults = {}; c.logger = nil } }

  it "sets default options for breakers built afterwards; the caller's options and aliases win" do
    # A ManualClock: retry_after is exact (a precise system clock moves
    # between trip! and retry_after; the portable build has no coarse one).
    clock = CircuitBreaker::ManualClock.new
    before = described_class.new(clock: clock)
    described_class.configure { |c| c.defaults = { open_duration: 10, min_calls: 3 } }

    expect([described_class.new(clock: clock).tap(&:trip!).retry_after, before.tap(&:trip!).retry_after]).to eq([10.0, 30.0])
    expect(described_class.new(open_duration: 5, clock: clock).tap(&:trip!).retry_after).to eq(5.0)
    expect(described_class.new(retry_time: 7, clock: clock).tap(&:trip!).retry_after).to eq(7.0)
  end

  it "lets a subclass's own defaults win over the configured ones" do
    subclass = Class.new(described_class) do
      def initialize(**options)
        super(open_duration: 2, **options)
      end
    end
    described_class.configure { |c| c.defaults = { open_duration: 10 } }

    expect(subclass.new(clock: CircuitBreaker::ManualClock.new).tap(&:trip!).retry_after).to eq(2.0)
  end

  it "gives breakers built without logger: the configured logger" do
    out = StringIO.new
    described_class.configure { |c| c.logger = Logger.new(out) }
    described_class.new(name: "configured").trip!
    described_class.new(name: "silent", logger: nil).trip!

    expect(out.string).to include('circuit "configured": closed -> open')
    expect(out.string).not_to include("silent")
  end

  it "refuses bad defaults when the block returns, and keeps the configuration in force" do
    described_class.configure { |c| c.defaults = { min_calls: 3 } }

    expect { described_class.configure { |c| c.defaults = { min_calls: 0 } } }
      .to raise_error(ArgumentError, /\ACircuitBreaker.configure: defaults: min_calls must be/)
    expect { described_class.configure { |c| c.defaults = { bogus: 1 } } }.to raise_error(ArgumentError, /bogus/)
    expect { described_class.configure { |c| c.defaults = { window: nil, name: "x" } } }
      .to raise_error(ArgumentError, /window:, name: belong to one breaker/)
    expect { described_class.configure { |c| c.logger = Object.new } }.to raise_error(TypeError, /logger/)
    expect { described_class.configure }.to raise_error(ArgumentError, /needs a block/)
    expect(described_class.configuration.defaults).to eq(min_calls: 3)
    expect(described_class.configuration).to be_frozen
  end

  it "keeps both of two configure calls made at once from two threads" do
    logger = Logger.new(StringIO.new)
    other_trying = false
    other = nil
    inside = Queue.new
    first = Thread.new do
      described_class.configure do |c|
        c.defaults = { min_calls: 7 }
        inside << true
        # Until the other thread has called configure and is blocked in it
        # (or, were configure not serialised, has finished it).
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
        Thread.pass until (other_trying && other.stop?) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      end
    end
    other = Thread.new do
      inside.pop
      other_trying = true
      described_class.configure { |c| c.logger = logger }
    end
    [first, other].each(&:join)

    expect([described_class.configuration.defaults, described_class.configuration.logger]).to eq([{ min_calls: 7 }, logger])
  end

  it "refuses a configure inside configure's own block" do
    expect { described_class.configure { described_class.configure { nil } } }
      .to raise_error(ArgumentError, "CircuitBreaker.configure was called inside its own block")
  end

  it "sets the namespace of shared: breakers" do
    skip "CircuitBreaker.default_namespace= is not on this branch yet" unless described_class.respond_to?(:default_namespace=)
    described_class.configure { |c| c.namespace = "configured-app" }

    expect(described_class.default_namespace).to eq("configured-app")
  ensure
    described_class.configure { |c| c.namespace = nil } if described_class.respond_to?(:default_namespace=)
  end

  describe "CIRCUIT_BREAKER_DISABLED=1" do
    lib = File.expand_path("../../lib", __dir__)

    it "builds pass-through breakers: every call runs, nothing is recorded or changed, metrics say so" do
      code = <<~RUBY
        b = CircuitBreaker.new(min_calls: 1)
        b.on_state_change { |e| puts "event \#{e.to}" }
        3.times { b.call { raise IOError } rescue nil }
        b.trip!
        p [b.call { 42 }, b.state, b.allow?, b.record_failure, b.open?]
        # As pairs: Hash#inspect reads {state: :disabled} from Ruby 3.4 on.
        p b.metrics.slice(:state, :total, :failures, :rejected, :admit_share, :kill_switch).to_a
      RUBY
      out, status = ChildProcess.capture2e({ "CIRCUIT_BREAKER_DISABLED" => "1" }, RbConfig.ruby, "-I", lib,
                                           "-rcircuit_breaker", "-e", code)

      expect(status).to be_success, out
      expect(out.lines.map(&:strip)).to eq(
        ["[42, :disabled, true, nil, false]",
         "[[:state, :disabled], [:total, 0], [:failures, 0], [:rejected, 0], [:admit_share, 1.0], [:kill_switch, true]]"]
      )
    end

    it "takes 1, true, yes and on (any case) as on, 0, false, no, off and empty as off, and refuses anything else" do
      code = <<~RUBY
        seen = ["1", "TRUE", " yes ", "On", "0", "false", "NO", "off", ""].map do |v|
          ENV["CIRCUIT_BREAKER_DISABLED"] = v
          CircuitBreaker.new.state
        end
        ENV["CIRCUIT_BREAKER_DISABLED"] = "ture"
        begin
          CircuitBreaker.new
        rescue ArgumentError => e
          seen << e.message
        end
        p seen
      RUBY
      out, status = ChildProcess.capture2e(RbConfig.ruby, "-I", lib, "-rcircuit_breaker", "-e", code)

      expect(status).to be_success, out
      expect(out.strip).to eq(([":disabled"] * 4 + [":closed"] * 5).then do |states|
        "[#{states.join(', ')}, \"CIRCUIT_BREAKER_DISABLED must be 1, true, yes or on (breakers stand aside), " \
          "or 0, false, no, off or empty (got \\\"ture\\\")\"]"
      end)
    end

    it "leaves breakers alone when unset" do
      expect(described_class.kill_switch?).to be(false) unless ENV["CIRCUIT_BREAKER_DISABLED"]
      expect(described_class.new.metrics).not_to have_key(:kill_switch)
    end
  end
end
