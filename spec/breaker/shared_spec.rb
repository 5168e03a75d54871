# frozen_string_literal: true

require "tmpdir"

# `shared:` within one process: two breaker objects opened under one name
# are views of one breaker in a mapped file. The cross-process behaviour
# (fork, kill -9, foreign files) is in spec/integration/shared_spec.rb.
RSpec.describe CircuitBreaker, "shared: within one process", :shared_memory do
  # A shared name of this process only (files no process maps any more are
  # removed by the next breaker opened in their directory).
  def shared_name(label = "unit")
    @shared_seq = (@shared_seq || 0) + 1
    "spec-#{label}-#{Process.pid}-#{@shared_seq}-#{rand(1 << 32)}"
  end

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:options) do
    { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 4, open_duration: 5,
      half_open_calls: 1, clock: clock }
  end

  def fail_once(breaker)
    breaker.call { raise BreakerHelpers::Boom, "down" }
  rescue BreakerHelpers::Boom
    nil
  end

  describe "two breakers opened with the same name" do
    let(:key) { shared_name }
    let(:first) { described_class.new(**options, shared: key) }
    let(:second) { described_class.new(**options, shared: key) }

    it "count the calls of both in one window" do
      first.call { :ok }
      fail_once(second)

      [first, second].each do |b|
        expect(b.metrics).to include(total: 2, failures: 1)
        expect(b.window.total).to eq(2)
        expect(b.window.failures).to eq(1)
      end
    end

    it "are tripped together, and share the count of rejected calls" do
      4.times { fail_once(first) }
      expect(second.state).to eq(:open)

      ran = false
      expect { second.call { ran = true } }.to raise_error(CircuitBreaker::OpenError)
      expect(ran).to be(false)
      expect { first.call { ran = true } }.to raise_error(CircuitBreaker::OpenError)
      expect(first.metrics[:rejected]).to eq(2)
      expect(second.metrics[:rejected]).to eq(2)
    end

    it "share the half-open probe quota" do
      4.times { fail_once(first) }
      clock.advance(5)

      expect(first.allow?).to be(true)   # the one probe of the stage
      expect(second.allow?).to be(false) # none left for the other object
      first.record_success
      expect(second.state).to eq(:closed)
    end

    it "share manual control" do
      first.force_open!
      expect(second.state).to eq(:forced_open)
      second.reset!
      expect(first.state).to eq(:closed)
    end

    it "fire each object's listeners only for the transitions it caused" do
      seen_first = transitions_of(first)
      seen_second = transitions_of(second)

      4.times { fail_once(first) }
      expect(moves(seen_first)).to eq([%i[closed open error_rate]])
      expect(seen_second).to be_empty

      clock.advance(5)
      expect(second.state).to eq(:half_open) # noticed by the second object
      expect(moves(seen_second)).to eq([%i[open half_open cool_down_elapsed]])
      expect(moves(seen_first)).to eq([%i[closed open error_rate]])
    end
  end

  describe "the window: argument" do
    it "is a template: the breaker's window is the live one in the file" do
      template = CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 50)
      breaker = described_class.new(**options, window: template, shared: shared_name)
      breaker.call { clock.advance(0.06) }

      expect(breaker.window).not_to equal(template)
      expect(breaker.window).to be_a(CircuitBreaker::SlidingWindow)
      expect(breaker.window.size).to eq(10)
      expect(breaker.window.slow_threshold_ms).to eq(50)
      expect(breaker.window.slow_calls).to eq(1)
      expect(template.total).to eq(0)
    end

    it "may serve as the template of several shared breakers" do
      template = CircuitBreaker::SlidingWindow.new(size: 10)
      a = described_class.new(**options, window: template, shared: shared_name)
      b = described_class.new(**options, window: template, shared: shared_name)
      a.call { :ok }

      expect([a.window.total, b.window.total]).to eq([1, 0])
    end

    it "may be a TimeWindow, whose buckets expire on the breaker's clock" do
      key = shared_name
      template = CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10)
      a = described_class.new(**options, window: template, shared: key)
      b = described_class.new(**options, window: template, shared: key)
      a.call { :ok }
      fail_once(b)

      expect(b.window).to be_a(CircuitBreaker::TimeWindow)
      expect([a.window.seconds, a.window.buckets]).to eq([10, 10])
      expect(a.window.total).to eq(2)
      expect(b.metrics).to include(total: 2, failures: 1)

      clock.advance(11)
      expect(a.window.total).to eq(0)
      expect(b.metrics[:total]).to eq(0)
    end

    it "defaults to a SlidingWindow of 100 calls" do
      breaker = described_class.new(shared: shared_name)

      expect(breaker.window).to be_a(CircuitBreaker::SlidingWindow)
      expect(breaker.window.size).to eq(100)
    end
  end

  describe "#shared_path", :shm_dir do
    let(:uid) { Process.uid }

    it "names a file in a directory of this user under /dev/shm, keyed by namespace, name and configuration" do
      skip "no /dev/shm here" unless File.directory?("/dev/shm")
      ENV.delete("CIRCUIT_BREAKER_SHM_DIR")
      key = shared_name

      path = described_class.new(shared: key, namespace: "shop").shared_path
      expect(path).to match(%r{\A/dev/shm/circuit_breaker-#{uid}/circuit_breaker-#{uid}-shop-#{key}-\h{16}\z})
      path = described_class.new(shared: key).shared_path
      namespace = Regexp.escape(CircuitBreaker.default_namespace)
      expect(path).to match(%r{\A/dev/shm/circuit_breaker-#{uid}/circuit_breaker-#{uid}-#{namespace}-#{key}-\h{16}\z})
      expect(described_class.new(shared: key).shared_path).to eq(path)
      expect(described_class.new(shared: key, min_calls: 7).shared_path).not_to eq(path)
    end

    it "escapes every byte a file name should not hold" do
      path = described_class.new(shared: "pay/ments ü%#{shared_name}", namespace: "my app").shared_path

      expect(File.basename(path)).to start_with("circuit_breaker-#{uid}-my%20app-pay%2Fments%20%C3%BC%25spec-unit-")
      expect(File.basename(described_class.new(shared: "../x#{shared_name}", namespace: "").shared_path))
        .to start_with("circuit_breaker-#{uid}-..%2Fxspec-")
    end

    it "follows $CIRCUIT_BREAKER_SHM_DIR" do
      Dir.mktmpdir do |dir|
        ENV["CIRCUIT_BREAKER_SHM_DIR"] = dir

        expect(File.dirname(described_class.new(shared: shared_name).shared_path)).to eq("#{dir}/circuit_breaker-#{uid}")
      end
    end

    it "is nil for a breaker of this process" do
      expect(described_class.new.shared_path).to be_nil
    end

    it "is where the breaker's file is created, private to its user" do
      path = described_class.new(shared: shared_name).shared_path

      expect(File.file?(path)).to be(true)
      expect(File.stat(path).mode & 0o777).to eq(0o600)
      expect(File.stat(path).uid).to eq(uid)
    end
  end

  describe "the name" do
    it "defaults to the shared key" do
      key = shared_name
      expect(described_class.new(shared: key).name).to eq(key)
    end

    it "defaults to a Symbol key's String" do
      key = shared_name
      expect(described_class.new(shared: key.to_sym).shared_path).to eq(described_class.new(shared: key).shared_path)
    end

    it "may differ from the key, and appears in OpenError" do
      key = shared_name
      breaker = described_class.new(**options, shared: key, name: "payments")
      4.times { fail_once(breaker) }

      expect(breaker.name).to eq("payments")
      expect { breaker.call { :ok } }.to raise_error(CircuitBreaker::OpenError) { |e| expect(e.breaker_name).to eq("payments") }
    end
  end

  describe "the shared: argument" do
    it "nil means a breaker of this object only" do
      a = described_class.new(**options, shared: nil)
      b = described_class.new(**options.merge(window: CircuitBreaker::SlidingWindow.new(size: 10)), shared: nil)
      4.times { fail_once(a) }

      expect(b.state).to eq(:closed)
    end

    it "must be a String or a Symbol" do
      expect { described_class.new(shared: 5) }.to raise_error(TypeError, /shared/)
      expect { described_class.new(shared: ["payments"]) }.to raise_error(TypeError, /shared/)
    end

    it "must fit in a file name, or is an ArgumentError naming the option" do
      expect { described_class.new(shared: "x" * 300) }
        .to raise_error(ArgumentError, /\Ashared: name too long: .*shorter shared: name/)
      expect { described_class.new(shared: "ü" * 70) }.to raise_error(ArgumentError, /too long/) # 420 bytes escaped
      expect(described_class.new(shared: "#{shared_name}-#{'x' * 150}").state).to eq(:closed)
    end

    it "must not be empty, and may hold any bytes" do
      expect { described_class.new(shared: "") }.to raise_error(ArgumentError, /shared must be a non-empty/)
      key = "#{shared_name}-\xff".b
      expect(described_class.new(shared: key).state).to eq(:closed)
    end
  end

  describe "half-open stages of a shared breaker" do
    it "free a probe after open_duration by default (probe_timeout), so a worker killed mid-probe cannot pin them" do
      breaker = described_class.new(**options, shared: shared_name)
      4.times { fail_once(breaker) }
      clock.advance(5)
      expect(breaker.allow?).to be(true) # a probe that never reports back
      clock.advance(5)

      expect(breaker.state).to eq(:open)
    end

    it "stay unbounded with probe_timeout: false (no half_open_timeout by default)" do
      breaker = described_class.new(**options, probe_timeout: false, shared: shared_name)
      4.times { fail_once(breaker) }
      clock.advance(5)
      expect(breaker.allow?).to be(true)
      clock.advance(500)

      expect(breaker.state).to eq(:half_open)
    end
  end

  describe "namespace:" do
    around do |example|
      saved = described_class.instance_variable_get(:@default_namespace)
      example.run
    ensure
      described_class.default_namespace = saved
    end

    it "keeps the breakers of two applications with one shared: name apart" do
      key = shared_name
      shop = described_class.new(**options, shared: key, namespace: "shop")
      blog = described_class.new(**options, shared: key, namespace: :blog)
      4.times { fail_once(shop) }

      expect(shop.state).to eq(:open)
      expect(blog.state).to eq(:closed)
      expect(described_class.new(**options, shared: key, namespace: :shop).state).to eq(:open)
    end

    it "defaults to CircuitBreaker.default_namespace, which configure sets and nil restores" do
      key = shared_name
      derived = described_class.default_namespace
      described_class.default_namespace = :shop
      expect(described_class.default_namespace).to eq("shop")
      shop = described_class.new(**options, shared: key)
      4.times { fail_once(shop) }
      expect(described_class.new(**options, shared: key, namespace: "shop").state).to eq(:open)

      described_class.default_namespace = nil
      expect(described_class.default_namespace).to eq(derived)
      expect(described_class.new(**options, shared: key).state).to eq(:closed)
    end

    it "is derived from the application's directory, environment and TEST_ENV_NUMBER by default" do
      Dir.mktmpdir("shop") do |dir|
        namespaces = [%w[test], %w[development], %w[test 2], ["test", ""]].map do |env, worker|
          out, status = ChildProcess.capture2e({ "RACK_ENV" => env, "RAILS_ENV" => nil, "APP_ENV" => nil, "TEST_ENV_NUMBER" => worker },
                                               RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__),
                                               "-rcircuit_breaker", "-e", "print CircuitBreaker.default_namespace",
                                               chdir: dir)
          expect(status).to be_success, out
          out
        end

        expect(namespaces[0]).to match(/\Ashop.*\.\h{8}\.test\z/)
        expect(namespaces[1]).to eq(namespaces[0].sub(/test\z/, "development"))
        expect(namespaces[0]).not_to include(described_class.default_namespace)
        # parallel_tests' workers (TEST_ENV_NUMBER "", "2", ...) apart.
        expect(namespaces[2..]).to eq(["#{namespaces[0]}2", namespaces[0]])
      end
    end

    it "must be a String or a Symbol" do
      expect { described_class.new(shared: shared_name, namespace: 5) }.to raise_error(TypeError, /namespace/)
      expect { described_class.default_namespace = 5 }.to raise_error(TypeError, /namespace/)
    end
  end

  describe "names" do
    it "are compared as UTF-8: a Symbol, UTF-8 and ISO-8859-1 spellings name one breaker" do
      key = "#{shared_name}-café"
      a = described_class.new(**options, shared: key)
      b = described_class.new(**options, shared: key.encode("ISO-8859-1"))
      c = described_class.new(**options, shared: key.to_sym, namespace: CircuitBreaker.default_namespace.encode("UTF-16LE"))
      4.times { fail_once(a) }

      expect([b.state, c.state]).to eq(%i[open open])
      expect([b.shared_path, c.shared_path]).to eq([a.shared_path] * 2)
      expect(b.name).to eq(key)
    end

    it "that cannot be UTF-8 are an ArgumentError naming the option" do
      bad = "\x81".dup.force_encoding("Windows-1252")
      expect { described_class.new(shared: bad) }.to raise_error(ArgumentError, /\Ashared must be convertible to UTF-8/)
      expect { described_class.new(shared: "x", namespace: bad) }.to raise_error(ArgumentError, /\Anamespace must/)
    end
  end
end
