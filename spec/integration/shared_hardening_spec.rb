# frozen_string_literal: true

require "fcntl"
require "timeout"
require "tmpdir"

# What `shared:` costs a host and what a stuck, hostile or time-faking
# neighbour can do to it (docs/shared.md, "Costs" and "Where"): waits on the
# monotonic clock and without the GVL, opening included; a directory
# private to the user; no file descriptor per breaker; no directory scan at
# every open. Every wait has a deadline; stragglers are killed.
RSpec.describe CircuitBreaker, "shared: hardening", :integration, :shared_memory do
  # Where glibc's robust mutex keeps its owner's thread id (see
  # spec/integration/shared_spec.rb, SharedProcesses::MUTEX_OFFSET).
  def lock_owner(path)
    File.binread(path, 4, 48).unpack1("L") & 0x3fff_ffff
  end

  let(:options) { { window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 5 } }

  def shared_name(label)
    @sequence = (@sequence || 0) + 1
    "spec-hardening-#{label}-#{Process.pid}-#{@sequence}"
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Runs the block in a forked child; its value comes back through a pipe.
  # The child is killed after `within` seconds.
  def in_child(within: 30)
    reader, writer = IO.pipe
    pid = ChildProcess.fork do
      reader.close
      value = begin
        yield
      rescue Exception => e # rubocop:disable Lint/RescueException
        "#{e.class}: #{e.message}"
      end
      writer.write(Marshal.dump(value))
      writer.close
      exit!(0)
    end
    writer.close
    raise "child #{pid} did not answer within #{within}s" unless reader.wait_readable(within)

    Marshal.load(reader.read) # rubocop:disable Security/MarshalLoad
  ensure
    reader&.close
    ChildProcess.stop(pid, signal: :KILL) if pid
  end

  # Takes an open-file-description lock on `byte` of the file at `path`
  # through a new descriptor, as another process's opener would.
  def ofd_lock(path, byte)
    file = File.open(path, "r+b")
    flock = [Fcntl::F_WRLCK, IO::SEEK_SET, byte, 1, 0].pack("s s x4 q q l x4") # struct flock (64-bit Linux)
    file.fcntl(37, flock) # F_OFD_SETLK
    file
  end

  describe "opening a file another process is building" do
    it "waits without the GVL: the process's other threads run, and Timeout cuts the wait" do
      key = shared_name("init")
      path = described_class.new(**options, shared: key).shared_path
      init = ofd_lock(path, 0) # as an opener stopped while it holds INIT

      ticks = 0
      ticker = Thread.new do
        loop do
          ticks += 1
          sleep 0.001
        end
      end
      started = now
      opened = begin
        Timeout.timeout(0.5) { described_class.new(**options, shared: key) }
      rescue Timeout::Error
        :timed_out
      end
      waited = now - started
      ticker.kill

      expect(opened).to eq(:timed_out)
      expect(waited).to be < 5 # the open's own bound is 10 s
      expect(ticks).to be > 20
      init.close
      expect(described_class.new(**options, shared: key).shared_path).to eq(path)
    end
  end

  describe "a clock faked or stepped", :test_hooks, if: FakeTime.installed? do
    it "never stretches a bounded wait for the lock: it is on the kernel's monotonic clock" do
      key = shared_name("faketime")
      path = described_class.new(**options, shared: key).shared_path
      holder = ChildProcess.fork do
        described_class.new(**options, shared: key).send(:__hold_shared_lock, 60_000)
        exit!(0)
      end
      limit = now + 10
      sleep 0.005 until lock_owner(path) == holder || now > limit
      Process.kill(:STOP, holder)

      script = <<~RUBY
        require "circuit_breaker"
        breaker = CircuitBreaker.new(window: CircuitBreaker::SlidingWindow.new(size: 10), min_calls: 5, shared: #{key.dump})
        breaker.send(:__lock_wait=, 0.1)
        begin
          breaker.metrics
          puts "locked"
        rescue CircuitBreaker::LockTimeoutError
          puts "gave up"
        end
      RUBY
      lib = File.expand_path("../../lib", __dir__)
      # A day ahead: libfaketime moves CLOCK_REALTIME and CLOCK_MONOTONIC.
      begin
        out, = ChildProcess.capture2e(FakeTime.env("+1d"), RbConfig.ruby, "-I", lib, "-e", script, within: 15)
      rescue ChildProcess::Timeout
        raise "the faked process still waited for the lock after 15 s"
      end
      expect(out).to eq("gave up\n")
    ensure
      ChildProcess.stop(holder, signal: :KILL) if holder
    end
  end

  describe "the directory", :shm_dir do
    let(:other_user) { "nobody" }

    def as_other_user(*command)
      ChildProcess.capture2e("setpriv", "--reuid=#{other_user}", "--regid=nogroup", "--clear-groups", *command)
    end

    before do
      skip "needs root and setpriv to act as a second user" unless Process.euid.zero? && ChildProcess.installed?("setpriv")
    end

    it "is created private to the user: another user can neither list nor enter it" do
      Dir.mktmpdir do |base|
        File.chmod(0o1777, base) # like /dev/shm
        ENV["CIRCUIT_BREAKER_SHM_DIR"] = base
        path = described_class.new(**options, shared: shared_name("private")).shared_path
        dir = File.dirname(path)

        expect(File.stat(dir).mode & 0o7777).to eq(0o700)
        out, status = as_other_user("ls", dir)
        expect([status.success?, out]).to match([false, /Permission denied/])
        _, status = as_other_user("touch", File.join(dir, "planted"))
        expect(status.success?).to be(false)
      end
    end

    it "is refused, naming its owner, when another user made it first" do
      Dir.mktmpdir do |base|
        File.chmod(0o1777, base)
        ENV["CIRCUIT_BREAKER_SHM_DIR"] = base
        planted = File.join(base, "circuit_breaker-#{Process.euid}")
        out, status = as_other_user("mkdir", "-m", "0777", planted)
        expect(status.success?).to be(true), out

        expect { described_class.new(**options, shared: shared_name("planted")) }
          .to raise_error(ArgumentError, /#{Regexp.escape(planted)} belongs to nobody \(uid \d+\), not to this user/)
      end
    end
  end

  describe "costs" do
    it "keeps no file descriptor per breaker: 300 breakers open under a limit of 32 more descriptors" do
      opened = in_child do
        open_now = Dir.children("/proc/self/fd").size
        Process.setrlimit(:NOFILE, open_now + 32)
        breakers = Array.new(300) { |i| described_class.new(**options, shared: shared_name("fd-#{i}")) }
        breakers.first.call { :ok }
        [breakers.size, Dir.children("/proc/self/fd").size - open_now]
      end

      expect(opened).to be_an(Array), opened.inspect
      expect(opened).to match([300, be <= 2])
    end

    it "looks for unused files at a process's first open, not at every open" do
      still_there = in_child do
        described_class.new(**options, shared: shared_name("first")) # this process's scan
        unused = in_child { described_class.new(**options, shared: shared_name("finished")).shared_path }
        described_class.new(**options, shared: shared_name("second"))
        exists = File.exist?(unused)
        File.delete(unused) if exists
        exists
      end

      expect(still_there).to be(true)
    end
  end
end
