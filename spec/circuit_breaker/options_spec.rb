# frozen_string_literal: true

# CircuitBreaker::Options (lib/circuit_breaker/options.rb): one frozen value
# built from the library's defaults, CircuitBreaker.configure's and the
# caller's keywords, the seeds' aliases translated there
# (docs/configuration.md).
RSpec.describe CircuitBreaker::Options do
  after { CircuitBreaker.configure { |c| c.defaults = {}; c.logger = nil } }

  def configured(defaults)
    CircuitBreaker::Configuration.new.tap { |c| c.defaults = defaults }
  end

  it "builds one frozen value from the library's defaults, then configure's, then the caller's keywords" do
    options = described_class.build({ min_calls: 5 }, configured(min_calls: 3, open_duration: 10))

    expect(options).to be_frozen
    expect([options.min_calls, options.open_duration, options.error_rate_threshold]).to eq([5, 10, 0.5])
    expect(described_class.build({}, configured({})).to_h.slice(*described_class::DEFAULTS.keys))
      .to eq(described_class::DEFAULTS)
  end

  it "translates the seeds' aliases where it builds, and says which option an alias stood for" do
    options = described_class.build({ threshold: 0.3, retry_time: 7, probe_ratio: 0.2, half_open_window: 10 }, configured({}))

    expect([options.error_rate_threshold, options.open_duration]).to eq([0.3, 7])
    expect([options.probe_ratio, options.half_open_window]).to eq([0.2, 10])
    expect(options.aliases).to eq(error_rate_threshold: :threshold, open_duration: :retry_time)
    breaker = CircuitBreaker.new(options)
    expect(breaker.metrics[:state]).to eq(:closed)
  end

  it "takes the seeds' aliases in configure's defaults, the caller's keywords winning whichever way either is written" do
    clock = CircuitBreaker::ManualClock.new
    CircuitBreaker.configure { |c| c.defaults = { retry_time: 10, threshold: 0.25 } }

    expect(CircuitBreaker.new(clock: clock).tap(&:trip!).retry_after).to eq(10.0)
    expect(CircuitBreaker.new(clock: clock, open_duration: 4).tap(&:trip!).retry_after).to eq(4.0)
    expect { CircuitBreaker.new(threshold: 2) }.to raise_error(ArgumentError, /\Athreshold must be/)
    expect { CircuitBreaker.new(error_rate_threshold: 2) }.to raise_error(ArgumentError, /\Aerror_rate_threshold must be/)
    breaker = CircuitBreaker.new(clock: clock, min_calls: 4, consecutive_failures: nil)
    3.times { breaker.record_success }
    breaker.record_failure # 1 of 4 = 0.25: the configured threshold:
    expect(breaker.state).to eq(:open)
  end

  it "lets a layer's ramp: or half_open_calls: win over an earlier layer's probe_ratio: and half_open_window:" do
    config = configured(probe_ratio: 0.2, half_open_window: 10)

    expect(described_class.build({}, config).to_h.values_at(:probe_ratio, :half_open_window)).to eq([0.2, 10])
    expect(described_class.build({ ramp: [0.5, 1.0] }, config).to_h.values_at(:probe_ratio, :ramp)).to eq([nil, [0.5, 1.0]])
    expect(described_class.build({ half_open_calls: 3 }, config).to_h.values_at(:probe_ratio, :half_open_window, :half_open_calls))
      .to eq([0.2, nil, 3])
    expect { described_class.build({ probe_ratio: 0.5, ramp: [1.0] }, config) }.to raise_error(ArgumentError, /not both/)
  end

  it "holds the kill switch, read when the options are built" do
    saved = ENV.fetch("CIRCUIT_BREAKER_DISABLED", nil)
    ENV["CIRCUIT_BREAKER_DISABLED"] = "1"
    on = described_class.build({}, configured({}))
    ENV["CIRCUIT_BREAKER_DISABLED"] = "0"
    off = described_class.build({}, configured({}))

    expect([on.kill_switch, off.kill_switch]).to eq([true, false])
    expect(CircuitBreaker.new(on).state).to eq(:disabled)
  ensure
    saved ? ENV["CIRCUIT_BREAKER_DISABLED"] = saved : ENV.delete("CIRCUIT_BREAKER_DISABLED")
  end

  it "is what CircuitBreaker.new builds from, with nothing prepended to CircuitBreaker" do
    expect(CircuitBreaker.ancestors.first).to be(CircuitBreaker)
    expect { CircuitBreaker.new(described_class.build({}, configured({})), min_calls: 3) }
      .to raise_error(ArgumentError, /wrong number of arguments/)
    expect { CircuitBreaker.new(min_calls: 3, bogus: 1) }.to raise_error(ArgumentError, "unknown keyword: :bogus")
  end
end
