# frozen_string_literal: true

require "fileutils"
require "tmpdir"

# Forked processes on one `shared:` breaker: one trip for all, exact counts,
# the probe quota across processes, a process killed while it holds the
# lock, the master-creates-then-forks pattern, and files that are not what
# the gem expects.
#
# Every wait has a deadline (SharedProcesses::DEADLINE): a hang becomes a
# failure naming what did not happen, and stragglers are killed with
# SIGKILL. No assertion depends on how long anything takes; real time passes
# only where open_duration must elapse across processes (0.3 s).
module SharedProcesses
  DEADLINE = 30

  # A process or pipe did not answer in time.
  class Stuck < StandardError; end
  # A worker raised, or exited without its report.
  class WorkerFailed < StandardError; end

  # Where glibc's robust mutex records its owner: the mutex's place in the
  # file's header comes from the extension, and the mutex's first word (its
  # futex) holds the owner's thread id (a process's main thread id is its pid).
  MUTEX_OFFSET = (CircuitBreaker.send(:__shared_mutex_offset) if TestHooks.available?)
  FUTEX_TID_MASK = 0x3fff_ffff

  @sequence = 0

  module_function

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # A number not used before by this process.
  def next_number
    @sequence += 1
  end

  # A forked child, and the pipe over which it reports: `out.(value)` in the
  # child is `receive` in the parent; the block's value is `result`.
  class Worker
    attr_reader :pid, :label

    def initialize(pid, io, label)
      @pid = pid
      @io = io
      @label = label
      @buffer = String.new(encoding: Encoding::BINARY)
      @status = nil
    end

    # The next value the child sent with `out.(value)`.
    def receive(within: DEADLINE)
      kind, value = read_message(within)
      raise WorkerFailed, "#{label}: expected a report, got its #{kind} #{value.inspect}" unless kind == :report

      value
    end

    # The value of the child's block (reports still unread are skipped);
    # waits for the child to exit.
    def result(within: DEADLINE)
      loop do
        kind, value = read_message(within)
        next unless kind == :result

        status = reap(within: within)
        raise WorkerFailed, "#{label} exited with #{status.inspect}" unless status.success?

        return value
      end
    end

    # Waits for the child to exit; kills it and raises {Stuck} after `within`.
    # @return [Process::Status]
    def reap(within: DEADLINE)
      return @status if @status

      @status = ChildProcess.wait(@pid, within: within)
      return @status if @status

      kill!
      raise Stuck, "#{label} (pid #{@pid}) did not exit within #{within}s (killed)"
    end

    # SIGKILL, then reap, bounded (idempotent).
    # @return [Process::Status]
    def kill!
      return @status if @status

      @status = ChildProcess.stop(@pid, signal: :KILL)
    ensure
      @io.close unless @io.closed?
    end

    private

    def read_message(within)
      limit = SharedProcesses.now + within
      loop do
        message = next_message
        if message
          raise WorkerFailed, "#{label} raised #{message[1]}" if message[0] == :error

          return message
        end
        left = limit - SharedProcesses.now
        if left <= 0
          kill!
          raise Stuck, "#{label} (pid #{@pid}) sent nothing within #{within}s (killed)"
        end
        next unless IO.select([@io], nil, nil, left)

        chunk = @io.read_nonblock(65_536, exception: false)
        raise WorkerFailed, "#{label} (pid #{@pid}) exited without reporting: #{reap.inspect}" if chunk.nil?

        @buffer << chunk if chunk.is_a?(String)
      end
    end

    def next_message
      return nil if @buffer.bytesize < 4

      length = @buffer.unpack1("N")
      return nil if @buffer.bytesize < 4 + length

      message = Marshal.load(@buffer.byteslice(4, length)) # rubocop:disable Security/MarshalLoad
      @buffer = @buffer.byteslice(4 + length..)
      message
    end
  end
end

