# frozen_string_literal: true

# record_errors: / ignore_errors: match an exception as `rescue` does: with
# the class's or module's `===`, so matchers that define their own `===`
# work (docs/semantics-permits.md).
RSpec.describe CircuitBreaker, "record_errors: and ignore_errors: match with ===" do
  include BreakerHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }

  status_error = Class.new(StandardError) do
    attr_reader :status

    def initialize(status)
      @status = status
      super("HTTP #{status}")
    end
  end
  # A class whose === looks at the status, as `rescue ServerError` would.
  server_error = Class.new(StandardError) do
    define_singleton_method(:===) { |e| e.respond_to?(:status) && e.status >= 500 }
  end
  # A module used only as a matcher: it is in no exception's ancestors.
  timeoutish = Module.new do
    def self.===(e)
      e.message.include?("timed out")
    end
  end

  it "records an exception its matcher's === accepts, as rescue would" do
    rescued = begin
      raise status_error.new(503)
    rescue server_error
      true
    end
    expect(rescued).to be(true)
    breaker = build_breaker(clock: clock, min_calls: 2, record_errors: [server_error, timeoutish])
    expect { breaker.call { raise status_error.new(404) } }.to raise_error(status_error)
    expect(breaker.window.total).to eq(0) # 404: not matched, passes through unrecorded
    expect { breaker.call { raise status_error.new(503) } }.to raise_error(status_error)
    expect { breaker.call { raise IOError, "read timed out" } }.to raise_error(IOError)
    expect(breaker.metrics[:failures_total]).to eq(2)
    expect(breaker.state).to eq(:open)
  end

  it "ignores an exception its ignore_errors matcher's === accepts" do
    breaker = build_breaker(clock: clock, min_calls: 1, ignore_errors: [timeoutish])
    expect { breaker.call { raise "query timed out" } }.to raise_error(RuntimeError)
    expect(breaker.window.total).to eq(0)
    expect { breaker.call { raise "boom" } }.to raise_error(RuntimeError)
    expect(breaker.state).to eq(:open)
  end

  it "still matches plain classes and modules by ancestry" do
    tagged = Module.new
    breaker = build_breaker(clock: clock, min_calls: 1, record_errors: [tagged])
    expect { breaker.call { raise StandardError.new("x").extend(tagged) } }.to raise_error(StandardError)
    expect(breaker.state).to eq(:open)
  end

  it "raises what a matcher's === raises, and records the call as a failure" do
    broken = Module.new { def self.===(_) = raise(ArgumentError, "matcher broke") }
    breaker = build_breaker(clock: clock, min_calls: 5, record_errors: [broken])
    expect { breaker.call { raise "x" } }.to raise_error(ArgumentError, "matcher broke")
    expect(breaker.window.failures).to eq(1)
  end
end
