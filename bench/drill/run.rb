# frozen_string_literal: true

# `rake drill` (docs/development.md, "rake drill"): the outage drill. For
# each setup, a real Puma cluster (bench/drill/puma.rb: 2 workers × 4
# threads, preload_app!) serves bench/drill/config.ru, whose requests call
# a real upstream on 127.0.0.1 (bench/drill/upstream.rb) over Net::HTTP
# with a 1 s read timeout, through the setup's breaker
# (bench/drill/setups.rb). The upstream is healthy, then answers 500, then
# hangs, then answers slowly (inside the timeout), then is healthy again;
# a load generator sends about DRILL_RATE requests a second on a fixed
# schedule (open loop, bounded in count and time), and DRILL_PAGE_RATE a
# second to the app's unrelated page, which calls nothing. It prints the
# table of bench/drill/report.rb per setup, and whether a peer dominates.
#
#   ruby bench/drill/run.rb [SETUP...]   # default: every setup
#   DRILL_PHASES=10,20,20,20,40          # seconds of each phase (the default)
#   DRILL_RATE=100 DRILL_PAGE_RATE=10 DRILL_RUNS=1
#   DRILL_SOURCES=DIR                    # the peers' code (bench/drill/peers.rb)
#
# Setups: process, host, host-cap, fleet, recommended, recommended-cap (ours),
# stoplight, semian, semian-bulkhead, circuitbox (the peers, from their
# installed gems or DRILL_SOURCES; a peer found nowhere is skipped, and
# said so).

$stdout.sync = true

require "etc"
require "fileutils"
require "json"
require "net/http"
require "rbconfig"
require "socket"
require "tmpdir"
require_relative "../../spec/support/db_servers"
require_relative "../../spec/support/redis_server"
require_relative "peers"
require_relative "report"

