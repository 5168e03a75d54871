# frozen_string_literal: true

desc "The outage drill: a Puma cluster, a failing then slow upstream, our setups, the peers' (DRILL_SETUPS, DRILL_PHASES, DRILL_RUNS, DRILL_SOURCES)"
task drill: :compile do
  # Debian's Puma, when missing (not a test package: bin/test never runs the drill).
  sh File.expand_path("../bin/setup", __dir__), "puma"
  ruby File.expand_path("../bench/drill/run.rb", __dir__), *ENV.fetch("DRILL_SETUPS", "").split(",")
end
