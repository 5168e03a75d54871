# frozen_string_literal: true

require "securerandom"
require "circuit_breaker/registry"

# docs/operating.md: CircuitBreaker.for, .registry, .reset_all! (and .forget_all!).
RSpec.describe CircuitBreaker, "registry" do
  # A name no other example uses: the registry lives as long as the process.
  let(:name) { "registry-spec-#{SecureRandom.hex(6)}" }

  describe ".for" do
    it "creates a breaker named after the name on the first call" do
      breaker = CircuitBreaker.for(name, min_calls: 3)
      expect(breaker).to be_a(CircuitBreaker)
      expect(breaker.name).to eq(name)
    end

    it "returns the same object for the same name" do
      first = CircuitBreaker.for(name, min_calls: 3)
      expect(CircuitBreaker.for(name, min_calls: 3)).to be(first)
      expect(CircuitBreaker.for(name)).to be(first)
    end

    it "takes a Symbol as its String" do
      first = CircuitBreaker.for(name.to_sym)
      expect(CircuitBreaker.for(name)).to be(first)
      expect(first.name).to eq(name).and be_a(String)
    end

    it "creates a default breaker when first called without options" do
      breaker = CircuitBreaker.for(name)
      expect(breaker.metrics[:state]).to eq(:closed)
      expect(breaker.window.size).to eq(CircuitBreaker::SlidingWindow.new.size)
    end

    it "compares later options with == (30 == 30.0, equal Arrays)" do
      first = CircuitBreaker.for(name, open_duration: 30, ramp: [0.5, 1.0])
      expect(CircuitBreaker.for(name, ramp: [0.5, 1.0], open_duration: 30.0)).to be(first)
    end

    it "raises ArgumentError naming the name and the differing keys" do
      CircuitBreaker.for(name, min_calls: 3, open_duration: 10)
      expect { CircuitBreaker.for(name, min_calls: 4, open_duration: 10) }
        .to raise_error(ArgumentError, /#{Regexp.escape(name.inspect)}.*min_calls:/)
      expect { CircuitBreaker.for(name, min_calls: 3) }.to raise_error(ArgumentError, /open_duration:/)
      expect { CircuitBreaker.for(name, min_calls: 3, open_duration: 10, jitter: 0.1) }
        .to raise_error(ArgumentError, /jitter:/)
    end

    it "raises when a later call gives options to a breaker first made without" do
      CircuitBreaker.for(name)
      expect { CircuitBreaker.for(name, min_calls: 20) }.to raise_error(ArgumentError, /min_calls:/)
    end

    it "compares windows by kind and settings: an equal new window finds the breaker, another size does not" do
      window = CircuitBreaker::SlidingWindow.new(size: 10)
      first = CircuitBreaker.for(name, window: window)
      expect(first.window).to be(window)
      expect(CircuitBreaker.for(name, window: CircuitBreaker::SlidingWindow.new(size: 10))).to be(first)
      expect(first.window).to be(window) # the first call's window stays
      expect { CircuitBreaker.for(name, window: CircuitBreaker::SlidingWindow.new(size: 11)) }
        .to raise_error(ArgumentError, /window:/)
      expect { CircuitBreaker.for(name, window: CircuitBreaker::TimeWindow.new(seconds: 10)) }
        .to raise_error(ArgumentError, /window:/)
    end

    it "compares Procs and methods by where they are written, so code run again after a reload matches" do
      register = -> { CircuitBreaker.for(name, failure_if: ->(r) { r.nil? }, record_errors: [IOError, ->(e) { e.message == "x" }]) }
      first = register.call

      expect(register.call).to be(first) # new Procs, written at the same place
      expect { CircuitBreaker.for(name, failure_if: ->(r) { r.nil? }, record_errors: [IOError, ->(e) { e.message == "x" }]) }
        .to raise_error(ArgumentError, /failure_if:, record_errors:/)
    end

    it "compares named classes by name (a reloaded class is a new object with the same name)" do
      stand_in = Class.new(StandardError)
      first = CircuitBreaker.for(name, record_errors: [IOError])
      allow(stand_in).to receive(:name).and_return("IOError")

      expect(CircuitBreaker.for(name, record_errors: [stand_in])).to be(first)
      expect { CircuitBreaker.for(name, record_errors: [EOFError]) }.to raise_error(ArgumentError, /record_errors:/)
    end

    it "accepts a name: option equal to the name, and refuses another" do
      first = CircuitBreaker.for(name, name: name.to_sym, min_calls: 3)
      expect(CircuitBreaker.for(name, name: name, min_calls: 3)).to be(first)
      expect(CircuitBreaker.for(name, min_calls: 3)).to be(first)
      expect { CircuitBreaker.for(name, name: "other") }.to raise_error(ArgumentError, /name:.*"other"/)
      expect { CircuitBreaker.for("#{name}-2", name: nil) }.to raise_error(ArgumentError, /name:/)
      expect(CircuitBreaker.registry).not_to have_key("#{name}-2")
    end

    it "refuses a name that is neither a String nor a Symbol" do
      expect { CircuitBreaker.for(42) }.to raise_error(TypeError, /name must be a String or a Symbol/)
      expect { CircuitBreaker.for(nil) }.to raise_error(TypeError, /name/)
    end

    it "registers nothing when CircuitBreaker.new refuses the options" do
      expect { CircuitBreaker.for(name, min_calls: 0) }.to raise_error(ArgumentError, /min_calls/)
      expect { CircuitBreaker.for(name, bogus: 1) }.to raise_error(ArgumentError, /bogus/)
      taken = CircuitBreaker::SlidingWindow.new
      CircuitBreaker.new(window: taken)
      expect { CircuitBreaker.for(name, window: taken) }.to raise_error(ArgumentError, /window/)
      expect(CircuitBreaker.registry).not_to have_key(name)
      expect(CircuitBreaker.for(name, min_calls: 5)).to be_a(CircuitBreaker)
    end

    it "compares options with no lock held: an option's == may use the registry" do
      probe = Class.new do
        def initialize(other_name) = @other_name = other_name
        def call(_result) = false

        def ==(other)
          CircuitBreaker.for(@other_name) # takes the registry's lock
          equal?(other)
        end
      end.new("#{name}-other")
      first = CircuitBreaker.for(name, failure_if: probe)
      expect(CircuitBreaker.for(name, failure_if: probe)).to be(first)
      expect(CircuitBreaker.registry).to have_key("#{name}-other")
    end

    it "gives 8 threads released at once one breaker" do
      window = CircuitBreaker::SlidingWindow.new(size: 10) # a second breaker on it would raise
      ready = Queue.new
      go = Queue.new
      threads = 8.times.map do
        Thread.new do
          ready << true
          go.pop
          CircuitBreaker.for(name, window: window, min_calls: 5)
        end
      end
      8.times { ready.pop }
      8.times { go << true }
      breakers = threads.map(&:value)
      expect(breakers.map(&:object_id).uniq.size).to eq(1)
      expect(breakers.first).to be(CircuitBreaker.registry[name])
    end
  end

  describe ".registry" do
    it "is a frozen Hash of name => breaker" do
      a = CircuitBreaker.for("#{name}-a")
      b = CircuitBreaker.for(:"#{name}-b")
      registry = CircuitBreaker.registry
      expect(registry).to be_a(Hash).and be_frozen
      expect(registry).to include("#{name}-a" => a, "#{name}-b" => b)
      expect(registry.keys).to all(be_a(String).and(be_frozen))
    end

    it "is a snapshot: later registrations do not change it" do
      before = CircuitBreaker.registry
      CircuitBreaker.for(name)
      expect(before).not_to have_key(name)
      expect(CircuitBreaker.registry).to have_key(name)
    end
  end

  describe ".reset_all!" do
    it "resets every registered breaker: closed, window emptied, listeners told" do
      clock = CircuitBreaker::ManualClock.new
      tripped = CircuitBreaker.for("#{name}-tripped", clock: clock).trip!
      forced = CircuitBreaker.for("#{name}-forced", clock: clock).force_open!
      closed = CircuitBreaker.for("#{name}-closed", clock: clock)
      closed.window.record(duration_ms: 1, success: false)
      events = []
      tripped.on_state_change { |e| events << [e.from, e.to, e.reason, CircuitBreaker.registry.size] }

      expect(CircuitBreaker.reset_all!).to be_nil
      expect([tripped, forced, closed].map(&:state)).to eq(%i[closed closed closed])
      expect(closed.window.total).to eq(0)
      expect(events.map { |e| e.first(3) }).to eq([%i[open closed manual]])
    end
  end

  describe ".forget_all!" do
    it "empties the registry; breakers handed out keep working" do
      old = CircuitBreaker.for(name, min_calls: 3)
      expect(CircuitBreaker.forget_all!).to be_nil
      expect(CircuitBreaker.registry).to be_empty
      fresh = CircuitBreaker.for(name, min_calls: 4)
      expect(fresh).not_to be(old)
      expect(old.call { :still_works }).to eq(:still_works)
    end
  end

  describe "after fork", :integration do
    it "lets the child use the registry, inheriting the parent's breakers as they were" do
      skip "fork is not available" unless Process.respond_to?(:fork)

      parent = CircuitBreaker.for(name).trip!
      reader, writer = IO.pipe
      pid = ChildProcess.fork do
        reader.close
        inherited = CircuitBreaker.for(name)
        fresh = CircuitBreaker.for("#{name}-child", min_calls: 2)
        inherited.reset!
        writer.puts [inherited.equal?(parent), inherited.state, fresh.state,
                     CircuitBreaker.registry.key?("#{name}-child")].inspect
        writer.close
        exit!(0)
      end
      writer.close
      status = ChildProcess.finish(pid)
      line = reader.read
      expect(status).to be_success
      expect(line.chomp).to eq([true, :closed, :closed, true].inspect)
      # the child's reset! did not reach the parent, nor its registration
      expect(parent.state).to eq(:open)
      expect(CircuitBreaker.registry).not_to have_key("#{name}-child")
    end

    it "lets the child register even when a parent thread held the lock at fork time" do
      skip "fork is not available" unless Process.respond_to?(:fork)

      entered = Queue.new
      release = Queue.new
      # Held inside CircuitBreaker.new (under the registry's lock): checking
      # record_errors asks the matcher whether it responds to #call.
      matcher = Object.new
      matcher.define_singleton_method(:respond_to_missing?) do |m, _priv|
        if m == :call
          entered << true
          release.pop
        end
        false
      end
      holder = Thread.new do
        CircuitBreaker.for(name, record_errors: [matcher])
      rescue TypeError
        :refused
      end
      entered.pop
      pid = ChildProcess.fork do
        # A guard against a hang, not a timed assertion.
        Timeout.timeout(60) { CircuitBreaker.for("#{name}-child") }
        exit!(0)
      rescue Timeout::Error
        exit!(1)
      end
      status = ChildProcess.finish(pid)
      release << true
      expect(holder.value).to eq(:refused)
      expect(status).to be_success
    end
  end
end
