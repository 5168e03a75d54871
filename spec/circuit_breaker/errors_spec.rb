# frozen_string_literal: true

# CircuitBreaker::Failure: raised inside call, a failure whatever the
# breaker's error lists say (docs/semantics.md).
RSpec.describe CircuitBreaker::Failure do
  it "is a CircuitBreaker::Error" do
    expect(described_class.ancestors).to include(CircuitBreaker::Error, StandardError)
  end

  it "is recorded as a failure even when record_errors leaves it out and ignore_errors names it" do
    breaker = CircuitBreaker.new(record_errors: [IOError], ignore_errors: [CircuitBreaker::Error, StandardError])
    failure = described_class.new("bad answer")

    expect { breaker.call { raise failure } }.to raise_error(failure)
    expect(breaker.metrics).to include(total: 1, failures: 1)
  end

  it "leaves other errors to the lists" do
    breaker = CircuitBreaker.new(record_errors: [IOError])

    expect { breaker.call { raise ArgumentError } }.to raise_error(ArgumentError)
    expect(breaker.metrics).to include(total: 0)
  end
end
