# frozen_string_literal: true

# bin/demo's Ruby part (bin/demo installs what it needs, builds the
# extension, then runs this file with its arguments).
#
# The breaker protecting a client from a flaky upstream, live.
#
# A local HTTP server plays a script (healthy, a burst of 500s, a slow
# phase, a recovery with a falling error share, healthy again) while a few
# client threads call it through Faraday and CircuitBreaker::Faraday. One
# line per tick shows the upstream's phase, the breaker's state, what its
# window sees and how much traffic it let through; at the end an HTML report
# with a chart is written.
#
#   bin/demo                    # ~40 s
#   bin/demo --fast             # the same story in ~10 s (or DEMO_SCALE=0.25)
#   bin/demo --out PATH         # where the report goes (default tmp/demo-report.html)
#   bin/demo --threads N        # client threads (default 4)
#   bin/demo --serve PORT       # also serve the status page on 127.0.0.1:PORT while it runs (0: any port)
#   bin/demo --fleet [--fast]   # several processes as hosts, alone and with fleet: (examples/fleet_story.rb)
require "optparse"

if ARGV.delete("--fleet")
  exec(RbConfig.ruby, "-I", File.expand_path("../lib", __dir__), File.expand_path("fleet_story.rb", __dir__), *ARGV)
end

ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift File.join(ROOT, "lib")
begin
  require "circuit_breaker"
  require "circuit_breaker/faraday"
  require_relative "support/flaky_upstream"
  require_relative "support/demo_report"
rescue LoadError => error
  abort "bin/demo: #{error.message} (run bin/demo, which installs what the demo needs and builds the extension)"
end

options = {
  scale: Float(ENV.fetch("DEMO_SCALE", "1.0")),
  out: File.join(ROOT, "tmp", "demo-report.html"),
  threads: 4,
  color: $stdout.tty? && ENV["NO_COLOR"].to_s.empty?
}
OptionParser.new do |o|
  o.banner = "usage: bin/demo [--fast] [--scale X] [--out PATH] [--threads N] [--no-color]"
  o.on("--fast", "the same story in a quarter of the time") { options[:scale] = 0.25 }
  o.on("--scale X", Float, "multiply every phase duration by X (default 1.0, or DEMO_SCALE)") { |v| options[:scale] = v }
  o.on("--out PATH", "where to write the HTML report") { |v| options[:out] = File.expand_path(v) }
  o.on("--threads N", Integer, "client threads (1..16, default 4)") { |v| options[:threads] = v }
  o.on("--[no-]color", "ANSI colours (default: when stdout is a terminal)") { |v| options[:color] = v }
  o.on("--serve PORT", Integer, "serve the status page on 127.0.0.1:PORT while the demo runs (0: any free port)") do |v|
    options[:serve] = v
  end
end.parse!
scale = options[:scale]
abort "bin/demo: --scale must be in (0, 2], got #{scale}" unless scale.positive? && scale <= 2
abort "bin/demo: --threads must be in 1..16" unless (1..16).cover?(options[:threads])
abort "bin/demo: --serve must be a port in 0..65535" unless options[:serve].nil? || (0..65_535).cover?(options[:serve])

SLOW_THRESHOLD_MS = 200
TICK = [0.5 * scale, 0.1].max # seconds between timeline lines
SAMPLE = TICK / 20            # seconds between looks at the breaker (chart, ramp stages)
THINK = 0.04 * [scale, 1.0].min # each client thread's pause between calls

upstream = CircuitBreaker::Examples::FlakyUpstream.new(scale: scale, slow_ms: 350)
window = CircuitBreaker::SlidingWindow.new(size: 50, slow_threshold_ms: SLOW_THRESHOLD_MS)
config = {
  window: window, name: "orders", min_calls: 10,
  error_rate_threshold: 0.5, slow_rate_threshold: 0.5,
  open_duration: 3.0 * scale,
  ramp: [0.1, 0.3, 0.6, 1.0], half_open_calls: 10, advance_rate: 0.9, reopen_rate: 0.5,
  # Each stage lasts at least this long: the seeds' observation window, so
  # the ramp shows stages that last however fast the probes pass.
  min_stage_duration: 0.6 * scale
}
breaker = CircuitBreaker.new(**config)

