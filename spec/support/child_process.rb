# frozen_string_literal: true

require "open3"

# Every process a spec starts is bounded (docs/development.md, "Testing"):
# it runs for at most `within` seconds, is then sent TERM (its whole
# process group when it has its own), KILL `GRACE` s later, and even the
# wait for its exit status is bounded. A child that outlives its bound
# fails the example with ChildProcess::Timeout naming the command and what
# it printed so far; no assertion depends on how long anything takes.
#
# Open3's block forms are not used: after the block returns they wait for
# the child forever (a Puma that ignored TERM once hung CI for 16 minutes).
#
# The children still running are known here (`live`), so the suite's
# watchdog (spec/support/watchdog.rb) and the end of the run can kill them.
#
# @example
#   out, status = ChildProcess.capture2e(RbConfig.ruby, "-e", "puts 1")
#   pid = ChildProcess.fork { exit!(0) }
#   ChildProcess.finish(pid).success?
module ChildProcess
  # The child outlived its bound (it has been stopped: TERM, then KILL).
  class Timeout < StandardError; end

  # How long a child may run, unless the caller says otherwise.
  LIMIT = 180
  # Between TERM and KILL, and the longest wait for a killed child's status.
  GRACE = 5

  @live = {} # pid => { what:, group:, waiter:, owner: }
  @lock = Mutex.new

  class << self
    # @return [Array<Integer>] the pids this process started and has not reaped
    def live
      @lock.synchronize { @live.select { |_, c| c[:owner] == Process.pid }.keys }
    end

    # Records a child started elsewhere (a server's own Process.spawn), so
    # `stop_all` knows it. `group:` when it leads its own process group.
    def track(pid, what, group: false, waiter: nil)
      @lock.synchronize { @live[pid] = { what: what, group: group, waiter: waiter, owner: Process.pid } }
      pid
    end

    # Process.spawn in its own process group, tracked.
    # @return [Integer] the pid
    def spawn(*cmd, **opts)
      track(Process.spawn(*cmd, **{ pgroup: true }.merge(opts)), what(cmd), group: true)
    end

    # Kernel#fork, tracked; the child forgets its parent's children.
    # @return [Integer] the pid (in the parent)
    def fork(what = "forked child", &block)
      pid = Kernel.fork do
        @lock = Mutex.new
        @live = {}
        block.call
      end
      track(pid, what)
    end

    # The child's status once it exited, or nil if it is still running
    # after `within` seconds. Never blocks longer than that.
    def wait(pid, within:)
      entry = @lock.synchronize { @live[pid] }
      status = if entry&.dig(:waiter)
                 entry[:waiter].join(within) && entry[:waiter].value
               else
                 poll(pid, within)
               end
      forget(pid) if status
      status
    end

    # The child's status; when it has not exited within `within` s it is
    # stopped (TERM, then KILL) and Timeout raised.
    def finish(pid, within: LIMIT, output: nil)
      wait(pid, within: within) || begin
        what = @lock.synchronize { @live.dig(pid, :what) } || "pid #{pid}"
        stop(pid)
        raise Timeout, "#{what} (pid #{pid}) still running after #{within}s: stopped with TERM, then KILL" \
                       "#{"; its output so far:\n#{output.call}" if output}"
      end
    end

    # TERM (to its group if it has one), KILL `grace` s later, and the
    # status (nil if it was not a child of ours, or is already reaped).
    def stop(pid, grace: GRACE, signal: :TERM)
      group = @lock.synchronize { @live.dig(pid, :group) }
      deliver(signal, pid, group)
      status = wait(pid, within: grace)
      unless status
        deliver(:KILL, pid, group)
        status = wait(pid, within: grace)
        raise Timeout, "pid #{pid} not reaped within #{grace}s of KILL" unless status
      end
      deliver(:KILL, pid, group) if group # what it left behind in its group
      status
    rescue Errno::ECHILD
      forget(pid)
      nil
    end

    # Kills every child this process still has (the watchdog, the end of
    # the run): KILL at once, then a bounded reap.
    def kill_all
      live.each { |pid| stop(pid, grace: 1, signal: :KILL) }
    rescue StandardError => e
      warn "ChildProcess.kill_all: #{e.class}: #{e.message}"
    end

    # Whether `name` is an executable on PATH (no shell is started).
    def installed?(name)
      ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).any? do |dir|
        path = File.join(dir, name)
        File.file?(path) && File.executable?(path)
      end
    end

    # Kernel#system, bounded: true, false, or nil (could not run), as it.
    def system(*cmd, within: LIMIT, **opts)
      pid = spawn(*cmd, **opts)
      finish(pid, within: within).success?
    rescue SystemCallError
      nil
    end

    # Open3.popen2e without its unbounded wait: yields stdin, the merged
    # output and a waiter; when the block returns (or raises) the child is
    # stopped if still running. Returns the block's value.
    def popen2e(*cmd, **opts, &block)
      popen(:popen2e, cmd, opts, &block)
    end

    # Open3.popen2's counterpart of `popen2e` (stdout only).
    def popen2(*cmd, **opts, &block)
      popen(:popen2, cmd, opts, &block)
    end

    # IO#gets on a child's output, waiting at most `within` s for it to
    # become readable (a line the child writes in one piece).
    def gets(io, within: LIMIT)
      raise Timeout, "no output from the child within #{within}s" unless io.wait_readable(within)

      io.gets
    end

    # Open3.capture2e, bounded: [output, status].
    def capture2e(*cmd, stdin_data: nil, within: LIMIT, **opts)
      popen2e(*cmd, **opts) do |stdin, out, waiter|
        collect(waiter, within, stdin, stdin_data, out).then { |(o), status| [o, status] }
      end
    end

    # Open3.capture2, bounded: [stdout, status].
    def capture2(*cmd, stdin_data: nil, within: LIMIT, **opts)
      popen2(*cmd, **opts) do |stdin, out, waiter|
        collect(waiter, within, stdin, stdin_data, out).then { |(o), status| [o, status] }
      end
    end

    # Open3.capture3, bounded: [stdout, stderr, status].
    def capture3(*cmd, stdin_data: nil, within: LIMIT, **opts)
      stdin, out, err, waiter = Open3.popen3(*cmd, **{ pgroup: true }.merge(opts))
      track(waiter.pid, what(cmd), group: true, waiter: waiter)
      begin
        (o, e), status = collect(waiter, within, stdin, stdin_data, out, err)
        [o, e, status]
      ensure
        [stdin, out, err].each { |io| io.close unless io.closed? }
        stop(waiter.pid) if waiter.alive?
        forget(waiter.pid)
      end
    end

    # A short name for a command line, for messages.
    def what(cmd) = cmd.grep(String).first(3).join(" ")

    private

    def popen(kind, cmd, opts)
      stdin, out, waiter = Open3.public_send(kind, *cmd, **{ pgroup: true }.merge(opts))
      track(waiter.pid, what(cmd), group: true, waiter: waiter)
      begin
        yield stdin, out, waiter
      ensure
        [stdin, out].each { |io| io.close unless io.closed? }
        stop(waiter.pid) if waiter.alive?
        forget(waiter.pid)
      end
    end

    # Feeds stdin, reads the outputs to their end and reaps, all within
    # `within` s: [outputs, status].
    def collect(waiter, within, stdin, stdin_data, *outs)
      writer = Thread.new do
        stdin.write(stdin_data) if stdin_data
      rescue Errno::EPIPE, IOError
        nil
      ensure
        stdin.close unless stdin.closed?
      end
      name = what_of(waiter.pid)
      texts = outs.map { +"" }
      readers = outs.zip(texts).map { |io, text| Thread.new { drain(io, text) } }
      status = finish(waiter.pid, within: within, output: -> { texts.join })
      readers.each do |r|
        r.join(GRACE) or raise Timeout, "#{name} exited, but its output stayed open #{GRACE}s " \
                                        "(a process it left behind?); so far:\n#{texts.join}"
      end
      writer.join(GRACE)
      [texts.map { |t| t.force_encoding(Encoding.default_external) }, status]
    ensure
      readers&.each { |r| r.kill if r.alive? }
      writer.kill if writer&.alive?
    end

    def drain(io, text)
      loop { text << io.readpartial(65_536) }
    rescue EOFError, IOError
      text
    end

    def what_of(pid) = @lock.synchronize { @live.dig(pid, :what) } || "pid #{pid}"

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def poll(pid, within)
      deadline = now + within
      delay = 0.001
      loop do
        done, status = Process.waitpid2(pid, Process::WNOHANG)
        return status if done
        return nil if now >= deadline

        sleep [delay, deadline - now].min
        delay = [delay * 2, 0.05].min
      end
    end

    def forget(pid)
      @lock.synchronize { @live.delete(pid) }
    end

    def deliver(signal, pid, group)
      Process.kill(signal, group ? -pid : pid)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end
  end
end

# What is still running when the run ends is stopped, not left behind.
at_exit { ChildProcess.kill_all }
