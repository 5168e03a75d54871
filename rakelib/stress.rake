# frozen_string_literal: true

# Not part of `rake spec` or CI: the thread stress of
# spec/integration/threads_spec.rb at full size. It prints one line of
# figures per exact-count example (calls, seconds, recorded, failures, slow).
desc "Thread stress: 16 threads x 100,000 mixed calls on one breaker (STRESS_CALLS=n per thread)"
task stress: :compile do
  calls = ENV.fetch("STRESS_CALLS", "100000")
  sh({ "STRESS_CALLS" => calls }, "rspec", "spec/integration/threads_spec.rb", "--order", "defined")
end
