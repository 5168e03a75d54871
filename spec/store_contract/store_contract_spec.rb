# frozen_string_literal: true

require "circuit_breaker/fleet"

# One contract, three stores of a breaker's state (spec/support/store_contract.rb):
# the rules are the same Rust core whatever holds the state.
RSpec.describe CircuitBreaker, "stores" do
  describe "process memory (the default)" do
    def store_options = {}
    def connect(_breaker) = nil
    def settle(_breaker) = nil

    it_behaves_like "a breaker store", counters: :process
  end

  describe "shared: (a file every process of the host maps)", :shared_memory do
    # A name and namespace of this breaker only; its file is removed once no
    # process maps it (docs/shared.md). ManualClock works within one process.
    def store_options
      key = "contract-#{Process.pid}-#{SecureRandom.hex(6)}"
      { shared: key, namespace: key }
    end

    def connect(_breaker) = nil
    def settle(_breaker) = nil

    it_behaves_like "a breaker store", counters: :host
  end

  describe "fleet: (a mirror kept in step through Redis)", :redis do
    after { CircuitBreaker::Fleet.stop_all }

    # Each example's breaker has a name of its own (the `name` of the
    # contract), so its fleet keys are its own too. The interval gives
    # sends the longest timeout (0.25 s, lib/circuit_breaker/fleet/syncer.rb), so
    # a loaded machine rarely makes a send fail; `settle` wakes the syncer
    # rather than waiting for it.
    def store_options = { fleet: redis_server.url, fleet_interval: 0.2 }

    def connect(breaker)
      breaker.on_fleet_change { |status| @fleet_degraded = true if status == :degraded }
      wait_until(what: "the fleet breaker connected") { breaker.metrics[:fleet] == :connected }
    end

    # Three syncer slots from now: the second one's report was taken after
    # this call, and its reply was applied before the third began
    # (lib/circuit_breaker/fleet/syncer.rb, Syncer#sync_once). A send that failed
    # meanwhile detached the host from the fleet (docs/fleet.md, "Degraded
    # mode"): the example then says nothing about the fleet, and is skipped.
    def settle(_breaker)
      syncers = CircuitBreaker::Fleet.instance_variable_get(:@syncers).values
      start = CircuitBreaker::Fleet.slots
      wait_until(what: "three fleet slots") do
        syncers.each(&:wake)
        CircuitBreaker::Fleet.slots >= start + 3
      end
      skip "a fleet send failed (a loaded machine): the host ran on its own breaker" if @fleet_degraded
    end

    it_behaves_like "a breaker store", counters: :process, extra_metrics: { fleet: :connected, fleet_reason: nil }, disagreements: {
      trip_then_clock: "fleet: the host follows the fleet's opening its own trip! made (its reply and its " \
                       "pushed copy alike), whose end only Redis's clock decides " \
                       "(ext/circuit_breaker_rules/src/fleet/: `decide` waits for the reply's remaining time " \
                       "to reach 0, and `follow` leaves a half-open host no probe slot meanwhile), so a host " \
                       "whose own clock ended the open period admits no probe until open_duration has passed " \
                       "in Redis's time"
    }
  end
end
