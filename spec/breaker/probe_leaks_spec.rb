# frozen_string_literal: true

# A half-open probe slot is given back (or its outcome recorded) however the
# probe's block ends. With `half_open_calls: 1` a leaked slot is obvious: the
# stage would reject every later call forever.
RSpec.describe CircuitBreaker, "half-open probe slots" do
  ignored = Class.new(StandardError)
  not_standard = Class.new(Exception) # rubocop:disable Lint/InheritException

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:events) { [] }
  let(:breaker) do
    # `events` is read here, not lazily inside the listener: an interrupt
    # landing in RSpec's memoization of a `let` (a Mutex) would become a
    # ThreadError there.
    log = events
    described_class.new(clock: clock, half_open_calls: 1, open_duration: 10,
                        ignore_errors: [ignored, ->(e) { e.message == "ignore me" }],
                        failure_if: ->(value) { value == :check_raises ? raise(ArgumentError, "bad check") : false })
                   .tap { |b| b.on_state_change { |e| log << [e.from, e.to, e.reason] } }
  end

  def half_open!
    breaker.trip!
    clock.advance(10)
    expect(breaker.state).to eq(:half_open)
    events.clear
  end

  # A thread whose probe waits inside the block until told; returns it once
  # the block runs.
  def probe_in_thread(&finish)
    inside = Queue.new
    thread = Thread.new do
      Thread.current.report_on_exception = false
      breaker.call do
        inside << true
        finish ? finish.call : sleep
      end
    end
    inside.pop
    thread
  end

  # After the probe ended: the stage completes and the breaker closes.
  def expect_breaker_to_close
    if breaker.state == :open
      clock.advance(breaker.retry_after)
      expect(breaker.state).to eq(:half_open)
    end
    expect(breaker.call { :probe }).to eq(:probe) unless breaker.closed?
    expect(breaker.state).to eq(:closed)
    expect(breaker.call { :after }).to eq(:after)
  end

  def swallow
    yield
  rescue Exception # rubocop:disable Lint/RescueException
    nil
  end

  def returning_from_block
    breaker.call { return :returned }
    :fell_through
  end

  # How the probe ends => what the breaker must make of it:
  #   :released  nothing recorded; the stage still has its slot (still half-open)
  #   :succeeded recorded as a success; the only probe passed (closed)
  #   :failed    recorded as a failure (open again)
  endings = {
    "Thread#kill" => [:released, ->(t) { t.probe_in_thread.kill.join }],
    "Thread#raise of a recorded error" =>
      [:failed, ->(t) { t.swallow { t.probe_in_thread.tap { |th| th.raise(RuntimeError, "stop") }.join } }],
    "Thread#raise of an ignored error" =>
      [:released, ->(t) { t.swallow { t.probe_in_thread.tap { |th| th.raise(ignored) }.join } }],
    "Thread#raise of Interrupt (not a StandardError)" =>
      [:released, ->(t) { t.swallow { t.probe_in_thread.tap { |th| th.raise(Interrupt) }.join } }],
    # A throw up to Ruby 3.2, Timeout::ExitException from 3.3 (docs/install.md).
    "Timeout.timeout around call" =>
      [defined?(Timeout::ExitException) ? :failed : :succeeded,
       ->(t) { t.swallow { Timeout.timeout(0.01) { t.breaker.call { sleep } } } }],
    "Timeout.timeout inside the block" =>
      [:failed, ->(t) { t.swallow { t.breaker.call { Timeout.timeout(0.01) { sleep } } } }],
    "an ignored error class" => [:released, ->(t) { t.swallow { t.breaker.call { raise ignored } } }],
    "an error ignored by a Proc" =>
      [:released, ->(t) { t.swallow { t.breaker.call { raise StandardError, "ignore me" } } }],
    "an exception that is not a StandardError" =>
      [:released, ->(t) { t.swallow { t.breaker.call { raise not_standard } } }],
    "exit (SystemExit)" => [:released, ->(t) { t.swallow { t.breaker.call { exit 3 } } }],
    "break" => [:succeeded, ->(t) { t.breaker.call { break } }],
    "throw" => [:succeeded, ->(t) { catch(:out) { t.breaker.call { throw :out } } }],
    "next" => [:succeeded, ->(t) { t.breaker.call { next :early } }],
    "return from the enclosing method" => [:succeeded, ->(t) { t.returning_from_block }],
    "failure_if raising" => [:failed, ->(t) { t.swallow { t.breaker.call { :check_raises } } }],
    "a recorded error" => [:failed, ->(t) { t.swallow { t.breaker.call { raise "down" } } }],
    "StopIteration ending a loop" => [:failed, ->(t) { loop { t.breaker.call { raise StopIteration } } }]
  }

  endings.each do |how, (expected, finish)|
    it "is not leaked when the probe ends by #{how} (#{expected})" do
      half_open!
      finish.call(self)

      case expected
      when :released
        expect(breaker.metrics).to include(state: :half_open, total: 0, stage: 0)
        expect(events).to be_empty
      when :succeeded
        expect(breaker.state).to eq(:closed)
        expect(events).to eq([%i[half_open closed probes_passed]])
      when :failed
        expect(breaker.state).to eq(:open)
        expect(events).to eq([%i[half_open open probe_failed]])
      end
      expect_breaker_to_close
    end
  end

  it "is not leaked when the matcher deciding the error raises (a failure; the matcher's error is raised)" do
    b = described_class.new(clock: clock, half_open_calls: 1, open_duration: 10,
                            ignore_errors: [->(_e) { raise ArgumentError, "matcher failed" }])
    b.trip!
    clock.advance(10)
    expect { b.call { raise "down" } }.to raise_error(ArgumentError, "matcher failed")
    expect(b.state).to eq(:open)
    clock.advance(10)
    expect(b.call { :ok }).to eq(:ok)
    expect(b.state).to eq(:closed)
  end

  it "is not leaked when a state-change listener raises as the probe closes the breaker" do
    half_open!
    breaker.on_state_change { raise "listener bug" }
    expect { expect(breaker.call { :ok }).to eq(:ok) }.to output(/listener bug/).to_stderr
    expect(breaker.state).to eq(:closed)
  end

  it "is given back, not counted as a call, when a listener raises something that is not a StandardError as the probe is admitted" do
    breaker.trip!
    clock.advance(10)
    fire = true
    # Raised as the call finds the open period over (open -> half-open).
    breaker.on_state_change { raise Interrupt if fire }
    ran = false
    expect { breaker.call { ran = true } }.to raise_error(Interrupt)
    expect(ran).to be(false)
    expect(breaker.metrics).to include(state: :half_open, calls: 0, total: 0, stage: 0)
    fire = false
    expect_breaker_to_close
  end

  it "is not leaked by a probe that calls the same breaker again (the inner call is rejected, a failure)" do
    half_open!
    expect { breaker.call { breaker.call { :inner } } }.to raise_error(CircuitBreaker::OpenError)
    expect(breaker.state).to eq(:open)
    expect_breaker_to_close
  end

  it "gives the slot to the next stage: a hung probe of an earlier stage does not count" do
    b = described_class.new(clock: clock, half_open_calls: 1, ramp: [0.5, 1.0], open_duration: 10,
                            half_open_timeout: 5)
    b.trip!
    clock.advance(10)
    hung = Thread.new { b.call { sleep } }
    wait_until(what: "the hung probe") { hung.status == "sleep" }
    clock.advance(5) # the stage times out: open again
    expect(b.state).to eq(:open)
    clock.advance(10)
    expect(b.call { :ok }).to eq(:ok) # stage 0 of the new half-open period
    expect(b.metrics[:stage]).to eq(1)
    expect(b.call { :ok }).to eq(:ok)
    expect(b.state).to eq(:closed)
    hung.kill.join
    expect(b.state).to eq(:closed) # the old probe's end decides nothing
  end

  describe "slots a probe can hold on to (documented: half_open_timeout frees them)" do
    let(:breaker) { described_class.new(clock: clock, half_open_calls: 1, open_duration: 10, half_open_timeout: 5) }

    it "a probe abandoned in a Fiber that is never resumed holds its slot until half_open_timeout" do
      half_open!
      fiber = Fiber.new { breaker.call { Fiber.yield } }
      fiber.resume
      expect { breaker.call { :ok } }.to raise_error(CircuitBreaker::OpenError)
      clock.advance(5)
      expect(breaker.state).to eq(:open)
      expect_breaker_to_close
    end

    it "an allow? permit whose thread ends without record_* holds its slot until half_open_timeout" do
      half_open!
      expect(Thread.new { breaker.allow? }.value).to be(true)
      expect(breaker.allow?).to be(false)
      clock.advance(5)
      expect(breaker.state).to eq(:open)
      expect_breaker_to_close
    end
  end

  # A listener's StandardError is only reported; whatever else ends it
  # (Thread#kill, Interrupt, a throw) goes on to the caller.
  describe "interrupts that arrive while a listener runs" do
    it "Thread#kill ends the thread" do
      inside = Queue.new
      breaker.on_state_change { inside << true && sleep(1) }
      thread = Thread.new { breaker.trip! && :survived }
      inside.pop
      thread.kill
      expect(thread.value).to be_nil
    end

    it "Interrupt raised by a listener reaches the caller" do
      breaker.on_state_change { raise Interrupt }
      expect { breaker.trip! }.to raise_error(Interrupt)
    end

    it "Timeout.timeout around the call still fires" do
      breaker.on_state_change { sleep 1 }
      expect { Timeout.timeout(0.05) { breaker.trip! } }.to raise_error(Timeout::Error)
    end

    it "a throw from an on_reject listener is not lost" do
      breaker.on_reject { throw :out, :thrown }
      breaker.trip!
      expect(catch(:out) { attempt_call }).to eq(:thrown)
    end
  end

  def attempt_call
    breaker.call { :ran }
  rescue CircuitBreaker::OpenError
    :rejected
  end

  it "never leaks a slot when threads are killed or interrupted at random moments", :integration do
    # The GVL passes (so the interrupt can land) inside the block, in
    # failure_if, in a listener and between calls.
    b = described_class.new(clock: clock, half_open_calls: 1, open_duration: 1,
                            ignore_errors: [ignored], failure_if: ->(_v) { Thread.pass || false })
    b.on_state_change { Thread.pass }
    random = Random.new(RSpec.configuration.seed)
    scaled(300).times do |i|
      b.trip!
      clock.advance(1)
      ready = Queue.new
      # Probes in a loop: each closes the breaker, which is tripped again.
      probe = Thread.new do
        Thread.current.report_on_exception = false
        ready << true
        loop do
          b.trip! if b.closed?
          clock.advance(1)
          Thread.pass
          begin
            b.call { Thread.pass }
          rescue CircuitBreaker::OpenError
            nil
          end
        end
      end
      ready.pop
      sleep(random.rand * 0.002)
      case i % 3
      when 0 then probe.kill
      when 1 then probe.raise(not_standard)
      else probe.raise(Interrupt)
      end
      # (Not a StandardError: one landing in the listener would be reported
      # and swallowed, by design, and the thread would go on probing.)
      ended = swallow { probe.join(10) } || !probe.alive?
      expect(ended).to be_truthy, "iteration #{i}: the probe thread did not end"

      # No trip! here: it would start a new generation and hide a leak.
      clock.advance(1) if b.state == :open
      expect(b.call { :ok }).to eq(:ok), "iteration #{i}: #{b.metrics}"
      expect(b.state).to eq(:closed)
    end
  end
end
