# frozen_string_literal: true

class CircuitBreaker
  # Environments whose breakers stay per process by default: a test suite's
  # breakers must not share state with each other's runs or with a
  # development server's.
  TEST_ENVIRONMENT_VARIABLES = %w[RAILS_ENV RACK_ENV APP_ENV].freeze
  private_constant :TEST_ENVIRONMENT_VARIABLES

  class << self
    # Where {CircuitBreaker.for} keeps a breaker built without `shared:`:
    # `:host` (as if given `shared: name`: one state for every process of
    # the host, docs/shared.md, "Host scope") or `:process`. The
    # configured `scope` if set, else `:process` where RAILS_ENV, RACK_ENV
    # or APP_ENV is `test`, else `:host`. Read each time a breaker is built.
    #
    # @example
    #   CircuitBreaker.configure { |c| c.scope = :process }
    #   CircuitBreaker.default_scope # => :process
    #   CircuitBreaker.configure { |c| c.scope = nil }
    # @return [Symbol] :host or :process
    def default_scope
      configuration.scope || (TEST_ENVIRONMENT_VARIABLES.any? { |v| ENV[v] == "test" } ? :process : :host)
    end
  end
end
