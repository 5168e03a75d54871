# frozen_string_literal: true

require "rbconfig"

# docs/operating.md: ActiveSupport::Notifications instrumentation, when loaded.
#
# Tagged :integration (it runs a subprocess), and ActiveSupport is loaded
# only when these examples run: once loaded (with concurrent-ruby) it makes
# every later example of a `GC_STRESS=1 rspec --tag ~integration` run
# several times slower, for Ruby code (events.rb) that events_spec.rb
# already covers.
RSpec.describe CircuitBreaker, "ActiveSupport::Notifications", :integration do
  before(:context) do
    # ActiveSupport 7 needs its base loaded first (7.2 raises NameError on
    # ActiveSupport::IsolatedExecutionState otherwise), as in a Rails app.
    require "active_support"
    require "active_support/notifications"
  end

  let(:clock) { CircuitBreaker::ManualClock.new }
  subject(:breaker) { CircuitBreaker.new(name: "notified", clock: clock, min_calls: 1, open_duration: 30) }

  let(:received) { [] }
  let!(:subscriptions) do
    %w[state_change.circuit_breaker rejected.circuit_breaker].map do |event|
      ActiveSupport::Notifications.subscribe(event) do |name, _start, _finish, _id, payload|
        received << [name, payload] if payload[:name] == "notified"
      end
    end
  end

  after { subscriptions.each { |s| ActiveSupport::Notifications.unsubscribe(s) } }

  it "instruments every transition as state_change.circuit_breaker" do
    expect { breaker.call { raise BreakerHelpers::Boom } }.to raise_error(BreakerHelpers::Boom)
    clock.advance(30)
    breaker.state
    names = received.map(&:first)
    expect(names).to eq(%w[state_change.circuit_breaker] * 2)
    payload = received.first.last
    expect(payload).to include(from: :closed, to: :open, name: "notified", reason: :error_rate)
    expect(payload[:metrics]).to include(state: :open, retry_after: 30.0)
    expect(received.last.last).to include(from: :open, to: :half_open, reason: :cool_down_elapsed)
  end

  it "carries, on an opening, the rates that opened it and the last recorded exception's class" do
    expect { breaker.call { raise BreakerHelpers::Boom } }.to raise_error(BreakerHelpers::Boom)
    payload = received.first.last
    expect(payload).to include(to: :open, error_rate: 1.0, slow_call_rate: 0.0, error_class: "BreakerHelpers::Boom")
    expect(payload[:metrics]).to include(tripped_error_rate: 1.0, failures_total: 1, opened: 1)
  end

  it "gives the same payload as the StateChange of on_state_change" do
    changes = []
    breaker.on_state_change { |e| changes << e }
    breaker.trip!.reset!
    expect(received.map(&:last)).to eq(changes.map(&:to_h))
  end

  it "instruments every rejection as rejected.circuit_breaker" do
    breaker.trip!
    expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError)
    clock.advance(10)
    expect(breaker.allow?).to be(false)
    rejected = received.select { |name, _| name == "rejected.circuit_breaker" }.map(&:last)
    expect(rejected).to eq([{ name: "notified", state: :open, retry_after: 30.0, reason: :open },
                            { name: "notified", state: :open, retry_after: 20.0, reason: :open }])
  end

  it "instruments rejections without any on_reject listener" do
    breaker.force_open!
    expect { breaker.call { :ran } }.to raise_error(CircuitBreaker::OpenError)
    expect(received.last).to eq(["rejected.circuit_breaker",
                                 { name: "notified", state: :forced_open, retry_after: nil, reason: :forced_open }])
  end

  it "instruments a call refused at the concurrency cap, with reason: :concurrency_limit and the cap" do
    capped = CircuitBreaker.new(name: "notified", clock: clock, max_concurrent: 1)
    capped.call { expect { capped.call { :not_run } }.to raise_error(CircuitBreaker::ConcurrencyLimitError) }
    expect(received).to eq([["rejected.circuit_breaker",
                             { name: "notified", state: :closed, retry_after: 1.0, reason: :concurrency_limit, limit: 1 }]])
  end

  it "instruments allow? answering false at the concurrency cap the same way" do
    capped = CircuitBreaker.new(name: "notified", clock: clock, max_concurrent: 1)
    expect([capped.allow?, capped.allow?]).to eq([true, false])
    capped.record_success
    expect(received.map { |_, payload| payload.values_at(:reason, :limit) }).to eq([[:concurrency_limit, 1]])
  end

  it "reports a subscriber's exception with warn and never raises it into call" do
    failing = ActiveSupport::Notifications.subscribe("state_change.circuit_breaker") { raise "subscriber broke" }
    expect do
      expect { breaker.call { raise BreakerHelpers::Boom } }.to raise_error(BreakerHelpers::Boom)
    end.to output(/ActiveSupport::Notifications.*subscriber broke/).to_stderr
    expect(breaker.state).to eq(:open)
  ensure
    ActiveSupport::Notifications.unsubscribe(failing)
  end

  it "is no hard dependency: requiring the gem does not load ActiveSupport" do
    script = <<~RUBY
      require "circuit_breaker"
      p defined?(ActiveSupport)
      b = CircuitBreaker.new(min_calls: 1)
      b.trip!
      begin
        b.call { :ran }
      rescue CircuitBreaker::OpenError
        p b.state
      end
    RUBY
    out, status = ChildProcess.capture2e(RbConfig.ruby, "-Ilib", "-e", script, chdir: File.expand_path("../../..", __dir__))
    expect(status).to be_success, out
    expect(out.lines.map(&:chomp)).to eq(["nil", ":open"])
  end
end
