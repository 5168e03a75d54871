# frozen_string_literal: true

# One scenario of `rake bench`, run in a process of its own:
#
#   ruby -Ilib bench/scenarios.rb NAME
#
# prints the scenario's rows as one line of JSON on stdout (bench/run.rb
# collects them into the table). NAME is one of Bench::Scenarios::ALL.

require "json"
require "circuit_breaker"
require_relative "article_breaker"
require_relative "support/harness"
require_relative "support/bare"

module Bench
  # Each scenario returns rows: {scenario:, impl:, ns:, allocs:, ratio:,
  # target:, value:, met:}; `value` is what the target is about (a ratio),
  # `met` true/false, or nil where no target applies.
  module Scenarios
    ALL = %w[success failure rejection rejection_as threads rates shared capped fleet adapters].freeze

    IMPLS = {
      bare: "bare Ruby", article: "article (Ruby)", gem: "circuit_breaker", shared: "circuit_breaker shared:",
      capped: "circuit_breaker max_concurrent: 100", shared_capped: "circuit_breaker shared:, max_concurrent: 100",
      adaptive: "circuit_breaker max_concurrent: :adaptive",
      shared_adaptive: "circuit_breaker shared:, max_concurrent: :adaptive",
      fleet_up: "fleet:, Redis up", fleet_paused: "fleet:, Redis paused (SIGSTOP)", fleet_down: "fleet:, Redis down"
    }.freeze

    module_function

    # A table row for `impl`'s `result`, compared with `bare` round by round.
    def row(scenario, impl, result, bare, target: nil, value: nil, met: nil, note: nil)
      {
        scenario: scenario, impl: IMPLS.fetch(impl), ns: result.ns, allocs: result.allocs,
        ratio: Bench.ratio(result, bare), target: target, value: value, met: met, value_note: note
      }
    end

    def check(ok, what)
      raise "bench setup is wrong: #{what}" unless ok
    end

    # closed, `call { 1 }`
    def success
      gem = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100))
      article = ArticleBreaker::Breaker.new(window: ArticleBreaker::SlidingWindow.new(size: 100))
      r = Bench.measure({
                          bare: Bench.plain("r.run { 1 }", r: Bare::Yield.new),
                          article: Bench.plain("r.call { 1 }", r: article),
                          gem: Bench.plain("r.call { 1 }", r: gem),
                          empty: Bench.plain("")
                        })
      m = gem.metrics
      check(m[:state] == :closed && m[:total] == 100 && m[:failures].zero?, "success: #{m}")
      check(article.state == :closed, "success: article #{article.state}")
      name = "closed success `call { 1 }`"
      target = "≤ 2.0× bare, 0 allocs"
      met = ->(x) { Bench.ratio(x, r[:bare]) <= 2.0 && x.allocs < 0.005 }
      [
        row(name, :bare, r[:bare], r[:bare], target: "baseline"),
        row(name, :article, r[:article], r[:bare], target: target, met: met.(r[:article])),
        row(name, :gem, r[:gem], r[:bare], target: target, met: met.(r[:gem])),
        { note: format("Every ns/call includes the `while` loop around the call: %.1f ns.", r[:empty].ns) }
      ]
    end

    # closed, `call { 1 }` on a breaker in shared memory (`shared:`) against
    # the same breaker in process memory
    def shared
      key = "bench-#{Process.pid}"
      local = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100))
      shared = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100), shared: key)
      r = Bench.measure({
                          bare: Bench.plain("r.run { 1 }", r: Bare::Yield.new),
                          gem: Bench.plain("r.call { 1 }", r: local),
                          shared: Bench.plain("r.call { 1 }", r: shared)
                        })
      m = shared.metrics
      check(m[:state] == :closed && m[:total] == 100, "shared: #{m}")
      name = "closed success, shared between processes"
      vs_local = Bench.ratio(r[:shared], r[:gem])
      [
        row(name, :bare, r[:bare], r[:bare], target: "baseline"),
        row(name, :gem, r[:gem], r[:bare], target: "reference"),
        row(name, :shared, r[:shared], r[:bare], target: "≤ 1.1× the in-process breaker",
                                                 value: vs_local, met: vs_local <= 1.1)
      ]
    ensure
      File.delete(shared.shared_path) if shared&.shared_path && File.exist?(shared.shared_path)
    end

    # closed, `call { 1 }` with a concurrency cap (docs/concurrency.md),
    # fixed and adaptive, against the same breaker without one, in process
    # memory and in shared memory (the cap host-wide)
    def capped
      key = "bench-capped-#{Process.pid}"
      window = -> { CircuitBreaker::SlidingWindow.new(size: 100) }
      local = CircuitBreaker.new(window: window.call)
      capped = CircuitBreaker.new(window: window.call, max_concurrent: 100)
      shared = CircuitBreaker.new(window: window.call, shared: key)
      shared_capped = CircuitBreaker.new(window: window.call, shared: "#{key}-capped", max_concurrent: 100)
      adaptive = CircuitBreaker.new(window: window.call, max_concurrent: :adaptive)
      shared_adaptive = CircuitBreaker.new(window: window.call, shared: "#{key}-adaptive", max_concurrent: :adaptive)
      r = Bench.measure({
                          bare: Bench.plain("r.run { 1 }", r: Bare::Yield.new),
                          gem: Bench.plain("r.call { 1 }", r: local),
                          capped: Bench.plain("r.call { 1 }", r: capped),
                          shared: Bench.plain("r.call { 1 }", r: shared),
                          shared_capped: Bench.plain("r.call { 1 }", r: shared_capped),
                          adaptive: Bench.plain("r.call { 1 }", r: adaptive),
                          shared_adaptive: Bench.plain("r.call { 1 }", r: shared_adaptive)
                        })
      [capped, shared_capped, adaptive, shared_adaptive].each do |b|
        m = b.metrics
        check(m[:state] == :closed && m[:total] == 100 && m[:in_flight].zero? && m[:limited].zero?, "capped: #{m}")
      end
      name = "closed success with a concurrency cap"
      in_process = Bench.ratio(r[:capped], r[:gem])
      host_wide = Bench.ratio(r[:shared_capped], r[:shared])
      adaptive_in_process = Bench.ratio(r[:adaptive], r[:gem])
      adaptive_host_wide = Bench.ratio(r[:shared_adaptive], r[:shared])
      target = "≤ 1.2× the same breaker without a cap"
      [
        row(name, :bare, r[:bare], r[:bare], target: "baseline"),
        row(name, :gem, r[:gem], r[:bare], target: "reference"),
        row(name, :capped, r[:capped], r[:bare], target: target, value: in_process, met: in_process <= 1.2),
        row(name, :shared, r[:shared], r[:bare], target: "reference"),
        row(name, :shared_capped, r[:shared_capped], r[:bare], target: target, value: host_wide, met: host_wide <= 1.2),
        row(name, :adaptive, r[:adaptive], r[:bare], target: target, value: adaptive_in_process,
                                                     met: adaptive_in_process <= 1.2),
        row(name, :shared_adaptive, r[:shared_adaptive], r[:bare], target: target, value: adaptive_host_wide,
                                                                   met: adaptive_host_wide <= 1.2)
      ]
    ensure
      [shared, shared_capped, shared_adaptive].each do |b|
        File.delete(b.shared_path) if b&.shared_path && File.exist?(b.shared_path)
      end
    end

    # closed, `call { 1 }` on a fleet breaker (docs/fleet.md) with Redis up,
    # paused and down, against the same breaker without `fleet:`; then the
    # Redis load and the convergence of bench/fleet.rb
    def fleet
      require_relative "fleet"
      Bench::Fleet.rows(self)
    end

    # Net::HTTP, Redis and SQL through the adapters (docs/adapters.md)
    def adapters
      require_relative "adapters"
      Bench::Adapters.rows(self)
    end

    # closed, the block raises, the caller rescues; recorded, never trips
    def failure
      # A TimeWindow, so that min_calls is not clamped to a count window's
      # size: with error_rate_threshold 1.0 a full count window of failures
      # would trip; no streak rule either. Every failure is recorded (checked below).
      gem = CircuitBreaker.new(window: CircuitBreaker::TimeWindow.new(seconds: 600, buckets: 10),
                               error_rate_threshold: 1.0, min_calls: 1_000_000_000, consecutive_failures: nil)
      # The article trips on `>`: a rate of 1.0 never exceeds 1.0.
      article = ArticleBreaker::Breaker.new(window: ArticleBreaker::SlidingWindow.new(size: 100),
                                            error_rate_threshold: 1.0)
      body = ->(method) { "begin; r.#{method} { raise Bench::Boom, 'boom' }; rescue Bench::Boom; end" }
      runners = {
        bare: Bench.plain(body.("run"), r: Bare::Yield.new),
        article: Bench.plain(body.("call"), r: article),
        gem: Bench.plain(body.("call"), r: gem)
      }
      r = Bench.measure(runners)
      m = gem.metrics
      check(m[:state] == :closed && m[:failures] == m[:total] && m[:total].positive?, "failure: #{m}")
      gem.reset!
      runners[:gem].call(1000)
      m = gem.metrics
      check(m[:failures] == 1000 && m[:total] == 1000 && m[:state] == :closed, "failure, recorded: #{m}")
      check(article.state == :closed, "failure: article #{article.state}")
      name = "closed failure (raise, rescue)"
      met = ->(x) { Bench.ratio(x, r[:bare]) <= 1.5 }
      [
        row(name, :bare, r[:bare], r[:bare], target: "baseline"),
        row(name, :article, r[:article], r[:bare], target: "≤ 1.5× bare", met: met.(r[:article])),
        row(name, :gem, r[:gem], r[:bare], target: "≤ 1.5× bare", met: met.(r[:gem]))
      ]
    end

    # open: the caller rescues the rejection
    def rejection
      gem = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100), open_duration: 3600)
      article = ArticleBreaker::Breaker.new(window: ArticleBreaker::SlidingWindow.new(size: 100), open_duration: 3600)
      # Both trip the way they would in production: on failures.
      21.times do
        [gem, article].each do |b|
          b.call { raise Bench::Boom }
        rescue Bench::Boom, CircuitBreaker::OpenError, ArticleBreaker::OpenError
          nil
        end
      end
      check(gem.state == :open, "rejection: gem #{gem.state}")
      check(article.state == :open, "rejection: article #{article.state}")
      rejected = gem.metrics[:rejected]
      r = Bench.measure({
                          bare: Bench.plain("begin; r.run { 1 }; rescue StandardError; end", r: Bare::Raise.new),
                          article: Bench.plain("begin; r.call { 1 }; rescue ArticleBreaker::OpenError; end", r: article),
                          gem: Bench.plain("begin; r.call { 1 }; rescue CircuitBreaker::OpenError; end", r: gem)
                        })
      check(gem.state == :open && gem.metrics[:rejected] > rejected, "rejection: #{gem.metrics}")
      name = "open rejection (rescue OpenError)"
      met = ->(x) { Bench.ratio(x, r[:bare]) <= 1.0 }
      # The same 100 frames down: a bare raise captures them all; the
      # rejection's one-line backtrace does not grow (docs/performance.md).
      deep = lambda do |body, receiver|
        loop = Bench.plain(body, r: receiver)
        ->(n) { Bench.at_depth(100) { loop.call(n) } }
      end
      d = Bench.measure({
                          bare: deep.("begin; r.run { 1 }; rescue StandardError; end", Bare::Raise.new),
                          gem: deep.("begin; r.call { 1 }; rescue CircuitBreaker::OpenError; end", gem)
                        })
      deep_name = "open rejection, 100 frames deep"
      [
        row(name, :bare, r[:bare], r[:bare], target: "baseline"),
        row(name, :article, r[:article], r[:bare], target: "≤ 1.0× bare", met: met.(r[:article])),
        row(name, :gem, r[:gem], r[:bare], target: "≤ 1.0× bare", met: met.(r[:gem])),
        row(deep_name, :bare, d[:bare], d[:bare], target: "baseline"),
        row(deep_name, :gem, d[:gem], d[:bare], target: "≤ 1.0× bare", met: Bench.ratio(d[:gem], d[:bare]) <= 1.0)
      ]
    end

    # open rejection with ActiveSupport::Notifications loaded and nobody
    # subscribed: absent listeners must cost nothing (a process of its own,
    # since loading ActiveSupport changes every later scenario)
    def rejection_as
      require "active_support/notifications"
      gem = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100), open_duration: 3600)
      gem.trip!
      check(!ActiveSupport::Notifications.notifier.listening?("rejected.circuit_breaker"), "rejection_as: a subscriber")
      rejected = gem.metrics[:rejected]
      r = Bench.measure({
                          bare: Bench.plain("begin; r.run { 1 }; rescue StandardError; end", r: Bare::Raise.new),
                          gem: Bench.plain("begin; r.call { 1 }; rescue CircuitBreaker::OpenError; end", r: gem)
                        })
      check(gem.state == :open && gem.metrics[:rejected] > rejected, "rejection_as: #{gem.metrics}")
      name = "open rejection, ActiveSupport loaded, nobody subscribed"
      met = ->(x) { Bench.ratio(x, r[:bare]) <= 1.0 }
      [
        row(name, :bare, r[:bare], r[:bare], target: "baseline"),
        row(name, :gem, r[:gem], r[:bare], target: "≤ 1.0× bare", met: met.(r[:gem]))
      ]
    end

    # 4 threads sharing one breaker vs 1 thread on the same breaker
    def threads
      recv = {
        bare: [Bare::Yield.new, "r.run { 1 }"],
        article: [ArticleBreaker::Breaker.new(window: ArticleBreaker::SlidingWindow.new(size: 100)), "r.call { 1 }"],
        gem: [CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100)), "r.call { 1 }"]
      }
      variants = {}
      counts = {}
      recv.each do |impl, (r, body)|
        one = Bench.threaded(1, body, r: r)
        # Long samples: a thread keeps the GVL for up to 100 ms, so each
        # of the 4 threads must run long enough to be switched out often.
        n = Bench.calibrate(one, seconds: 2 * SAMPLE_SECONDS)
        variants[:"#{impl}_1"] = one
        variants[:"#{impl}_4"] = Bench.threaded(4, body, r: r)
        counts[:"#{impl}_1"] = counts[:"#{impl}_4"] = n
      end
      r = Bench.measure(variants, counts: counts)
      gem = recv[:gem][0]
      check(gem.state == :closed && gem.metrics[:total] == 100, "threads: #{gem.metrics}")
      name = "4 threads, one breaker, `call { 1 }`"
      %i[bare article gem].map do |impl|
        one = r[:"#{impl}_1"]
        four = r[:"#{impl}_4"]
        scaling = Bench.ratio(one, four) # (4-thread rate) / (1-thread rate), wall clock
        cpu = one.cpu_ns / four.cpu_ns
        row(name, impl, four, r[:bare_4], target: "4-thread rate ≥ 0.8× 1-thread", value: scaling,
                                          met: scaling >= 0.8, note: format("CPU time %.2f×", cpu))
      end
    end

    # reading rates and metrics on a 10,000-call window vs a 10-call window
    def rates
      sizes = [10, 10_000]
      fill = lambda do |window, size|
        size.times { |i| window.record(duration_ms: i % 7 == 0 ? 900 : 5, success: i % 10 != 0) }
        window
      end
      objs = sizes.to_h do |size|
        gem_window = CircuitBreaker::SlidingWindow.new(size: size)
        gem = CircuitBreaker.new(window: gem_window, min_calls: size)
        fill.(gem_window, size)
        check(gem.metrics[:total] == size && gem.state == :closed, "rates: #{gem.metrics}")
        article = fill.(ArticleBreaker::SlidingWindow.new(size: size), size)
        check(article.total == size, "rates: article #{article.total}")
        bare = fill.(Bare::Counts.new(size), size)
        [size, { bare: bare, article: article, gem: gem, gem_window: gem_window }]
      end
      variants = {}
      sizes.each do |size|
        o = objs[size]
        variants[:"bare_rate_#{size}"] = Bench.plain("r.error_rate", r: o[:bare])
        variants[:"article_rate_#{size}"] = Bench.plain("r.error_rate", r: o[:article])
        variants[:"gem_rate_#{size}"] = Bench.plain("r.error_rate", r: o[:gem_window])
        variants[:"bare_metrics_#{size}"] = Bench.plain("r.metrics", r: o[:bare])
        variants[:"gem_metrics_#{size}"] = Bench.plain("r.metrics", r: o[:gem])
      end
      r = Bench.measure(variants)
      rows = []
      { "rate" => ["`error_rate`", %i[bare article gem]], "metrics" => ["`metrics`", %i[bare gem]] }.each do |what, (label, impls)|
        impls.each do |impl|
          rows << row("#{label}, 10-call window", impl, r[:"#{impl}_#{what}_10"], r[:"bare_#{what}_10"], target: "reference")
        end
        impls.each do |impl|
          large = r[:"#{impl}_#{what}_10000"]
          growth = Bench.ratio(large, r[:"#{impl}_#{what}_10"])
          rows << row("#{label}, 10,000-call window", impl, large, r[:"bare_#{what}_10000"],
                      target: "≈ cost on 10 calls (≤ 1.2×)", value: growth, met: growth <= 1.2)
        end
      end
      rows << { note: "The article has no `metrics`: its breaker exposes only the window's rates." }
      rows
    end
  end
end

if $PROGRAM_NAME == __FILE__
  name = ARGV.fetch(0) { abort "usage: ruby -Ilib bench/scenarios.rb #{Bench::Scenarios::ALL.join('|')}" }
  abort "unknown scenario #{name.inspect}" unless Bench::Scenarios::ALL.include?(name)
  rows = Bench::Scenarios.public_send(name)
  $stdout.puts JSON.generate(rows)
end
