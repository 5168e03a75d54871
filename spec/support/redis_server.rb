# frozen_string_literal: true

require "tmpdir"
require "fileutils"
require "socket"
require_relative "child_process"

# A real redis-server for the fleet specs: one per example group, on a unix
# socket in a temp dir (`--port 0 --save ''`: no TCP port, no disk), started
# and stopped by its PID, with the faults docs/fleet.md promises to survive.
#
# Only the server's own protocol is spoken here (a tiny RESP client on the
# socket), so the harness does not depend on the redis gem it tests.
#
# @example
#   server = RedisServer.start
#   server.command("PING")          # => "PONG"
#   server.stop
class RedisServer
  # The server did not come up, or did not answer, in time.
  class Stuck < StandardError; end

  DEADLINE = 30

  attr_reader :dir, :socket, :pid, :port

  # @return [Boolean] whether redis-server is installed (specs skip otherwise)
  def self.available?
    ChildProcess.installed?("redis-server")
  end

  # @return [RedisServer] a running server
  def self.start(**options)
    new(**options).tap(&:launch)
  end

  # `tcp:` also listens on a free port of 127.0.0.1 (replicas connect
  # over TCP); `replica_of:` replicates that server.
  def initialize(extra: [], tcp: false, replica_of: nil)
    @dir = Dir.mktmpdir("cb-redis-")
    @socket = File.join(@dir, "redis.sock")
    @port = tcp ? free_port : 0
    @extra = extra
    @extra += ["--replicaof", "127.0.0.1", replica_of.port.to_s] if replica_of
    @pid = nil
  end

  # @return [String] the URL the gem is given
  def url
    "unix://#{@socket}"
  end

  # Starts redis-server on the socket (again, after `crash`).
  def launch
    File.delete(@socket) if File.exist?(@socket)
    args = ["redis-server", "--port", @port.to_s, "--bind", "127.0.0.1", "--unixsocket", @socket, "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", @dir, "--daemonize", "no",
            "--logfile", File.join(@dir, "redis.log"), *@extra]
    @pid = ChildProcess.spawn(*args, in: File::NULL, out: File::NULL, err: File::NULL)
    wait_until("redis-server answers PING") { ping? }
    wait_until("the replica in sync") { command("INFO", "replication").include?("master_link_status:up") } if replicating?
    self
  end

  # Stops the server by its PID and removes the temp dir.
  def stop
    resume
    kill("KILL")
    FileUtils.rm_rf(@dir)
  end

  # kill -9, then a new server on the same socket (empty: no persistence).
  def crash_and_restart
    kill("KILL")
    launch
  end

  # kill -9 and no restart (Redis down).
  def crash
    kill("KILL")
  end

  # SIGSTOP: the server accepts nothing and answers nothing.
  def pause
    Process.kill("STOP", @pid) if @pid
    @paused = true
  end

  # SIGCONT after `pause`.
  def resume
    Process.kill("CONT", @pid) if @pid && @paused
    @paused = false
  end

  # One command on a fresh connection; returns the reply (errors as
  # RuntimeError).
  def command(*args, timeout: 5)
    UNIXSocket.open(@socket) do |s|
      s.write("*#{args.size}\r\n" + args.map { |a| a = a.to_s; "$#{a.bytesize}\r\n#{a}\r\n" }.join)
      read_reply(s, timeout)
    end
  end

  # @return [Hash{String=>Integer}] calls per command (INFO commandstats)
  def command_counts
    info = command("INFO", "commandstats")
    info.scan(/^cmdstat_([^:]+):calls=(\d+)/).to_h { |name, calls| [name, Integer(calls)] }
  end

  # @return [Boolean] whether the server answers
  def ping?
    command("PING", timeout: 1) == "PONG"
  rescue SystemCallError, IOError, Stuck
    false
  end

  # Fault helpers (docs/fleet.md, "Outages").
  # Slow: scripts (writes) wait until `client_unpause`.
  def client_pause = command("CLIENT", "PAUSE", 600_000, "WRITE")
  def client_unpause = command("CLIENT", "UNPAUSE")
  def script_flush = command("SCRIPT", "FLUSH")
  def kill_subscribers = command("CLIENT", "KILL", "TYPE", "pubsub")

  # Out of memory: writes fail with OOM until `unlimit_memory`.
  def limit_memory
    command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    command("CONFIG", "SET", "maxmemory", "1")
  end

  def unlimit_memory = command("CONFIG", "SET", "maxmemory", "0")

  # Writes garbage into every key matching `pattern` (strings over hashes,
  # junk into hash fields).
  def scribble(pattern)
    keys = command("KEYS", pattern)
    keys.each do |k|
      if command("TYPE", k) == "hash"
        command("HGETALL", k).each_slice(2) { |field, _| command("HSET", k, field, "\xFFgarbage") }
      else
        command("SET", k, "garbage")
      end
    end
    keys
  end

  # Bounded wait for a condition (a hang becomes a failure, not a timing).
  def wait_until(what, deadline: DEADLINE)
    limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + deadline
    until yield
      raise Stuck, "#{what}: not within #{deadline}s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit

      sleep 0.01
    end
  end

  private

  def replicating? = @extra.include?("--replicaof")

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def kill(signal)
    return unless @pid

    ChildProcess.stop(@pid, signal: signal) # KILL, and a bounded reap
    @pid = nil
  end

  def read_reply(sock, timeout)
    line = read_line(sock, timeout)
    case line[0]
    when "+" then line[1..]
    when "-" then raise line[1..]
    when ":" then Integer(line[1..])
    when "$"
      n = Integer(line[1..])
      return nil if n.negative?

      data = read_exactly(sock, n + 2, timeout)
      data[0, n]
    when "*"
      n = Integer(line[1..])
      n.negative? ? nil : Array.new(n) { read_reply(sock, timeout) }
    else raise "unexpected reply #{line.inspect}"
    end
  end

  def read_line(sock, timeout)
    buf = +""
    buf << read_exactly(sock, 1, timeout) until buf.end_with?("\r\n")
    buf.chomp
  end

  def read_exactly(sock, n, timeout)
    out = +""
    while out.bytesize < n
      raise Stuck, "redis-server did not answer within #{timeout}s" unless sock.wait_readable(timeout)

      chunk = sock.read_nonblock(n - out.bytesize, exception: false)
      raise IOError, "connection closed" if chunk.nil?
      next if chunk == :wait_readable

      out << chunk
    end
    out
  end
end

# RSpec glue: `redis_server` in a group tagged `:redis`; the group is
# skipped only when redis-server is not installed.
module RedisServerHelpers
  def self.included(group)
    group.before(:all) do
      skip "redis-server is not installed (bin/test installs it)" unless RedisServer.available?
      @redis_server = RedisServer.start
    end
    group.after(:all) { @redis_server&.stop }
  end

  def redis_server = @redis_server
end

RSpec.configure { |c| c.include RedisServerHelpers, :redis } if defined?(RSpec)
