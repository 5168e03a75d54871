# frozen_string_literal: true

# Subclasses of the native classes (allocate + initialize): instances of the
# subclass with its options, `initialize`/`super`, and a clear error, never
# a crash, from an object whose initialize never ran.
RSpec.describe "subclasses of the gem's classes" do
  include BreakerHelpers

  let(:clock) { CircuitBreaker::ManualClock.new }

  payments = Class.new(CircuitBreaker) do
    attr_reader :team

    def initialize(team: "billing", **options)
      @team = team
      super(name: "payments", error_rate_threshold: 0.25, min_calls: 4, **options)
    end
  end

  it "returns an instance of a CircuitBreaker subclass, built with the options its initialize passes to super" do
    breaker = payments.new(clock: clock, team: "risk")
    expect(breaker).to be_an_instance_of(payments)
    expect(breaker.team).to eq("risk")
    expect(breaker.name).to eq("payments")
    succeed_calls(breaker, 3)
    fail_calls(breaker, 1) # 1 of 4 = 0.25 >= error_rate_threshold
    expect(breaker.state).to eq(:open)
    expect { breaker.call { :never } }.to raise_error(CircuitBreaker::OpenError, /"payments"/)
    expect(breaker.inspect).to start_with("#<")
  end

  it "lets the caller override what the subclass passes, and reports bad values under the caller's name" do
    breaker = payments.new(clock: clock, min_calls: 1)
    fail_calls(breaker, 1)
    expect(breaker.state).to eq(:open)
    expect { payments.new(min_calls: 0) }.to raise_error(ArgumentError, /min_calls/)
    expect { payments.new(retry_time: -1) }.to raise_error(ArgumentError, /\Aretry_time must be/)
  end

  it "keeps the aliases working through super" do
    seed_breaker = Class.new(CircuitBreaker) do
      def initialize(**options)
        super(threshold: 0.5, retry_time: 5, **options)
      end
    end
    breaker = seed_breaker.new(clock: clock, min_calls: 2)
    fail_calls(breaker, 1)
    succeed_calls(breaker, 1)
    expect(breaker.state).to eq(:open)
    expect(breaker.retry_after).to eq(5.0)
    expect { seed_breaker.new(error_rate_threshold: 0.5) }.to raise_error(ArgumentError, /not both/)
  end

  it "returns instances of SlidingWindow, TimeWindow and ManualClock subclasses, with their options" do
    small = Class.new(CircuitBreaker::SlidingWindow) { def initialize(**o) = super(size: 3, **o) }
    minute = Class.new(CircuitBreaker::TimeWindow) { def initialize(**o) = super(seconds: 60, buckets: 6, **o) }
    late = Class.new(CircuitBreaker::ManualClock) { def initialize = super(1000.0) }

    window = small.new(slow_threshold_ms: 50)
    expect(window).to be_an_instance_of(small)
    expect([window.size, window.slow_threshold_ms]).to eq([3, 50.0])
    timed = minute.new
    expect(timed).to be_an_instance_of(minute)
    expect([timed.seconds, timed.buckets]).to eq([60.0, 6])
    start = late.new
    expect(start).to be_an_instance_of(late)
    expect(start.now).to eq(1000.0)

    breaker = CircuitBreaker.new(window: window, clock: start, min_calls: 3)
    fail_calls(breaker, 3)
    expect(breaker.window).to be(window)
    expect(breaker.state).to eq(:open)
    expect(CircuitBreaker.new(window: timed, clock: start).window).to be(timed)
  end

  uninitialized = {
    "CircuitBreaker" => -> { CircuitBreaker.allocate },
    "a subclass whose initialize does not call super" => -> { Class.new(CircuitBreaker) { def initialize; end }.new }
  }
  uninitialized.each do |what, build|
    it "raises a clear RuntimeError from every method of #{what} whose initialize never ran" do
      breaker = build.call
      calls = {
        call: -> { breaker.call { :never } }, state: -> { breaker.state }, metrics: -> { breaker.metrics },
        retry_after: -> { breaker.retry_after }, trip!: -> { breaker.trip! }, reset!: -> { breaker.reset! },
        force_open!: -> { breaker.force_open! }, disable!: -> { breaker.disable! }, name: -> { breaker.name },
        window: -> { breaker.window }, allow?: -> { breaker.allow? }, record_success: -> { breaker.record_success },
        record_failure: -> { breaker.record_failure }, closed?: -> { breaker.closed? },
        on_reject: -> { breaker.on_reject { nil } }
      }
      calls.each do |name, run|
        expect(&run).to raise_error(RuntimeError, /uninitialized CircuitBreaker/), "#{name} did not raise"
      end
      # inspect answers (a debugger or an error message may show it).
      expect(breaker.inspect).to eq("#<CircuitBreaker (not initialized)>")
      GC.start # its (empty) mark function runs without a crash
    end
  end

  {
    "SlidingWindow" => [CircuitBreaker::SlidingWindow, %i[total failures slow_calls error_rate slow_call_rate reset size]],
    "TimeWindow" => [CircuitBreaker::TimeWindow, %i[total seconds buckets]],
    "ManualClock" => [CircuitBreaker::ManualClock, %i[now]]
  }.each do |name, (klass, readers)|
    it "raises a clear RuntimeError from an allocated #{name} whose initialize never ran, and inspects it" do
      object = klass.allocate
      readers.each do |m|
        expect { object.public_send(m) }.to raise_error(RuntimeError, /uninitialized CircuitBreaker::#{name}/)
      end
      expect(object.inspect).to eq("#<CircuitBreaker::#{name} (not initialized)>")
      expect(Class.new(klass).allocate.inspect).to match(/\A#<#<Class:0x\h+> \(not initialized\)>\z/)
      expect { CircuitBreaker.new(window: object) }.to raise_error(RuntimeError, /uninitialized/) unless name == "ManualClock"
      expect { CircuitBreaker.new(clock: object) }.to raise_error(RuntimeError, /uninitialized/) if name == "ManualClock"
    end
  end

  it "refuses to initialize twice, and the breaker keeps its first setup" do
    breaker = CircuitBreaker.new(name: "once", clock: clock)
    expect { breaker.__send__(:initialize, name: "twice") }.to raise_error(RuntimeError, /already initialized/)
    expect(breaker.name).to eq("once")
    expect(breaker.call { :ok }).to eq(:ok)
    window = CircuitBreaker::SlidingWindow.new(size: 5)
    expect { window.__send__(:initialize, size: 9) }.to raise_error(RuntimeError, /already initialized/)
    expect(window.size).to eq(5)
  end

  it "refuses dup and clone (the native state is not copied)" do
    [CircuitBreaker.new, CircuitBreaker::SlidingWindow.new, CircuitBreaker::TimeWindow.new,
     CircuitBreaker::ManualClock.new].each do |object|
      expect { object.dup }.to raise_error(TypeError, /can't copy/)
      expect { object.clone }.to raise_error(TypeError, /can't copy/)
    end
  end
end
