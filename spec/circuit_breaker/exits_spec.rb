# frozen_string_literal: true

require "spec_helper"

# Every way out of `call` other than a value is returned inside Rust and
# raised by the method's entry once every Rust frame has returned: a long
# jump from deeper would skip the destructors of what those frames own. A
# checked build (CIRCUIT_BREAKER_PROFILE=checked rake compile, as bin/test
# runs this file) counts the values native methods keep alive; a leak shows
# as a count that does not come back.
RSpec.describe "CircuitBreaker#call's ways out" do
  before do
    next if CircuitBreaker.respond_to?(:__live_native_values, true)

    skip "needs a checked build: CIRCUIT_BREAKER_PROFILE=checked rake compile"
  end

  let(:clock) { CircuitBreaker::ManualClock.new }

  def live
    CircuitBreaker.send(:__live_native_values)
  end

  def new_breaker(**options)
    CircuitBreaker.new(clock: clock, min_calls: 2, **options)
  end

  # Runs `way` 20 times and expects the count of live values unchanged (a
  # delta: a thread another example left parked in a block holds its own).
  def expect_nothing_left(&way)
    before = live
    20.times(&way)
    expect(live).to eq(before)
  end

  it "drops everything on a value, a recorded raise and an ignored raise" do
    breaker = new_breaker(min_calls: 1_000, ignore_errors: [ArgumentError])
    expect_nothing_left do
      breaker.call { 1 }
      expect { breaker.call { raise "down" } }.to raise_error(RuntimeError, "down")
      expect { breaker.call { raise ArgumentError } }.to raise_error(ArgumentError)
    end
  end

  it "drops everything on a rejection, and on the raise that opens the breaker" do
    expect_nothing_left do
      breaker = new_breaker
      2.times { expect { breaker.call { raise "down" } }.to raise_error(RuntimeError) }
      expect { breaker.call { 1 } }.to raise_error(CircuitBreaker::OpenError)
    end
  end

  it "drops everything when a fallback answers, raises or throws, and on bad keywords" do
    expect_nothing_left do
      breaker = new_breaker
      on_failure = { fallback: ->(e) { e.class }, fallback_on: :failure }
      2.times { expect(breaker.call(**on_failure) { raise "down" }).to eq(RuntimeError) }
      expect(breaker.call(**on_failure) { 1 }).to eq(CircuitBreaker::OpenError)
      expect { breaker.call(fallback: ->(_) { raise KeyError }) { 1 } }.to raise_error(KeyError)
      expect(catch(:cache) { breaker.call(fallback: ->(_) { throw :cache, :thrown }) { 1 } }).to eq(:thrown)
      expect { breaker.call(fallback: 1) { 1 } }.to raise_error(TypeError)
      expect { breaker.call(fallback: ->(_) {}, nope: 1) { 1 } }.to raise_error(ArgumentError)
    end
  end

  it "drops everything on break, next and throw, with and without a transition" do
    expect_nothing_left do
      breaker = new_breaker
      expect(breaker.call { break :out }).to eq(:out)
      expect(breaker.call { next :skipped }).to eq(:skipped)
      expect(catch(:done) { breaker.call { throw :done, :thrown } }).to eq(:thrown)
      breaker.trip!
      clock.advance(30)
      # A probe cut short by a jump closes the breaker: the listeners run
      # while the jump resumes.
      seen = []
      breaker.on_state_change { |e| seen << e.to }
      2.times { catch(:done) { breaker.call { throw :done } } }
      expect(seen).to eq(%i[half_open closed])
    end
  end

  it "drops everything when a listener raises while a jump resumes" do
    expect_nothing_left do
      breaker = new_breaker
      breaker.on_state_change { |e| raise Interrupt if e.to == :closed }
      breaker.trip!
      clock.advance(30)
      catch(:done) { breaker.call { throw :done } }
      expect { catch(:done) { breaker.call { throw :done } } }.to raise_error(Interrupt)
      expect(breaker.state).to eq(:closed)
    end
  end

  it "drops everything when failure_if raises, and when a thread is killed in the block" do
    expect_nothing_left do
      breaker = new_breaker(failure_if: ->(_) { raise KeyError })
      expect { breaker.call { 1 } }.to raise_error(KeyError)
      queue = Queue.new
      worker = Thread.new { breaker.call { queue << :in && sleep } }
      queue.pop
      worker.kill.join
    end
  end

  it "drops everything when the call is made without a block" do
    expect_nothing_left do
      expect { new_breaker.call }.to raise_error(ArgumentError, /needs a block/)
    end
  end
end
