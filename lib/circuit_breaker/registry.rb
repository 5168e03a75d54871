# frozen_string_literal: true

class CircuitBreaker
  # The process-wide registry behind {CircuitBreaker.for}: one breaker per
  # name. Its Mutex guards the table only; it is held while a breaker is
  # created (so that two threads asking for a new name at once build one
  # breaker, and a `window:` is attached once) and never while user code
  # runs otherwise (option `==`, listeners of `reset!`). A forked child
  # inherits the table (the same breaker objects, with the state they had at
  # fork time) and a usable Mutex.
  #
  # @api private
  module Registry
    LOCK = Mutex.new
    # name (frozen String) => [breaker, options given at creation (frozen)]
    ENTRIES = {}
    @scope_warned = false

    class << self
      # Rebuilds every registered `shared:` breaker under its namespace with
      # `suffix` added (its own `namespace:`, else the default namespace as
      # it was), with a new window of the same settings: a forked test
      # worker's breakers, apart from its siblings' (test_helpers.rb). The
      # registry keeps the options of the first call, so later
      # CircuitBreaker.for calls still match.
      def move_shared_apart(suffix, old_default)
        locked do
          ENTRIES.each do |key, (breaker, options)|
            next unless breaker.shared_path

            namespace = "#{options[:namespace] || old_default}#{suffix}"
            ENTRIES[key] = [CircuitBreaker.new(**options, window: blank_copy(options[:window]), name: key, namespace: namespace),
                            options].freeze
          end
        end
      end

      # A window with `window`'s settings that no breaker uses yet (nil: nil).
      def blank_copy(window)
        case window
        when SlidingWindow then SlidingWindow.new(size: window.size, slow_threshold_ms: window.slow_threshold_ms)
        when TimeWindow then TimeWindow.new(seconds: window.seconds, buckets: window.buckets, slow_threshold_ms: window.slow_threshold_ms)
        end
      end

      # @return [String] `name` as a frozen String
      def key(name)
        case name
        when String then -String.new(name) # a plain String, even from a subclass
        when Symbol then -name.to_s
        else raise TypeError, "CircuitBreaker.for: name must be a String or a Symbol (got #{name.inspect})"
        end
      end

      # @return [CircuitBreaker, nil] the breaker registered under `key`,
      #   never creating one
      def lookup(key)
        locked { ENTRIES[key]&.first }
      end

      # The breaker registered under `name`, never creating one.
      # @raise [ArgumentError] when no breaker is registered under that name
      # @raise [TypeError] a name that is neither a String nor a Symbol
      def registered(name)
        lookup(key(name)) ||
          raise(ArgumentError, "no breaker is registered as #{name.to_s.inspect}; " \
                               "register it first with CircuitBreaker.for(#{name.to_s.inspect}, **options)")
      end

      # The breaker {CircuitBreaker.for} registers under `key`: `options` as
      # given, host-wide when they say nothing of `shared:` and the default
      # scope is `:host`. When the host cannot have it (a platform without
      # shared memory, a read-only or full file system, too many open files,
      # a directory another user owns...), the breaker is per process, and
      # the first such breaker of the process warns, naming the cause. An
      # explicit `shared:` raises instead, as CircuitBreaker.new does.
      def build(key, options)
        return CircuitBreaker.new(**options, name: key) if options.key?(:shared) || CircuitBreaker.default_scope == :process

        unless CircuitBreaker.shared_supported?
          return per_process(key, options, "this platform has no shared memory for breakers (docs/install.md)")
        end

        begin
          CircuitBreaker.new(**options, name: key, shared: key)
        rescue SystemCallError, ArgumentError => e
          # The binding's shared-file errors are ArgumentErrors starting with
          # "shared:" (a name too long for a file, a planted directory or
          # file); any other ArgumentError is a bad option, raised as is.
          raise if e.is_a?(ArgumentError) && !e.message.start_with?("shared:")

          per_process(key, options, "#{e.class}: #{e.message}")
        end
      end

      # A breaker of this process, for a name that cannot be host-wide;
      # the first one warns.
      def per_process(key, options, cause)
        breaker = CircuitBreaker.new(**options, name: key)
        unless @scope_warned
          @scope_warned = true
          message = "circuit_breaker: CircuitBreaker.for(#{key.inspect}) is per process, not host-wide as by default: " \
                    "#{cause}. Breakers of CircuitBreaker.for that cannot be host-wide are per process " \
                    "(metrics[:scope] == :process); this is said once per process. Set " \
                    "CircuitBreaker.configure { |c| c.scope = :process } to choose that (docs/shared.md, \"Host scope\")."
          logger = CircuitBreaker.configuration.logger
          logger ? logger.warn(message) : Kernel.warn(message)
        end
        breaker
      end

      # The options that tell breakers apart, without `name:` (checked
      # against the name here).
      def options_without_name(key, options)
        return options unless options.key?(:name)

        given = options[:name]
        unless (given.is_a?(String) || given.is_a?(Symbol)) && given.to_s == key
          raise ArgumentError,
                "CircuitBreaker.for(#{key.inspect}): name: #{given.inspect} differs from the registry name " \
                "(leave name: out; the breaker is named after the registry name)"
        end
        options.reject { |k, _| k == :name }
      end

      # Keys present in only one of the two option Hashes, or whose values
      # differ by value (see {comparable}).
      def differing_keys(registered, given)
        (registered.keys | given.keys).reject do |k|
          registered.key?(k) && given.key?(k) && option(k, registered[k]) == option(k, given[k])
        end
      end

      # An option as it is compared: `fleet:` by the server it names (a new
      # client of the same Redis is the same fleet), the others by
      # {comparable}.
      def option(key, value)
        return comparable(value) unless key == :fleet && !value.nil?

        require_relative "fleet"
        Fleet.server(value)
      end

      # What an option value is compared by, so that re-running the same
      # source after a code reload finds the same breaker: a window by its
      # kind and settings, a Proc or Method by where it is written (a Proc
      # without a source location, such as `&:sym`, by identity), a named
      # class or module by its name (a reloaded class is a new object),
      # Arrays and Hashes element by element, anything else by `==`.
      def comparable(value)
        case value
        when SlidingWindow then [SlidingWindow, value.size, value.slow_threshold_ms]
        when TimeWindow then [TimeWindow, value.seconds, value.buckets, value.slow_threshold_ms]
        when Proc then value.source_location ? [Proc, value.lambda?, value.source_location] : value
        when Method, UnboundMethod then [value.class, value.name, value.source_location || value.owner]
        when Module then value.name ? [Module, value.name] : value
        when Array then value.map { |v| comparable(v) }
        when Hash then value.transform_values { |v| comparable(v) }
        else value
        end
      end

      # Runs the block holding LOCK. In a signal handler (`trap`), where
      # Mutex#lock is refused, it runs on a helper thread that may take it,
      # unless the handler interrupted this very thread inside the registry
      # (it cannot wait for itself).
      def locked(&block)
        LOCK.synchronize(&block)
      rescue ThreadError
        raise if LOCK.owned?

        Thread.new { LOCK.synchronize(&block) }.value
      end

      def mismatch(key, keys)
        ArgumentError.new(
          "CircuitBreaker.for(#{key.inspect}): options differ from the first call's: " \
          "#{keys.map { |k| "#{k}:" }.join(', ')}; " \
          "call CircuitBreaker.for(#{key.inspect}) without options to look the breaker up"
        )
      end
    end
  end
  private_constant :Registry

  class << self
    # The breaker registered under `name`, created with `options` on the
    # first call (with `name:` set to the name). One breaker per name per
    # process; safe to call from many threads at once.
    #
    # A later call without options looks the breaker up. A later call with
    # options compares them, as given, with those of the first call, by
    # value: the same keys, windows of the same kind and settings, Procs and
    # methods written at the same place, classes of the same name, other
    # values `==`. So code that runs again after a reload (a class body, a
    # `to_prepare` block) finds the breaker it made the first time, which
    # keeps the first call's objects. When they differ it raises
    # ArgumentError naming the keys.
    #
    # @example Configure once at boot, look up anywhere
    #   CircuitBreaker.for(:payments, window: CircuitBreaker::SlidingWindow.new(size: 50), open_duration: 10)
    #   CircuitBreaker.for("payments").call { charge(card) }   # the same breaker
    # @param name [String, Symbol] the registry name (Symbols become Strings)
    # @param options [Hash] options of {CircuitBreaker.new}, used when the breaker is created
    # @return [CircuitBreaker]
    # @raise [ArgumentError] options differing from the first call's, a
    #   `name:` other than `name`, or an option CircuitBreaker.new refuses
    # @raise [TypeError] a name that is neither a String nor a Symbol
    def for(name, **options)
      key = Registry.key(name)
      options = Registry.options_without_name(key, options).freeze
      created = false
      breaker, registered = Registry.locked do
        Registry::ENTRIES[key] ||= begin
          created = true
          [Registry.build(key, options), options].freeze
        end
      end
      return breaker if created || options.empty?

      # Compared with no lock held: `==` may be user code.
      differing = Registry.differing_keys(registered, options)
      raise Registry.mismatch(key, differing) unless differing.empty?

      breaker
    end

    # A snapshot of the registry: a frozen Hash of name (String) => breaker,
    # in registration order. Later registrations do not change it.
    #
    # @example
    #   CircuitBreaker.registry.each { |name, breaker| puts "#{name}: #{breaker.state}" }
    #   CircuitBreaker.registry["payments"]  # => #<CircuitBreaker "payments" state=closed ...>
    # @return [Hash{String => CircuitBreaker}]
    def registry
      Registry.locked { Registry::ENTRIES.transform_values(&:first) }.freeze
    end

    # Resets every registered breaker (`reset!`: closed, window emptied),
    # for test suites. Their listeners run, outside the registry's lock.
    #
    # @example In spec_helper.rb
    #   RSpec.configure { |c| c.before { CircuitBreaker.reset_all! } }
    # @return [nil]
    def reset_all!
      registry.each_value(&:reset!)
      nil
    end

    # Empties the registry, for test suites that build breakers with
    # per-example options (a fresh ManualClock, say): the next
    # {CircuitBreaker.for} of a name creates a new breaker. Breakers already
    # handed out keep working, unregistered.
    #
    # @example In spec_helper.rb
    #   RSpec.configure { |c| c.after { CircuitBreaker.forget_all! } }
    # @return [nil]
    def forget_all!
      Registry.locked { Registry::ENTRIES.clear }
      nil
    end
  end
end