RSpec.describe CircuitBreaker, "shared: between processes", :integration, :shared_memory do
  include SharedProcesses

  before do
    @workers = []
    @gates = []
    @names = []
  end

  after do
    @workers.each(&:kill!)
  end

  # A shared name of this example only (its file is removed once no process
  # maps it, by the next breaker opened in its directory).
  def shared_name(label)
    "spec-#{label}-#{Process.pid}-#{SharedProcesses.next_number}"
  end

  # The files of `key` in the shared directory.
  def files_of(key)
    base = ENV.fetch("CIRCUIT_BREAKER_SHM_DIR", "/dev/shm")
    Dir.glob(File.join(base, "circuit_breaker-#{Process.euid}", "circuit_breaker-*-#{key}-*"))
  end

  # Opens a shared breaker in a new process, whose first open removes the
  # files no live process maps (a process looks again at most once a
  # minute, docs/shared.md).
  def clean_shared_dir
    expect(fork_worker("cleaner") { described_class.new(shared: shared_name("cleaner")) && :opened }.result).to eq(:opened)
  end

  # A gate made before the workers that wait on it are forked.
  def gate
    ProcessGate.new.tap { |g| @gates << g }
  end

  # Forks a child that runs the block with `out` (a proc sending a value to
  # the parent) and sends the block's value when it ends. The child leaves
  # with exit!, so RSpec's at_exit hooks never run in it.
  def fork_worker(label = "worker #{@workers.size}")
    reader, writer = IO.pipe
    send_message = lambda do |message|
      data = Marshal.dump(message)
      writer.write([data.bytesize].pack("N"), data)
    end
    pid = ChildProcess.fork(label) do
      reader.close
      @gates.each(&:forget_parent_end)
      begin
        value = yield ->(v) { send_message.([:report, v]) }
        send_message.([:result, value])
        writer.close
        exit!(0)
      rescue Exception => e # rubocop:disable Lint/RescueException
        begin
          send_message.([:error, "#{e.class}: #{e.message} (#{e.backtrace&.first(3)&.join(' < ')})"])
        ensure
          exit!(1)
        end
      end
    end
    writer.close
    SharedProcesses::Worker.new(pid, reader, label).tap { |w| @workers << w }
  end

  def fail_call(breaker)
    breaker.call { raise BreakerHelpers::Boom, "down" }
  rescue BreakerHelpers::Boom
    nil
  end

  # [calls whose block ran, calls rejected] of `count` failing calls.
  def failing_calls(breaker, count)
    ran = rejected = 0
    count.times do
      breaker.call do
        ran += 1
        raise BreakerHelpers::Boom, "down"
      end
    rescue BreakerHelpers::Boom
      nil
    rescue CircuitBreaker::OpenError
      rejected += 1
    end
    [ran, rejected]
  end

  # The pid of the process holding the shared lock of the file at `path`
  # (0: nobody), as glibc records it.
  def lock_owner(path)
    File.binread(path, 4, SharedProcesses::MUTEX_OFFSET).unpack1("L") & SharedProcesses::FUTEX_TID_MASK
  end

  # A child that opens the shared breaker `key` (with the group's
  # `options`) and takes its lock for `ms` milliseconds; returns once the
  # file at `path` shows the lock held by that child.
  def lock_holder(key, path, ms)
    holder = fork_worker("lock holder") do |out|
      breaker = described_class.new(**options.call, shared: key)
      out.(:locking)
      breaker.send(:__hold_shared_lock, ms)
      :released
    end
    expect(holder.receive).to eq(:locking)
    wait_for("the lock held by the child (pid #{holder.pid}); has the header layout changed?") do
      lock_owner(path) == holder.pid
    end
    holder
  end

  # Whether process `pid` has ended, every thread of it: reaped, or a
  # zombie with no other thread left. /proc shows its main thread a zombie
  # ("Z") as soon as that thread has exited, while another (Ruby 3.3 and
  # later fork a timer thread into every child) may still be exiting; its
  # mappings, and so the IN_USE locks they keep, go only with the last
  # thread (without this, the rolling-deploy example saw its file still in
  # use in 3 of 5 loaded runs on Ruby 3.3 and 3.4).
  def gone?(pid)
    status = File.read("/proc/#{pid}/status")
    status.match?(/^State:\s+Z/) && status[/^Threads:\s+(\d+)/, 1] == "1"
  rescue Errno::ENOENT, Errno::ESRCH
    true
  end

  def wait_for(what, within: 10)
    limit = SharedProcesses.now + within
    until (value = yield)
      raise SharedProcesses::Stuck, "#{what}: not within #{within}s" if SharedProcesses.now > limit

      sleep 0.005
    end
    value
  end

  describe "a trip" do
    it "caused by failures in some processes opens the breaker for every process" do
      key = shared_name("trip")
      # The window's rule (10 calls at 50 %), the default streak of 8 off.
      options = lambda {
        { window: CircuitBreaker::SlidingWindow.new(size: 20), min_calls: 10, open_duration: 30, consecutive_failures: nil }
      }
      parent = described_class.new(**options.call, shared: key)
      start = gate
      check = gate
      failers = Array.new(3) do
        fork_worker do |out|
          breaker = described_class.new(**options.call, shared: key)
          out.(breaker.state)
          start.wait
          failing_calls(breaker, 6)
        end
      end
      checkers = Array.new(3) do
        fork_worker do |out|
          breaker = described_class.new(**options.call, shared: key)
          out.(breaker.state)
          check.wait
          ran = false
          error = begin
            breaker.call { ran = true }
            nil
          rescue CircuitBreaker::OpenError => e
            [e.class.name, e.state, e.breaker_name]
          end
          [breaker.state, ran, error]
        end
      end
      expect((failers + checkers).map(&:receive)).to all(eq(:closed))

      start.open!
      ran, rejected = failers.map(&:result).transpose.map(&:sum)

      # 10 failures trip it; the other failers may each have one call in
      # flight then, whose outcome belongs to the closed generation.
      expect(ran).to be_between(10, 12)
      expect(ran + rejected).to eq(18)
      expect(parent.state).to eq(:open)
      parent_ran = false
      expect { parent.call { parent_ran = true } }.to raise_error(CircuitBreaker::OpenError)
      expect(parent_ran).to be(false)

      check.open!
      expect(checkers.map(&:result)).to all(eq([:open, false, ["CircuitBreaker::OpenError", :open, key]]))
      expect(parent.metrics[:rejected]).to eq(rejected + 1 + checkers.size)
    end
  end

  describe "counts" do
    it "are exact after 6 processes x 2000 calls on a breaker that cannot trip", :test_hooks do
      key = shared_name("counts")
      processes = 6
      calls = 2000
      options = lambda do
        { window: CircuitBreaker::SlidingWindow.new(size: 20_000), error_rate_threshold: 1.0,
          slow_rate_threshold: 1.0, min_calls: 1_000_000_000, consecutive_failures: nil }
      end
      # Call i of process p: a failure when (i + p) % 3 == 0; every fifth
      # call goes through allow?/record_* instead of a block.
      failure = ->(p, i) { ((i + p) % 3).zero? }
      parent = described_class.new(**options.call, shared: key)
      start = gate
      workers = Array.new(processes) do |p|
        fork_worker do |out|
          breaker = described_class.new(**options.call, shared: key)
          # Counting, not the bounded wait: on a busy CI machine a holder
          # descheduled past 100 ms would make a record be dropped (and
          # counted in dropped_records), as docs/shared.md says.
          breaker.send(:__lock_wait=, 60)
          out.(:ready)
          start.wait
          admitted = 0
          calls.times do |i|
            if (i % 5).zero?
              raise "rejected" unless breaker.allow?

              admitted += 1
              breaker.record(!failure.(p, i), duration_ms: 1)
            else
              begin
                breaker.call do
                  admitted += 1
                  raise BreakerHelpers::Boom, "down" if failure.(p, i)

                  :ok
                end
              rescue BreakerHelpers::Boom
                nil
              end
            end
          end
          admitted
        end
      end
      workers.each(&:receive)

      start.open!

      expect(workers.map(&:result)).to all(eq(calls))
      failures = Array.new(processes) { |p| calls.times.count { |i| failure.(p, i) } }.sum
      expect(parent.metrics).to include(state: :closed, total: processes * calls, failures: failures,
                                        slow_calls: 0, rejected: 0)
      expect([parent.window.total, parent.window.failures]).to eq([processes * calls, failures])
    end

    it "survive a race to create the file, and every process leaving" do
      key = shared_name("create")
      options = -> { { window: CircuitBreaker::SlidingWindow.new(size: 100), min_calls: 100 } }
      start = gate
      workers = Array.new(8) do
        fork_worker do |out|
          out.(:ready)
          start.wait
          breaker = described_class.new(**options.call, shared: key) # all at once
          # Eight processes on a busy machine: a holder descheduled past the
          # 100 ms bound would make a record be dropped (docs/shared.md), and
          # this example counts creations, not the bound.
          breaker.send(:__lock_wait=, 60) if TestHooks.available?
          breaker.call { :ok }
          fail_call(breaker)
          :done
        end
      end
      workers.each(&:receive)
      expect(files_of(key)).to be_empty

      start.open!
      expect(workers.map(&:result)).to all(eq(:done))

      breaker = described_class.new(**options.call, shared: key)
      expect(breaker.metrics).to include(state: :closed, total: 16, failures: 8)
    end
  end

  describe "half-open" do
    it "admits at most half_open_calls probes across processes, and counts their rejections once" do
      key = shared_name("probes")
      options = lambda do
        { window: CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 60_000), min_calls: 2,
          open_duration: 0.3, half_open_calls: 3 }
      end
      parent = described_class.new(**options.call, shared: key)
      2.times { fail_call(parent) }
      expect(parent.state).to eq(:open)
      start = gate
      release = gate
      workers = Array.new(7) do
        fork_worker do |out|
          breaker = described_class.new(**options.call, shared: key)
          out.(:ready)
          start.wait
          begin
            # Each probe stays in flight until every process has tried.
            breaker.call do
              out.(:admitted)
              release.wait
              :ok
            end
            :probed
          rescue CircuitBreaker::OpenError => e
            out.(:rejected)
            e.state
          end
        end
      end
      workers.each(&:receive)
      wait_for("half-open after open_duration") { parent.state == :half_open }

      start.open!
      outcomes = workers.map(&:receive)

      expect(outcomes.count(:admitted)).to eq(3)
      expect(outcomes.count(:rejected)).to eq(4)
      parent_ran = false
      expect { parent.call { parent_ran = true } }.to raise_error(CircuitBreaker::OpenError)
      expect(parent_ran).to be(false)
      expect(parent.metrics).to include(state: :half_open, rejected: 5)

      release.open!
      expect(workers.map(&:result).tally).to eq(probed: 3, half_open: 4)
      expect(parent.state).to eq(:closed)
    end
  end

  describe "a process killed with SIGKILL" do
    let(:options) do
      -> { { window: CircuitBreaker::SlidingWindow.new(size: 100), min_calls: 50, open_duration: 30 } }
    end

    it "while it holds the lock does not block the others, and leaves the breaker consistent", :test_hooks do
      key = shared_name("kill")
      parent = described_class.new(**options.call, shared: key)
      path = parent.shared_path
      10.times { parent.call { :ok } }
      5.times { fail_call(parent) }
      holder = lock_holder(key, path, 20_000)
      # A process already waiting for the lock when its holder dies.
      waiter = fork_worker("waiter") do |out|
        breaker = described_class.new(**options.call, shared: key)
        out.(:calling)
        breaker.call { :ok }
      end
      expect(waiter.receive).to eq(:calling)

      status = holder.kill!
      expect(status.termsig).to eq(Signal.list.fetch("KILL"))

      expect(waiter.result).to eq(:ok)
      latecomer = fork_worker("latecomer") do
        breaker = described_class.new(**options.call, shared: key)
        [breaker.call { :ok }, breaker.metrics[:total]]
      end
      expect(latecomer.result).to eq([:ok, 17])
      expect(parent.call { :ok }).to eq(:ok)
      expect(parent.metrics).to include(state: :closed, total: 18, failures: 5, rejected: 0)
      expect(lock_owner(path)).to eq(0)

      ran, = failing_calls(parent, 100)
      expect(parent.state).to eq(:open)
      expect(ran).to be_between(1, 100)
    end

    it "during a half-open probe holds its slot only until probe_timeout (open_duration by default) fails it" do
      key = shared_name("dead-probe")
      options = lambda do
        { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 2, open_duration: 0.3,
          half_open_calls: 1, backoff: 3.0 } # no half_open_timeout: the default nil; reopened for 0.9 s
      end
      parent = described_class.new(**options.call, shared: key)
      seen = transitions_of(parent)
      2.times { fail_call(parent) }
      # The prober itself ends the open period: the stage (and its
      # half_open_timeout) begins with its admission, however slowly a
      # loaded machine starts the process.
      prober = fork_worker("prober") do |out|
        breaker = described_class.new(**options.call, shared: key)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
        begin
          breaker.call do
            out.(:probing)
            sleep 30 # killed before it ends
          end
        rescue CircuitBreaker::OpenError
          raise if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

          sleep 0.01
          retry
        end
      end
      expect(prober.receive).to eq(:probing)

      expect(prober.kill!.termsig).to eq(Signal.list.fetch("KILL"))
      expect { parent.call { :ok } }.to raise_error(CircuitBreaker::OpenError) # its slot is still taken

      wait_for("reopened by probe_timeout") do
        parent.state && moves(seen).include?(%i[half_open open probe_timeout])
      end
      wait_for("half-open again") { parent.state == :half_open }
      expect(parent.call { :ok }).to eq(:ok)
      expect(parent.state).to eq(:closed)
    end

    it "at any point of its calls leaves counts that stay exact" do
      key = shared_name("kill-busy")
      window_size = 1000
      options = lambda do
        { window: CircuitBreaker::SlidingWindow.new(size: window_size), error_rate_threshold: 1.0,
          slow_rate_threshold: 1.0, min_calls: 1_000_000_000, consecutive_failures: nil } # never opens
      end
      parent = described_class.new(**options.call, shared: key)
      busy = Array.new(3) do |p|
        fork_worker("busy #{p}") do |out|
          breaker = described_class.new(**options.call, shared: key)
          n = 0
          loop do
            n += 1
            out.(:running) if n == 200
            if n.odd?
              fail_call(breaker)
            else
              breaker.call { :ok }
            end
          end
        end
      end
      busy.each { |w| expect(w.receive).to eq(:running) }

      busy.each do |w|
        sleep rand(0.005..0.05)
        expect(w.kill!.termsig).to eq(Signal.list.fetch("KILL"))
      end

      probe = fork_worker("probe") do
        described_class.new(**options.call, shared: key).call { :ok }
      end
      expect(probe.result).to eq(:ok)
      m = parent.metrics
      expect(m[:state]).to eq(:closed)
      expect(m[:total]).to be_between(1, window_size)
      expect(m[:failures]).to be_between(0, m[:total])
      expect(m[:error_rate]).to be_within(1e-9).of(m[:failures].fdiv(m[:total]))
      # Overwrite every slot of the ring: the running counts must follow.
      window_size.times { parent.call { :ok } }
      expect(parent.metrics).to include(total: window_size, failures: 0, slow_calls: 0)
      # All but one failed: error rate 1.0 at min_calls (clamped to the size) would trip it.
      (window_size - 1).times { fail_call(parent) }
      expect(parent.metrics).to include(state: :closed, total: window_size, failures: window_size - 1)
    end
  end

  describe "a breaker created in the master before fork (Puma, Unicorn)" do
    it "is shared by the workers, and only the process that tripped it sees the transition" do
      key = shared_name("master")
      workers_count = 6
      min_calls = 10
      breaker = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 50), min_calls: min_calls,
                                    open_duration: 30, consecutive_failures: nil, shared: key) # the window's rule
      seen = transitions_of(breaker) # the listener is inherited by each worker
      start = gate
      workers = Array.new(workers_count) do
        fork_worker do |out|
          out.(:ready)
          start.wait
          ran, rejected = failing_calls(breaker, 20)
          [ran, rejected, moves(seen), breaker.state]
        end
      end
      workers.each(&:receive)

      start.open!
      results = workers.map(&:result)

      openers = results.count { |(_, _, events, _)| events.include?(%i[closed open error_rate]) }
      expect(openers).to eq(1)
      expect(results.flat_map { |r| r[2] }).to eq([%i[closed open error_rate]])
      expect(results.map(&:last)).to all(eq(:open))
      ran = results.sum { |r| r[0] }
      rejected = results.sum { |r| r[1] }
      # min_calls failures trip it; every other worker may have one call in flight.
      expect(ran).to be_between(min_calls, min_calls + workers_count - 1)
      expect(ran + rejected).to eq(workers_count * 20)
      expect(seen).to be_empty # the master caused nothing
      expect(breaker.metrics).to include(state: :open, rejected: rejected)
    end
  end

  describe "files that are not what the gem expects" do
    let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 2, open_duration: 30 } }

    def open_breaker(key, **overrides)
      described_class.new(**options, **overrides, shared: key)
    end

    # The path of `key`'s file, made and left by another process (which no
    # longer maps it); deleted after the example, since what the examples
    # leave there is not the gem's to clean up (bin/test checks that the
    # suite leaves no file behind).
    def path_of(key)
      fork_worker { open_breaker(key).shared_path }.result.tap { |path| (@planted ||= []) << path }
    end

    after { @planted&.each { |path| FileUtils.rm_f(path) } }

    # The size of a file the gem makes for `options`.
    def file_size
      File.size(path_of(shared_name("size")))
    end

    it "refuses random bytes of the right size, and leaves them alone" do
      key = shared_name("random")
      path = path_of(key)
      junk = "NOTOURS!".b + Random.bytes(file_size - 8)
      File.binwrite(path, junk)
      File.chmod(0o600, path)

      expect { open_breaker(key) }.to raise_error(ArgumentError, /\Ashared: .*not a circuit_breaker file/)
      expect(File.binread(path)).to eq(junk)
    end

    it "refuses a file of another size" do
      key = shared_name("size")
      path = path_of(key)
      [17, file_size + 64].each do |size|
        File.binwrite(path, Random.bytes(size))
        expect { open_breaker(key) }.to raise_error(ArgumentError, /\Ashared: /)
        expect(File.size(path)).to eq(size)
      end
    end

    it "initialises an empty private file made beforehand" do
      key = shared_name("empty")
      path = path_of(key)
      File.write(path, "")
      File.chmod(0o600, path)

      a = open_breaker(key)
      b = open_breaker(key)
      2.times { fail_call(a) }

      expect(b.state).to eq(:open)
      expect(File.binread(path, 8)).to eq("CBREAKR\0".b)
    end

    it "refuses a file of another layout version" do
      key = shared_name("version")
      path = path_of(key) # made and left by another process
      File.open(path, "r+b") { |f| f.pwrite([99].pack("L"), 8) }

      expect { open_breaker(key) }.to raise_error(ArgumentError, /\Ashared: .*layout version/)
      expect(File.binread(path, 4, 8).unpack1("L")).to eq(99)
    end

    it "rebuilds a file whose creator died before it was ready" do
      key = shared_name("unready")
      maker = fork_worker do
        breaker = open_breaker(key)
        2.times { fail_call(breaker) }
        [breaker.state, breaker.shared_path]
      end
      state, path = maker.result
      expect(state).to eq(:open)
      File.open(path, "r+b") { |f| f.pwrite([0].pack("L"), 12) }

      breaker = open_breaker(key)
      expect(breaker.metrics).to include(state: :closed, total: 0)
      2.times { fail_call(breaker) }
      expect(open_breaker(key).state).to eq(:open)
    end

    # /dev/shm is writable by every user: another user may plant the file
    # (or a link) at a name before the breaker's owner opens it.
    def refused_or_system_error(error)
      expect(error).to be_a(SystemCallError).or be_a(ArgumentError)
    end

    it "does not follow a symbolic link planted at the path, and refuses it with an ArgumentError" do
      key = shared_name("link")
      Dir.mktmpdir do |dir|
        target = File.join(dir, "victim")
        File.write(target, "")
        path = path_of(key)
        File.delete(path)
        File.symlink(target, path)

        expect { open_breaker(key) }.to raise_error(ArgumentError, /\Ashared: #{Regexp.escape(path)} .*private to it/)
        expect(File.size(target)).to eq(0)
      end
    end

    it "does not adopt a file another user owns" do
      skip "needs root to make a file of another user" unless Process.uid.zero?
      key = shared_name("foreign-owner")
      path = path_of(key)
      File.write(path, "")
      File.chmod(0o666, path)
      File.chown(65_534, 65_534, path)

      expect { open_breaker(key) }.to raise_error { |e| refused_or_system_error(e) }
    end

    it "refuses a file that other users may read or write" do
      key = shared_name("open-to-all")
      path = path_of(key)
      File.write(path, "")
      File.chmod(0o644, path)

      expect { open_breaker(key) }.to raise_error(ArgumentError, /\Ashared: .*private to it/)
      expect(File.size(path)).to eq(0)
    end

    it "gives another configuration or window its own file, so old and new workers both boot" do
      key = shared_name("config")
      first = open_breaker(key)
      2.times { first.call { :ok } }
      others = [
        { min_calls: 3 }, { error_rate_threshold: 0.4 }, { slow_rate_threshold: 0.9 }, { open_duration: 31 },
        { half_open_calls: 3 }, { ramp: [0.5] }, { ramp: [0.5, 1.0] }, { advance_rate: 0.9 },
        { reopen_rate: 0.5 }, { half_open_timeout: 5 }, { backoff: 2.0 }, { max_open_duration: 60 },
        { jitter: 0.1 },
        { window: CircuitBreaker::SlidingWindow.new(size: 11) },
        { window: CircuitBreaker::SlidingWindow.new(size: 10, slow_threshold_ms: 100) },
        { window: CircuitBreaker::TimeWindow.new(seconds: 10, buckets: 10) }
      ]
      paths = others.map do |other|
        breaker = open_breaker(key, **other)
        expect(breaker.metrics).to include(state: :closed, total: 0), "for #{other.inspect}"
        breaker.shared_path
      end
      expect(paths.uniq.size).to eq(others.size)
      expect(paths).not_to include(first.shared_path)
      # A new worker of the old configuration (a rolling deploy's other half).
      in_child = fork_worker do
        [open_breaker(key, min_calls: 3).metrics[:total], open_breaker(key).metrics[:total]]
      end
      expect(in_child.result).to eq([0, 2])

      second = open_breaker(key)
      fail_call(second)
      expect(first.metrics).to include(state: :closed, total: 3, failures: 1)
    end

    it "accepts options that stay in each process (name, listeners, errors, failure_if, logger)" do
      key = shared_name("local")
      a = open_breaker(key, name: "a", record_errors: [BreakerHelpers::Boom], failure_if: ->(v) { v == :bad })
      b = open_breaker(key, name: "b", ignore_errors: [BreakerHelpers::Boom])
      a.call { :bad }
      expect { b.call { raise BreakerHelpers::Boom } }.to raise_error(BreakerHelpers::Boom)

      expect(a.metrics).to include(total: 1, failures: 1)
    end

    describe "an unusable place", :shm_dir do
      def refused_in(dir)
        ENV["CIRCUIT_BREAKER_SHM_DIR"] = dir
        key = shared_name("place")
        expect { open_breaker(key) }.to raise_error(SystemCallError) { |e| yield e if block_given? }
      end

      it "raises the system's error: a directory that cannot hold files" do
        refused_in("/proc")
      end

      it "raises the system's error: a directory that is a file" do
        Dir.mktmpdir do |dir|
          file = File.join(dir, "a-file")
          File.write(file, "")
          refused_in(file) { |e| expect(e).to be_a(Errno::ENOTDIR) }
        end
      end

      it "raises the system's error: a directory that does not exist" do
        Dir.mktmpdir do |dir|
          refused_in(File.join(dir, "missing")) { |e| expect(e).to be_a(Errno::ENOENT) }
        end
      end

      it "raises the system's error: a directory without write permission" do
        skip "permissions do not apply to root" if Process.uid.zero?

        Dir.mktmpdir do |dir|
          File.chmod(0o500, dir)
          refused_in(dir) { |e| expect(e).to be_a(Errno::EACCES) }
        ensure
          File.chmod(0o700, dir)
        end
      end

      it "is used when it works" do
        Dir.mktmpdir do |dir|
          ENV["CIRCUIT_BREAKER_SHM_DIR"] = dir
          breaker = open_breaker(shared_name("place"))
          expect(File.dirname(breaker.shared_path)).to eq(File.join(dir, "circuit_breaker-#{Process.euid}"))
          expect(File.exist?(breaker.shared_path)).to be(true)
        end
      end
    end
  end

  describe "a process stopped while it holds the lock", :test_hooks do
    let(:clock) { CircuitBreaker::ManualClock.new }
    let(:options) do
      -> { { window: CircuitBreaker::SlidingWindow.new(size: 100), min_calls: 50, open_duration: 30, half_open_calls: 1 } }
    end

    # A child that takes the shared lock of `key` and is then stopped
    # (SIGSTOP) while it holds it; killed by the after hook.
    def stopped_holder(key, path)
      holder = lock_holder(key, path, 60_000)
      Process.kill(:STOP, holder.pid)
      holder
    end

    # Kills the stopped holder: the next locker recovers the lock.
    def release(holder)
      Process.kill(:CONT, holder.pid)
      expect(holder.kill!.termsig).to eq(Signal.list.fetch("KILL"))
    end

    it "decides calls from the published state without the lock, drops and counts records, and raises nothing" do
      key = shared_name("stopped")
      parent = described_class.new(**options.call, shared: key)
      parent.call { :ok }
      holder = stopped_holder(key, parent.shared_path)

      # Closed admits: the blocks run, their records are dropped.
      expect(Array.new(5) { parent.call { :ran } }).to all(eq(:ran))
      expect(parent.allow?).to be(true)
      parent.record_success
      expect(parent.state).to eq(:closed) # the published state

      release(holder)
      expect(parent.metrics).to include(state: :closed, total: 1, dropped_records: 6)
    end

    it "rejects while open and refuses half-open probes, from the published state" do
      key = shared_name("stopped-open")
      parent = described_class.new(**options.call, clock: clock, shared: key)
      parent.trip!
      holder = stopped_holder(key, parent.shared_path)

      ran = false
      expect { parent.call { ran = true } }.to raise_error(CircuitBreaker::OpenError) { |e|
        expect([e.state, e.retry_after]).to eq([:open, 30.0])
      }
      expect(parent.allow?).to be(false)
      expect(ran).to be(false)
      release(holder)

      clock.advance(30)
      expect(parent.state).to eq(:half_open) # published by this step
      holder = stopped_holder(key, parent.shared_path)
      expect { parent.call { ran = true } }.to raise_error(CircuitBreaker::OpenError) { |e| expect(e.state).to eq(:half_open) }
      expect(ran).to be(false)
      expect { parent.metrics }.to raise_error(CircuitBreaker::LockTimeoutError, /stayed busy/)
      expect { parent.trip! }.to raise_error(CircuitBreaker::LockTimeoutError)
      release(holder)
      expect(parent.metrics).to include(state: :half_open, dropped_records: 0)
    end

    it "never holds the GVL while waiting: the waiting process's other threads run, and Timeout cuts the wait" do
      key = shared_name("stopped-gvl")
      parent = described_class.new(**options.call, shared: key)
      holder = stopped_holder(key, parent.shared_path)
      victim = fork_worker("victim") do
        breaker = described_class.new(**options.call, shared: key)
        breaker.send(:__lock_wait=, 60) # far longer than anything below waits
        ticks = 0
        counter = Thread.new do
          loop do
            ticks += 1
            sleep 0.001
          end
        end
        entered = false
        waiter = Thread.new do
          Timeout.timeout(1) { breaker.call { entered = true } } # closed: its record waits for the lock
        rescue Timeout::Error
          :timed_out
        end
        limit = SharedProcesses.now + 20
        sleep 0.001 until entered || SharedProcesses.now > limit
        seen = ticks
        sleep 0.001 until ticks > seen + 20 || SharedProcesses.now > limit
        ran_meanwhile = ticks > seen + 20 && waiter.alive?
        result = waiter.value
        counter.kill
        [entered, ran_meanwhile, result]
      end

      expect(victim.result(within: 20)).to eq([true, true, :timed_out])
      release(holder)
    end

    it "raises a lock error other than a dead owner, and takes no step without the lock" do
      key = shared_name("broken")
      parent = described_class.new(**options.call, shared: key)
      parent.trip!
      # An invalid mutex kind (glibc: the word after lock, count, owner, nusers).
      File.open(parent.shared_path, "r+b") { |f| f.pwrite([0x7f].pack("L"), SharedProcesses::MUTEX_OFFSET + 16) }

      ran = false
      expect { parent.call { ran = true } }.to raise_error(SystemCallError)
      expect(ran).to be(false)
      expect { parent.metrics }.to raise_error(SystemCallError)
    end
  end

  describe "a file system without room", :shm_dir do
    it "is an Errno at construction, never a SIGBUS" do
      skip "needs root to mount a tiny tmpfs" unless Process.uid.zero?
      Dir.mktmpdir do |dir|
        out, status = ChildProcess.capture2e("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir)
        skip "cannot mount a tmpfs here: #{out.strip}" unless status.success?
        begin
          ENV["CIRCUIT_BREAKER_SHM_DIR"] = dir
          key = shared_name("tiny")
          # In a child: a SIGBUS would kill it rather than the suite.
          big = fork_worker("big") do
            described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 1_000_000), shared: key)
            :built
          rescue SystemCallError => e
            e.class.name
          end
          expect(big.result).to eq("Errno::ENOSPC")

          small = fork_worker("small") do
            breaker = described_class.new(window: CircuitBreaker::SlidingWindow.new(size: 10), shared: key)
            breaker.call { :ok }
          end
          expect(small.result).to eq(:ok)
        ensure
          ChildProcess.system("umount", dir, within: 30)
        end
      end
    end
  end

  describe "a file whose creator died before writing its header" do
    it "is rebuilt under the init lock" do
      key = shared_name("zeros")
      options = { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 2 }
      path = fork_worker { described_class.new(**options, shared: key).shared_path }.result
      File.binwrite(path, "\0" * File.size(path))

      breaker = described_class.new(**options, shared: key)
      expect(breaker.metrics).to include(state: :closed, total: 0)
      2.times { fail_call(breaker) }
      expect(described_class.new(**options, shared: key).state).to eq(:open)
    end
  end

  describe "files of a rolling deploy" do
    let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 2 } }

    it "are removed once no live process maps them, and kept while one does" do
      key = shared_name("deploy")
      release = gate
      old_worker = fork_worker("old worker") do |out|
        breaker = described_class.new(**options, min_calls: 3, shared: key) # the old configuration
        out.(breaker.shared_path)
        release.wait
        :done
      end
      # Its first open (which looks for unused files) before the finished
      # worker's file exists: else that look may find it unused already.
      old_path = old_worker.receive
      gone = fork_worker("finished worker") { described_class.new(**options, min_calls: 4, shared: key).shared_path }
      gone_path = gone.result
      expect(File.exist?(gone_path)).to be(true) # nobody removed it yet

      new_worker = described_class.new(**options, shared: key)
      clean_shared_dir

      expect(File.exist?(gone_path)).to be(false)
      expect(File.exist?(old_path)).to be(true)
      expect(File.exist?(new_worker.shared_path)).to be(true)

      release.open!
      expect(old_worker.result).to eq(:done)
      clean_shared_dir
      expect(File.exist?(old_path)).to be(false)
      expect(File.exist?(new_worker.shared_path)).to be(true)
    end

    it "stay in use by a forked child after the parent lets go of them" do
      key = shared_name("inherited")
      path = fork_worker do |out|
        breaker = described_class.new(**options, shared: key)
        grandchild = ChildProcess.fork do
          sleep 30 # holds the inherited mapping until killed
          exit!(0)
        end
        out.(grandchild)
        breaker.shared_path
      end.then do |maker|
        @grandchild = maker.receive
        maker.result
      end

      clean_shared_dir
      expect(File.exist?(path)).to be(true)

      Process.kill(:KILL, @grandchild)
      wait_for("the grandchild gone, every thread of it") { gone?(@grandchild) }
      clean_shared_dir
      expect(File.exist?(path)).to be(false)
    ensure
      begin
        Process.kill(:KILL, @grandchild) if @grandchild
      rescue Errno::ESRCH
        nil
      end
    end
  end
end
