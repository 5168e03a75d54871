# frozen_string_literal: true

class CircuitBreaker
  class Dashboard
    # The app's `authorize:` hook, asked for every action: called with the
    # Rack::Request (and, when it takes more than one argument, the action
    # Symbol and the breaker name); truthy allows it. Without a hook every
    # action is refused (docs/operating.md).
    # @api private
    class Authorization
      # @param hook [#call, nil]
      # @raise [TypeError] a hook that cannot be called
      def initialize(hook)
        raise TypeError, "authorize: must respond to call (got #{hook.inspect})" unless hook.nil? || hook.respond_to?(:call)

        @hook = hook
      end

      # @return [Boolean] whether the app gave a hook
      def enabled?
        !@hook.nil?
      end

      # @param method [Symbol] the breaker method the action calls (:trip!…)
      # @return [Boolean]
      def allows?(request, method, name)
        args = @hook.respond_to?(:arity) && @hook.arity == 1 ? [request] : [request, method.to_s.chomp("!").to_sym, name]
        @hook.call(*args) ? true : false
      end
    end
  end
end
