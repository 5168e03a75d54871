# frozen_string_literal: true

# call(fallback:, fallback_on:) (docs/semantics.md, "Fallback").
RSpec.describe CircuitBreaker, "#call with fallback:" do
  let(:breaker) { build_breaker(name: "orders", min_calls: 2) }
  let(:seen) { [] }
  let(:fallback) { ->(error) { seen << error; :fallback } }

  it "answers a rejection with the fallback's value, given the OpenError; the rejection is still counted and reported" do
    rejected = []
    breaker.on_reject { |e| rejected << e }
    breaker.trip!
    ran = false

    expect(breaker.call(fallback: fallback) { ran = true }).to eq(:fallback)
    expect(ran).to be(false)
    expect(seen.map(&:class)).to eq([CircuitBreaker::OpenError])
    expect(seen.first.breaker_name).to eq("orders")
    expect(rejected).to eq(seen)
    expect(breaker.metrics[:rejected]).to eq(1)
  end

  it "returns the block's value when admitted, and lets a failure raise unless fallback_on: :failure" do
    expect(breaker.call(fallback: fallback) { 42 }).to eq(42)
    expect { breaker.call(fallback: fallback) { raise BreakerHelpers::Boom } }.to raise_error(BreakerHelpers::Boom)
    expect(seen).to be_empty
    expect(breaker.metrics.slice(:calls, :failures_total)).to eq(calls: 2, failures_total: 1)
  end

  it "with fallback_on: :failure, answers an exception recorded as a failure, given that exception, and records it" do
    error = BreakerHelpers::Boom.new("down")

    expect(breaker.call(fallback: fallback, fallback_on: :failure) { raise error }).to eq(:fallback)
    expect(seen).to eq([error])
    expect(breaker.metrics.slice(:total, :failures)).to eq(total: 1, failures: 1)
    # The second failure opens it: then a rejection answers too.
    breaker.call(fallback: fallback, fallback_on: :failure) { raise BreakerHelpers::Boom }
    expect(breaker.state).to eq(:open)
    expect(breaker.call(fallback: fallback, fallback_on: :failure) { :never }).to eq(:fallback)
    expect(seen.map(&:class)).to eq([BreakerHelpers::Boom, BreakerHelpers::Boom, CircuitBreaker::OpenError])
  end

  it "with fallback_on: :failure, answers Timeout::Error, CircuitBreaker::Failure and an exception failure_if raised" do
    raising = build_breaker(min_calls: 100, failure_if: ->(_) { raise ArgumentError, "judge" })

    expect(breaker.call(fallback: fallback, fallback_on: :failure) { raise Timeout::Error }).to eq(:fallback)
    expect(raising.call(fallback: fallback, fallback_on: :failure) { 1 }).to eq(:fallback)
    expect(seen.map(&:class)).to eq([Timeout::Error, ArgumentError])
  end

  it "leaves alone what is not a failure: ignored errors, non-StandardErrors, jumps, and a value failure_if judged a failure" do
    ignoring = build_breaker(min_calls: 100, ignore_errors: [IOError])
    judging = build_breaker(min_calls: 100, failure_if: ->(v) { v == :declined })
    options = { fallback: fallback, fallback_on: :failure }

    expect { ignoring.call(**options) { raise IOError } }.to raise_error(IOError)
    expect { breaker.call(**options) { raise Interrupt } }.to raise_error(Interrupt)
    expect(breaker.call(**options) { break :broken }).to eq(:broken)
    expect(catch(:out) { breaker.call(**options) { throw :out, :thrown } }).to eq(:thrown)
    expect(judging.call(**options) { :declined }).to eq(:declined)
    expect(judging.metrics[:failures]).to eq(1)
    expect(seen).to be_empty
  end

  it "leaves $! as it was once a fallback answered a failure, inside a rescue clause too" do
    options = { fallback: fallback, fallback_on: :failure }

    breaker.call(**options) { raise BreakerHelpers::Boom }
    expect($!).to be_nil
    begin
      raise KeyError, "outer"
    rescue KeyError
      breaker.call(**options) { raise BreakerHelpers::Boom }
      expect($!.message).to eq("outer")
    end
  end

  it "raises what the fallback raises, and lets its throw go on" do
    breaker.trip!

    expect { breaker.call(fallback: ->(_) { raise KeyError, "no cache" }) { 1 } }.to raise_error(KeyError, "no cache")
    expect(catch(:cache) { breaker.call(fallback: ->(_) { throw :cache, :thrown }) { 1 } }).to eq(:thrown)
  end

  it "takes any object that responds to call, and fallback_on: nil as the default" do
    callable = Object.new
    def callable.call(error) = "from #{error.class.name}"
    breaker.trip!

    expect(breaker.call(fallback: callable, fallback_on: nil) { 1 }).to eq("from CircuitBreaker::OpenError")
    expect(breaker.call(fallback: method(:format).to_proc.curry(2)["%s"]) { 1 }).to start_with("circuit")
  end

  it "refuses bad arguments, naming them, before anything is recorded" do
    expect { breaker.call(fallback: 5) { 1 } }.to raise_error(TypeError, /\Afallback must be an object that responds to call/)
    expect { breaker.call(fallback: fallback, fallback_on: :timeout) { 1 } }
      .to raise_error(ArgumentError, "fallback_on must be :rejection or :failure (got :timeout)")
    expect { breaker.call(fallback: fallback, fallback_on: "failure") { 1 } }.to raise_error(ArgumentError, /fallback_on/)
    expect { breaker.call(fallback_on: :failure) { 1 } }.to raise_error(ArgumentError, /missing keyword: :fallback/)
    expect { breaker.call(fallback: fallback, retries: 2) { 1 } }.to raise_error(ArgumentError, /unknown keyword: :retries/)
    expect { breaker.call(fallback) { 1 } }.to raise_error(ArgumentError, /wrong number of arguments \(given 1, expected 0/)
    expect { breaker.call({ fallback: fallback }) { 1 } }.to raise_error(ArgumentError, /wrong number of arguments/)
    expect { breaker.call(fallback: fallback) }.to raise_error(ArgumentError, /needs a block/)
    expect(breaker.metrics[:total]).to eq(0)
  end

  it "keeps call without keywords free of allocations" do
    plain = build_breaker
    allocated = lambda do
      before = GC.stat(:total_allocated_objects)
      1000.times { plain.call { 1 } }
      GC.stat(:total_allocated_objects) - before
    end
    allocated.call # warm: the first round's measuring allocates once

    expect(allocated.call).to eq(0)
  end

  it "is accepted, and never answers, by a kill-switched breaker (CIRCUIT_BREAKER_DISABLED)" do
    lib = File.expand_path("../../lib", __dir__)
    code = <<~RUBY
      b = CircuitBreaker.new(min_calls: 1)
      p [b.call(fallback: ->(_) { :fb }) { 1 }, (b.call(fallback: ->(_) { :fb }, fallback_on: :failure) { raise IOError } rescue $!.class)]
    RUBY
    out, status = ChildProcess.capture2e({ "CIRCUIT_BREAKER_DISABLED" => "1" }, RbConfig.ruby, "-I", lib, "-rcircuit_breaker", "-e", code)

    expect(status).to be_success, out
    expect(out.strip).to eq("[1, IOError]")
  end
end
