# frozen_string_literal: true

# Examples tagged :shm_dir may point CIRCUIT_BREAKER_SHM_DIR (where shared:
# files live, docs/shared.md) elsewhere; it is put back after each one.
RSpec.configure do |config|
  config.around(:example, :shm_dir) do |example|
    saved = ENV.fetch("CIRCUIT_BREAKER_SHM_DIR", nil)
    example.run
  ensure
    saved ? ENV["CIRCUIT_BREAKER_SHM_DIR"] = saved : ENV.delete("CIRCUIT_BREAKER_SHM_DIR")
  end
end
