# frozen_string_literal: true

# docs/operating.md: on_state_change, on_reject and the logger.
RSpec.describe CircuitBreaker, "events" do
  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:options) { {} }
  subject(:breaker) do
    CircuitBreaker.new(name: "events", clock: clock, min_calls: 2, open_duration: 30,
                       window: CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 800), **options)
  end

  def fail_once
    breaker.call { raise BreakerHelpers::Boom }
  rescue BreakerHelpers::Boom
    nil
  end

  def open_it
    2.times { fail_once }
    raise "not open: #{breaker.inspect}" unless breaker.state == :open
  end

  def half_open_it
    open_it
    clock.advance(30)
    breaker.state
  end

  # Every event from here on.
  let!(:events) do
    list = []
    breaker.on_state_change { |e| list << e }
    list
  end

  def moves
    events.map { |e| [e.from, e.to, e.reason] }
  end

  describe "on_state_change" do
    it "returns the breaker, and needs a block" do
      expect(breaker.on_state_change { nil }).to be(breaker)
      expect { breaker.on_state_change }.to raise_error(ArgumentError, /block/)
    end

    it "hands a StateChange with the name and the metrics taken just after the transition" do
      open_it
      event = events.first
      expect(event).to be_a(CircuitBreaker::StateChange)
      expect(event.name).to eq("events")
      expect(event.metrics).to be_frozen
      expect(event.metrics[:state]).to eq(:open)
      expect(event.metrics[:retry_after]).to eq(30.0)
      expect(event.metrics[:total]).to eq(0) # entering open empties the window
    end

    it "calls every listener, in the order they were added" do
      order = []
      breaker.on_state_change { order << :first }
      breaker.on_state_change { order << :second }
      breaker.trip!
      expect(order).to eq(%i[first second])
    end

    it "runs after the lock is released: a listener may use the breaker" do
      seen = []
      breaker.on_state_change do |e|
        seen << [e.to, breaker.state, breaker.metrics[:state], breaker.window.total]
        seen << (breaker.call { :inner } rescue :rejected) # rubocop:disable Style/RescueModifier
      end
      open_it
      expect(seen).to eq([[:open, :open, :open, 0], :rejected])
    end

    it "runs in the thread that caused the transition" do
      threads = []
      breaker.on_state_change { threads << Thread.current }
      Thread.new { breaker.trip! }.join
      breaker.reset!
      expect(threads.size).to eq(2)
      expect(threads.first).not_to be(Thread.current)
      expect(threads.last).to be(Thread.current)
    end

    it "reports a listener's exception with warn and never raises it into call" do
      breaker.on_state_change { raise ArgumentError, "listener broke" }
      after = []
      breaker.on_state_change { |e| after << e.to }
      expect do
        # opens (error rate 0.5 over 2 calls) in a call that returned a value
        expect { breaker.call { raise BreakerHelpers::Boom, "own" } }.to raise_error(BreakerHelpers::Boom, "own")
        expect(breaker.call { :value }).to eq(:value)
        # reopens in a call whose block raised
        clock.advance(30)
        expect { breaker.call { raise BreakerHelpers::Boom, "probe" } }.to raise_error(BreakerHelpers::Boom, "probe")
      end.to output(/on_state_change.*"events".*ArgumentError: listener broke/).to_stderr
      expect(after).to eq(%i[open half_open open])
    end
  end

  describe "on_reject" do
    let!(:rejections) do
      list = []
      breaker.on_reject { |error| list << error }
      list
    end

    it "returns the breaker, and needs a block" do
      expect(breaker.on_reject { nil }).to be(breaker)
      expect { breaker.on_reject }.to raise_error(ArgumentError, /block/)
    end

    it "is called once per rejected call with the OpenError raised" do
      open_it
      raised = 3.times.map do
        breaker.call { :ran }
      rescue CircuitBreaker::OpenError => e
        e
      end
      expect(rejections.size).to eq(3)
      rejections.zip(raised).each { |handed, error| expect(handed).to be(error) }
      expect(rejections.first).to have_attributes(breaker_name: "events", state: :open, retry_after: 30.0)
    end

    it "is called for allow? returning false" do
      breaker.force_open!
      expect(breaker.allow?).to be(false)
      expect(rejections.map { |e| [e.class, e.state, e.retry_after] }).to eq([[CircuitBreaker::OpenError, :forced_open, nil]])
    end

    it "is called for half-open calls without a probe slot" do
      half_open_it
      2.times { expect(breaker.allow?).to be(true) } # both probe slots of the stage
      expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError)
      2.times { breaker.record_success }
      expect(rejections.map { |e| [e.state, e.retry_after] }).to eq([[:half_open, 1.0]])
    end

    it "is called with the ConcurrencyLimitError of a call refused at the cap (reason :concurrency_limit)" do
      capped = CircuitBreaker.new(name: "capped", clock: clock, max_concurrent: 1)
      heard = []
      capped.on_reject { |error| heard << error }
      raised = capped.call do
        capped.call { :not_run }
      rescue CircuitBreaker::ConcurrencyLimitError => e
        e
      end
      expect(heard).to eq([raised])
      expect(raised).to have_attributes(breaker_name: "capped", reason: :concurrency_limit, state: :closed, limit: 1,
                                        retry_after: 1.0)
      expect(rejections).to be_empty # another breaker's listener
    end

    it "is called with a ConcurrencyLimitError when allow? answers false at the cap" do
      capped = CircuitBreaker.new(name: "capped", clock: clock, max_concurrent: 1)
      heard = []
      capped.on_reject { |error| heard << error }
      expect([capped.allow?, capped.allow?]).to eq([true, false]) # the first holds the only slot
      capped.record_success
      expect(heard.map { |e| [e.class, e.reason, e.limit] }).to eq([[CircuitBreaker::ConcurrencyLimitError, :concurrency_limit, 1]])
    end

    it "is not called for admitted calls" do
      3.times { breaker.call { :ok } }
      expect(breaker.allow?).to be(true)
      breaker.record_success
      expect(rejections).to be_empty
    end

    it "reports a listener's exception with warn; the call still raises OpenError" do
      breaker.on_reject { raise "reject listener broke" }
      breaker.force_open!
      expect do
        expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError)
      end.to output(/on_reject.*RuntimeError: reject listener broke/).to_stderr
      expect(rejections.size).to eq(1)
    end
  end

  describe "logger:" do
    let(:logger) do
      Class.new do
        attr_reader :lines

        def initialize
          @lines = []
        end

        def warn(message) = @lines << [:warn, message]
        def info(message) = @lines << [:info, message]
      end.new
    end
    let(:options) { { logger: logger } }

    it "logs an opening as warn with the name, the reason and the rates" do
      2.times { breaker.call { clock.advance(0.9) } }
      expect(logger.lines.size).to eq(1)
      level, text = logger.lines.first
      expect(level).to eq(:warn)
      expect(text).to include('"events"', "closed -> open", "slow_call_rate", "error rate", "slow-call rate")
    end

    it "logs the rates that opened the breaker" do
      2.times { breaker.call { clock.advance(0.9) } }
      expect(logger.lines.first.last).to match(/slow-call rate 100(\.0)?%/)
    end

    it "logs a forced opening as warn, and closing, half-opening and disabling as info" do
      half_open_it
      2.times { breaker.call { :probe } }
      breaker.force_open!.disable!.reset!
      expect(logger.lines.map { |level, text| [level, text[/\w+ -> \w+/]] }).to eq(
        [[:warn, "closed -> open"], [:info, "open -> half_open"], [:info, "half_open -> closed"],
         [:warn, "closed -> forced_open"], [:info, "forced_open -> disabled"], [:info, "disabled -> closed"]]
      )
    end

    it "reports a logger that raises with warn, and still calls the listeners" do
      def logger.warn(_message) = raise(IOError, "disk full")

      expect { breaker.trip! }.to output(/logger.*IOError: disk full/).to_stderr
      expect(moves).to eq([%i[closed open manual]])
    end
  end
end