module Drill
  ROOT = File.expand_path("../..", __dir__)
  PHASES = Report::PHASES
  OURS = %w[process host host-cap fleet recommended recommended-cap].freeze
  PEERS = Peers::GEMS.keys.freeze
  CLIENT_TIMEOUT = 10 # seconds a load request waits for the app
  CLIENTS = 128       # load threads per route: the schedule lags only past this many requests in flight
  HANG = 3            # seconds the hanging upstream holds a request (past the 1 s read timeout)
  SLOW = [0.6, 0.9].freeze # seconds the slow upstream takes to answer (inside the 1 s read timeout)
  DEADLINE = 60 # seconds to boot the app, and to drain after the last request
  # Puma's workers × threads per setup: 8 threads for the host either way.
  CLUSTER = Hash.new([2, 4]).merge("semian-bulkhead" => [8, 1]).freeze

  Result = Struct.new(:setup, :description, :upstream, :requests, :page, :lengths, :load, keyword_init: true)

  module_function

  def main(argv)
    setups = argv.empty? ? OURS + PEERS : argv
    unknown = setups - OURS - PEERS
    abort "drill: unknown setup(s) #{unknown.join(', ')} (known: #{(OURS + PEERS).join(', ')})" unless unknown.empty?
    lengths = ENV.fetch("DRILL_PHASES", "10,20,20,20,40").split(",").map { |s| Float(s) }
    unless lengths.size == PHASES.size && lengths.all?(&:positive?)
      abort "drill: DRILL_PHASES needs #{PHASES.size} positive lengths in seconds (#{PHASES.join(', ')})"
    end
    rate = Float(ENV.fetch("DRILL_RATE", "100"))
    page_rate = Float(ENV.fetch("DRILL_PAGE_RATE", "10"))
    runs = Integer(ENV.fetch("DRILL_RUNS", "1"))
    puts "Ruby #{RUBY_DESCRIPTION}, Puma #{puma_version}, #{Etc.nprocessors} CPUs, load average #{loadavg}"
    puts "phases #{PHASES.zip(lengths).map { |p, l| "#{p} #{l.round(1)} s" }.join(' → ')}, " \
         "#{rate.round} requests/s, #{page_rate.round} to the unrelated page, #{runs} run(s) per setup"
    results = []
    Dir.mktmpdir("drill-") do |tmp|
      setups.each do |setup|
        env = setup_env(setup, tmp)
        if env.is_a?(String)
          puts "#{setup}: skipped, #{env}"
          next
        end
        runs.times do |i|
          result = run_once(setup, env, lengths, [rate, page_rate], tmp, "#{setup}-#{i}")
          results << result
          puts Report.row(result)
        end
      end
    end
    puts
    puts Report.table(results)
    verdict = Report.verdict(results)
    puts "", verdict unless verdict.empty?
    puts "", noise
  end

  def puma_version
    `puma --version 2>/dev/null`[/[\d.]+/] || "missing"
  end

  def loadavg
    File.read("/proc/loadavg").split.first(3).join(" ")
  end

  # The environment of the app's process for `setup`, or why it is skipped.
  def setup_env(setup, tmp)
    workers, threads = CLUSTER[setup]
    env = { "DRILL_SETUP" => setup, "RUBYLIB" => File.join(ROOT, "lib"), "DRILL_WORKERS" => workers.to_s,
            "DRILL_THREADS" => threads.to_s }
    if OURS.include?(setup)
      missing = missing_option(setup, env)
      return missing || env
    end

    peer = Peers.env(setup, tmp, method(:puts))
    return peer if peer.is_a?(String)

    env.merge(peer).merge("RUBYLIB" => [peer["RUBYLIB"], env["RUBYLIB"]].reject { |p| p.to_s.empty? }
                                                                         .join(File::PATH_SEPARATOR))
  end

  # Why this build cannot run `setup` (an option of its settings it does
  # not know yet), or nil.
  def missing_option(setup, env)
    return unless setup.end_with?("-cap")

    script = 'require "circuit_breaker"; require_relative ARGV[0]; ' \
             "CircuitBreaker.new(max_concurrent: Drill.cap)"
    out = IO.popen([env, RbConfig.ruby, "-rnet/http", "-e", script, File.join(__dir__, "setups.rb"),
                    { err: %i[child out] }], &:read)
    return if $?.success?

    "this build of circuit_breaker refuses its settings: #{out.lines.first.to_s.strip}"
  end

  def run_once(setup, env, lengths, rates, tmp, id)
    dir = File.join(tmp, id)
    FileUtils.mkdir_p(dir)
    load_before = loadavg
    redis = RedisServer.start if setup == "fleet"
    upstream_port_file = File.join(dir, "upstream.port")
    upstream = Process.spawn(RbConfig.ruby, File.join(__dir__, "upstream.rb"), upstream_port_file,
                             *lengths.map(&:to_s), HANG.to_s, *SLOW.map(&:to_s), pgroup: true, out: File::NULL)
    wait_for("the upstream") { File.exist?(upstream_port_file) }
    upstream_port = Integer(File.read(upstream_port_file))
    port = DbServers.free_port
    log = File.join(dir, "puma.log")
    app_env = env.merge("DRILL_PORT" => port.to_s, "DRILL_UPSTREAM" => "http://127.0.0.1:#{upstream_port}/",
                        "DRILL_NAME" => "drill-#{Process.pid}-#{id}", "RAILS_ENV" => nil, "APP_ENV" => nil,
                        "RACK_ENV" => nil)
    app_env["DRILL_REDIS_URL"] = redis.url if redis
    workers = Integer(app_env.fetch("DRILL_WORKERS"))
    puma = Process.spawn(app_env, "puma", "-C", File.join(__dir__, "puma.rb"),
                         pgroup: true, in: File::NULL, %i[out err] => log)
    begin
      wait_for("Puma's #{workers} workers (#{log})") do
        abort "drill: Puma exited:\n#{File.read(log)}" if Process.wait(puma, Process::WNOHANG)
        File.read(log).scan(/Worker \d+ \(PID: \d+\) booted/).size >= workers && get(port, "/ready")&.code == "200"
      end
      description = File.read(log)[/drill app: (.*)$/, 1]
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.5
      get(upstream_port, "/__start?t0=#{t0}")
      requests, page = load(port, t0, lengths.sum, rates)
      counts = JSON.parse(get(upstream_port, "/__stats").body)
      Result.new(setup: setup, description: description, upstream: counts, requests: requests, page: page,
                 lengths: lengths, load: "#{load_before} → #{loadavg}")
    ensure
      stop(puma)
      stop(upstream)
      redis&.stop
      destroy_bulkhead(app_env) if setup == "semian-bulkhead"
    end
  end

  # Semian's bulkhead is a SysV semaphore set, which outlives the
  # processes that used it: removed once Puma has stopped.
  def destroy_bulkhead(env)
    script = "require 'net/http'; require_relative ARGV[0]; Drill.destroy_semian_bulkhead"
    return if system(env, RbConfig.ruby, "-e", script, File.join(__dir__, "setups.rb"))

    warn "drill: Semian's semaphore set for #{env['DRILL_NAME']} may be left (ipcs -s)"
  end

  # Sends `duration × rate` requests to the app's / and `duration ×
  # page_rate` to its unrelated page /page, request i of each at t0 + i /
  # rate, each route from its own pool of CLIENTS threads; a request's
  # latency counts from its scheduled time, so a lagging schedule shows in
  # it. Returns, per route, [time, status, latency] per request (status 0:
  # no answer within CLIENT_TIMEOUT; its latency is then the time it
  # waited).
  def load(port, t0, duration, rates)
    deadline = t0 + duration + DEADLINE
    routes = ["/", "/page"].zip(rates).map do |path, rate|
      count = (duration * rate).floor
      queue = Queue.new
      count.times { |i| queue << i }
      queue.close
      results = Array.new(count)
      threads = Array.new([CLIENTS, count].min) do
        Thread.new do
          while (i = queue.pop)
            at = t0 + (i / rate)
            pause = at - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            sleep pause if pause.positive?
            status = begin
              Integer(get(port, path, timeout: CLIENT_TIMEOUT)&.code || 0)
            rescue StandardError
              0
            end
            results[i] = [i / rate, status, Process.clock_gettime(Process::CLOCK_MONOTONIC) - at]
          end
        end
      end
      [threads, results]
    end
    routes.flat_map(&:first).each do |t|
      t.join([deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC), 0].max)
    end
    routes.flat_map(&:first).each(&:kill)
    routes.map { |_, results| results.compact }
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
