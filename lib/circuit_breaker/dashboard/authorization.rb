# frozen_string_literal: true

class CircuitBreaker
  class Dashboard
    # The app's `authorize:` hook, asked for every action: called with the
    # Rack::Request, or with the request, the action Symbol and the
    # breaker name; truthy allows it. Which form is decided once, from the
    # hook's parameters, and a hook that takes neither is refused when the
    # dashboard is built (it would be refused every action, silently).
    # Without a hook every action is refused (docs/operating.md).
    # @api private
    class Authorization
      FORMS = "authorize: must take 1 argument (the Rack::Request) or 3 (the request, the action Symbol, " \
              "the breaker name), e.g. ->(req) { ... } or ->(req, action, name) { ... }"

      # @param hook [#call, nil]
      # @raise [TypeError] a hook that cannot be called
      # @raise [ArgumentError] a hook that takes neither 1 nor 3 arguments
      def initialize(hook)
        raise TypeError, "authorize: must respond to call (got #{hook.inspect})" unless hook.nil? || hook.respond_to?(:call)

        @hook = hook
        @full = hook.nil? || arguments(hook)
      end

      # @return [Boolean] whether the app gave a hook
      def enabled?
        !@hook.nil?
      end

      # @param method [Symbol] the breaker method the action calls (:trip!…)
      # @return [Boolean]
      def allows?(request, method, name)
        args = @full ? [request, method.to_s.chomp("!").to_sym, name] : [request]
        @hook.call(*args) ? true : false
      end

      private

      # Whether the hook is called with all three arguments (else the
      # request alone). A proc (not a lambda) drops or pads arguments, so
      # only its arity tells; a lambda or method takes what its parameters
      # take (3 preferred).
      def arguments(hook)
        callable = hook.is_a?(Proc) || hook.is_a?(Method) ? hook : hook.method(:call)
        takes = if callable.is_a?(Proc) && !callable.lambda?
                  arity = callable.arity
                  ->(n) { arity.negative? || arity == n || arity.zero? }
                else
                  params = callable.parameters
                  required = params.count { |kind, _| kind == :req }
                  optional = params.count { |kind, _| kind == :opt }
                  rest = params.any? { |kind, _| kind == :rest }
                  ->(n) { n >= required && (rest || n <= required + optional) }
                end
        return true if takes.(3)
        return false if takes.(1)

        raise ArgumentError, "#{FORMS} (got one of arity #{callable.arity})"
      rescue NameError
        true # call answered by method_missing: its arguments are unknown
      end
    end
  end
end
