# frozen_string_literal: true

require "rbconfig"

# CircuitBreaker::Rejection (lib/circuit_breaker/rejection.rb): an
# adapter's rejection is a CircuitBreaker::OpenError for `rescue`, and for
# record_errors: / ignore_errors: alike, on every breaker, whenever it was
# built and whatever the order of the requires (docs/adapters.md,
# "Rejections").
RSpec.describe "CircuitBreaker::Rejection" do
  it "is judged by the matchers as rescue judges it, on breakers built before and after the adapter's require" do
    # A Ruby of its own: no adapter is loaded there until it says so.
    lib = File.expand_path("../../lib", __dir__)
    out, status = ChildProcess.capture2e(RbConfig.ruby, "-I", lib, "-e", <<~RUBY)
      require "circuit_breaker"
      build = lambda do
        common = { min_calls: 1, consecutive_failures: nil }
        [CircuitBreaker.new(ignore_errors: [CircuitBreaker::OpenError], **common),
         CircuitBreaker.new(record_errors: [CircuitBreaker::OpenError], **common),
         CircuitBreaker.new(record_errors: [CircuitBreaker::Error], **common)]
      end
      before = build.call
      require "circuit_breaker/net_http"
      after = build.call
      rejection = CircuitBreaker::Adapters::NetHTTP::OpenError.new(CircuitBreaker::OpenError.new(breaker_name: "upstream"))
      rescued = begin
        raise rejection
      rescue CircuitBreaker::OpenError
        true
      end
      [before, after].each do |(ignoring, recording, erroring)|
        [ignoring, recording, erroring].each do |breaker|
          breaker.call { raise rejection }
        rescue CircuitBreaker::OpenError
          nil
        end
        p [rescued, ignoring.metrics[:failures_total], recording.metrics[:failures_total], erroring.metrics[:failures_total]]
      end
    RUBY

    expect(status).to be_success, out
    # Ignored (no failure recorded) by ignore_errors: [OpenError]; a failure
    # for record_errors: [OpenError] and [Error]; both orders alike.
    expect(out.lines.map(&:chomp)).to eq(["[true, 0, 1, 1]", "[true, 0, 1, 1]"])
  end

  describe "refused at the concurrency cap (docs/concurrency.md)" do
    before { require "circuit_breaker/net_http" }

    let(:rejection_class) { CircuitBreaker::Adapters::NetHTTP::OpenError }
    let(:at_cap) { rejection_class.new(CircuitBreaker::ConcurrencyLimitError.new(breaker_name: "api", limit: 3)) }
    let(:open) { rejection_class.new(CircuitBreaker::OpenError.new(breaker_name: "api", state: :open, retry_after: 5.0)) }

    it "carries the reason and the cap, as the breaker's error does" do
      expect(at_cap).to have_attributes(reason: :concurrency_limit, limit: 3, retry_after: 1.0, state: :closed,
                                        breaker_name: "api", message: /circuit "api" is at its concurrency limit \(3\)\z/)
      expect(open).to have_attributes(reason: :open, limit: nil, retry_after: 5.0)
    end

    it "reads them from its cause when built from a message (a library that re-raises as its own class)" do
      wrapped = begin
        begin
          raise CircuitBreaker::ConcurrencyLimitError.new(breaker_name: "api", limit: 2)
        rescue CircuitBreaker::ConcurrencyLimitError
          raise rejection_class, "refused"
        end
      rescue rejection_class => e
        e
      end
      expect(wrapped).to have_attributes(reason: :concurrency_limit, limit: 2, breaker_name: "api", message: /refused\z/)
    end

    it "is a CircuitBreaker::ConcurrencyLimitError for rescue, and no other rejection is" do
      rescued = [at_cap, open].map do |error|
        raise error
      rescue CircuitBreaker::ConcurrencyLimitError
        :at_cap
      rescue CircuitBreaker::OpenError
        :open
      end
      expect(rescued).to eq(%i[at_cap open])
      expect(CircuitBreaker::ConcurrencyLimitError === at_cap).to be(true)
      expect(at_cap.is_a?(CircuitBreaker::Rejection)).to be(true)
    end
  end
end
