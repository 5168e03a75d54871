# frozen_string_literal: true

# With ActiveSupport::Notifications loaded and nobody subscribed, a
# rejection builds no payload and instruments nothing (rake bench has the
# cost: "open rejection, ActiveSupport loaded, nobody subscribed").
# Tagged :integration like notifications_spec.rb, which loads ActiveSupport.
RSpec.describe CircuitBreaker, "ActiveSupport::Notifications with nobody subscribed", :integration do
  before(:context) do
    # ActiveSupport 7 needs its base loaded first, as in notifications_spec.rb.
    require "active_support"
    require "active_support/notifications"
  end

  let(:clock) { CircuitBreaker::ManualClock.new }
  let(:breaker) { CircuitBreaker.new(name: "quiet", clock: clock, min_calls: 1, open_duration: 30) }

  def reject
    breaker.call { :never }
  rescue CircuitBreaker::OpenError
    nil
  end

  it "builds no payload and instruments nothing for a rejection" do
    expect(ActiveSupport::Notifications.notifier.listening?("rejected.circuit_breaker")).to be(false)
    breaker.trip!
    3.times { reject } # warm: the notifier's per-name cache
    allow(ActiveSupport::Notifications).to receive(:instrument).and_call_original
    counts = {} # reused: count_objects allocates no result Hash
    hashes = lambda do
      GC.disable
      before = ObjectSpace.count_objects(counts)[:T_HASH]
      100.times { reject }
      ObjectSpace.count_objects(counts)[:T_HASH] - before
    ensure
      GC.enable
    end
    expect(hashes.call).to eq(0)
    expect(breaker.allow?).to be(false)
    expect(ActiveSupport::Notifications).not_to have_received(:instrument)
  end

  it "asks the notifier whether anyone subscribed once, not at every rejection (its listening? costs half a raise)" do
    notifier = ActiveSupport::Notifications.notifier
    asked = notifier.respond_to?(:all_listeners_for) ? :all_listeners_for : :listening? # ActiveSupport 7.1+ : 6.1
    allow(notifier).to receive(asked).and_call_original
    breaker.trip!
    100.times { reject }
    expect(notifier).to have_received(asked).with("rejected.circuit_breaker").at_most(:once)
  end

  it "instruments rejections from a subscription made during the outage, and none after it ended" do
    received = []
    breaker.trip!
    3.times { reject } # the answer kept: nobody subscribed
    subscription = ActiveSupport::Notifications.subscribe("rejected.circuit_breaker") { |*args| received << args.last[:name] }
    2.times { reject }
    ActiveSupport::Notifications.unsubscribe(subscription)
    reject
    expect(received).to eq(%w[quiet quiet])
  ensure
    ActiveSupport::Notifications.unsubscribe(subscription) if subscription
  end

  it "asks a notifier put in place of the old one (ActiveSupport::Notifications.notifier=) afresh" do
    old = ActiveSupport::Notifications.notifier
    received = []
    breaker.trip!
    3.times { reject }
    ActiveSupport::Notifications.notifier = ActiveSupport::Notifications::Fanout.new
    reject
    ActiveSupport::Notifications.subscribe("rejected.circuit_breaker") { |*args| received << args.last[:name] }
    reject
    ActiveSupport::Notifications.notifier = old
    reject
    expect(received).to eq(%w[quiet])
  ensure
    ActiveSupport::Notifications.notifier = old
  end

  it "still instruments once someone subscribes" do
    received = []
    subscription = ActiveSupport::Notifications.subscribe("rejected.circuit_breaker") { |*args| received << args.last }
    breaker.trip!
    reject
    expect(received).to eq([{ name: "quiet", state: :open, retry_after: 30.0, reason: :open }])
  ensure
    ActiveSupport::Notifications.unsubscribe(subscription)
  end
end
