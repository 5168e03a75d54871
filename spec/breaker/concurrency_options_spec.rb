# frozen_string_literal: true

# max_concurrent: and max_wait: (docs/concurrency.md): the values taken and
# refused, and the error a call refused at the cap raises.
RSpec.describe "CircuitBreaker concurrency options" do
  it "refuses caps that are not nil, an Integer in 1..100_000 or :adaptive, naming max_concurrent" do
    [0, -1, 100_001].each do |bad|
      expect { CircuitBreaker.new(max_concurrent: bad) }.to raise_error(
        ArgumentError, "max_concurrent must be nil, an Integer in 1..100_000 or :adaptive (got #{bad})"
      )
    end
    expect { CircuitBreaker.new(max_concurrent: :fixed) }.to raise_error(
      ArgumentError, "max_concurrent must be nil, an Integer in 1..100_000 or :adaptive (got :fixed)"
    )
    { 1.5 => "Float", "3" => "String" }.each do |bad, klass|
      expect { CircuitBreaker.new(max_concurrent: bad) }.to raise_error(
        TypeError, "max_concurrent must be nil, an Integer in 1..100_000 or :adaptive (got #{klass})"
      )
    end
  end

  it "takes max_wait: as seconds in 0..60, naming it otherwise" do
    [-0.5, 61, Float::NAN, Float::INFINITY].each do |bad|
      expect { CircuitBreaker.new(max_wait: bad) }.to raise_error(ArgumentError, /\Amax_wait must be/)
    end
    expect { CircuitBreaker.new(max_wait: "1") }.to raise_error(TypeError, /\Amax_wait must be a Numeric/)
    expect(CircuitBreaker.new(max_wait: 0.5).metrics[:limited]).to eq(0)
  end

  it "shows no cap in metrics without one" do
    m = CircuitBreaker.new.metrics
    expect(m).to include(in_flight: nil, concurrency_limit: nil, limited: 0)
  end

  it "has a ConcurrencyLimitError, an OpenError with its own reason, message and retry_after" do
    e = CircuitBreaker::ConcurrencyLimitError.new(breaker_name: "payments", state: :closed, limit: 3)
    expect(e).to be_a(CircuitBreaker::OpenError)
    expect([e.reason, e.state, e.limit, e.retry_after]).to eq([:concurrency_limit, :closed, 3, 1.0])
    expect(e.message).to eq('circuit "payments" is at its concurrency limit (3)')
  end

  it "gives every OpenError a reason that follows its state" do
    reasons = %i[open half_open forced_open].map { |s| CircuitBreaker::OpenError.new(state: s).reason }
    expect(reasons).to eq(%i[open half_open forced_open])
  end
end
