# frozen_string_literal: true

require "stringio"
require "logger"
require "tmpdir"

# CircuitBreaker.for is host-wide by default (docs/shared.md, "Host
# scope"): one state for every process of the host, unless configured
# per process, opted out with `shared: false`, in a test environment, or
# when the host cannot have it (then per process, with one warning).
RSpec.describe CircuitBreaker, "host scope", :shm_dir do
  let(:log) { StringIO.new }

  around do |example|
    saved = %w[RAILS_ENV RACK_ENV APP_ENV].to_h { |v| [v, ENV.fetch(v, nil)] }
    %w[RAILS_ENV RACK_ENV APP_ENV].each { |v| ENV.delete(v) }
    described_class.configure do |c|
      c.scope = nil # chosen by the environment, as in an app
      c.logger = Logger.new(log)
    end
    described_class.const_get(:Registry).instance_variable_set(:@scope_warned, false)
    example.run
  ensure
    saved.each { |k, v| v ? ENV[k] = v : ENV.delete(k) }
    described_class.configure do |c|
      c.scope = :process # as spec/spec_helper.rb sets it
      c.logger = nil
    end
    described_class.const_get(:Registry).instance_variable_set(:@scope_warned, false)
    described_class.forget_all!
  end

  def name_of(label)
    "spec-scope-#{label}-#{Process.pid}-#{rand(1 << 30)}"
  end

  # Runs the block in a forked child; its value comes back through a pipe.
  def in_child
    reader, writer = IO.pipe
    pid = ChildProcess.fork do
      reader.close
      writer.write(Marshal.dump(yield))
      writer.close
      exit!(0)
    end
    writer.close
    raise "child #{pid} did not answer" unless reader.wait_readable(30)

    Marshal.load(reader.read) # rubocop:disable Security/MarshalLoad
  ensure
    reader&.close
    ChildProcess.wait(pid, within: 30) || ChildProcess.stop(pid, signal: :KILL) if pid
  end

  describe "the default", :shared_memory do
    it "makes CircuitBreaker.for host-wide: a trip in one process is seen by every other" do
      name = name_of("default")
      breaker = described_class.for(name, min_calls: 2)

      tripped_elsewhere = in_child do
        described_class.forget_all! # as a process that did not inherit the registry
        other = described_class.for(name, min_calls: 2)
        other.trip!
        [other.metrics[:scope], other.shared_path]
      end

      expect(described_class.default_scope).to eq(:host)
      expect(tripped_elsewhere).to eq([:host, breaker.shared_path])
      expect(breaker.state).to eq(:open)
      expect(breaker.metrics).to include(scope: :host, counters: :host)
      expect(log.string).to be_empty
    end

    it "keeps CircuitBreaker.new per process, named or not" do
      expect(described_class.new(name: name_of("new")).metrics[:scope]).to eq(:process)
      expect(described_class.new.shared_path).to be_nil
    end

    %w[RAILS_ENV RACK_ENV APP_ENV].each do |variable|
      it "is per process where #{variable} is test" do
        ENV[variable] = "test"

        expect(described_class.default_scope).to eq(:process)
        expect(described_class.for(name_of(variable)).metrics[:scope]).to eq(:process)
      end
    end

    it "is per process when configured so, or with shared: false" do
      expect(described_class.for(name_of("false"), shared: false).metrics[:scope]).to eq(:process)
      described_class.configure { |c| c.scope = :process }
      expect(described_class.for(name_of("configured")).metrics[:scope]).to eq(:process)
      expect { described_class.configure { |c| c.scope = :fleet } }.to raise_error(ArgumentError, /scope must be :host, :process or nil/)
    end
  end

  describe "a host that cannot have it", :shared_memory do
    it "gives per-process breakers and one warning naming the cause; an explicit shared: raises" do
      ENV["CIRCUIT_BREAKER_SHM_DIR"] = "/proc" # cannot hold a directory

      first = described_class.for(name_of("proc-1"))
      second = described_class.for(name_of("proc-2"))

      expect([first, second].map { |b| b.metrics[:scope] }).to eq(%i[process process])
      expect(log.string.lines.grep(/per process, not host-wide/).size).to eq(1)
      expect(log.string).to match(/CircuitBreaker.for\("spec-scope-proc-1-.*Errno::\w+: .*circuit_breaker-\d+/)
      expect { described_class.for(name_of("explicit"), shared: "explicit") }.to raise_error(SystemCallError)
    end

    it "falls back when the process is out of file descriptors" do
      outcome = in_child do
        Process.setrlimit(:NOFILE, Dir.children("/proc/self/fd").map(&:to_i).max + 16)
        hoard = []
        loop { hoard << File.open(File::NULL) } # every descriptor taken
      rescue Errno::EMFILE
        breaker = described_class.for(name_of("emfile"))
        hoard.each(&:close)
        [breaker.metrics[:scope], log.string[/Errno::EMFILE/]]
      end

      expect(outcome).to eq([:process, "Errno::EMFILE"])
    end

    # A tmpfs of this example's own at CIRCUIT_BREAKER_SHM_DIR (root only).
    def on_tmpfs(options)
      skip "needs root to mount a tmpfs" unless Process.uid.zero?
      Dir.mktmpdir do |dir|
        out, status = ChildProcess.capture2e("mount", "-t", "tmpfs", "-o", options, "tmpfs", dir)
        skip "cannot mount a tmpfs here: #{out.strip}" unless status.success?
        begin
          ENV["CIRCUIT_BREAKER_SHM_DIR"] = dir
          yield
        ensure
          # lazily, should a mapping outlive the example
          ChildProcess.system("umount", dir, within: 30) || ChildProcess.system("umount", "-l", dir, within: 30)
        end
      end
    end

    it "falls back on a read-only file system, naming it; an explicit shared: raises" do
      on_tmpfs("ro,size=64k") do
        expect(described_class.for(name_of("ro")).metrics[:scope]).to eq(:process)
        expect(log.string).to match(/per process, not host-wide.*Errno::EROFS/)
        expect { described_class.for(name_of("ro-explicit"), shared: "ro-explicit") }.to raise_error(Errno::EROFS)
      end
    end

    it "falls back on a full file system, naming it; an explicit shared: raises" do
      on_tmpfs("size=64k,mode=1777") do
        big = CircuitBreaker::SlidingWindow.new(size: 1_000_000) # a record larger than the file system
        expect(described_class.for(name_of("full"), window: big).metrics[:scope]).to eq(:process)
        expect(log.string).to match(/per process, not host-wide.*Errno::ENOSPC/)
        expect { described_class.for(name_of("full-explicit"), window: big, shared: "full-explicit") }.to raise_error(Errno::ENOSPC)
      end
    end

    it "falls back when another user made the directory first" do
      skip "needs root and setpriv to act as a second user" unless Process.euid.zero? && ChildProcess.installed?("setpriv")

      Dir.mktmpdir do |base|
        File.chmod(0o1777, base)
        ENV["CIRCUIT_BREAKER_SHM_DIR"] = base
        _, status = ChildProcess.capture2e("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                           "mkdir", File.join(base, "circuit_breaker-#{Process.euid}"))
        expect(status.success?).to be(true)

        expect(described_class.for(name_of("planted")).metrics[:scope]).to eq(:process)
        expect(log.string).to match(/belongs to nobody/)
      end
    end
  end

  describe "a platform without shared memory", :no_shared_memory do
    it "gives per-process breakers and one warning naming the platform" do
      expect(described_class.for(name_of("portable")).metrics[:scope]).to eq(:process)
      expect(described_class.for(name_of("portable-2")).metrics[:scope]).to eq(:process)
      expect(log.string.lines.grep(/no shared memory/).size).to eq(1)
    end
  end

  describe "the derived namespace" do
    it "includes the Rails application's name, so two apps at one path stay apart" do
      lib = File.expand_path("../../lib", __dir__)
      script = <<~RUBY
        require "circuit_breaker"
        require "pathname"
        module Rails
          def self.root = Pathname("/srv/app")
          def self.application = Shop::Application.new
        end
        module Shop
          class Application; end
        end
        print CircuitBreaker.default_namespace
      RUBY
      out, status = ChildProcess.capture2e({ "RAILS_ENV" => "production" }, RbConfig.ruby, "-I", lib, "-e", script)

      expect(status.success?).to be(true), out
      expect(out).to match(/\Aapp\.Shop\.\h{8}\.production\z/)
    end
  end
end
