# frozen_string_literal: true

require "tmpdir"
require "circuit_breaker/prometheus"

# docs/operating.md: CircuitBreaker::Prometheus, checked with the real promtool.
RSpec.describe CircuitBreaker::Prometheus do
  let(:clock) { CircuitBreaker::ManualClock.new }

  def breaker(**options)
    build_breaker(clock: clock, **{ min_calls: 2, open_duration: 30 }.merge(options))
  end

  # The samples of `text` as { "name{labels}" => value String }.
  def samples(text)
    text.lines.reject { |l| l.start_with?("#") }.to_h { |l| l.chomp.split(" ", 2) }
  end

  before { CircuitBreaker.forget_all! }
  after { CircuitBreaker.forget_all! }

  it "renders every registered breaker by default" do
    CircuitBreaker.for(:payments, clock: clock)
    CircuitBreaker.for("orders", clock: clock)
    expect(samples(described_class.render).keys.grep(/\Acircuit_breaker_calls_total/))
      .to eq(['circuit_breaker_calls_total{breaker="payments"}', 'circuit_breaker_calls_total{breaker="orders"}'])
  end

  it "renders a state gauge with one series per state, and the counters" do
    b = breaker(min_calls: 3)
    b.call { :ok }
    fail_calls(b, 2)
    expect(attempt(b)).to eq(:rejected)
    s = samples(described_class.render({ "payments" => b }))
    expect(s.select { |k, _| k.start_with?("circuit_breaker_state{") }).to eq(
      'circuit_breaker_state{breaker="payments",state="closed"}' => "0",
      'circuit_breaker_state{breaker="payments",state="open"}' => "1",
      'circuit_breaker_state{breaker="payments",state="half_open"}' => "0",
      'circuit_breaker_state{breaker="payments",state="forced_open"}' => "0",
      'circuit_breaker_state{breaker="payments",state="disabled"}' => "0"
    )
    expect(s).to include(
      'circuit_breaker_info{breaker="payments",counters="process"}' => "1",
      'circuit_breaker_calls_total{breaker="payments"}' => "3",
      'circuit_breaker_successes_total{breaker="payments"}' => "1",
      'circuit_breaker_failures_total{breaker="payments"}' => "2",
      'circuit_breaker_slow_calls_total{breaker="payments"}' => "0",
      'circuit_breaker_rejected_calls_total{breaker="payments"}' => "1",
      'circuit_breaker_opened_total{breaker="payments"}' => "1",
      'circuit_breaker_window_calls{breaker="payments"}' => "0",
      'circuit_breaker_error_ratio{breaker="payments"}' => "0.0",
      'circuit_breaker_tripped_error_ratio{breaker="payments"}' => "0.6666666666666666",
      'circuit_breaker_admit_ratio{breaker="payments"}' => "0.0",
      'circuit_breaker_retry_after_seconds{breaker="payments"}' => "30.0"
    )
    expect(s.keys.grep(/half_open_stage/)).to be_empty
  end

  it "leaves out what a state has no value for (retry_after forced open; stage and tripped rates closed)" do
    forced = breaker.force_open!
    closed = breaker
    half = breaker(ramp: [0.5, 1.0])
    trip!(half)
    cool_down(half)
    s = samples(described_class.render({ "forced" => forced, "closed" => closed, "half" => half }))
    expect(s.keys.grep(/retry_after/)).to contain_exactly(
      'circuit_breaker_retry_after_seconds{breaker="closed"}', 'circuit_breaker_retry_after_seconds{breaker="half"}'
    )
    expect(s).to include('circuit_breaker_half_open_stage{breaker="half"}' => "0",
                         'circuit_breaker_admit_ratio{breaker="half"}' => "0.5",
                         'circuit_breaker_tripped_error_ratio{breaker="half"}' => "1.0")
    expect(s.keys.grep(/tripped|stage/).grep(/closed|forced/)).to be_empty
  end

  it "counts no limited calls and leaves out the cap's gauges for a breaker without max_concurrent:" do
    s = samples(described_class.render({ "plain" => breaker }))
    expect(s).to include('circuit_breaker_limited_calls_total{breaker="plain"}' => "0")
    expect(s.keys.grep(/in_flight|concurrency_limit/)).to be_empty
  end

  # docs/concurrency.md: a call inside another of the same breaker holds a
  # second slot, so a cap of 1 refuses it.
  it "renders the calls in flight, the cap and the limited calls of a capped breaker" do
    capped = breaker(max_concurrent: 1)
    inside = nil
    capped.call do
      expect { capped.call { :not_run } }.to raise_error(CircuitBreaker::ConcurrencyLimitError)
      inside = samples(described_class.render({ "capped" => capped }))
    end
    expect(inside).to include('circuit_breaker_in_flight_calls{breaker="capped"}' => "1",
                              'circuit_breaker_concurrency_limit{breaker="capped"}' => "1",
                              'circuit_breaker_limited_calls_total{breaker="capped"}' => "1",
                              'circuit_breaker_rejected_calls_total{breaker="capped"}' => "1")
    after = samples(described_class.render({ "capped" => capped }))
    expect(after).to include('circuit_breaker_in_flight_calls{breaker="capped"}' => "0",
                             'circuit_breaker_limited_calls_total{breaker="capped"}' => "1")
  end

  it "renders the adaptive cap's current value as the concurrency limit, as it moves" do
    adaptive = breaker(max_concurrent: :adaptive, adaptive_initial: 7, consecutive_failures: nil)
    limit = -> { samples(described_class.render({ "adaptive" => adaptive }))['circuit_breaker_concurrency_limit{breaker="adaptive"}'] }
    expect(limit.call).to eq("7")
    # Fast calls, then fifty times slower ones (docs/choices.md): the cap falls.
    5.times { adaptive.call { clock.advance(0.01) } }
    20.times { adaptive.call { clock.advance(0.5) } }
    expect(adaptive.metrics[:concurrency_limit]).to be < 7
    expect(limit.call).to eq(adaptive.metrics[:concurrency_limit].to_s)
  end

  it "marks the counters of a shared: breaker as host-wide", :shared_memory do
    key = "spec-prom-#{Process.pid}-#{rand(1 << 32)}"
    b = CircuitBreaker.new(shared: key)
    expect(described_class.render({ "s" => b })).to include('circuit_breaker_info{breaker="s",counters="host"} 1')
  end

  it "adds constant labels and escapes label values" do
    text = described_class.render({ "a\"b\\c\nd" => breaker }, labels: { worker: 3, "host" => "web-1" })
    expect(text).to include('circuit_breaker_calls_total{breaker="a\\"b\\\\c\\nd",worker="3",host="web-1"} 0')
  end

  it "is empty without breakers" do
    expect(described_class.render({})).to eq("")
  end

  it "refuses what it cannot render, naming the argument" do
    expect { described_class.render([breaker]) }.to raise_error(TypeError, /breakers must be a Hash/)
    expect { described_class.render({ "x" => :nope }) }.to raise_error(TypeError, /name => CircuitBreaker/)
    expect { described_class.render({}, labels: [1]) }.to raise_error(TypeError, /labels must be a Hash/)
    %w[state breaker counters 1x __x a-b].each do |bad|
      expect { described_class.render({}, labels: { bad => 1 }) }.to raise_error(ArgumentError, /labels: #{Regexp.escape(bad.inspect)}/)
    end
  end

  describe "promtool check metrics", :integration do
    def promtool(text)
      ChildProcess.capture2e("promtool", "check", "metrics", stdin_data: text)
    rescue Errno::ENOENT
      skip "promtool is missing (bin/test installs Debian's prometheus)"
    end

    it "finds nothing to say about the exposition in every state" do
      breakers = %i[closed open half_open forced_open disabled].to_h { |s| [s.to_s, breaker(ramp: [0.5, 1.0])] }
      trip!(breakers["open"])
      trip!(breakers["half_open"])
      cool_down(breakers["half_open"])
      breakers["forced_open"].force_open!
      breakers["disabled"].disable!
      breakers.each_value { |b| attempt(b) }
      text = described_class.render(breakers, labels: { worker: "0" })
      out, status = promtool(text)
      expect([out, status.exitstatus]).to eq(["", 0])
    end

    it "finds nothing to say about the exposition of capped breakers (fixed and adaptive) beside uncapped ones" do
      capped = breaker(max_concurrent: 1)
      breakers = { "plain" => breaker, "capped" => capped, "adaptive" => breaker(max_concurrent: :adaptive) }
      text = nil
      capped.call do
        capped.call { :not_run } rescue CircuitBreaker::ConcurrencyLimitError # rubocop:disable Style/RescueModifier
        text = described_class.render(breakers, labels: { worker: "0" })
      end
      expect(text).to include("# TYPE circuit_breaker_limited_calls_total counter",
                              "# TYPE circuit_breaker_in_flight_calls gauge",
                              "# TYPE circuit_breaker_concurrency_limit gauge",
                              'circuit_breaker_limited_calls_total{breaker="capped",worker="0"} 1')
      out, status = promtool(text)
      expect([out, status.exitstatus]).to eq(["", 0])
    end

    # Series as the exposition names them: open from minute 2, as many
    # calls rejected as made.
    let(:rule_tests) do
      <<~YAML
        rule_files: [rules.yml]
        evaluation_interval: 1m
        tests:
          - interval: 1m
            input_series:
              - series: 'circuit_breaker_state{instance="web-1",breaker="payments",state="open"}'
                values: '0 0 1x20'
              - series: 'circuit_breaker_calls_total{instance="web-1",breaker="payments"}'
                values: '0+60x22'
              - series: 'circuit_breaker_rejected_calls_total{instance="web-1",breaker="payments"}'
                values: '0+60x22'
            alert_rule_test:
              - eval_time: 8m
                alertname: CircuitBreakerOpenTooLong
                exp_alerts: []
              - eval_time: 13m
                alertname: CircuitBreakerOpenTooLong
                exp_alerts:
                  - exp_labels: { severity: page, instance: web-1, breaker: payments }
                    exp_annotations: { summary: "circuit payments on web-1 has not closed for 10 minutes" }
              - eval_time: 15m
                alertname: CircuitBreakerRejectingCalls
                exp_alerts:
                  - exp_labels: { severity: ticket, breaker: payments }
                    exp_annotations: { summary: "circuit payments rejects 50% of its calls" }
      YAML
    end

    it "accepts the alert rules of docs/operating.md, which fire when they should (promtool check/test rules)" do
      docs = File.read(File.expand_path("../../docs/operating.md", __dir__))
      rules = docs[/```yaml\n(groups:.*?)```/m, 1]
      expect(rules).to include("CircuitBreakerOpenTooLong", "CircuitBreakerRejectingCalls")
      Dir.mktmpdir do |dir|
        File.write(File.join(dir, "rules.yml"), rules)
        File.write(File.join(dir, "test.yml"), rule_tests)
        out, status = ChildProcess.capture2e("promtool", "check", "rules", "rules.yml", chdir: dir)
        expect(status).to be_success, out
        out, status = ChildProcess.capture2e("promtool", "test", "rules", "test.yml", chdir: dir)
        expect(status).to be_success, out
      end
    rescue Errno::ENOENT
      skip "promtool is missing (bin/test installs Debian's prometheus)"
    end

    it "would see a mistake (the check is real)" do
      text = described_class.render({ "x" => breaker }).sub("circuit_breaker_calls_total", "circuit_breaker_calls")
      out, status = promtool(text)
      expect(status.exitstatus).not_to eq(0)
      expect(out).to match(/_total/)
    end
  end
end
