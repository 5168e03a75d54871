# frozen_string_literal: true

# `rake drill` (docs/development.md, "rake drill"): the outage drill. For
# each setup, a real Puma cluster (bench/drill/puma.rb: 2 workers × 4
# threads, preload_app!) serves bench/drill/config.ru, whose requests call
# a real upstream on 127.0.0.1 (bench/drill/upstream.rb) over Net::HTTP
# with a 1 s read timeout, through the setup's breaker
# (bench/drill/setups.rb). The upstream is healthy, then answers 500, then
# hangs, then is healthy again; a load generator sends about DRILL_RATE
# requests a second on a fixed schedule (open loop, bounded in count and
# time) and prints, per setup: the failing calls that reached the upstream,
# the requests that waited for the read timeout, p50/p99 latency per
# phase, the seconds from a healthy upstream to full traffic (every 1 s
# window from then on above 95 % success), and the 503s after recovery.
#
#   ruby bench/drill/run.rb [SETUP...]   # default: every setup
#   DRILL_PHASES=10,20,20,40             # seconds of each phase (the default)
#   DRILL_RATE=100 DRILL_RUNS=1
#   DRILL_SOURCES=DIR                    # where the peers' git repositories are
#
# Setups: process, host, fleet, recommended (ours), stoplight, semian,
# circuitbox (the peers, loaded from their git repositories at run time:
# DIR/bolshakov+stoplight/repo, DIR/Shopify+semian/repo,
# DIR/yammer+circuitbox/repo, each at its newest release that supports this
# Ruby; a peer whose repository is missing is skipped and said so).

$stdout.sync = true

require "etc"
require "fileutils"
require "json"
require "net/http"
require "rbconfig"
require "rubygems"
require "socket"
require "tmpdir"
require_relative "../../spec/support/db_servers"
require_relative "../../spec/support/redis_server"