# ---- the status page (--serve) ----------------------------------------------
# CircuitBreaker::Dashboard (docs/operating.md) on WEBrick; its buttons act
# on the demo's breaker, from this machine only.
server = nil
if options[:serve]
  begin
    require "circuit_breaker/dashboard"
    require "rack"
    require_relative "support/webrick_rack"
    handler = CircuitBreaker::Examples.webrick_handler
  rescue LoadError => error
    abort "bin/demo: --serve needs Rack's WEBrick handler: Rack 2's, or rackup's with Rack 3 (#{error.message})"
  end
  dashboard = CircuitBreaker::Dashboard.new(breakers: { breaker.name => breaker }, refresh: 1,
                                            authorize: ->(request) { %w[127.0.0.1 ::1].include?(request.ip) })
  server = WEBrick::HTTPServer.new(BindAddress: "127.0.0.1", Port: options[:serve],
                                   Logger: WEBrick::Log.new(File::NULL), AccessLog: [])
  server.mount("/", handler, dashboard)
  server_thread = Thread.new { server.start }
end

# ---- what happens, recorded -------------------------------------------------
clock = -> { upstream.elapsed } # seconds into the upstream's script
events = Queue.new # transitions, in the order they happened
listen = lambda do
  breaker.on_state_change do |e|
    events << { t: clock.call, from: e.from, to: e.to, reason: e.reason, phase: upstream.phase }
  end
end

lock = Mutex.new
tick_counts = Hash.new(0)  # this tick's calls, by outcome
total_counts = Hash.new(0) # the whole run's
count = lambda do |*keys|
  lock.synchronize do
    keys.each do |k|
      tick_counts[k] += 1
      total_counts[k] += 1
    end
  end
end

# ---- the clients ------------------------------------------------------------
stop = false
deadline = nil
ready = Queue.new
go = Queue.new
start_clients = lambda do
  Array.new(options[:threads]) do |i|
    Thread.new do
      Thread.current.name = "client-#{i}"
      conn = Faraday.new(upstream.url) do |f|
        f.use CircuitBreaker::Faraday, breaker: breaker
        f.options.timeout = 2
        f.options.open_timeout = 1
        f.adapter :net_http
      end
      # A Faraday connection's first request is slow (~60 ms here): pay it
      # before the story starts, while the breaker is disabled.
      begin
        conn.get("/status/204")
      rescue Faraday::Error
        nil
      ensure
        ready << i
      end
      go.pop
      rng = Random.new(i)
      200_000.times do # bounded in count as well as in time
        break if stop || clock.call > deadline

        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        begin
          response = conn.get("/api/orders")
          ms = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000
          keys = %i[attempted admitted]
          keys << :errors if response.status >= 500
          keys << :slow if ms >= SLOW_THRESHOLD_MS
          count.call(*keys)
        rescue CircuitBreaker::OpenError
          count.call(:attempted, :rejected)
        rescue Faraday::Error
          count.call(:attempted, :admitted, :errors)
        end
        sleep(THINK * (0.5 + rng.rand))
      end
    rescue StandardError => e
      warn "client-#{i}: #{e.class}: #{e.message}"
    end
  end
end

# ---- the timeline -----------------------------------------------------------
color = options[:color]
paint = ->(text, code) { color ? "\e[#{code}m#{text}\e[0m" : text }
STATE_CODES = { closed: "32", open: "31;1", half_open: "33", forced_open: "31", disabled: "90" }.freeze
pct = ->(x) { x.nil? ? "   –" : format("%3d%%", (x * 100).round) }
bar = lambda do |share, width = 20|
  filled = (share.clamp(0.0, 1.0) * width).round
  full, empty = color ? ["█", "░"] : ["#", "."]
  "[#{full * filled}#{empty * (width - filled)}]"
end
# `shares`: the ramp shares seen during the tick (a stage can be shorter than a tick).
state_text = lambda do |m, shares = []|
  shares = (shares + [m[:admit_share]]).uniq if m[:state] == :half_open
  text = case m[:state]
         when :half_open then "half-open #{shares.map { |s| (s * 100).round }.join('→')}%"
         when :open then "OPEN"
         else m[:state].to_s
         end
  paint.call(text.ljust(21), STATE_CODES.fetch(m[:state], "0"))
