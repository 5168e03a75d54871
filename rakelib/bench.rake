# frozen_string_literal: true

desc "Benchmark the gem against bare Ruby and the articles' Ruby breaker (BENCH_SCALE, BENCH_ROUNDS)"
task bench: :compile do
  ruby File.expand_path("../bench/run.rb", __dir__)
end
