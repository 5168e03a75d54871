# frozen_string_literal: true

class CircuitBreaker
  # Environments whose breakers stay per process by default: a test suite's
  # breakers must not share state with each other's runs or with a
  # development server's.
  TEST_ENVIRONMENT_VARIABLES = %w[RAILS_ENV RACK_ENV APP_ENV].freeze
  private_constant :TEST_ENVIRONMENT_VARIABLES

  @scope_warned = false

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

    private

    # The breaker {CircuitBreaker.for} registers under `key`: `options` as
    # given, host-wide when they say nothing of `shared:` and the default
    # scope is `:host`. When the host cannot have it (a platform without
    # shared memory, a read-only or full file system, too many open files,
    # a directory another user owns...), the breaker is per process, and
    # the first such breaker of the process warns, naming the cause. An
    # explicit `shared:` raises instead, as CircuitBreaker.new does.
    #
    # @api private
    def __registered_breaker(key, options)
      return new(**options, name: key) if options.key?(:shared) || default_scope == :process

      unless shared_supported?
        return __per_process(key, options, "this platform has no shared memory for breakers (docs/install.md)")
      end

      begin
        new(**options, name: key, shared: key)
      rescue SystemCallError, ArgumentError => e
        # The binding's shared-file errors are ArgumentErrors starting with
        # "shared:" (a name too long for a file, a planted directory or
        # file); any other ArgumentError is a bad option, raised as is.
        raise if e.is_a?(ArgumentError) && !e.message.start_with?("shared:")

        __per_process(key, options, "#{e.class}: #{e.message}")
      end
    end

    def __per_process(key, options, cause)
      breaker = new(**options, name: key)
      unless @scope_warned
        @scope_warned = true
        message = "circuit_breaker: CircuitBreaker.for(#{key.inspect}) is per process, not host-wide as by default: " \
                  "#{cause}. Breakers of CircuitBreaker.for that cannot be host-wide are per process " \
                  "(metrics[:scope] == :process); this is said once per process. Set " \
                  "CircuitBreaker.configure { |c| c.scope = :process } to choose that (docs/shared.md, \"Host scope\")."
        logger = configuration.logger
        logger ? logger.warn(message) : Kernel.warn(message)
      end
      breaker
    end
  end
end
