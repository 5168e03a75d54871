# frozen_string_literal: true

require "tmpdir"
require "fileutils"
require "socket"
require_relative "child_process"

# Real database servers for the ActiveRecord adapter's specs
# (spec/adapters/active_record_spec.rb): PostgreSQL and MariaDB from
# Debian's packages, each in a temp dir, on a free port of 127.0.0.1,
# started and stopped by PID. Servers refuse to run as root: as root the
# data dir is handed to `nobody` and the server runs as that user.
module DbServers
  # The server did not come up in time.
  class Stuck < StandardError; end

  # Generous: on a machine whose 2 cores other suites keep busy, initdb and
  # the first start of PostgreSQL took over 60 s once.
  DEADLINE = 180

  module_function

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def wait_until(what, deadline: DEADLINE)
    limit = Process.clock_gettime(Process::CLOCK_MONOTONIC) + deadline
    until yield
      raise Stuck, "#{what}: not within #{deadline}s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > limit

      sleep 0.05
    end
  end

  def listening?(port)
    TCPSocket.new("127.0.0.1", port).close
    true
  rescue SystemCallError
    false
  end

  # `argv` as `nobody` when this process is root.
  def as_server_user(argv)
    Process.uid.zero? ? ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv] : argv
  end

  def hand_over(dir)
    FileUtils.chown_R("nobody", "nogroup", dir) if Process.uid.zero?
  end

  # One server process (and its temp dir), stopped by PID.
  class Server
    attr_reader :port, :dir, :pid

    def initialize(port, dir)
      @port = port
      @dir = dir
      @pid = nil
    end

    def stop
      kill
      FileUtils.rm_rf(@dir)
    end

    # kill -9 of the server and its children, and no restart.
    def crash
      kill
    end

    # The server's process group, and its children by PID: PostgreSQL's
    # backends leave the group (setsid), and one left alive keeps serving
    # its open connection.
    def kill
      return unless @pid

      pids = [@pid, *children(@pid)]
      Process.kill("KILL", -@pid) rescue nil # rubocop:disable Style/RescueModifier
      pids.each { |pid| Process.kill("KILL", pid) rescue nil } # rubocop:disable Style/RescueModifier
      ChildProcess.stop(@pid, signal: :KILL) # a bounded reap
      @pid = nil
    end

    def children(parent)
      Dir["/proc/[0-9]*/stat"].filter_map do |stat|
        fields = File.read(stat).split(") ", 2).last.split
        Integer(stat[%r{/proc/(\d+)/}, 1]) if Integer(fields[1]) == parent
      rescue SystemCallError, ArgumentError
        nil
      end
    end

    def up?
      !@pid.nil?
    end

    def spawn(argv)
      @pid = ChildProcess.spawn(*DbServers.as_server_user(argv), in: File::NULL, out: File::NULL,
                                                                 err: File.join(@dir, "server.log"))
      DbServers.wait_until("#{argv.first} listening on #{@port}") { DbServers.listening?(@port) }
      self
    end
  end

  # PostgreSQL 15: initdb (trust auth, superuser `postgres`), then postgres.
  class Postgres < Server
    BIN = Dir["/usr/lib/postgresql/*/bin"].max

    def self.available?
      !BIN.nil? && File.executable?(File.join(BIN, "initdb"))
    end

    def self.start
      dir = Dir.mktmpdir("cb-pg-")
      File.chmod(0o755, dir)
      data = File.join(dir, "data")
      DbServers.hand_over(dir)
      ok = ChildProcess.system(*DbServers.as_server_user([File.join(BIN, "initdb"), "-D", data, "-A", "trust",
                                                          "-U", "postgres", "--no-sync", "-E", "UTF8"]),
                               out: File::NULL, err: File::NULL)
      raise Stuck, "initdb failed in #{dir}" unless ok

      new(DbServers.free_port, dir).launch
    end

    # Returns once the server accepts connections (after a kill -9 it
    # recovers first, refusing them as "starting up" while it listens).
    def launch
      spawn([File.join(BIN, "postgres"), "-D", File.join(@dir, "data"), "-p", @port.to_s, "-h", "127.0.0.1",
             "-k", @dir, "-c", "fsync=off", "-c", "max_connections=20"])
      DbServers.wait_until("PostgreSQL accepting connections on #{@port}") do
        ChildProcess.system(File.join(BIN, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", @port.to_s, "-t", "5",
                            within: 30)
      end
      self
    end

    def config(**extra)
      { adapter: "postgresql", host: "127.0.0.1", port: @port, username: "postgres", database: "postgres", **extra }
    end
  end

  # MariaDB: mariadb-install-db, then mariadbd without grant tables
  # (anyone connects; fine on 127.0.0.1 in a test).
  class MariaDB < Server
    def self.available?
      ChildProcess.installed?("mariadbd") && ChildProcess.installed?("mariadb-install-db")
    end

    def self.start
      dir = Dir.mktmpdir("cb-mariadb-")
      File.chmod(0o755, dir)
      DbServers.hand_over(dir)
      ok = ChildProcess.system(*DbServers.as_server_user(["mariadb-install-db", "--no-defaults", "--datadir=#{dir}/data",
                                                          "--auth-root-authentication-method=normal", "--skip-test-db"]),
                               out: File::NULL, err: File::NULL)
      raise Stuck, "mariadb-install-db failed in #{dir}" unless ok

      new(DbServers.free_port, dir).launch
    end

    def launch
      spawn(["mariadbd", "--no-defaults", "--datadir=#{@dir}/data", "--socket=#{@dir}/mysqld.sock",
             "--port=#{@port}", "--bind-address=127.0.0.1", "--pid-file=#{@dir}/mysqld.pid",
             "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=8M", "--max-connections=20"])
    end

    def config(**extra)
      { adapter: "mysql2", host: "127.0.0.1", port: @port, username: "root", database: "mysql", **extra }
    end
  end
end
