# frozen_string_literal: true

$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "circuit_breaker"

Dir[File.join(__dir__, "support", "**", "*.rb")].sort.each { |f| require f }

RSpec.configure do |config|
  config.disable_monkey_patching!
  config.order = :random
  Kernel.srand config.seed
  config.expect_with(:rspec) { |c| c.syntax = :expect }
  config.example_status_persistence_file_path = "tmp/rspec-status.txt"
  # Examples of shared: (tagged :shared_memory) need a build that has it;
  # a build without it (docs/install.md) runs those tagged :no_shared_memory
  # instead (spec/breaker/portable_spec.rb).
  config.filter_run_excluding(CircuitBreaker.shared_supported? ? :no_shared_memory : :shared_memory)
  # This suite's CircuitBreaker.for breakers stay per process, as in an
  # app's test suite (RAILS_ENV=test; docs/shared.md, "Host scope"), without
  # setting RACK_ENV for the apps the suite boots;
  # spec/circuit_breaker/scope_spec.rb covers the default.
  CircuitBreaker.configure { |c| c.scope = :process }

  # GC_STRESS=1 runs every example under GC.stress; GC_COMPACT=1 compacts
  # the heap around every example (objects must survive being moved).
  if ENV["GC_STRESS"] == "1"
    config.around do |example|
      GC.stress = true
      example.run
    ensure
      GC.stress = false
    end
  end
  if ENV["GC_COMPACT"] == "1" && GC.respond_to?(:compact)
    config.before { GC.compact }
    config.after { GC.compact }
  end
end
