# frozen_string_literal: true

# Every argument a caller can get wrong, as a table: each bad value raises
# ArgumentError (a value out of range) or TypeError (a value of the wrong
# type) whose message names the argument; nothing crashes, and an object
# that refused an argument is unchanged and still usable. A second table
# lists the edge values that are legitimately accepted (docs/configuration.md–3).
RSpec.describe CircuitBreaker, "bad input" do
  cb = CircuitBreaker
  nan = Float::NAN
  inf = Float::INFINITY
  huge_int = 2**64

  # [what is called, -> { the call }, error class, name the message must contain]
  # `breaker`, `window` and `clock` rows run on the example's objects, which
  # must be unchanged afterwards.
  rows = []
  row = ->(call, error, name, &run) { rows << { call: call, run: run, error: error, name: name } }

  # Values out of range for a Float in (0, 1] / a wrong type.
  out_of_unit = { "NaN" => nan, "Infinity" => inf, "-Infinity" => -inf, "-1" => -1, "0" => 0, "0.0" => 0.0,
                  "1.5" => 1.5, "2**64" => huge_int, "1e300" => 1e300 }
  wrong_type = { "nil" => nil, '"0.5"' => "0.5", ":half" => :half, "[]" => [], "Object.new" => Object.new,
                 "true" => true, "Complex(1, 1)" => Complex(1, 1) }

  %i[error_rate_threshold slow_rate_threshold advance_rate].each do |opt|
    out_of_unit.each { |show, v| row.call("CircuitBreaker.new(#{opt}: #{show})", ArgumentError, opt.to_s) { cb.new(opt => v) } }
    wrong_type.each { |show, v| row.call("CircuitBreaker.new(#{opt}: #{show})", TypeError, opt.to_s) { cb.new(opt => v) } }
  end

  { "NaN" => nan, "Infinity" => inf, "-Infinity" => -inf, "-1" => -1, "0" => 0, "-1e-9" => -1e-9,
    "-2**64" => -huge_int }.each do |show, v|
    row.call("CircuitBreaker.new(open_duration: #{show})", ArgumentError, "open_duration") { cb.new(open_duration: v) }
    row.call("CircuitBreaker.new(half_open_timeout: #{show})", ArgumentError, "half_open_timeout") do
      cb.new(half_open_timeout: v)
    end
  end
  wrong_type.except("nil").each do |show, v|
    row.call("CircuitBreaker.new(open_duration: #{show})", TypeError, "open_duration") { cb.new(open_duration: v) }
  end
  row.call("CircuitBreaker.new(open_duration: nil)", TypeError, "open_duration") { cb.new(open_duration: nil) }
  row.call('CircuitBreaker.new(half_open_timeout: "5")', TypeError, "half_open_timeout") { cb.new(half_open_timeout: "5") }

  { "NaN" => nan, "1e300" => 1e300, "1.5" => 1.5, "-1" => -1, "Infinity" => inf }.each do |show, v|
    row.call("CircuitBreaker.new(min_calls: #{show})", v.is_a?(Float) ? TypeError : ArgumentError, "min_calls") do
      cb.new(min_calls: v)
    end
  end
  { "0" => 0, "1_000_000_001" => 1_000_000_001, "2**64" => huge_int, "-2**64" => -huge_int }.each do |show, v|
    row.call("CircuitBreaker.new(min_calls: #{show})", ArgumentError, "min_calls") { cb.new(min_calls: v) }
  end
  { "nil" => nil, '"20"' => "20", "Rational(1, 2)" => Rational(1, 2) }.each do |show, v|
    row.call("CircuitBreaker.new(min_calls: #{show})", TypeError, "min_calls") { cb.new(min_calls: v) }
  end

  { "0" => 0, "-1" => -1, "1_000_001" => 1_000_001, "2**64" => huge_int }.each do |show, v|
    row.call("CircuitBreaker.new(half_open_calls: #{show})", ArgumentError, "half_open_calls") { cb.new(half_open_calls: v) }
  end
  { "2.0" => 2.0, "NaN" => nan, "nil" => nil, '"2"' => "2" }.each do |show, v|
    row.call("CircuitBreaker.new(half_open_calls: #{show})", TypeError, "half_open_calls") { cb.new(half_open_calls: v) }
  end

  { "[]" => [], "[0.5, 0.3] (unsorted)" => [0.5, 0.3], "[0.5, 0.5] (not strictly ascending)" => [0.5, 0.5],
    "[0]" => [0], "[0.0, 1.0]" => [0.0, 1.0], "[1.5]" => [1.5], "[-0.1, 1.0]" => [-0.1, 1.0], "[NaN]" => [nan],
    "[Infinity]" => [inf], "[0.1, 2**64]" => [0.1, huge_int],
    "1001 stages" => Array.new(1001) { |i| (i + 1) / 1001.0 } }.each do |show, v|
    row.call("CircuitBreaker.new(ramp: #{show})", ArgumentError, "ramp") { cb.new(ramp: v) }
  end
  { "nil" => nil, "0.5" => 0.5, "0.5..1.0" => (0.5..1.0), '["0.5"]' => ["0.5"], "[nil]" => [nil],
    "[[0.5]]" => [[0.5]] }.each do |show, v|
    row.call("CircuitBreaker.new(ramp: #{show})", TypeError, "ramp") { cb.new(ramp: v) }
  end

  row.call("CircuitBreaker.new(advance_rate: 0.5, reopen_rate: 0.6) (advance_rate < reopen_rate)", ArgumentError,
           "reopen_rate") { cb.new(advance_rate: 0.5, reopen_rate: 0.6) }
  { "-0.1" => -0.1, "1.5" => 1.5, "NaN" => nan, "-Infinity" => -inf }.each do |show, v|
    row.call("CircuitBreaker.new(reopen_rate: #{show})", ArgumentError, "reopen_rate") { cb.new(reopen_rate: v) }
  end
  row.call('CircuitBreaker.new(reopen_rate: "0.5")', TypeError, "reopen_rate") { cb.new(reopen_rate: "0.5") }

  { "0.5" => 0.5, "0" => 0, "-1" => -1, "NaN" => nan, "Infinity" => inf }.each do |show, v|
    row.call("CircuitBreaker.new(backoff: #{show})", ArgumentError, "backoff") { cb.new(backoff: v) }
  end
  row.call("CircuitBreaker.new(backoff: nil)", TypeError, "backoff") { cb.new(backoff: nil) }
  row.call("CircuitBreaker.new(open_duration: 10, max_open_duration: 5)", ArgumentError, "max_open_duration") do
    cb.new(open_duration: 10, max_open_duration: 5)
  end
  { "NaN" => nan, "Infinity" => inf, "0" => 0, "-1" => -1 }.each do |show, v|
    row.call("CircuitBreaker.new(max_open_duration: #{show})", ArgumentError, "max_open_duration") do
      cb.new(max_open_duration: v)
    end
  end
  row.call("CircuitBreaker.new(max_open_duration: :forever)", TypeError, "max_open_duration") do
    cb.new(max_open_duration: :forever)
  end
  { "1.0" => 1.0, "-0.1" => -0.1, "NaN" => nan, "Infinity" => inf, "2**64" => huge_int }.each do |show, v|
    row.call("CircuitBreaker.new(jitter: #{show})", ArgumentError, "jitter") { cb.new(jitter: v) }
  end
  row.call("CircuitBreaker.new(jitter: nil)", TypeError, "jitter") { cb.new(jitter: nil) }

  %i[record_errors ignore_errors].each do |opt|
    { "[String] (not an Exception class)" => [String], "[Object.new]" => [Object.new], "[1]" => [1],
      '["RuntimeError"]' => ["RuntimeError"], "[:timeout]" => [:timeout], "[nil]" => [nil],
      "StandardError (not an Array)" => StandardError, "nil" => nil, "{}" => {},
      "[StandardError, Integer]" => [StandardError, Integer] }.each do |show, v|
      row.call("CircuitBreaker.new(#{opt}: #{show})", TypeError, opt.to_s) { cb.new(opt => v) }
    end
  end
  { "5" => 5, '"bad?"' => "bad?", ":nil?" => :nil?, "Object.new" => Object.new, "[]" => [] }.each do |show, v|
    row.call("CircuitBreaker.new(failure_if: #{show}) (not callable)", TypeError, "failure_if") { cb.new(failure_if: v) }
  end
  { "5" => 5, "Object.new" => Object.new, "{ size: 5 }" => { size: 5 }, "SlidingWindow (the class)" => cb::SlidingWindow,
    "ManualClock.new" => cb::ManualClock.new }.each do |show, v|
    row.call("CircuitBreaker.new(window: #{show})", TypeError, "window") { cb.new(window: v) }
  end
  { "Object.new" => Object.new, "5" => 5, "Time" => Time, ":monotonic" => :monotonic,
    "SlidingWindow.new" => cb::SlidingWindow.new }.each do |show, v|
    row.call("CircuitBreaker.new(clock: #{show})", TypeError, "clock") { cb.new(clock: v) }
  end
  { "5" => 5, "[]" => [], "Object.new" => Object.new, "1.5" => 1.5 }.each do |show, v|
    row.call("CircuitBreaker.new(name: #{show})", TypeError, "name") { cb.new(name: v) }
  end

  # Aliases (docs/configuration.md). A range error names the option the alias stands for.
  row.call("CircuitBreaker.new(threshold: 1.5)", ArgumentError, "threshold") { cb.new(threshold: 1.5) }
  row.call("CircuitBreaker.new(threshold: 0.5, error_rate_threshold: 0.5)", ArgumentError, "threshold") do
    cb.new(threshold: 0.5, error_rate_threshold: 0.5)
  end
  row.call("CircuitBreaker.new(retry_time: 0)", ArgumentError, "retry_time") { cb.new(retry_time: 0) }
  row.call("CircuitBreaker.new(retry_time: 5, open_duration: 5)", ArgumentError, "retry_time") do
    cb.new(retry_time: 5, open_duration: 5)
  end
  row.call('CircuitBreaker.new(probe_ratio: "0.5")', TypeError, "probe_ratio") { cb.new(probe_ratio: "0.5") }
  row.call("CircuitBreaker.new(half_open_window: 10) (without probe_ratio)", ArgumentError, "half_open_window") do
    cb.new(half_open_window: 10)
  end
  row.call("CircuitBreaker.new(probe_ratio: 0.5, half_open_window: 0)", ArgumentError, "half_open_window") do
    cb.new(probe_ratio: 0.5, half_open_window: 0)
  end
  row.call("CircuitBreaker.new(probe_ratio: 0.5, half_open_window: 1.5)", TypeError, "half_open_window") do
    cb.new(probe_ratio: 0.5, half_open_window: 1.5)
  end
  row.call("CircuitBreaker.new(ramp: [1.0], probe_ratio: 0.5)", ArgumentError, "probe_ratio") do
    cb.new(ramp: [1.0], probe_ratio: 0.5)
  end
  row.call("CircuitBreaker.new(bogus: 1)", ArgumentError, "bogus") { cb.new(bogus: 1) }
  row.call('CircuitBreaker.new("min_calls" => 1) (a String key)', ArgumentError, "min_calls") { cb.new("min_calls" => 1) }
  row.call("CircuitBreaker.new(5) (positional)", ArgumentError, "arguments") { cb.new(5) }

  # Windows.
  { "0" => 0, "-1" => -1, "1_000_001" => 1_000_001, "2**64" => huge_int, "-2**64" => -huge_int }.each do |show, v|
    row.call("SlidingWindow.new(size: #{show})", ArgumentError, "size") { cb::SlidingWindow.new(size: v) }
  end
  { "1.5" => 1.5, "nil" => nil, '"100"' => "100", "NaN" => nan }.each do |show, v|
    row.call("SlidingWindow.new(size: #{show})", TypeError, "size") { cb::SlidingWindow.new(size: v) }
  end
  { "0" => 0, "-1" => -1, "NaN" => nan, "Infinity" => inf }.each do |show, v|
    row.call("SlidingWindow.new(slow_threshold_ms: #{show})", ArgumentError, "slow_threshold_ms") do
      cb::SlidingWindow.new(slow_threshold_ms: v)
    end
    row.call("TimeWindow.new(slow_threshold_ms: #{show})", ArgumentError, "slow_threshold_ms") do
      cb::TimeWindow.new(slow_threshold_ms: v)
    end
  end
  row.call('SlidingWindow.new(slow_threshold_ms: "800")', TypeError, "slow_threshold_ms") do
    cb::SlidingWindow.new(slow_threshold_ms: "800")
  end
  row.call("SlidingWindow.new(bogus: 1)", ArgumentError, "bogus") { cb::SlidingWindow.new(bogus: 1) }
  { "0" => 0, "-1" => -1, "NaN" => nan, "Infinity" => inf, "1e300" => 1e300, "2**64" => huge_int,
    "1e-12 (below 1 ns per bucket)" => 1e-12 }.each do |show, v|
    row.call("TimeWindow.new(seconds: #{show})", ArgumentError, "seconds") { cb::TimeWindow.new(seconds: v, buckets: 1) }
  end
  row.call("TimeWindow.new(seconds: 1e-6, buckets: 3600) (below 1 ns per bucket)", ArgumentError, "seconds") do
    cb::TimeWindow.new(seconds: 1e-6, buckets: 3600)
  end
  { "nil" => nil, '"10"' => "10" }.each do |show, v|
    row.call("TimeWindow.new(seconds: #{show})", TypeError, "seconds") { cb::TimeWindow.new(seconds: v) }
  end
  { "0" => 0, "-1" => -1, "3601" => 3601, "2**64" => huge_int }.each do |show, v|
    row.call("TimeWindow.new(buckets: #{show})", ArgumentError, "buckets") { cb::TimeWindow.new(buckets: v) }
  end
  { "1.5" => 1.5, "nil" => nil }.each do |show, v|
    row.call("TimeWindow.new(buckets: #{show})", TypeError, "buckets") { cb::TimeWindow.new(buckets: v) }
  end
  { "Object.new" => Object.new, "5" => 5 }.each do |show, v|
    row.call("TimeWindow.new(clock: #{show})", TypeError, "clock") { cb::TimeWindow.new(clock: v) }
  end

  # ManualClock.
  { "NaN" => nan, "Infinity" => inf, "-Infinity" => -inf }.each do |show, v|
    row.call("ManualClock.new(#{show})", ArgumentError, "start") { cb::ManualClock.new(v) }
  end
  { '"1"' => "1", "nil" => nil, "start: 1" => { start: 1 } }.each do |show, v|
    row.call("ManualClock.new(#{show})", TypeError, "start") { cb::ManualClock.new(v) }
  end
  { "-1" => -1, "-1e-9" => -1e-9, "NaN" => nan, "Infinity" => inf, "-Infinity" => -inf }.each do |show, v|
    row.call("clock.advance(#{show})", ArgumentError, "seconds") { |t| t.clock.advance(v) }
  end
  { '"1"' => "1", "nil" => nil, "Complex(1, 1)" => Complex(1, 1), ":tick" => :tick }.each do |show, v|
    row.call("clock.advance(#{show})", TypeError, "seconds") { |t| t.clock.advance(v) }
  end

  # Recording: breaker's low-level API and windows.
  bad_durations = { "-1" => [ArgumentError, -1], "-1e-300" => [ArgumentError, -1e-300], "NaN" => [ArgumentError, nan],
                    "Infinity" => [ArgumentError, inf], '"5"' => [TypeError, "5"], "nil" => [TypeError, nil],
                    "Object.new" => [TypeError, Object.new] }
  bad_durations.each do |show, (error, v)|
    row.call("breaker.record_success(duration_ms: #{show})", error, "duration_ms") do |t|
      t.breaker.record_success(duration_ms: v)
    end
    row.call("breaker.record(false, duration_ms: #{show})", error, "duration_ms") do |t|
      t.breaker.record(false, duration_ms: v)
    end
    row.call("window.record(duration_ms: #{show}, success: true)", error, "duration_ms") do |t|
      t.window.record(duration_ms: v, success: true)
    end
  end
  row.call("breaker.record_failure(duration_ms: -5)", ArgumentError, "duration_ms") do |t|
    t.breaker.record_failure(duration_ms: -5)
  end
  row.call("breaker.record_success(5) (positional)", ArgumentError, "arguments") { |t| t.breaker.record_success(5) }
  row.call("breaker.record (no outcome)", ArgumentError, "arguments") { |t| t.breaker.record }
  row.call("breaker.record_failure(bogus: 1)", ArgumentError, "bogus") { |t| t.breaker.record_failure(bogus: 1) }
  row.call("breaker.call (no block)", ArgumentError, "block") { |t| t.breaker.call }
  row.call("breaker.on_state_change (no block)", ArgumentError, "block") { |t| t.breaker.on_state_change }
  row.call("breaker.on_reject (no block)", ArgumentError, "block") { |t| t.breaker.on_reject }
  row.call("window.record(success: true) (no duration)", ArgumentError, "duration_ms") do |t|
    t.window.record(success: true)
  end
  row.call("window.record(duration_ms: 1) (no success)", ArgumentError, "success") { |t| t.window.record(duration_ms: 1) }
  row.call("window.record(duration_ms: 1, success: true, extra: 1)", ArgumentError, "extra") do |t|
    t.window.record(duration_ms: 1, success: true, extra: 1)
  end

  let(:clock) { CircuitBreaker::ManualClock.new(100) }
  let(:window) { CircuitBreaker::SlidingWindow.new(size: 10) }
  let(:breaker) { CircuitBreaker.new(window: window, clock: clock, min_calls: 2) }

  table_size = rows.size
  it "has at least 100 rows" do
    expect(table_size).to be >= 100
  end

  # Under GC_STRESS=1 (where a raise_error example takes seconds) one row in
  # ten runs; the normal run takes them all.
  sample = ->(list) { ENV["GC_STRESS"] == "1" ? list.each_slice(10).map(&:first) : list }

  sample.call(rows).each do |r|
    it "#{r[:call]} raises #{r[:error]} naming #{r[:name]}" do
      breaker.call { :warm_up }
      before = [breaker.metrics, window.total, clock.now]
      expect { r[:run].call(self) }.to raise_error(r[:error]) { |e| expect(e.message).to include(r[:name]) }
      expect([breaker.metrics, window.total, clock.now]).to eq(before)
      expect(breaker.call { :still_usable }).to eq(:still_usable)
    end
  end

  [0, 1.5, nan].each do |v|
    it "CircuitBreaker.new(probe_ratio: #{v}) raises ArgumentError naming probe_ratio" do
      expect { CircuitBreaker.new(probe_ratio: v) }.to raise_error(ArgumentError, /probe_ratio/)
    end
  end

  # Issue #34: Waker#wait (the fleet syncer's, @api private) aborted the VM
  # on NaN. Run in a child, so that an abort fails the example, not the run.
  it "CircuitBreaker::Fleet::Waker#wait refuses NaN, infinities and negative seconds naming timeout" do
    reader, writer = IO.pipe
    pid = ChildProcess.fork do
      reader.close
      waker = CircuitBreaker::Fleet::Waker.new
      seen = [nan, inf, -inf, -1, -1e-9].map do |v|
        waker.wait(v)
        "#{v}: returned"
      rescue ArgumentError => e
        e.message
      end
      writer.write(Marshal.dump([seen, waker.wait(0)]))
      writer.close
      exit!(0)
    end
    writer.close
    # The pipe reaches its end when the child exits, or aborts.
    ended = IO.select([reader], nil, nil, 30)
    dump = ended ? reader.read : ""
    # Bounded either way: TERM, then KILL 5 s later, if it never ended.
    status = ended ? ChildProcess.finish(pid, within: 30) : ChildProcess.stop(pid)
    expect(status.success?).to be(true), "the child ended with #{status.inspect}"
    seen, waited = Marshal.load(dump) # rubocop:disable Security/MarshalLoad
    expect(seen).to all(match(/\Atimeout must be a finite Numeric >= 0 \(seconds\) \(got /))
    expect(seen).to eq(%w[NaN Infinity -Infinity -1 -1.0e-09].map { |v| "timeout must be a finite Numeric >= 0 (seconds) (got #{v})" })
    expect(waited).to be(false)
  ensure
    reader&.close
  end

  describe "a bad record_* leaves the calling thread's permit in place" do
    it "settles the permit with the next good record_* (half-open probe not lost)" do
      b = CircuitBreaker.new(clock: clock, half_open_calls: 1, open_duration: 5)
      b.trip!
      clock.advance(5)
      expect(b.allow?).to be(true)
      before = b.metrics
      expect { b.record_success(duration_ms: -1) }.to raise_error(ArgumentError, /duration_ms/)
      expect { b.record_failure(duration_ms: "x") }.to raise_error(TypeError, /duration_ms/)
      expect(b.metrics).to eq(before)
      expect(b.allow?).to be(false) # the slot is still this thread's
      b.record_success(duration_ms: 1)
      expect(b.state).to eq(:closed)
    end

    it "stays consistent when a bad record_* hits a closed breaker" do
      2.times { breaker.record_failure(duration_ms: 1) }
      expect(breaker.state).to eq(:open)
      breaker.reset!
      expect { breaker.record(false, duration_ms: nan) }.to raise_error(ArgumentError)
      expect(breaker.metrics).to include(state: :closed, total: 0, failures: 0)
    end
  end

  # Edge values the options accept (docs/configuration.md): each is taken, and the object answers sensibly.
  describe "values that are legitimately accepted" do
    accepted = {
      "open_duration: 1e300 (finite > 0; saturates at ~292 years)" => -> { cb.new(open_duration: 1e300) },
      "open_duration: 2**64" => -> { cb.new(open_duration: huge_int) },
      "open_duration: Rational(1, 3)" => -> { cb.new(open_duration: Rational(1, 3)) },
      "half_open_timeout: 1e300" => -> { cb.new(half_open_timeout: 1e300) },
      "backoff: 1e300, max_open_duration: 1e300" => -> { cb.new(backoff: 1e300, max_open_duration: 1e300) },
      "max_open_duration equal to open_duration" => -> { cb.new(open_duration: 10, max_open_duration: 10) },
      "error_rate_threshold: Rational(1, 2)" => -> { cb.new(error_rate_threshold: Rational(1, 2)) },
      "error_rate_threshold: 1 (Integer)" => -> { cb.new(error_rate_threshold: 1) },
      "reopen_rate: 0" => -> { cb.new(reopen_rate: 0) },
      "reopen_rate equal to advance_rate" => -> { cb.new(advance_rate: 0.7, reopen_rate: 0.7) },
      "jitter: 0" => -> { cb.new(jitter: 0) },
      "jitter: 0.999" => -> { cb.new(jitter: 0.999) },
      "ramp: [1e-300] (a tiny share still admits the first call)" => -> { cb.new(ramp: [1e-300]) },
      "ramp with 1000 stages" => -> { cb.new(ramp: Array.new(1000) { |i| (i + 1) / 1000.0 }) },
      "min_calls: 1_000_000_000" => -> { cb.new(min_calls: 1_000_000_000) },
      "half_open_calls: 1_000_000" => -> { cb.new(half_open_calls: 1_000_000) },
      "record_errors: [] (only timeouts count)" => -> { cb.new(record_errors: []) },
      "record_errors: [Comparable] (a module)" => -> { cb.new(record_errors: [Comparable]) },
      "record_errors: [Exception]" => -> { cb.new(record_errors: [Exception]) },
      "failure_if: a Method" => -> { cb.new(failure_if: 1.method(:==)) },
      "name: :payments (a Symbol)" => -> { cb.new(name: :payments) },
      'name: ""' => -> { cb.new(name: "") },
      "threshold: nil (an alias given as nil counts as not given)" => -> { cb.new(threshold: nil, error_rate_threshold: 0.3) },
      "SlidingWindow.new(size: 1_000_000)" => -> { cb.new(window: cb::SlidingWindow.new(size: 1_000_000)) },
      "SlidingWindow.new(slow_threshold_ms: 1e300)" => -> { cb.new(window: cb::SlidingWindow.new(slow_threshold_ms: 1e300)) },
      "TimeWindow.new(seconds: 1e9)" => -> { cb.new(window: cb::TimeWindow.new(seconds: 1e9)) },
      "TimeWindow.new(seconds: 1e-9, buckets: 1)" => -> { cb.new(window: cb::TimeWindow.new(seconds: 1e-9, buckets: 1)) },
      "TimeWindow.new(seconds: 3600, buckets: 3600)" => -> { cb.new(window: cb::TimeWindow.new(seconds: 3600, buckets: 3600)) }
    }
    sample.call(accepted.to_a).each do |show, build|
      it "accepts #{show}, and the breaker works" do
        b = build.call
        expect(b.call { :ok }).to eq(:ok)
        expect(b.trip!.state).to eq(:open)
        expect(b.retry_after).to be_a(Float).and(be > 0)
        expect(b.reset!.metrics[:state]).to eq(:closed)
      end
    end

    it "accepts ManualClock.new(±9.2e9) and advances up to about 292 years (beyond: bad_input_values_spec.rb)" do
      expect(CircuitBreaker::ManualClock.new(9.2e9).now).to eq(9.2e9)
      expect(CircuitBreaker::ManualClock.new(-9.2e9).now).to eq(-9.2e9)
      expect(CircuitBreaker::ManualClock.new(-5).now).to eq(-5.0)
      c = CircuitBreaker::ManualClock.new
      expect(c.advance(9.2e9).now).to eq(9.2e9)
    end

    it "accepts a huge finite duration_ms (a slow call)" do
      breaker.record_success(duration_ms: 1e300)
      window.record(duration_ms: huge_int, success: true)
      expect([window.total, window.slow_calls]).to eq([2, 2])
    end
  end
end
