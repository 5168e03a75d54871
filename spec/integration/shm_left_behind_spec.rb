# frozen_string_literal: true

require "io/wait"
require "tmpdir"

# bin/shm-left-behind, which bin/test runs after each RSpec run: it fails
# while a process the suite leaked still maps a shared-memory file, and
# passes once only unused files were left (it sweeps those).
RSpec.describe "bin/shm-left-behind", :integration, :shared_memory do
  root = File.expand_path("../..", __dir__)

  def check(root, dir)
    ChildProcess.capture3({ "CIRCUIT_BREAKER_SHM_DIR" => dir }, File.join(root, "bin/shm-left-behind"))
  end

  it "fails naming the file a live process maps, and passes once that process ended" do
    Dir.mktmpdir do |dir|
      reader, writer = IO.pipe
      done_r, done_w = IO.pipe
      leaked = ChildProcess.fork do
        [reader, done_w].each(&:close)
        ENV["CIRCUIT_BREAKER_SHM_DIR"] = dir
        writer.puts CircuitBreaker.new(shared: "leaked-#{Process.pid}").shared_path
        writer.close
        done_r.read # until the example lets go
        exit!(0)
      end
      [writer, done_r].each(&:close)
      raise "the child did not answer within 30 s" unless reader.wait_readable(30)

      path = reader.gets.chomp
      _, err, status = check(root, dir)
      expect(status.exitstatus).to eq(1)
      expect(err).to include("left shared-memory files behind", path)

      done_w.close
      ChildProcess.finish(leaked, within: 30)
      leaked = nil
      out, err, status = check(root, dir)
      expect([status.exitstatus, out, err]).to eq([0, "", ""])
      expect(Dir.glob("#{dir}/**/*", File::FNM_DOTMATCH).select { |f| File.file?(f) }).to be_empty
    ensure
      [reader, done_w].compact.reject(&:closed?).each(&:close)
      ChildProcess.stop(leaked, signal: :KILL) if leaked
    end
  end
end
