# frozen_string_literal: true

# A build without shared records (docs/install.md): macOS and the other
# systems without robust process-shared mutexes, and on Linux the build made
# with CIRCUIT_BREAKER_PORTABLE=1, which bin/test runs the whole suite on.
RSpec.describe CircuitBreaker, "without shared records", :no_shared_memory do
  it "refuses shared: at construction with NotImplementedError naming shared: and the platform" do
    expect { described_class.new(name: "payments", shared: "spec-portable-#{Process.pid}") }
      .to raise_error(NotImplementedError, %r{\Ashared: is not supported (on \w+|by this build \(CIRCUIT_BREAKER_PORTABLE=1).*docs/install\.md})
  end

  it "checks the arguments first: a wrong type or bad option is still a TypeError or ArgumentError" do
    expect { described_class.new(shared: 5) }.to raise_error(TypeError, /shared/)
    expect { described_class.new(shared: "x", min_calls: 0) }.to raise_error(ArgumentError, /min_calls/)
  end

  it "leaves no file behind" do
    dir = ENV.fetch("CIRCUIT_BREAKER_SHM_DIR", nil)
    before = dir && Dir.exist?(dir) ? Dir.children(dir) : []
    expect { described_class.new(shared: "spec-portable-file-#{Process.pid}") }.to raise_error(NotImplementedError)
    expect(dir && Dir.exist?(dir) ? Dir.children(dir) : []).to eq(before)
  end

  it "keeps breakers of one process working" do
    breaker = described_class.new(min_calls: 2, clock: CircuitBreaker::ManualClock.new)
    2.times { expect { breaker.call { raise IOError } }.to raise_error(IOError) }

    expect { breaker.call { :never } }.to raise_error(CircuitBreaker::OpenError)
    expect(breaker.shared_path).to be_nil
  end
end

RSpec.describe CircuitBreaker, ".shared_supported?" do
  it "is true on Linux, unless the build was made portable (CIRCUIT_BREAKER_PORTABLE=1)" do
    linux = RbConfig::CONFIG["host_os"].include?("linux")

    expect(described_class.shared_supported?).to be(linux && ENV["CIRCUIT_BREAKER_PORTABLE"] != "1")
  end
end
