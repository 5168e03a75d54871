# frozen_string_literal: true

require_relative "lib/circuit_breaker/version"

Gem::Specification.new do |spec|
  spec.name = "circuit_breaker"
  spec.version = CircuitBreaker::VERSION
  spec.summary = "A circuit breaker for Ruby services with a Rust core: error and slow-call rates, gradual half-open recovery"
  spec.description = <<~DESC
    Protects a Ruby service from a failing or slow dependency: a sliding window
    of recent calls opens the breaker when the error rate or the slow-call rate
    crosses its threshold, rejects calls fast while open, then lets traffic back
    in stages (10% -> 30% -> 60% -> 100%) as probes succeed. The state machine
    is written in Rust and costs about as much as a bare method call.
  DESC
  spec.authors = ["circuit_breaker developers"]
  spec.license = "MIT"
  # The source gem builds on every Ruby from 3.1 on (docs/install.md lists
  # what is tested); `rake native:gem` narrows this to the ABI it was built for.
  spec.required_ruby_version = ">= 3.1"
  # No homepage: the project has no public address yet, and a placeholder
  # would send users nowhere. The README and docs/ ship in the gem.
  spec.metadata = { "rubygems_mfa_required" => "true" }

  # An explicit list: build output (target/, *.so) must never be packaged.
  spec.files = Dir[
    "lib/**/*.rb",
    "lib/**/*.lua", # the fleet's Redis script (lib/circuit_breaker/fleet.rb reads it)
    "lib/circuit_breaker/dashboard/page.html.erb", # the status page (lib/circuit_breaker/dashboard/page.rb renders it)
    "sig/**/*.rbs",
    "ext/circuit_breaker/extconf.rb",
    "ext/circuit_breaker/precompiled.rb", # what the platform gems carry (extconf.rb names them)
    "ext/*/Cargo.toml",
    "ext/*/build.rs",
    "ext/*/src/**/*.rs",
    "docs/*.md",
  ] + %w[Cargo.toml Cargo.lock README.md CHANGELOG.md LICENSE circuit_breaker.gemspec]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/circuit_breaker/extconf.rb"]
end