end
describe_event = lambda do |e|
  verb = { open: "opened", half_open: "half-open", closed: "closed", forced_open: "forced open" }.fetch(e[:to], e[:to])
  why = {
    error_rate: "error rate crossed #{(config[:error_rate_threshold] * 100).round}%",
    slow_call_rate: "slow-call rate crossed #{(config[:slow_rate_threshold] * 100).round}%",
    consecutive_failures: "failures in a row",
    probe_failed: "probes failed",
    probes_passed: "every ramp stage passed",
    cool_down_elapsed: "open_duration elapsed, probing",
    half_open_timeout: "half-open timed out"
  }.fetch(e[:reason], e[:reason].to_s)
  line = format("  %6.2fs  ── %s (%s) during %s", e[:t], verb, why, e[:phase].to_s.tr("_", " "))
  paint.call(line, STATE_CODES.fetch(e[:to], "0"))
end

interrupted = false
trap("INT") { interrupted = true }
upstream.start
breaker.disable!
clients = start_clients.call
options[:threads].times { ready.pop }
breaker.reset! # closed, window empty: the warm-up requests leave no trace
listen.call

puts "bin/demo: breaker #{breaker.name.inspect} in front of a flaky upstream at #{upstream.url} " \
     "(#{options[:threads]} client threads, scale #{scale})"
puts "  script: " + upstream.phases.map { |n, s| "#{n.to_s.tr('_', ' ')} #{s.round(1)}s" }.join(" → ")
puts "  status page: http://127.0.0.1:#{server.config[:Port]}/ (JSON /status.json, Prometheus /metrics)" if server
puts "  ramp #{config[:ramp].map { |r| "#{(r * 100).round}%" }.join(' → ')}, " \
     "#{config[:half_open_calls]} probes a stage, open #{config[:open_duration].round(2)}s, " \
     "slow ≥ #{SLOW_THRESHOLD_MS} ms"
puts
puts "  err, slow: the window's rates (in brackets while it is empty, open or half-open: the rates that opened it);"
puts "  calls, fails: the breaker's counters since creation"
puts paint.call(format("  %6s  %-12s %-21s %6s %6s %6s %6s %6s %6s  %s", "t", "upstream", "breaker", "err", "slow",
                       "admit", "spared", "calls", "fails", "progress"), "1")

samples = []
ticks = []
all_events = []
script = upstream.duration
grace = [3.0, script * 0.2].max # after the script, wait (bounded) for the breaker to close
deadline = script + grace
upstream.restart_script # the story starts now
options[:threads].times { go << true }
printed = 0
tick_shares = []
last_stage = nil
stage_lines = []

next_tick = TICK
next_sample = 0.0
loop do
  now = clock.call
  if now >= next_sample
    m = breaker.metrics
    samples << { t: now, state: m[:state], stage: m[:stage], admit_share: m[:admit_share],
                 error_rate: m[:error_rate], slow_call_rate: m[:slow_call_rate], total: m[:total] }
    if m[:state] == :half_open
      tick_shares << m[:admit_share] unless tick_shares.include?(m[:admit_share])
      # A ramp stage passed (not a transition: no event; seen by looking).
      if last_stage && m[:stage] > last_stage
        line = format("  %6.2fs  ·· ramp: %d%% of calls admitted", now, (m[:admit_share] * 100).round)
        stage_lines << [now, paint.call(line, "33")]
      end
      last_stage = m[:stage]
    else
      last_stage = nil
    end
    next_sample += SAMPLE
  end
  all_events << events.pop until events.empty?
  if now >= next_tick
    m = breaker.metrics
    tick = lock.synchronize { tick_counts.dup.tap { tick_counts.clear } }
    ticks << { t: now, attempted: tick[:attempted], admitted: tick[:admitted], rejected: tick[:rejected] }
    (all_events.drop(printed).map { |e| [e[:t], describe_event.call(e)] } + stage_lines)
      .sort_by(&:first).each { |_, text| puts text }
    printed = all_events.size
    stage_lines.clear
    admitted = tick[:attempted].zero? ? nil : tick[:admitted].to_f / tick[:attempted]
    # An open breaker's window is empty: show what opened it instead.
    rate = lambda do |key, tripped_key|
      if m[:total].positive? then pct.call(m[key])
      elsif m[tripped_key] then "(#{pct.call(m[tripped_key]).strip})"
      else
        "  –"
      end
    end
    puts format("  %6.1f  %-12s %s %6s %6s %6s %6d %6d %6d  %s",
                now, upstream.phase(now).to_s.tr("_", " "), state_text.call(m, tick_shares),
                rate.call(:error_rate, :tripped_error_rate), rate.call(:slow_call_rate, :tripped_slow_call_rate),
                pct.call(admitted), tick[:rejected], m[:calls], m[:failures_total], bar.call([now / script, 1.0].min))
    next_tick += TICK
    tick_shares = []
  end
  break if interrupted
  break if now >= script && breaker.state == :closed
  break if now >= deadline

  sleep([[next_sample, next_tick].min - clock.call, 0.005].max)
