# frozen_string_literal: true

# docs/semantics.md: how `call` classifies every way a block can end, OpenError,
# and listeners around jumps.
RSpec.describe CircuitBreaker, "#call" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:window) { CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100) }
  let(:boom) { BreakerHelpers::Boom }

  # Not a StandardError (like Interrupt): a bare `rescue` does not catch it.
  stop_class = Class.new(Exception) # rubocop:disable Lint/InheritException -- not a StandardError on purpose

  def make(**options)
    build_breaker(**{ clock: clock, window: window, min_calls: 100 }.merge(options))
  end

  # A half-open breaker with a single probe slot: the next admitted call is
  # the probe, and a second one is rejected while it runs.
  def half_open(**options)
    defaults = { clock: clock, window: window, min_calls: 1, open_duration: 10, half_open_calls: 1 }
    breaker = build_breaker(**defaults.merge(options))
    breaker.trip!
    cool_down(breaker)
    expect(breaker.state).to eq(:half_open)
    breaker
  end

  # `return` inside the block returns from this method.
  def returns_from_the_block(breaker)
    breaker.call { return :returned }
    :fell_through
  end

  def counts
    [window.total, window.failures, window.slow_calls]
  end

  describe "a block that returns" do
    it "returns its value and records a success with its duration" do
      breaker = make
      result = breaker.call do
        clock.advance(0.25)
        :value
      end
      expect(result).to eq(:value)
      expect(counts).to eq([1, 0, 1])
      expect(breaker.call { 42 }).to eq(42)
      expect(counts).to eq([2, 0, 1])
    end

    it "returns any object untouched: nil, false, a frozen string, a BasicObject" do
      breaker = make
      basic = BasicObject.new
      text = "frozen"
      expect(breaker.call { nil }).to be_nil
      expect(breaker.call { false }).to be(false)
      expect(breaker.call { text }).to be(text)
      expect(breaker.call { basic }.__id__).to eq(basic.__id__)
      expect(counts).to eq([4, 0, 0])
    end

    it "keeps the block's value alive while a transition is reported (GC.stress)" do
      skip "sets GC.stress itself (too slow in the GC_STRESS pass)" if ENV["GC_STRESS"] == "1"
      breaker = half_open
      value = nil
      was = GC.stress
      begin
        GC.stress = true
        value = breaker.call { Array.new(2) { |i| i + 1 } } # closes the breaker
      ensure
        GC.stress = was
      end
      expect(breaker.state).to eq(:closed)
      expect(value).to eq([1, 2])
    end

    it "returns the value of `next`, as a success" do
      breaker = make
      early = true
      result = breaker.call do
        next :early if early

        :late
      end
      expect(result).to eq(:early)
      expect(counts).to eq([1, 0, 0])
    end

    it "records a failure when failure_if is true, and still returns the value" do
      response = Struct.new(:status)
      breaker = make(failure_if: ->(r) { r.status >= 500 })
      bad = response.new(503)
      expect(breaker.call { bad }).to be(bad)
      expect(breaker.call { response.new(200) }.status).to eq(200)
      expect(counts).to eq([2, 1, 0])
    end

    it "passes the value itself to failure_if, which may be any callable" do
      seen = []
      judge = Object.new
      judge.define_singleton_method(:call) { |v| seen << v && v.nil? }
      breaker = make(failure_if: judge)
      value = Object.new
      breaker.call { value }
      breaker.call { nil }
      expect(seen.first).to be(value)
      expect(counts).to eq([2, 1, 0])
    end

    it "takes any truthy failure_if result as a failure" do
      breaker = make(failure_if: ->(r) { r })
      breaker.call { "error text" }
      breaker.call { nil }
      breaker.call { false }
      expect(counts).to eq([3, 1, 0])
    end

    it "records a failure when failure_if raises, and raises failure_if's exception" do
      breaker = make(failure_if: ->(_) { raise KeyError, "no status" })
      expect { breaker.call { :ok } }.to raise_error(KeyError, "no status")
      expect(counts).to eq([1, 1, 0])
    end

    it "lets a failure_if failure trip the breaker, and a probe's failure_if decide it" do
      breaker = build_breaker(clock: clock, window: window, min_calls: 2, half_open_calls: 1,
                              failure_if: ->(r) { r == :bad })
      2.times { breaker.call { :bad } }
      expect(breaker.state).to eq(:open)
      cool_down(breaker)
      expect(breaker.call { :bad }).to eq(:bad)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "a block that raises" do
    it "records a record_errors exception (StandardError by default) as a failure" do
      breaker = make
      expect { breaker.call { raise boom } }.to raise_error(boom)
      expect { breaker.call { raise ArgumentError } }.to raise_error(ArgumentError)
      expect(counts).to eq([2, 2, 0])
    end

    it "re-raises the very exception object, with its own backtrace" do
      breaker = make
      original = boom.new("downstream failed")
      inside = nil
      raised = begin
        breaker.call do
          raise original
        rescue boom => e
          inside = e.backtrace.dup
          raise
        end
      rescue boom => e
        e
      end
      expect(raised).to be(original)
      expect(raised.object_id).to eq(original.object_id)
      expect(raised.backtrace).to eq(inside)
      expect(raised.backtrace.first).to include(__FILE__)
    end

    it "re-raises an unrecorded exception unchanged too" do
      breaker = make(ignore_errors: [boom])
      original = boom.new("ignored")
      expect { breaker.call { raise original } }.to raise_error(satisfy { |e| e.equal?(original) })
    end

    it "records only record_errors classes when given" do
      breaker = make(record_errors: [IOError, KeyError])
      expect { breaker.call { raise EOFError } }.to raise_error(EOFError) # an IOError
      expect { breaker.call { raise KeyError } }.to raise_error(KeyError)
      expect { breaker.call { raise ArgumentError } }.to raise_error(ArgumentError)
      expect(counts).to eq([2, 2, 0])
    end

    it "accepts Procs in record_errors, given the exception" do
      breaker = make(record_errors: [->(e) { e.message.start_with?("5") }])
      expect { breaker.call { raise boom, "503 unavailable" } }.to raise_error(boom)
      expect { breaker.call { raise boom, "404 not found" } }.to raise_error(boom)
      expect(counts).to eq([1, 1, 0])
    end

    it "records nothing for an ignore_errors class" do
      breaker = make(ignore_errors: [KeyError])
      expect { breaker.call { raise KeyError } }.to raise_error(KeyError)
      expect(counts).to eq([0, 0, 0])
    end

    it "records nothing for an ignore_errors Proc" do
      breaker = make(ignore_errors: [->(e) { e.message == "not found" }])
      expect { breaker.call { raise boom, "not found" } }.to raise_error(boom)
      expect { breaker.call { raise boom, "timeout" } }.to raise_error(boom)
      expect(counts).to eq([1, 1, 0])
    end

    it "checks ignore_errors first, before record_errors" do
      breaker = make(record_errors: [boom], ignore_errors: [boom])
      expect { breaker.call { raise boom } }.to raise_error(boom)
      expect(counts).to eq([0, 0, 0])
    end

    it "records nothing for an exception outside StandardError, and re-raises it" do
      breaker = make
      expect { breaker.call { raise stop_class, "stop" } }.to raise_error(stop_class, "stop")
      expect { breaker.call { raise Interrupt } }.to raise_error(Interrupt)
      expect { breaker.call { raise SystemExit } }.to raise_error(SystemExit)
      expect { breaker.call { raise NoMemoryError, "fake" } }.to raise_error(NoMemoryError)
      expect(counts).to eq([0, 0, 0])
    end

    it "records Timeout::Error raised inside the block as a failure, whatever record_errors says" do
      breaker = make(record_errors: [ArgumentError])
      expect { breaker.call { raise Timeout::Error, "read timeout" } }.to raise_error(Timeout::Error)
      expect { breaker.call { raise Class.new(Timeout::Error) } }.to raise_error(Timeout::Error)
      expect(counts).to eq([2, 2, 0])
    end

    it "records Timeout::Error as a failure even with record_errors: []" do
      breaker = make(record_errors: [])
      expect { breaker.call { raise Timeout::Error } }.to raise_error(Timeout::Error)
      expect { breaker.call { raise boom } }.to raise_error(boom)
      expect(counts).to eq([1, 1, 0])
    end

    it "records Timeout::ExitException as a failure where Ruby has it" do
      skip "no Timeout::ExitException on this Ruby" unless defined?(Timeout::ExitException)

      breaker = make(record_errors: [ArgumentError])
      expect { breaker.call { raise Timeout::ExitException } }.to raise_error(Timeout::ExitException)
      expect(counts).to eq([1, 1, 0])
    end

    it "still lets ignore_errors exclude a Timeout::Error" do
      breaker = make(ignore_errors: [Timeout::Error])
      expect { breaker.call { raise Timeout::Error } }.to raise_error(Timeout::Error)
      expect(counts).to eq([0, 0, 0])
    end
  end

  describe "a block that jumps (break, next, throw, return)" do
    it "counts `break` as a success and returns the break value from call" do
      breaker = make
      expect(breaker.call { break :broken }).to eq(:broken)
      expect(counts).to eq([1, 0, 0])
    end

    it "counts `throw` as a success and lets the catch receive its value" do
      breaker = make
      result = catch(:done) do
        breaker.call { throw :done, :caught }
        :not_caught
      end
      expect(result).to eq(:caught)
      expect(counts).to eq([1, 0, 0])
    end

    it "counts `return` as a success and returns from the enclosing method" do
      breaker = make
      expect(returns_from_the_block(breaker)).to eq(:returned)
      expect(counts).to eq([1, 0, 0])
    end

    it "returns from an enclosing lambda" do
      breaker = make
      body = lambda do
        breaker.call { return :from_lambda }
        :fell_through
      end
      expect(body.call).to eq(:from_lambda)
    end

    it "does not ask failure_if about a jump's value: a jump is a success" do
      breaker = make(failure_if: ->(_) { true })
      expect(breaker.call { break :broken }).to eq(:broken)
      expect(catch(:out) { breaker.call { throw :out, :thrown } }).to eq(:thrown)
      expect(counts).to eq([2, 0, 0])
    end

    it "records a jump with its duration: slow when the clock passed the slow line inside the block" do
      breaker = make
      catch(:timeout) do
        breaker.call do
          clock.advance(0.1) # exactly the slow line
          throw :timeout
        end
      end
      breaker.call do
        clock.advance(0.5)
        break
      end
      expect(counts).to eq([2, 0, 2])
    end

    # How Timeout.timeout interrupts the block is Ruby's (docs/install.md): a
    # throw up to Ruby 3.2, a success with its duration; from 3.3 (timeout
    # 0.4) Timeout::ExitException, a failure like Timeout::Error.
    it "counts a Timeout.timeout around call as it arrives: a throw is a slow success, ExitException a failure" do
      breaker = make
      stuck = Queue.new
      expect do
        Timeout.timeout(0.02) do
          breaker.call do
            clock.advance(3)
            stuck.pop # until Timeout cuts it short
          end
        end
      end.to raise_error(Timeout::Error)
      expect(counts).to eq(defined?(Timeout::ExitException) ? [1, 1, 1] : [1, 0, 1])
    end

    it "counts a half-open probe that jumps as a passed probe" do
      breaker = half_open(half_open_calls: 2)
      catch(:out) { breaker.call { throw :out } }
      expect(breaker.metrics[:total]).to eq(1)
      expect(breaker.call { :second_probe }).to eq(:second_probe)
      expect(breaker.state).to eq(:closed)
    end
  end

  describe "probe slots" do
    it "is released by an ignored error: nothing recorded, the next call probes" do
      breaker = half_open(ignore_errors: [KeyError])
      expect { breaker.call { raise KeyError } }.to raise_error(KeyError)
      expect(breaker.state).to eq(:half_open)
      expect(window.total).to eq(0)
      expect(breaker.call { :probe }).to eq(:probe)
      expect(breaker.state).to eq(:closed)
    end

    it "is released by an exception outside record_errors" do
      breaker = half_open
      expect { breaker.call { raise stop_class } }.to raise_error(stop_class)
      expect(breaker.state).to eq(:half_open)
      expect(window.total).to eq(0)
      expect(breaker.call { :probe }).to eq(:probe)
      expect(breaker.state).to eq(:closed)
    end

    it "is released when the probe's thread is killed, and nothing is recorded" do
      breaker = half_open
      running = Queue.new
      never = Queue.new
      probe = Thread.new do
        breaker.call do
          running << :in_block
          never.pop
        end
      end
      running.pop
      expect(attempt(breaker)).to eq(:rejected) # the slot is taken while it runs
      probe.kill
      probe.join
      expect(breaker.state).to eq(:half_open)
      expect(window.total).to eq(0)
      expect(breaker.call { :probe }).to eq(:probe)
      expect(breaker.state).to eq(:closed)
    end

    it "records nothing for a killed thread in the closed state either" do
      breaker = make
      running = Queue.new
      worker = Thread.new do
        breaker.call do
          running << :in_block
          Queue.new.pop
        end
      end
      running.pop
      worker.kill
      worker.join
      expect(counts).to eq([0, 0, 0])
    end

    it "is used up by a failure_if that raises (a failed probe)" do
      breaker = half_open(failure_if: ->(_) { raise KeyError })
      expect { breaker.call { :ok } }.to raise_error(KeyError)
      expect(breaker.state).to eq(:open)
    end

    it "counts a Timeout::Error probe as a failed probe" do
      breaker = half_open(record_errors: [ArgumentError])
      expect { breaker.call { raise Timeout::Error } }.to raise_error(Timeout::Error)
      expect(breaker.state).to eq(:open)
    end
  end

  describe "re-entrance" do
    it "lets the block call the same breaker (no deadlock), both calls recorded" do
      breaker = make
      expect(breaker.call { breaker.call { 20 } + 1 }).to eq(21)
      expect(counts).to eq([2, 0, 0])
    end

    it "lets the block read and control the breaker" do
      breaker = make
      result = breaker.call do
        [breaker.state, breaker.metrics[:total], breaker.allow?, breaker.record_success]
      end
      expect(result).to eq([:closed, 0, true, nil])
      expect(counts).to eq([2, 0, 0])
    end
  end

  it "raises ArgumentError without a block, taking no permit" do
    breaker = half_open
    expect { breaker.call }.to raise_error(ArgumentError, /block/)
    expect(breaker.metrics[:rejected]).to eq(0)
    expect(breaker.call { :probe }).to eq(:probe)
  end

  it "raises ArgumentError without a block while closed, recording nothing" do
    breaker = build_breaker(clock: clock, window: window)
    expect { breaker.call }.to raise_error(ArgumentError, /CircuitBreaker#call needs a block/)
    expect(breaker.metrics.values_at(:total, :calls, :failures_total)).to eq([0, 0, 0])
    expect(breaker.call { :ok }).to eq(:ok)
  end

  describe "OpenError" do
    let(:breaker) { build_breaker(clock: clock, window: window, name: "payments", min_calls: 1, open_duration: 18) }

    def rejection(breaker)
      breaker.call { raise "the block must not run" }
    rescue CircuitBreaker::OpenError => e
      e
    end

    it "is raised without running the block while open, carrying name, state and the real retry_after" do
      trip!(breaker)
      clock.advance(5.6)
      error = rejection(breaker)
      expect(error).to be_a(CircuitBreaker::OpenError)
      expect(error.breaker_name).to eq("payments")
      expect(error.state).to eq(:open)
      expect(error.retry_after).to be_within(1e-9).of(12.4)
      expect(error.message).to eq('circuit "payments" is open')
    end

    it "says :half_open with retry_after 1.0 (at least a second) when no probe slot is free" do
      half = build_breaker(clock: clock, window: window, name: :payments, min_calls: 1, half_open_calls: 1)
      half.trip!
      cool_down(half)
      error = nil
      half.call { error = rejection(half) } # rejected while the probe runs
      expect(error.state).to eq(:half_open)
      expect(error.retry_after).to eq(1.0)
      expect(error.breaker_name).to eq("payments")
      expect(error.message).to include('"payments"')
    end

    it "says :forced_open with retry_after nil when forced open" do
      breaker.force_open!
      error = rejection(breaker)
      expect(error.state).to eq(:forced_open)
      expect(error.retry_after).to be_nil
      expect(error.message).to include('"payments"')
    end

    it "has a nil breaker_name for an unnamed breaker" do
      unnamed = make(min_calls: 1)
      unnamed.trip!
      error = rejection(unnamed)
      expect(error.breaker_name).to be_nil
      expect(error.message).to eq("circuit is open")
    end

    it "is a CircuitBreaker::Error and a StandardError" do
      breaker.trip!
      expect(rejection(breaker)).to be_a(CircuitBreaker::Error).and be_a(StandardError)
      expect(CircuitBreaker::OpenError.ancestors).to include(CircuitBreaker::Error, StandardError)
      expect { breaker.call { :never } }.to raise_error(CircuitBreaker::OpenError)
    end

    it "has a message of the name and the state only, the same at every rejection (error trackers group it)" do
      breaker.trip!
      first = rejection(breaker)
      clock.advance(7.3)
      expect(rejection(breaker).message).to eq(first.message)
      expect(first.message).to eq('circuit "payments" is open')
      breaker.force_open!
      expect(rejection(breaker).message).to eq('circuit "payments" is forced open')
    end

    # `depth` frames deep in this file, then the rejection.
    def rejected_from_here(breaker, depth)
      return rejected_from_here(breaker, depth - 1) if depth.positive?

      begin
        breaker.call { raise "the block must not run" } # line of the frame
      rescue CircuitBreaker::OpenError => e
        e
      end
    end

    it "has a one-line backtrace, the caller's frame outside the gem, at any stack depth" do
      breaker.trip!
      line = __LINE__ - 8
      [0, 3, 120].each do |depth|
        error = rejected_from_here(breaker, depth)
        expect(error.backtrace).to eq(["#{__FILE__}:#{line}:in `rejected_from_here'"]), "depth #{depth}: #{error.backtrace.inspect}"
      end
    end

    it "has a backtrace of its own that the caller may change (test frameworks filter it in place)" do
      breaker.trip!
      first = rejection(breaker)
      first.backtrace.push("app.rb:1").reject! { |line| line.start_with?("gem") }
      expect(rejection(breaker).backtrace.size).to eq(1)
    end

    it "counts as a rejection in metrics and reaches on_reject listeners" do
      rejected = []
      breaker.on_reject { |e| rejected << e }
      breaker.trip!
      error = rejection(breaker)
      expect(breaker.metrics[:rejected]).to eq(1)
      expect(rejected).to eq([error])
    end
  end

  describe "listeners and jumps" do
    it "fires once when a slow `throw` trips the breaker by slow-call rate, and the throw still lands" do
      breaker = build_breaker(clock: clock, window: window, min_calls: 1, slow_rate_threshold: 1.0)
      events = []
      threads = []
      breaker.on_state_change do |e|
        events << e
        threads << Thread.current
        breaker.metrics # the lock is not held while listeners run
      end
      result = catch(:deadline) do
        breaker.call do
          clock.advance(0.5)
          throw :deadline, :thrown
        end
        :not_thrown
      end
      expect(result).to eq(:thrown)
      expect(moves(events)).to eq([%i[closed open slow_call_rate]])
      expect(threads).to eq([Thread.current])
      expect(events.first.metrics[:state]).to eq(:open)
    end

    it "fires once when a half-open probe ending in `break` closes the breaker, and break returns its value" do
      breaker = half_open
      events = transitions_of(breaker)
      expect(breaker.call { break :broke_out }).to eq(:broke_out)
      expect(moves(events)).to eq([%i[half_open closed probes_passed]])
      expect(breaker.state).to eq(:closed)
    end

    it "fires once when a `return` from a probe closes the breaker" do
      breaker = half_open
      events = transitions_of(breaker)
      expect(returns_from_the_block(breaker)).to eq(:returned)
      expect(moves(events)).to eq([%i[half_open closed probes_passed]])
    end

    it "reports a listener that raises during a jump (warn) and lets the jump go on" do
      breaker = half_open
      breaker.on_state_change { raise "listener bug" }
      result = nil
      expect { result = catch(:out) { breaker.call { throw :out, :landed } } }
        .to output(/listener bug/).to_stderr
      expect(result).to eq(:landed)
      expect(breaker.state).to eq(:closed)
    end

    it "fires once when a failing block trips the breaker, before the exception reaches the caller" do
      breaker = build_breaker(clock: clock, window: window, min_calls: 1)
      order = []
      breaker.on_state_change { |e| order << e.to }
      begin
        breaker.call { raise boom }
      rescue boom
        order << :rescued
      end
      expect(order).to eq(%i[open rescued])
    end
  end
end
