# frozen_string_literal: true

# bin/demo --fleet: several processes as hosts against the flaky upstream,
# first each on its own breaker, then with `fleet:` on a real redis-server,
# which is paused (SIGSTOP) midway. Prints what reached the failing upstream
# and writes an HTML report: one row of state bands per host and run, the
# upstream's phases, and when Redis was paused. docs/fleet.md explains it.
#
#   ruby -Ilib examples/fleet_story.rb [--fast] [--out PATH] [--hosts N]

require "optparse"
require "net/http"
require "cgi"
require "fileutils"
require "circuit_breaker"
require_relative "support/flaky_upstream"
require_relative "../spec/support/redis_server"

module FleetStory
  STATE_COLORS = { closed: "#d9f2df", open: "#f8d0d0", half_open: "#fbeac2", forced_open: "#f0b0b0",
                   disabled: "#e4e4e4" }.freeze

  module_function

  def run(scale:, hosts:, out:)
    abort "bin/demo --fleet: redis-server is not installed (bin/setup installs it)" unless RedisServer.available?

    server = RedisServer.start
    runs = [["each host alone", nil], ["fleet: on Redis", server]].map do |label, redis|
      upstream = CircuitBreaker::Examples::FlakyUpstream.start(
        scale: scale, healthy: 1, error_burst: 8, slow: 0, recovering: 4, recovered: 3
      )
      pause = redis && [upstream.phases[0][1] + 3.0 * scale, 1.5 * scale] # in the error burst
      rows = play(upstream, redis, hosts, pause)
      counts = upstream.counts
      upstream.stop
      { label: label, rows: rows, phases: phase_spans(upstream), pause: pause, counts: counts }
    end
    server.stop
    runs.each do |r|
      opened = r[:rows].map { |row| row[:samples].find { |_, s, _| s == :open }&.first }.compact
      puts format("%-16s %4d calls reached the upstream during its error burst; every host open %s s into it%s",
                  r[:label], r[:counts][:error_burst],
                  opened.size == r[:rows].size ? format("%.2f", opened.max - r[:phases][1][1]) : "never",
                  r[:pause] ? format("; Redis paused %.1f s at %.1f s", r[:pause][1], r[:pause][0]) : "")
    end
    FileUtils.mkdir_p(File.dirname(out))
    File.write(out, html(runs))
    puts "report: #{out}"
  end

  # Forks `hosts` processes calling the upstream; each returns its samples
  # [t, state, fleet status] every 50 ms.
  def play(upstream, redis, hosts, pause)
    pids = []
    gate_r, gate_w = IO.pipe
    readers = Array.new(hosts) do |i|
      r, w = IO.pipe
      pids << fork do
        r.close
        gate_w.close
        w.write(Marshal.dump(host(upstream, redis, i, -> { w.write("r") && gate_r.read })))
        w.close
        exit!(0)
      end
      w.close
      r
    end
    gate_r.close
    readers.each { |r| r.read(1) } # every host connected (or given up waiting)
    upstream.restart_script
    gate_w.close # go
    if pause
      sleep [pause[0] - upstream.elapsed, 0].max
      redis.pause
      sleep pause[1]
      redis.resume
    end
    readers.map { |r| { samples: Marshal.load(r.read) } } # rubocop:disable Security/MarshalLoad
  ensure
    pids&.each { |pid| Process.wait(pid) } # not waitall: redis-server is a child too
  end

  def host(upstream, redis, index, ready)
    # Quiet hosts (5 calls/s each): alone, each needs min_calls of its own
    # before it may judge; the fleet judges their sum.
    options = { name: "fleet-story", window: CircuitBreaker::SlidingWindow.new(size: 20), min_calls: 20,
                open_duration: 2.0, half_open_calls: 4 }
    options.update(fleet: redis.url, fleet_interval: 0.1) if redis
    breaker = CircuitBreaker.new(**options)
    uri = URI("#{upstream.url}/api/orders")
    http = Net::HTTP.start(uri.host, uri.port, open_timeout: 1, read_timeout: 2)
    limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    sleep 0.02 until !redis || breaker.metrics[:fleet] == :connected ||
                     Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
    ready.call
    upstream.restart_script # this process's copy of the script clock: the parent restarts its own now
    samples = []
    next_sample = 0.0
    rng = Random.new(index)
    until upstream.finished?
      t = upstream.elapsed
      if t >= next_sample
        samples << [t, breaker.state, breaker.metrics[:fleet]]
        next_sample = t + 0.05
      end
      begin
        breaker.call do
          res = http.get(uri.path)
          raise "HTTP #{res.code}" if res.code.to_i >= 500
        end
      rescue RuntimeError, CircuitBreaker::OpenError, SystemCallError, IOError, Net::ReadTimeout
        nil
      end
      sleep 0.2 * (0.5 + rng.rand)
    end
    samples
  end

  def phase_spans(upstream)
    t = 0.0
    upstream.phases.map { |name, s| [name, t, t += s] }
  end

  # ---- the report ------------------------------------------------------------
  W = 1000
  ROW = 16
  LEFT = 150

  def html(runs)
    duration = runs.map { |r| r[:phases].last[2] }.max
    x = ->(t) { LEFT + ((W - LEFT - 10) * t / duration) }
    svgs = runs.map do |r|
      height = 40 + (r[:rows].size * (ROW + 4))
      parts = []
      r[:phases].each do |name, from, to|
        next if to <= from

        parts << %(<text x="#{x.(from) + 2}" y="14" font-size="11">#{name}</text>)
        parts << %(<line x1="#{x.(from)}" y1="0" x2="#{x.(from)}" y2="#{height}" stroke="#999"/>)
      end
      if r[:pause]
        from, len = r[:pause]
        parts << %(<rect x="#{x.(from)}" y="20" width="#{x.(from + len) - x.(from)}" height="#{height - 20}" ) +
                 %(fill="none" stroke="#333" stroke-dasharray="4,3"/>)
        parts << %(<text x="#{x.(from) + 2}" y="#{height - 4}" font-size="11">Redis paused</text>)
      end
      r[:rows].each_with_index do |row, i|
        y = 24 + (i * (ROW + 4))
        parts << %(<text x="4" y="#{y + 12}" font-size="12">host #{i + 1}</text>)
        row[:samples].each_cons(2) do |(t0, state, _), (t1, _, _)|
          parts << %(<rect x="#{x.(t0)}" y="#{y}" width="#{[x.(t1) - x.(t0), 0.5].max}" height="#{ROW}" ) +
                   %(fill="#{STATE_COLORS.fetch(state)}"/>)
        end
      end
      <<~SVG
        <h2>#{CGI.escapeHTML(r[:label])}: #{r[:counts][:error_burst]} calls reached the upstream during its error burst</h2>
        <svg xmlns="http://www.w3.org/2000/svg" width="#{W}" height="#{height}">#{parts.join}</svg>
      SVG
    end
    legend = STATE_COLORS.map { |s, c| %(<span style="background:#{c};padding:2px 8px">#{s}</span>) }.join(" ")
    <<~HTML
      <!doctype html>
      <html><head><meta charset="utf-8"><title>circuit_breaker fleet demo</title></head>
      <body style="font-family:sans-serif">
      <h1>One breaker across hosts (docs/fleet.md)</h1>
      <p>#{runs.first[:rows].size} processes as hosts call one flaky upstream. #{legend}</p>
      #{svgs.join}
      </body></html>
    HTML
  end
end

if $PROGRAM_NAME == __FILE__
  options = { scale: 1.0, hosts: 6, out: File.expand_path("../tmp/demo-fleet-report.html", __dir__) }
  OptionParser.new do |o|
    o.banner = "usage: examples/fleet_story.rb [--fast] [--out PATH] [--hosts N]"
    o.on("--fast", "the same story in half the time") { options[:scale] = 0.5 }
    o.on("--out PATH", "where to write the HTML report") { |v| options[:out] = File.expand_path(v) }
    o.on("--hosts N", Integer, "processes playing hosts (2..16, default 6)") { |v| options[:hosts] = v }
  end.parse!
  abort "--hosts must be in 2..16" unless (2..16).cover?(options[:hosts])
  FleetStory.run(**options)
end
