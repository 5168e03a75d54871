# frozen_string_literal: true

require "circuit_breaker/fleet"

require "securerandom"
require_relative "../spec/support/redis_server"

module Bench
  # The fleet rows of `rake bench` (docs/performance.md, docs/fleet.md): the call path
  # with Redis up, paused and down against the same breaker without
  # `fleet:`; Redis round trips per host per second with 1 and 100 fleet
  # breakers; a convergence run of forked hosts against a counting
  # upstream that fails every call, next to the docs' bound; and the same
  # with warm windows, hosts meeting the failures a little apart (H = 2, 4,
  # 8), next to the warm-window bound (docs/fleet.md, "The bound").
  module Fleet
    HOSTS = 8
    RATE = 50.0 # calls per second per host
    MIN_CALLS = 20
    INTERVAL = 0.1

    module_function

    def rows(s)
      return [{ note: "fleet: skipped, redis-server is not installed" }] unless RedisServer.available?

      server = RedisServer.start
      begin
        call_path(s, server) + load(server) + scale(server) + convergence(server) + warm_convergence(server)
      ensure
        server.stop
      end
    end

    def call_path(s, server)
      local = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 100))
      fleet = CircuitBreaker.new(name: "bench-#{SecureRandom.hex(4)}", fleet: server.url,
                                 window: CircuitBreaker::SlidingWindow.new(size: 100))
      wait { fleet.metrics[:fleet] == :connected }
      rows = []
      name = "closed success, fleet: vs the same breaker without"
      run = lambda do |impl|
        r = Bench.measure({ bare: Bench.plain("r.run { 1 }", r: Bare::Yield.new),
                            gem: Bench.plain("r.call { 1 }", r: local),
                            impl => Bench.plain("r.call { 1 }", r: fleet) })
        rows << s.row(name, :gem, r[:gem], r[:bare], target: "reference") if rows.empty?
        vs = Bench.ratio(r[impl], r[:gem])
        rows << s.row(name, impl, r[impl], r[:bare], target: "≤ 1.1× without fleet:", value: vs, met: vs <= 1.1)
      end
      run.(:fleet_up)
      server.pause
      wait { fleet.metrics[:fleet] == :degraded }
      run.(:fleet_paused)
      server.resume
      server.crash
      wait { fleet.metrics[:fleet] == :degraded }
      run.(:fleet_down)
      server.launch
      wait { fleet.metrics[:fleet] == :connected }
      CircuitBreaker::Fleet.stop_all
      rows
    end

    # Round trips the syncer makes per second (one pipeline each), and the
    # scripts Redis runs, with 1 and with 100 fleet breakers in a process.
    def load(server)
      [1, 100].map do |n|
        breakers = Array.new(n) { |i| CircuitBreaker.new(name: "load-#{n}-#{i}", fleet: server.url, fleet_interval: INTERVAL) }
        wait { breakers.all? { |b| b.metrics[:fleet] == :connected } }
        trips0 = CircuitBreaker::Fleet.round_trips
        evals0 = server.command_counts.fetch("evalsha", 0)
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep 2
        secs = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
        trips = (CircuitBreaker::Fleet.round_trips - trips0) / secs
        evals = (server.command_counts.fetch("evalsha", 0) - evals0) / secs
        CircuitBreaker::Fleet.stop_all
        { note: format("Redis load with %d fleet breaker(s), fleet_interval %.1f s: %.1f round trips/s per host " \
                       "(target ≤ %.0f), %.0f scripts/s (idle breakers: heartbeats only, docs/fleet.md \"Cost at scale\")",
                       n, INTERVAL, trips, 1 / INTERVAL, evals) }
      end
    end

    SCALE = 1_000 # idle fleet breakers in one process
    SCALE_SECS = 3.0

    # Cost at scale: in a forked process, an app thread calling a local
    # breaker as fast as it can, first alone, then beside SCALE idle fleet
    # breakers (fleet_interval 0.1 s): its calls/s; its longest stall by
    # the fleet threads (the CPU time they used during a gap between two of
    # the app thread's calls: they held the GVL, or collected garbage,
    # meanwhile; on a busy machine other gaps are the OS's, and are
    # shown apart); the fleet threads' CPU and redis-server's.
    def scale(server)
      r, w = IO.pipe
      pid = fork do
        r.close
        local = CircuitBreaker.new(name: "scale-local")
        alone = app_thread(local, [])
        fleet = Array.new(SCALE) { |i| CircuitBreaker.new(name: "scale-#{i}", fleet: server.url, fleet_interval: INTERVAL) }
        wait(120) { fleet.all? { |b| b.metrics[:fleet] == :connected } }
        tasks = Thread.list.select { |t| t.name.to_s.start_with?("circuit_breaker fleet") }
                      .map { |t| "/proc/self/task/#{t.native_thread_id}/schedstat" }
        redis0 = cpu_ns(["/proc/#{server.pid}/schedstat"])
        cpu0 = cpu_ns(tasks)
        beside = app_thread(local, tasks)
        syncer = (cpu_ns(tasks) - cpu0) / 1e9 / SCALE_SECS
        redis = (cpu_ns(["/proc/#{server.pid}/schedstat"]) - redis0) / 1e9 / SCALE_SECS
        w.write(Marshal.dump([alone, beside, syncer, redis]))
        exit!(0)
      end
      w.close
      alone, beside, syncer, redis = Marshal.load(r.read) # rubocop:disable Security/MarshalLoad
      Process.wait(pid)
      met = syncer < 0.1 && redis < 0.1 && beside[2] <= 0.005
      [{ note: format("Cost at scale, %d idle fleet breakers in one process (fleet_interval %.1f s): an app thread's " \
                      "calls/s %.2fM beside them vs %.2fM without (%.0f %%); its longest stall by the fleet threads " \
                      "%.1f ms (its longest gap %.1f ms beside them, %.1f ms without: the machine's); the fleet threads " \
                      "%.1f %% of a core, redis-server %.1f %% (targets: < 10 %%, < 10 %%, stall ≤ 5 ms: %s)",
                      SCALE, INTERVAL, beside[0] / 1e6, alone[0] / 1e6, 100.0 * beside[0] / alone[0],
                      beside[2] * 1000, beside[1] * 1000, alone[1] * 1000, syncer * 100, redis * 100,
                      met ? "met" : "NOT met") }]
    end

    # This thread's calls/s on `breaker` over SCALE_SECS, the longest gap
    # between two calls, and the longest CPU time `tasks` used during one.
    def app_thread(breaker, tasks)
      calls = 0
      longest = by_tasks = 0.0
      before = cpu_ns(tasks)
      t0 = last = sampled = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      while (now = Process.clock_gettime(Process::CLOCK_MONOTONIC)) - t0 < SCALE_SECS
        gap = now - last
        longest = gap if gap > longest
        # The tasks' CPU is read every 2 ms, and right after a gap.
        if gap > 0.001 || now - sampled > 0.002
          cpu = cpu_ns(tasks)
          by_tasks = [by_tasks, [gap, (cpu - before) / 1e9].min].max if gap > 0.001
          before = cpu
          now = sampled = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        end
        last = now
        breaker.call { 1 }
        calls += 1
      end
      [calls / (now - t0), longest, by_tasks]
    end

    # Nanoseconds on a CPU of the tasks (their /proc schedstat).
    def cpu_ns(paths)
      paths.sum { |path| Integer(File.read(path).split.first, 10) }
    end

    # HOSTS forked processes call a dependency that fails every call, RATE
    # calls/s each, until their breaker is open; counts the calls that
    # reached it, with and without fleet:.
    def convergence(server)
      rtt = measure_rtt(server)
      # docs/fleet.md, "The bound": a failure reaches Redis within D.
      reach = RATE * INTERVAL <= 1 ? rtt : INTERVAL + rtt
      bound = [HOSTS * MIN_CALLS, MIN_CALLS + (HOSTS * RATE * (reach + (2 * (INTERVAL + rtt))))].min
      [true, false].map do |with_fleet|
        name = "conv-#{SecureRandom.hex(4)}"
        reached, open_after, spread = run_hosts(server, name, with_fleet)
        if with_fleet
          { note: format("Convergence, %d hosts × %.0f calls/s, min_calls %d, fleet_interval %.1f s, RTT %.2f ms: " \
                         "%d calls reached the failing dependency (bound min(H·m, m + H·r·(D + 2(I+RTT))) = %.0f: %s); " \
                         "every host open %.2f s after the first failure, the last %.3f s after the first " \
                         "(target: within one fleet_interval of the fleet verdict: %s)",
                         HOSTS, RATE, MIN_CALLS, INTERVAL, rtt * 1000, reached, bound,
                         reached <= bound ? "met" : "NOT met", open_after, spread,
                         spread <= INTERVAL ? "met" : "NOT met") }
        else
          { note: format("Convergence without fleet: %d calls reached it (H·m = %d); every host open %.2f s after the first failure",
                         reached, HOSTS * MIN_CALLS, open_after) }
        end
      end
    end

    def run_hosts(server, name, with_fleet)
      gate_r, gate_w = IO.pipe
      pids = []
      pipes = Array.new(HOSTS) do
        r, w = IO.pipe
        w.sync = true
        pids << fork do
          r.close
          gate_w.close
          # The window's rule alone (docs/fleet.md, "The bound"), not
          # consecutive_failures, which opens each host after 8 failures.
          options = { name: name, min_calls: MIN_CALLS, open_duration: 60, consecutive_failures: nil }
          options.update(fleet: server.url, fleet_interval: INTERVAL) if with_fleet
          breaker = CircuitBreaker.new(**options)
          wait { breaker.metrics[:fleet] == :connected } if with_fleet
          w.write("ready\n")
          gate_r.read
          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          reached = 0
          tick = t0
          until breaker.open? || Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 > 30
            begin
              breaker.call { reached += 1; raise "upstream down" }
            rescue RuntimeError, CircuitBreaker::OpenError
              nil
            end
            tick += 1 / RATE
            pause = tick - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            sleep pause if pause.positive?
          end
          now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          w.write("#{reached} #{now - t0} #{now}\n")
          exit!(0)
        end
        w.close
        r
      end
      gate_r.close
      pipes.each(&:gets)
      gate_w.close # every host starts now
      results = pipes.map { |r| r.gets.split.map(&:to_f) }
      pids.each { |pid| Process.wait(pid) } # not waitall: redis-server is a child too
      opened = results.map { |r| r[2] } # CLOCK_MONOTONIC is one clock for the whole host
      [results.sum(&:first).to_i, results.map { |r| r[1] }.max, opened.max - opened.min]
    end

    WARM_HOSTS = [2, 4, 8].freeze
    WARM_SIZE = 100 # SlidingWindow size, full of successes
    STAGGER = 0.5 # seconds between two hosts' first failures
    QUORUM = 0.5 # fleet_quorum's default

    # Warm windows: each host's window holds WARM_SIZE successes, then host
    # i meets a dependency that fails every call STAGGER × i seconds after
    # the first, RATE calls/s, until its breaker is open. Alone, each opens
    # after f = WARM_SIZE / 2 failures (error_rate_threshold 0.5); with
    # fleet:, the hosts that opened alone open the others once they carry
    # fleet_quorum of the calls.
    def warm_convergence(server)
      rtt = measure_rtt(server)
      reach = RATE * INTERVAL <= 1 ? rtt : INTERVAL + rtt
      latency = reach + (2 * (INTERVAL + rtt))
      f = WARM_SIZE / 2
      WARM_HOSTS.map do |hosts|
        k = [(QUORUM * hosts).ceil, hosts >= 3 ? 2 : 1].max
        opened_k = (STAGGER * (k - 1)) + (f / RATE)
        bound = Array.new(hosts) { |i| [f, RATE * [0, opened_k + latency - (STAGGER * i)].max].min }.sum
        with = run_warm_hosts(server, hosts, true)
        without = run_warm_hosts(server, hosts, false)
        { note: format("Warm windows (SlidingWindow %d full of successes), %d hosts × %.0f calls/s meeting the failures " \
                       "%.1f s apart: with fleet: %d calls reached the failing dependency (bound Σ min(f, r·(Tk + L − ti)) = %.0f: %s), " \
                       "without: %d (H·f = %d); %.0f %% fewer",
                       WARM_SIZE, hosts, RATE, STAGGER, with, bound, with <= bound ? "met" : "NOT met",
                       without, hosts * f, 100.0 * (without - with) / without) }
      end
    end

    def run_warm_hosts(server, hosts, with_fleet)
      name = "warm-#{SecureRandom.hex(4)}"
      gate_r, gate_w = IO.pipe
      done_r, done_w = IO.pipe
      pids = []
      pipes = Array.new(hosts) do |i|
        r, w = IO.pipe
        w.sync = true
        pids << fork do
          r.close
          gate_w.close
          done_w.close
          options = { name: name, window: CircuitBreaker::SlidingWindow.new(size: WARM_SIZE), open_duration: 60,
                      consecutive_failures: nil }
          options.update(fleet: server.url, fleet_interval: INTERVAL) if with_fleet
          breaker = CircuitBreaker.new(**options)
          wait { breaker.metrics[:fleet] == :connected } if with_fleet
          WARM_SIZE.times { breaker.call { :ok } }
          w.write("ready\n")
          gate_r.read
          t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          start = t0 + (STAGGER * i)
          reached = 0
          tick = start
          until breaker.open? || Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 > 30
            pause = tick - Process.clock_gettime(Process::CLOCK_MONOTONIC)
            sleep pause if pause.positive?
            next if breaker.open?

            begin
              breaker.call { reached += 1; raise "upstream down" }
            rescue RuntimeError, CircuitBreaker::OpenError
              nil
            end
            tick += 1 / RATE
          end
          w.write("#{reached}\n")
          done_r.read # a host that exits would no longer count in the fleet
          exit!(0)
        end
        w.close
        r
      end
      gate_r.close
      done_r.close
      pipes.each(&:gets)
      if with_fleet # every host's warm window in Redis first (sent at its next interval)
        wait do
          key = server.command("KEYS", "circuit_breaker:{#{name}:*}:hosts").first
          key && server.command("HVALS", key).count { |v| v.split[1] == WARM_SIZE.to_s } == hosts
        end
      end
      gate_w.close # every host starts now
      reached = pipes.sum { |r| Integer(r.gets) }
      done_w.close
      pids.each { |pid| Process.wait(pid) } # not waitall: redis-server is a child too
      reached
    end

    def measure_rtt(server)
      samples = Array.new(20) do
        t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        server.command("PING")
        Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
      end
      samples.sort[samples.size / 2]
    end

    def wait(deadline = 30)
      limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + deadline
      sleep 0.01 until yield || Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit
    end
  end
end
