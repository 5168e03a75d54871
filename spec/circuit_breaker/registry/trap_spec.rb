# frozen_string_literal: true

# The registry works inside a signal handler, where Mutex#lock is refused.
RSpec.describe CircuitBreaker, "registry in a signal handler" do
  # Other files leave breakers registered; this one lists the registry.
  before { CircuitBreaker.forget_all! }
  after { CircuitBreaker.forget_all! }

  # Runs the block as a USR2 handler of this process; returns its value or
  # the exception it raised (bounded wait: handlers run at the next check).
  def in_trap(&block)
    outcome = nil
    previous = trap("USR2") do
      outcome = [:ok, block.call]
    rescue StandardError => e
      outcome = [:error, e]
    end
    Process.kill(:USR2, Process.pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.001 until outcome || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    raise "the handler did not run" unless outcome
    raise outcome.last if outcome.first == :error

    outcome.last
  ensure
    trap("USR2", previous || "DEFAULT")
  end

  it "creates, looks up, lists, resets and forgets breakers from a trap" do
    breaker = in_trap { CircuitBreaker.for(:trapped, min_calls: 1) }
    expect(breaker.name).to eq("trapped")
    expect(in_trap { CircuitBreaker.for(:trapped) }).to be(breaker)
    expect(in_trap { CircuitBreaker.for(:trapped, min_calls: 1) }).to be(breaker)
    breaker.trip!
    expect(in_trap { CircuitBreaker.registry }).to eq("trapped" => breaker)
    in_trap { CircuitBreaker.reset_all! }
    expect(breaker.state).to eq(:closed)
    in_trap { CircuitBreaker.forget_all! }
    expect(CircuitBreaker.registry).to be_empty
  end
end
