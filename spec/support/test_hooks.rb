# frozen_string_literal: true

# The test-only native methods (`__hold_shared_lock`, `__lock_wait=`,
# `__shared_mutex_offset`…) are in the suite's build only (`rake compile`;
# docs/development.md, "Test hooks"). Examples tagged :test_hooks call them,
# and are skipped, saying why, against a library without them (an installed
# gem: `rake gem:check_native` runs the core specs that way).
module TestHooks
  def self.available?
    CircuitBreaker.respond_to?(:__shared_mutex_offset, true)
  end
end

RSpec.configure do |config|
  config.before(:example, :test_hooks) do
    next if TestHooks.available?

    skip "needs the test hooks, which this build of the library lacks (rake compile builds them)"
  end
end
