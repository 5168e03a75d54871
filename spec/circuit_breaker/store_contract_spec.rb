# frozen_string_literal: true

# One contract, three stores of a breaker's state (spec/support/store_contract.rb):
# the rules are the same Rust core whatever holds the state.
RSpec.describe CircuitBreaker, "stores" do
  describe "process memory (the default)" do
    def store_options = {}
    def connect(_breaker) = nil
    def settle(_breaker) = nil

    it_behaves_like "a breaker store", counters: :process
  end

  describe "shared: (a file every process of the host maps)" do
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
    # contract), so its fleet keys are its own too.
    def store_options = { fleet: redis_server.url, fleet_interval: 0.02 }

    def connect(breaker)
      wait_until(what: "the fleet breaker connected") { breaker.metrics[:fleet] == :connected }
    end

    # Three round trips from now: the second one's report was taken after
    # this call, and its reply was applied before the third began
    # (lib/circuit_breaker/fleet.rb, Syncer#sync_once).
    def settle(_breaker)
      start = CircuitBreaker::Fleet.round_trips
      wait_until(what: "three fleet round trips") { CircuitBreaker::Fleet.round_trips >= start + 3 }
    end

    it_behaves_like "a breaker store", counters: :process, extra_metrics: { fleet: :connected }, disagreements: {
      trip_then_clock: "fleet: a trip! becomes the fleet's opening, whose end only Redis's clock decides " \
                       "(ext/circuit_breaker_core/src/fleet.rs: `decide` waits for the reply's remaining time " \
                       "to be 0; `follow` leaves the host half-open with no probe slot meanwhile), so a host " \
                       "whose own clock ended the open period admits no probe until open_duration has passed " \
                       "in Redis's time",
      reset_echo: "fleet: the reply to a host's own reset! empties its window a second time " \
                  "(ext/circuit_breaker_core/src/fleet.rs, `follow`: a closed fleet with reason :manual " \
                  "resets a closed host's window), dropping the calls the host recorded after its reset!"
    }
  end
end
