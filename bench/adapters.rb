# frozen_string_literal: true

require "socket"
require_relative "../spec/support/redis_server"
require_relative "../spec/support/db_servers"

module Bench
  # `rake bench`'s adapter rows (docs/adapters.md): one call through an
  # adapter against the same call to a dependency the adapter does not
  # protect, on a local server in another process.
  module Adapters
    module_function

    def rows(scenarios)
      [net_http(scenarios), redis(scenarios), active_record(scenarios), grpc(scenarios),
       { note: "Sidekiq's middleware has no row: it reads one breaker's state per job, nothing per call." }].compact
    end

    # `->(n) { [calls, seconds, process CPU seconds] }`, timed by the
    # harness's loop clock (the calling thread's CPU time by default: the
    # server is another process, so this is the client's own work, where
    # the adapter's cost lands, without the other tenants' noise).
    def runner(&call)
      lambda do |n|
        c0 = Bench.process_cpu
        t0 = Bench.loop_clock
        i = 0
        while i < n
          call.call
          i += 1
        end
        [n, Bench.loop_clock - t0, Bench.process_cpu - c0]
      end
    end

    # A forked child answering every request on each of `count` listeners
    # with a tiny keep-alive 200 (no WEBrick: the client's cost stands out
    # more); stopped by its PID.
    def http_servers(count)
      servers = Array.new(count) { TCPServer.new("127.0.0.1", 0) }
      pid = fork do
        servers.map do |server|
          Thread.new do
            loop do
              client = server.accept
              Thread.new(client) do |c|
                while (line = c.gets)
                  next unless line == "\r\n"

                  c.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
                end
              rescue IOError, SystemCallError
                nil
              ensure
                c.close
              end
            end
          end
        end.each(&:join)
      end
      ports = servers.map { |s| s.addr[1] }
      servers.each(&:close)
      [pid, ports]
    end

    def stop(pid)
      Process.kill("KILL", pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end

    def net_http(scenarios)
      require "circuit_breaker/net_http"
      pid, (with, without) = http_servers(2)
      CircuitBreaker::Adapters::NetHTTP.protect("127.0.0.1:#{with}")
      sessions = [with, without].map { |port| Net::HTTP.start("127.0.0.1", port) }
      r = Bench.measure({
                          without: runner { sessions[1].get("/") },
                          with: runner { sessions[0].get("/") }
                        })
      breaker = CircuitBreaker.registry.fetch("net_http:127.0.0.1:#{with}")
      scenarios.check(breaker.metrics[:total].positive? && breaker.closed?, "net_http: #{breaker.metrics}")
      adapter_row("Net::HTTP GET, keep-alive, local server", r)
    ensure
      sessions&.each(&:finish)
      stop(pid) if pid
    end

    def redis(scenarios)
      return { note: "adapters: the Redis row skipped, redis-server is not installed" } unless RedisServer.available?

      require "circuit_breaker/redis"
      server = RedisServer.start
      with = ::Redis.new(path: server.socket, circuit_breaker: true)
      without = ::Redis.new(path: server.socket)
      with.set("k", "v")
      r = Bench.measure({ without: runner { without.get("k") }, with: runner { with.get("k") } })
      breaker = CircuitBreaker.registry.fetch("redis:#{server.socket}")
      scenarios.check(breaker.metrics[:total].positive? && breaker.closed?, "redis: #{breaker.metrics}")
      adapter_row("Redis GET, unix socket, redis-rb #{::Redis::VERSION}", r)
    ensure
      server&.stop
    end

    def active_record(scenarios)
      return { note: "adapters: the SQL row skipped, PostgreSQL is not installed" } unless DbServers::Postgres.available?

      require "circuit_breaker/active_record"
      server = DbServers::Postgres.start
      models = { with: { circuit_breaker: true }, without: {} }.to_h do |key, extra|
        model = Class.new(::ActiveRecord::Base) { self.abstract_class = true }
        Bench.const_set(:"AdapterBench#{key.capitalize}", model)
        model.establish_connection(server.config(**extra))
        [key, model.connection]
      end
      r = Bench.measure(models.transform_values { |c| runner { c.select_value("SELECT 1") } })
      breaker = CircuitBreaker.registry.fetch("active_record:127.0.0.1:#{server.port}/postgres")
      scenarios.check(breaker.metrics[:total].positive? && breaker.closed?, "active_record: #{breaker.metrics}")
      adapter_row("ActiveRecord `SELECT 1`, PostgreSQL on 127.0.0.1", r)
    ensure
      server&.stop
    end

    # A unary call to a gRPC server in this process (its threads are not
    # the caller's: the thread CPU clock leaves them out).
    def grpc(scenarios)
      require "circuit_breaker/grpc"
      text = Struct.new(:text) do
        def self.marshal(message) = message.text.to_s
        def self.unmarshal(bytes) = new(bytes)
      end
      service = Class.new do
        include ::GRPC::GenericService
        self.service_name = "circuit_breaker.bench.Echo"
        self.marshal_class_method = :marshal
        self.unmarshal_class_method = :unmarshal
        rpc :Echo, text, text
        define_method(:echo) { |message, _call| message }
      end
      server = ::GRPC::RpcServer.new(pool_size: 8, max_waiting_requests: 1_000)
      port = server.add_http2_port("127.0.0.1:0", :this_port_is_insecure)
      server.handle(service)
      thread = Thread.new { server.run }
      server.wait_till_running(10)
      target = "127.0.0.1:#{port}"
      interceptor = CircuitBreaker::Adapters::GRPC::Interceptor.new(target)
      with = service.rpc_stub_class.new(target, :this_channel_is_insecure, interceptors: [interceptor])
      without = service.rpc_stub_class.new(target, :this_channel_is_insecure)
      message = text.new("hi")
      r = Bench.measure({ without: runner { without.echo(message) }, with: runner { with.echo(message) } })
      scenarios.check(interceptor.breaker.metrics[:total].positive? && interceptor.breaker.closed?, "grpc: #{interceptor.breaker.metrics}")
      adapter_row("gRPC unary call, server on 127.0.0.1", r)
    ensure
      server&.stop
      thread&.join(10)
    end

    # The target is judged on the fastest round of each side: on a shared
    # machine other tenants only ever add time, and the adapter's own cost
    # (about a microsecond) is far below the swings of a network call.
    def adapter_row(name, r)
      median = Bench.ratio(r[:with], r[:without])
      fastest = r[:with].per_round.min / r[:without].per_round.min
      {
        scenario: name, impl: "through the adapter", ns: r[:with].ns, allocs: r[:with].allocs, ratio: median,
        target: "≤ 1.05× without (#{format('%.0f', r[:without].ns)} ns)", value: fastest, met: fastest <= 1.05,
        value_note: "fastest rounds; × bare column: median of the rounds' ratios, against the same call without the adapter"
      }
    end
  end
end