end
stop = true
clients.each { |t| t.join(5) }
elapsed = clock.call
all_events << events.pop until events.empty?
all_events.drop(printed).each { |e| puts describe_event.call(e) }
reached = upstream.counts.values.sum # the script's route only (not the warm-up)
upstream.stop
if server
  server.shutdown
  server_thread.join(10)
end

# ---- the summary and the report ---------------------------------------------
by_state = all_events.group_by { |e| e[:to] }.transform_values(&:size)
spared = total_counts[:rejected]
final = breaker.metrics
summary = {
  "run" => format("%.1f s, %d client threads", elapsed, options[:threads]),
  "calls attempted" => total_counts[:attempted],
  "calls that reached the upstream" => "#{total_counts[:admitted]} (the upstream counted #{reached})",
  "calls spared (rejected, never sent)" => spared,
  "errors seen by the client" => total_counts[:errors],
  "slow calls seen by the client" => total_counts[:slow],
  "transitions" => all_events.size,
  "opened" => by_state.fetch(:open, 0),
  "half-open" => by_state.fetch(:half_open, 0),
  "closed" => by_state.fetch(:closed, 0),
  "final state" => final[:state],
  "breaker counters (metrics)" => "calls #{final[:calls]}, successes #{final[:successes]}, " \
                                  "failures #{final[:failures_total]}, slow #{final[:slow_total]}, " \
                                  "rejected #{final[:rejected]}, opened #{final[:opened]} (#{final[:counters]})"
}
config_rows = {
  "window" => "SlidingWindow(size: 50, slow_threshold_ms: #{SLOW_THRESHOLD_MS})",
  "min_calls" => config[:min_calls],
  "error_rate_threshold" => config[:error_rate_threshold],
  "slow_rate_threshold" => config[:slow_rate_threshold],
  "open_duration" => "#{config[:open_duration].round(2)} s",
  "ramp" => config[:ramp].inspect,
  "half_open_calls" => config[:half_open_calls],
  "advance_rate / reopen_rate" => "#{config[:advance_rate]} / #{config[:reopen_rate]}",
  "upstream script" => upstream.phases.map { |n, s| "#{n} #{s.round(1)}s" }.join(", "),
  "slow phase latency" => "#{upstream.slow_ms} ms"
}
t = 0.0
phase_spans = upstream.phases.reject { |_, s| s.zero? }.map { |name, s| [name, t, (t += s)] }
phase_spans.last[2] = elapsed if elapsed > t # after the script the upstream stays healthy
report = CircuitBreaker::Examples::DemoReport.new(
  title: "circuit_breaker demo — breaker #{breaker.name.inspect} vs a flaky upstream",
  phases: phase_spans, samples: samples, ticks: ticks, events: all_events, summary: summary, config: config_rows
)
path = report.write(options[:out])

puts
puts paint.call("Summary", "1")
printf("  %-38s %s\n", "calls attempted", total_counts[:attempted])
printf("  %-38s %s\n", "reached the upstream", "#{total_counts[:admitted]} (upstream counted #{reached})")
printf("  %-38s %s\n", "spared by the breaker", "#{spared} calls rejected without reaching the upstream")
printf("  %-38s %s\n", "transitions", "#{all_events.size}: opened #{by_state.fetch(:open, 0)}×, " \
                                      "half-open #{by_state.fetch(:half_open, 0)}×, closed #{by_state.fetch(:closed, 0)}×")
printf("  %-38s %s\n", "final state", final[:state])
printf("  %-38s %s\n", "breaker counters", summary["breaker counters (metrics)"])
puts "  report: #{path}"
exit(interrupted ? 130 : 0)
