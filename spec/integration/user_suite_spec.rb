# frozen_string_literal: true

require "tmpdir"
require_relative "../../examples/support/flaky_upstream"

# `require "circuit_breaker/rspec"` and `"circuit_breaker/minitest"` as an
# app's own suite uses them (spec/fixtures/user_suite), run in a child
# process against a real orders API on 127.0.0.1.
RSpec.describe "an app's test suite with the gem's test helpers", :integration do
  root = File.expand_path("../..", __dir__)
  suite = File.join(root, "spec/fixtures/user_suite")

  before(:all) { @upstream = CircuitBreaker::Examples::FlakyUpstream.start(stop_after: 600) }
  after(:all) { @upstream&.stop }

  # As an app's suite runs: in the test environment, where breakers of
  # CircuitBreaker.for are per process (docs/shared.md, "Host scope").
  def run_suite(root, *command, env: {})
    env = { "ORDERS_URL" => @upstream.url, "RUBYOPT" => "-I#{File.join(root, 'lib')}", "RACK_ENV" => "test",
            **env }
    ChildProcess.capture2e(env, *command, chdir: File.join(root, "spec/fixtures/user_suite")) # its own .rspec-less dir
  end

  it "passes the RSpec example of docs/testing.md: matchers, forcing, moving time, a reset between examples" do
    out, status = run_suite(root, "rspec", "--order", "defined", File.join(suite, "orders_spec.rb"))

    expect(status).to be_success, out
    expect(out).to include("3 examples, 0 failures")
  end

  it "shows that example verbatim in docs/testing.md" do
    example = File.read(File.join(suite, "orders_spec.rb"))[/^RSpec\.describe.*\z/m]

    expect(File.read(File.join(root, "docs/testing.md"))).to include(example)
  end

  # Each of these files fails on a build whose breakers' time only moves
  # forward: its 300 examples a year ahead stop every breaker's clock.
  it "makes ActiveSupport's travel, travel_to, freeze_time and travel_back move breakers, both ways, on this Rails" do
    out, status = run_suite(root, "rspec", File.join(suite, "travel_spec.rb"))

    expect(status).to be_success, out
    expect(out).to include("305 examples, 0 failures")
  end

  it "makes Timecop's travel, freeze and return move breakers, both ways" do
    out, status = run_suite(root, "rspec", File.join(suite, "timecop_spec.rb"))

    expect(status).to be_success, out
    expect(out).to include("304 examples, 0 failures") # 1 pending before Timecop 0.9.9
  end

  it "follows travel in a Rails test case, which travels back after each test" do
    out, status = run_suite(root, RbConfig.ruby, File.join(suite, "travel_test.rb"))

    expect(status).to be_success, out
    expect(out).to match(/301 runs, \d+ assertions, 0 failures, 0 errors/)
  end

  it "never writes a test's time travel into a shared: record another process reads, or to a fleet",
     :shared_memory do
    skip "redis-server is not installed (bin/test installs it)" unless RedisServer.available?
    redis = RedisServer.start
    Dir.mktmpdir do |dir|
      out, status = run_suite(root, "rspec", File.join(suite, "shared_travel_spec.rb"),
                              env: { "CIRCUIT_BREAKER_SHM_DIR" => dir, "REDIS_URL" => redis.url })

      expect(status).to be_success, out
      expect(out).to include("3 examples, 0 failures")
    end
  ensure
    redis&.stop
  end

  it "keeps Rails' parallel workers (forked, no TEST_ENV_NUMBER) apart: their shared: breakers are their own",
     :shared_memory do
    DebianPackages.skip_for(self, "ActiveSupport's parallel testing on minitest 6")
    Dir.mktmpdir do |dir|
      report = File.join(dir, "report")
      out, status = ChildProcess.capture2e({ "REPORT" => report, "RUBYOPT" => "-I#{File.join(root, 'lib')}",
                                             "CIRCUIT_BREAKER_SHM_DIR" => dir },
                                           RbConfig.ruby, File.join(suite, "parallel_test.rb"), chdir: suite)

      expect(status).to be_success, out
      rows = File.readlines(report).map(&:split)
      expect(rows.size).to eq(4)
      rows.each do |pid, registered, built, size|
        expect([registered, built]).to all(include(".worker#{pid}-")), rows.inspect
        expect(size).to eq("10") # rebuilt with the first call's options
      end
      # Workers never share a file.
      expect(rows.group_by(&:first).transform_values { |r| r.map { |x| x[1] }.uniq }.values.flatten.uniq.size)
        .to eq(rows.map(&:first).uniq.size)
    end
  end

  it "passes the Minitest equivalent" do
    out, status = run_suite(root, RbConfig.ruby, File.join(suite, "orders_test.rb"))

    expect(status).to be_success, out
    expect(out).to match(/3 runs, \d+ assertions, 0 failures, 0 errors/)
  end

  it "explains a failed matcher with the breaker's state and counts" do
    require "circuit_breaker/test_helpers"
    breaker = CircuitBreaker.new(name: "explained")

    expect(CircuitBreaker::TestHelpers.describe(breaker))
      .to eq('circuit "explained" is closed (calls 0, failures 0, error rate 0%, rejected 0)')
    # One message for the RSpec matchers and the Minitest assertions alike.
    expect(CircuitBreaker::TestHelpers.state_message(breaker, :half_open))
      .to eq('expected circuit half-open, but circuit "explained" is closed (calls 0, failures 0, error rate 0%, rejected 0)')
    expect(CircuitBreaker::TestHelpers.state_message(breaker, :closed, negated: true))
      .to start_with("expected not circuit closed, but")
    expect { CircuitBreaker::TestHelpers.resolve("nobody-registered-this") }
      .to raise_error(ArgumentError, /no breaker is registered as "nobody-registered-this"/)
  end
end