module Drill
  ROOT = File.expand_path("../..", __dir__)
  PHASES = %w[healthy errors hanging recovered].freeze
  OURS = %w[process host fleet recommended].freeze
  PEERS = { "stoplight" => "bolshakov+stoplight", "semian" => "Shopify+semian",
            "circuitbox" => "yammer+circuitbox" }.freeze
  CLIENT_TIMEOUT = 10 # seconds a load request waits for the app
  CLIENTS = 128       # load threads: the schedule lags only past this many requests in flight
  HANG = 3            # seconds the hanging upstream holds a request (past the 1 s read timeout)
  DEADLINE = 60       # seconds to boot the app, and to drain after the last request

  Result = Struct.new(:setup, :description, :upstream, :requests, :lengths, keyword_init: true)

  module_function

  def main(argv)
    setups = argv.empty? ? OURS + PEERS.keys : argv
    unknown = setups - OURS - PEERS.keys
    abort "drill: unknown setup(s) #{unknown.join(', ')} (known: #{(OURS + PEERS.keys).join(', ')})" unless unknown.empty?
    lengths = ENV.fetch("DRILL_PHASES", "10,20,20,40").split(",").map { |s| Float(s) }
    abort "drill: DRILL_PHASES needs 4 lengths" unless lengths.size == 4 && lengths.all?(&:positive?)
    rate = Float(ENV.fetch("DRILL_RATE", "100"))
    runs = Integer(ENV.fetch("DRILL_RUNS", "1"))
    puts "Ruby #{RUBY_DESCRIPTION}, Puma #{puma_version}, #{Etc.nprocessors} CPUs, load average #{loadavg}"
    puts "phases #{PHASES.zip(lengths).map { |p, l| "#{p} #{l.round(1)} s" }.join(' → ')}, " \
         "#{rate.round} requests/s, #{runs} run(s) per setup"
    results = []
    Dir.mktmpdir("drill-") do |tmp|
      setups.each do |setup|
        env = setup_env(setup, tmp)
        if env.is_a?(String)
          puts "#{setup}: skipped, #{env}"
          next
        end
        runs.times do |i|
          result = run_once(setup, env, lengths, rate, tmp, "#{setup}-#{i}")
          results << result
          puts row(result)
        end
      end
    end
    puts
    puts table(results)
    puts
    puts noise
  end

  def puma_version
    `puma --version 2>/dev/null`[/[\d.]+/] || "missing"
  end

  def loadavg
    File.read("/proc/loadavg").split.first(3).join(" ")
  end

  # The environment of the app's process for `setup`, or why it is skipped.
  def setup_env(setup, tmp)
    env = { "DRILL_SETUP" => setup, "RUBYLIB" => File.join(ROOT, "lib") }
    return env if OURS.include?(setup)

    lib = peer_lib(setup, tmp)
    return lib unless lib.is_a?(Array)

    env["RUBYLIB"] = (lib + [env["RUBYLIB"]]).join(File::PATH_SEPARATOR)
    # Semian's circuit breaker without its sysv-semaphore C extension (the
    # bulkhead, turned off under threads by its README).
    env["SEMIAN_SEMAPHORES_DISABLED"] = "1" if setup == "semian"
    env
  end

  # The peer's lib/ extracted from its git repository at its newest release
  # whose gemspec admits this Ruby, plus a shim directory when needed.
  def peer_lib(setup, tmp)
    sources = ENV.fetch("DRILL_SOURCES", "/work/.mirror")
    git = File.join(sources, PEERS.fetch(setup), "repo")
    return "no repository at #{git} (DRILL_SOURCES)" unless File.directory?(git)

    tag = newest_release(git, setup)
    return "no release of #{setup} in #{git} supports Ruby #{RUBY_VERSION}" unless tag

    dir = File.join(tmp, "#{setup}-#{tag}")
    FileUtils.mkdir_p(dir)
    system("git --git-dir=#{git} archive #{tag} lib | tar -x -C #{dir}", exception: true)
    puts "#{setup}: #{tag} from #{git}"
    [File.join(dir, "lib")] + shims(setup, tmp)
  end

  def newest_release(git, name)
    tags = `git --git-dir=#{git} tag`.split.select { |t| t.match?(/\Av\d+(\.\d+)*\z/) }
    tags.sort_by { |t| Gem::Version.new(t.delete_prefix("v")) }.reverse.find do |tag|
      spec = `git --git-dir=#{git} show #{tag}:#{name}.gemspec 2>/dev/null`
      requirement = spec[/required_ruby_version\s*=\s*["']([^"']+)["']/, 1]
      requirement && Gem::Requirement.new(requirement).satisfied_by?(Gem::Version.new(RUBY_VERSION))
    end
  end

  # Stoplight 4 requires redlock (not packaged by Debian) when it loads its
  # Redis store, which the drill does not use (its default store is in
  # memory): a stand-in that refuses to be used.
  def shims(setup, tmp)
    return [] unless setup == "stoplight" && !system(RbConfig.ruby, "-e", "require 'redlock'", err: File::NULL)

    dir = File.join(tmp, "shims")
    FileUtils.mkdir_p(dir)
    File.write(File.join(dir, "redlock.rb"), <<~RUBY)
      # The drill's stand-in: Stoplight's Redis store is not used.
      module Redlock
        class Client
          def initialize(*)
            raise NotImplementedError, "redlock is not installed (the drill uses Stoplight's memory store)"
          end
        end
      end
    RUBY
    [dir]
  end

  def run_once(setup, env, lengths, rate, tmp, id)
    dir = File.join(tmp, id)
    FileUtils.mkdir_p(dir)
    redis = RedisServer.start if setup == "fleet"
    upstream_port_file = File.join(dir, "upstream.port")
    upstream = Process.spawn(RbConfig.ruby, File.join(__dir__, "upstream.rb"), upstream_port_file,
                             *lengths.map(&:to_s), HANG.to_s, pgroup: true, out: File::NULL)
    wait_for("the upstream") { File.exist?(upstream_port_file) }
    upstream_port = Integer(File.read(upstream_port_file))
    port = DbServers.free_port
    log = File.join(dir, "puma.log")
    app_env = env.merge("DRILL_PORT" => port.to_s, "DRILL_UPSTREAM" => "http://127.0.0.1:#{upstream_port}/",
                        "DRILL_NAME" => "drill-#{Process.pid}-#{id}", "RAILS_ENV" => nil, "APP_ENV" => nil,
                        "RACK_ENV" => nil)
    app_env["DRILL_REDIS_URL"] = redis.url if redis
    puma = Process.spawn(app_env, "puma", "-C", File.join(__dir__, "puma.rb"),
                         pgroup: true, in: File::NULL, %i[out err] => log)
    begin
      wait_for("Puma's 2 workers (#{log})") do
        abort "drill: Puma exited:\n#{File.read(log)}" if Process.wait(puma, Process::WNOHANG)
        File.read(log).scan(/Worker \d+ \(PID: \d+\) booted/).size >= 2 && get(port, "/ready")&.code == "200"
      end
      description = File.read(log)[/drill app: (.*)$/, 1]
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.5
      get(upstream_port, "/__start?t0=#{t0}")
      requests = load(port, t0, lengths.sum, rate)
      counts = JSON.parse(get(upstream_port, "/__stats").body)
      Result.new(setup: setup, description: description, upstream: counts, requests: requests, lengths: lengths)
    ensure
      stop(puma)
      stop(upstream)
      redis&.stop
    end
  end

  # Sends `duration × rate` requests, request i at t0 + i / rate, from a
  # pool of CLIENTS threads; a request's latency counts from its scheduled
  # time, so a lagging schedule shows in it. Returns [time, status, latency]
  # per request (status 0: no answer within CLIENT_TIMEOUT).
  def load(port, t0, duration, rate)
    count = (duration * rate).floor
    queue = Queue.new
    count.times { |i| queue << i }
    queue.close
    results = Array.new(count)
    deadline = t0 + duration + DEADLINE
    threads = Array.new(CLIENTS) do
      Thread.new do
        while (i = queue.pop)
          at = t0 + (i / rate)
          pause = at - Process.clock_gettime(Process::CLOCK_MONOTONIC)
          sleep pause if pause.positive?
          status = begin
            Integer(get(port, "/", timeout: CLIENT_TIMEOUT).code)
          rescue StandardError
            0
          end
          results[i] = [i / rate, status, Process.clock_gettime(Process::CLOCK_MONOTONIC) - at]
        end
      end
    end
    threads.each { |t| t.join([deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max) }
    threads.each(&:kill)
    results.compact
  end

  def get(port, path, timeout: 2)
    Net::HTTP.start("127.0.0.1", port, open_timeout: timeout, read_timeout: timeout) { |http| http.get(path) }
  rescue StandardError
    nil
  end

  def wait_for(what)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + DEADLINE
    until yield
      abort "drill: #{what} not ready within #{DEADLINE} s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.1
    end
  end

  def stop(pid)
    Process.kill("TERM", -pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
    sleep 0.1 until Process.wait(pid, Process::WNOHANG) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    return if $?&.pid == pid

    Process.kill("KILL", -pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  # The figures of one run.
  def figures(result)
    lengths = result.lengths
    starts = lengths.each_index.map { |i| lengths.first(i).sum }
    recovered_at = starts[3]
    by_phase = result.requests.group_by { |t, _, _| PHASES[starts.rindex { |s| t >= s }] }
    latency = PHASES.to_h do |phase|
      ms = (by_phase[phase] || []).map { |_, _, l| l * 1000 }.sort
      [phase, ms.empty? ? nil : [percentile(ms, 0.5), percentile(ms, 0.99)]]
    end
    after = result.requests.select { |t, _, _| t >= recovered_at }
    { failing: result.upstream.fetch("errors", 0), hung: result.requests.count { |_, s, _| s == 504 },
      latency: latency, recovery: recovery(after, recovered_at, recovered_at + lengths[3]),
      rejected_after: after.count { |_, s, _| s == 503 },
      lost: result.requests.count { |_, s, _| s.zero? } }
  end

  def percentile(sorted, q)
    sorted[[(q * sorted.size).ceil - 1, 0].max]
  end

  # Seconds from `from` to the end of the last 1 s window (in steps of
  # 0.1 s) under 95 % success; nil when the run ended under it.
  def recovery(requests, from, to)
    last_bad = nil
    start = from
    while start + 1 <= to + 1e-9
      window = requests.select { |t, _, _| t >= start && t < start + 1 }
      ok = window.count { |_, s, _| s == 200 }
      last_bad = start if window.empty? || ok < 0.95 * window.size
      start += 0.1
    end
    return 0.0 if last_bad.nil?
    return nil if last_bad + 1 > to - 1

    last_bad + 1 - from
  end

  def row(result)
    f = figures(result)
    "#{result.setup}: #{result.description}: #{f[:failing]} failing calls reached the upstream, " \
      "#{f[:hung]} waited for the timeout, recovery #{fmt_recovery(f[:recovery], result.lengths[3])}, " \
      "#{f[:rejected_after]} 503s after recovery#{", #{f[:lost]} unanswered" if f[:lost].positive?}"
  end

  def fmt_recovery(seconds, length)
    seconds ? format("%.1f s", seconds) : "> #{(length - 1).round} s"
  end

  def table(results)
    header = ["setup", "failing calls reaching the upstream", "waited for the timeout",
              *PHASES.map { |p| "p50/p99 ms, #{p}" }, "healthy → 95 %", "503s after recovery"]
    rows = results.map do |r|
      f = figures(r)
      [r.setup, f[:failing], f[:hung],
       *PHASES.map { |p| f[:latency][p] ? f[:latency][p].map { |x| x.round.to_s }.join(" / ") : "—" },
       fmt_recovery(f[:recovery], r.lengths[3]), f[:rejected_after]]
    end
    ([header, header.map { |h| "-" * h.to_s.size }] + rows).map { |cells| "| #{cells.join(' | ')} |" }.join("\n")
  end

  # How often the default breaker trips on a steady 20 % of errors at 100
  # calls/s (a ManualClock, so 100 simulated minutes take a few seconds).
  def noise
    script = <<~RUBY
      require "circuit_breaker"
      clock = CircuitBreaker::ManualClock.new
      breaker = CircuitBreaker.new(clock: clock)
      opened = 0
      breaker.on_state_change { |e| opened += 1 if e.from == :closed }
      random = Random.new(20)
      600_000.times do
        clock.advance(0.01)
        next unless breaker.allow?

        breaker.record(random.rand >= 0.2)
      end
      print opened
    RUBY
    opened = IO.popen([{ "RUBYLIB" => File.join(ROOT, "lib") }, RbConfig.ruby, "-e", script], &:read).to_i
    "noise: CircuitBreaker.new defaults on a steady 20 % of errors at 100 calls/s " \
      "(100 simulated minutes, ManualClock): #{opened} openings, #{format('%.2f', opened / 10.0)} per 10 minutes"
  end
end

Drill.main(ARGV) if $PROGRAM_NAME == __FILE__
