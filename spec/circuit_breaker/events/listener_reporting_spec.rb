# frozen_string_literal: true

# Reporting a listener's error never raises into call, allow? or trip!, and
# listeners see transitions in the order they happened, even when one of
# them changes the state (docs/semantics-permits.md).
RSpec.describe CircuitBreaker, "listener reporting under hostile setups" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:breaker) { CircuitBreaker.new(name: "hostile", clock: clock, min_calls: 1, open_duration: 10) }

  # An exception whose #message raises.
  rude = Class.new(StandardError) do
    def message
      raise NoMethodError, "message is broken"
    end
  end

  # Runs the three entry points whose listeners fail; each keeps its own outcome.
  def exercise(breaker)
    expect { breaker.call { raise ArgumentError, "own" } }.to raise_error(ArgumentError, "own") # opens
    expect { breaker.call { :never } }.to raise_error(CircuitBreaker::OpenError)
    expect(breaker.allow?).to be(false)
    expect(breaker.reset!).to be(breaker)
    expect(breaker.trip!).to be(breaker)
  end

  it "survives a listener's exception whose message raises" do
    breaker.on_state_change { raise rude }
    breaker.on_reject { raise rude }
    expect { exercise(breaker) }.to output(/on_state_change listener of "hostile" raised .*message raised/).to_stderr
  end

  it "survives a closed $stderr" do
    breaker.on_state_change { raise "listener broke" }
    breaker.on_reject { raise "listener broke" }
    original = $stderr
    closed = IO.pipe.last.tap(&:close)
    begin
      $stderr = closed
      exercise(breaker)
    ensure
      $stderr = original
    end
  end

  it "survives a Warning.warn that raises (warnings turned into errors)" do
    breaker.on_state_change { raise "listener broke" }
    breaker.on_reject { raise "listener broke" }
    strict = Module.new # prepended for good; its method only for this example
    Warning.singleton_class.prepend(strict)
    begin
      strict.define_method(:warn) { |message, *| raise "warning raised: #{message}" }
      expect { warn "anything" }.to raise_error(RuntimeError, /warning raised/)
      exercise(breaker)
    ensure
      strict.remove_method(:warn)
    end
  end

  it "delivers a transition a listener causes after the one it is handling, to every listener" do
    seen = { first: [], second: [] }
    breaker.on_state_change do |e|
      seen[:first] << [e.from, e.to]
      breaker.reset! if e.to == :open
    end
    breaker.on_state_change { |e| seen[:second] << [e.from, e.to] }
    expect { breaker.call { raise "boom" } }.to raise_error(RuntimeError)
    expected = [%i[closed open], %i[open closed]]
    expect(seen).to eq(first: expected, second: expected)
    expect(breaker.state).to eq(:closed)
  end
end
